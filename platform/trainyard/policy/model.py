"""The vocabulary of policy: a Rule, the Context it reads, and the Finding it produces.

A rule is a pure function over plain manifests, either one object at a time (``check_object``)
or over the whole set (``check_stack``, for rules about relations: a LocalQueue and its
ClusterQueue, a tenant namespace and its NetworkPolicy). The same functions run in
``trainyard check`` on rendered manifests and in the CrossGuard pack on the resources Pulumi
registers; the Context is what differs between the two: where the stack's config comes from,
and how to tell whether a resource is protected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from trainyard.config.model import PlatformConfig, Tenant
from trainyard.config.security import PolicyLevel
from trainyard.manifests.meta import Manifest

if TYPE_CHECKING:
    from trainyard.manifests.chart_release import ChartRelease

Severity = Literal["mandatory", "advisory"]
STACK_OBJECT = "(stack)"


@dataclass(frozen=True)
class Finding:
    """One violation of one rule by one object (``object_id`` is ``(stack)`` for stack-wide findings)."""

    rule_id: str
    severity: Severity
    object_id: str
    message: str
    hint: str


@dataclass(frozen=True)
class Context:
    """What rules may read besides the manifests.

    ``protection(obj)`` says whether the stack declares ``obj`` Pulumi-protected: True or False
    for objects the stack declares, None for objects it does not (a tenant's TrainJob in a PR).
    """

    config: PlatformConfig
    protection: Callable[[Manifest], bool | None] = field(default=lambda obj: None)
    # The stack's chart releases (``trainyard check``); the CrossGuard pack sees no releases, only objects.
    releases: tuple[ChartRelease, ...] = ()

    @cached_property
    def tenants_by_namespace(self) -> dict[str, Tenant]:
        return {t.namespace_name: t for t in self.config.tenants}

    def tenant_of(self, obj: Manifest) -> Tenant | None:
        namespace = (obj.get("metadata") or {}).get("namespace")
        return self.tenants_by_namespace.get(namespace) if isinstance(namespace, str) else None

    def level(self, rule: Rule) -> PolicyLevel:
        return self.config.security.policy.severity.get(rule.id, rule.severity)


ObjectCheck = Callable[[Manifest, Context], Iterable[str]]
StackCheck = Callable[[Sequence[Manifest], Context], Iterable[tuple[Manifest | None, str]]]


@dataclass(frozen=True)
class Rule:
    """A policy rule: an id, a one-line description, a default severity, a remediation hint, a check.

    ``admission`` names the ValidatingAdmissionPolicy that enforces the same rule at run time, if any.
    """

    id: str
    description: str
    severity: Severity
    hint: str
    check_object: ObjectCheck | None = None
    check_stack: StackCheck | None = None
    admission: str | None = None


def object_rule(rule_id: str, description: str, hint: str, severity: Severity = "mandatory",
                admission: str | None = None) -> Callable[[ObjectCheck], Rule]:
    def wrap(check: ObjectCheck) -> Rule:
        return Rule(rule_id, description, severity, hint, check_object=check, admission=admission)
    return wrap


def stack_rule(rule_id: str, description: str, hint: str, severity: Severity = "mandatory",
               admission: str | None = None) -> Callable[[StackCheck], Rule]:
    def wrap(check: StackCheck) -> Rule:
        return Rule(rule_id, description, severity, hint, check_stack=check, admission=admission)
    return wrap
