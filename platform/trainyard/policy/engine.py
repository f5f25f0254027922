"""Running the rules: over a rendered stack plus extra manifests, with the stack's severities.

``evaluate`` is the entry point ``trainyard check`` and ``trainyard diff`` share; the CrossGuard
pack calls the same rule functions one resource (or one stack) at a time instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from trainyard.config.model import PlatformConfig
from trainyard.manifests import RenderedPlatform
from trainyard.manifests.meta import Manifest, object_key
from trainyard.policy.model import STACK_OBJECT, Context, Finding, Rule
from trainyard.policy.pods import as_dict, walks_shared
from trainyard.policy.rules import RULES

_SEVERITY_ORDER = {"mandatory": 0, "advisory": 1}


def declared_protection(config: PlatformConfig, rendered: RenderedPlatform) -> Callable[[Manifest], bool | None]:
    """Offline answer to "is this object protected?": the stack's lifecycle setting, for what it declares.

    The components protect every data-holding object the stack declares when
    ``lifecycle.protect_data`` is set (``components/platform.py``); this mirrors that decision.
    """
    declared = {object_key(obj) for obj in rendered.all_objects}

    def protection(obj: Manifest) -> bool | None:
        try:
            key = object_key(obj)
        except KeyError:
            return None
        return config.lifecycle.protect_data if key in declared else None

    return protection


def safe_object_id(obj: Manifest) -> str:
    meta = as_dict(obj.get("metadata"))
    kind, namespace, name = obj.get("kind") or "?", meta.get("namespace"), meta.get("name") or "?"
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def run_rules(rules: Iterable[Rule], objects: Sequence[Manifest], ctx: Context) -> list[Finding]:
    with walks_shared():  # every rule reads the same objects' containers: find them once
        return _run_rules(rules, objects, ctx)


def _run_rules(rules: Iterable[Rule], objects: Sequence[Manifest], ctx: Context) -> list[Finding]:
    findings: list[Finding] = []
    for rule in rules:
        level = ctx.level(rule)
        if level == "disabled":
            continue
        if rule.check_object is not None:
            for obj in objects:
                findings += [Finding(rule.id, level, safe_object_id(obj), message, rule.hint)
                             for message in rule.check_object(obj, ctx)]
        if rule.check_stack is not None:
            findings += [Finding(rule.id, level, safe_object_id(obj) if obj is not None else STACK_OBJECT, message,
                                 rule.hint)
                         for obj, message in rule.check_stack(objects, ctx)]
    return sorted(findings, key=lambda f: (_SEVERITY_ORDER[f.severity], f.rule_id, f.object_id, f.message))


def evaluate(config: PlatformConfig, rendered: RenderedPlatform,
             extra_manifests: Iterable[Manifest] = ()) -> list[Finding]:
    """Every finding of every enabled rule on the rendered stack plus ``extra_manifests``, most severe first."""
    ctx = Context(config, declared_protection(config, rendered), rendered.releases)
    return run_rules(RULES, [*rendered.all_objects, *extra_manifests], ctx)


def disabled_rules(config: PlatformConfig) -> list[str]:
    return sorted(rule_id for rule_id, level in config.security.policy.severity.items() if level == "disabled")
