"""CrossGuard wrappers: one Pulumi policy per trainyard.policy rule, nothing else.

Rules that look at one object become ResourceValidationPolicies, rules about relations between
objects become StackValidationPolicies. Each wrapper rebuilds manifests from the resources'
properties (``trainyard.policy.crossguard.manifest_from``), runs the rule and reports its
messages with the rule's hint. Protection is read from each resource's ``protect`` option.

The stack's config comes from the engine (``PULUMI_CONFIG``); its per-rule severities set each
policy's enforcement level, as ``trainyard policy-config STACK`` would. This module is
importable without starting the policy server (``__main__.py`` does that), so tests call the
wrappers' ``validate`` directly.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyPack,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from trainyard.config import ConfigError
from trainyard.config.model import PlatformConfig
from trainyard.manifests.meta import Manifest
from trainyard.policy import RULES, Context, Rule
from trainyard.policy.crossguard import (
    PackConfigError,
    enforcement_levels,
    manifest_from,
    platform_config_from_environment,
    stack_of,
    with_placeholders,
)

__all__ = ["PACK_NAME", "PolicyPack", "policies"]

PACK_NAME = "trainyard"
LEVELS = {"mandatory": EnforcementLevel.MANDATORY, "advisory": EnforcementLevel.ADVISORY,
          "disabled": EnforcementLevel.DISABLED}


PROJECT_ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _config_of(stack: str | None) -> PlatformConfig:
    environ = dict(os.environ)
    if stack and not environ.get("PULUMI_CONFIG"):
        environ.setdefault("PULUMI_STACK", stack)
    return platform_config_from_environment(environ, PROJECT_ROOT)


def stack_config(urn: str = "") -> PlatformConfig:
    """The config of the stack under preview: from the engine's environment, else the stack named in the URN."""
    return _config_of(stack_of(urn))


def _config_or_none() -> PlatformConfig | None:
    try:
        return stack_config()
    except (ConfigError, PackConfigError):
        return None  # e.g. `pulumi policy publish`: no stack; validation reports the problem when it runs


def violation(rule: Rule, message: str) -> str:
    return f"{message}\nHint: {rule.hint}"


def validate_resource(rule: Rule, args: ResourceValidationArgs, report: ReportViolation) -> None:
    obj = manifest_from(args.resource_type, args.props)
    if obj is None or rule.check_object is None:
        return
    protected = bool(args.opts.protect)
    ctx = Context(stack_config(args.urn), protection=lambda _: protected)
    obj = with_placeholders(obj, ctx.config, PROJECT_ROOT)
    for message in rule.check_object(obj, ctx):
        report(violation(rule, message), None)


def validate_stack(rule: Rule, args: StackValidationArgs, report: ReportViolation) -> None:
    if rule.check_stack is None:
        return
    declared: list[tuple[PolicyResource, Manifest]] = []
    config = stack_config(args.resources[0].urn if args.resources else "")
    for resource in args.resources:
        obj = manifest_from(resource.resource_type, resource.props)
        if obj is not None:
            declared.append((resource, with_placeholders(obj, config, PROJECT_ROOT)))
    resource_of: Mapping[int, PolicyResource] = {id(obj): resource for resource, obj in declared}

    def protection(obj: Manifest) -> bool | None:
        resource = resource_of.get(id(obj))
        return bool(resource.opts.protect) if resource is not None else None

    ctx = Context(config, protection=protection)
    for obj, message in rule.check_stack([obj for _, obj in declared], ctx):
        owner = resource_of.get(id(obj)) if obj is not None else None
        report(violation(rule, message), owner.urn if owner is not None else None)


def policy_for(rule: Rule, level: str) -> Policy:
    common: dict[str, Any] = {"name": rule.id, "description": rule.description,
                              "enforcement_level": LEVELS[level], "remediation_steps": rule.hint}
    if rule.check_object is not None:
        return ResourceValidationPolicy(validate=functools.partial(validate_resource, rule), **common)
    return StackValidationPolicy(validate=functools.partial(validate_stack, rule), **common)


def policies() -> list[Policy]:
    levels = enforcement_levels(_config_or_none())
    return [policy_for(rule, levels[rule.id]) for rule in RULES]
