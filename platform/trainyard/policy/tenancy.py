"""Rules on isolation: every tenant namespace is fenced, queued, bounded and restricted.

A tenant namespace is one the stack declares for a tenant, or any Namespace labelled
``trainyard.dev/tenant`` (a pull request may add one). Each must come with a default-deny
NetworkPolicy, a LocalQueue, a ResourceQuota, and Pod Security "restricted" enforced; and no
namespace anywhere may enforce a weaker Pod Security level. Where admission is on, each holds the
admission policies' params (the ``trainyard-policy`` TenantPolicy) exactly as the stack's config renders
them, and no Role there lets anyone write them (a tenant would edit its own policy).

Ref: https://kubernetes.io/docs/concepts/security/pod-security-admission/
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from trainyard.manifests import admission, policy_params
from trainyard.manifests.gpu_operator import PSA_EXCEPTION_ANNOTATION, pod_security_exceptions
from trainyard.manifests.installs import COMPONENT_LABEL
from trainyard.manifests.meta import TENANT_LABEL, Manifest
from trainyard.manifests.tenants import PSA_LEVEL
from trainyard.policy.model import Context, StackCheck, object_rule, stack_rule
from trainyard.policy.pods import as_dict, as_list

PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
PSA_LEVELS = ("privileged", "baseline", "restricted")  # weakest first


def _meta(obj: Manifest) -> dict[str, object]:
    return as_dict(obj.get("metadata"))


def tenant_namespaces(objects: Sequence[Manifest], ctx: Context) -> dict[str, Manifest | None]:
    """Tenant namespace name -> its Namespace object (None when the set does not declare it)."""
    declared = {str(_meta(o).get("name")): o for o in objects if o.get("kind") == "Namespace"}
    names = set(ctx.tenants_by_namespace)
    names |= {name for name, ns in declared.items() if TENANT_LABEL in as_dict(_meta(ns).get("labels"))}
    return {name: declared.get(name) for name in sorted(names)}


def _in_namespace(objects: Sequence[Manifest], kind: str) -> dict[str, list[Manifest]]:
    out: dict[str, list[Manifest]] = {}
    for obj in objects:
        if obj.get("kind") == kind:
            out.setdefault(str(_meta(obj).get("namespace") or ""), []).append(obj)
    return out


def is_default_deny(policy: Manifest) -> bool:
    """Selects every pod, isolates both directions, and allows nothing by itself."""
    spec = as_dict(policy.get("spec"))
    selector = as_dict(spec.get("podSelector"))
    selects_all = "podSelector" in spec and not selector.get("matchLabels") and not selector.get("matchExpressions")
    types = set(as_list(spec.get("policyTypes")))
    return selects_all and {"Ingress", "Egress"} <= types and not spec.get("ingress") and not spec.get("egress")


def _missing_kind(kind: str, what: str) -> StackCheck:
    def check(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
        present = _in_namespace(objects, kind)
        for name, namespace in tenant_namespaces(objects, ctx).items():
            if not present.get(name):
                yield namespace, f"tenant namespace {name} has no {what}"
    return check


@stack_rule("tenant-default-deny", "Every tenant namespace has a default-deny NetworkPolicy (ingress and egress).",
            "Keep the default-deny policy from manifests/network.py; open paths with separate allow policies.")
def tenant_default_deny(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    policies = _in_namespace(objects, "NetworkPolicy")
    for name, namespace in tenant_namespaces(objects, ctx).items():
        if not any(is_default_deny(p) for p in policies.get(name, [])):
            yield namespace, f"tenant namespace {name} has no default-deny NetworkPolicy for ingress and egress"


tenant_local_queue = stack_rule(
    "tenant-local-queue", "Every tenant namespace has a LocalQueue.",
    "Declare the tenant in the stack: tenants get the LocalQueue 'default' on their ClusterQueue.",
)(_missing_kind("LocalQueue", "LocalQueue"))

tenant_resource_quota = stack_rule(
    "tenant-resource-quota", "Every tenant namespace has a ResourceQuota.",
    "Declare the tenant in the stack: tenants get a ResourceQuota that caps what can bypass Kueue.",
)(_missing_kind("ResourceQuota", "ResourceQuota"))


@stack_rule("tenant-psa-restricted", "Every tenant namespace enforces Pod Security 'restricted'.",
            f"Label the namespace {PSA_ENFORCE}: {PSA_LEVEL} (tenants.PSA_LABELS does).")
def tenant_psa_restricted(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    for name, namespace in tenant_namespaces(objects, ctx).items():
        if namespace is None:
            yield None, f"tenant namespace {name} is not declared, so nothing enforces Pod Security on it"
            continue
        level = as_dict(_meta(namespace).get("labels")).get(PSA_ENFORCE)
        if level != PSA_LEVEL:
            yield namespace, f"enforces Pod Security {level or 'privileged (no label)'}, not {PSA_LEVEL}"


@object_rule("psa-no-weaker-level", "No namespace enforces a Pod Security level weaker than 'restricted', "
             "except the stack's reviewed exceptions (the GPU operator's namespace).",
             f"Label the namespace {PSA_ENFORCE}: {PSA_LEVEL}; run what needs more in a reviewed system namespace "
             "with a stack severity override.")
def psa_no_weaker_level(obj: Manifest, ctx: Context) -> Iterator[str]:
    if obj.get("kind") != "Namespace":
        return
    level = as_dict(_meta(obj).get("labels")).get(PSA_ENFORCE)
    exception = next((e for e in pod_security_exceptions(ctx.config) if e.namespace == _meta(obj).get("name")), None)
    if exception is not None and level == exception.level:
        return
    if level is None:
        yield f"sets no {PSA_ENFORCE} label, so Pod Security defaults to privileged"
    elif level != PSA_LEVEL:
        yield f"enforces Pod Security {level!r}, weaker than {PSA_LEVEL}"


# Objects of these concerns may live in an exception namespace: the GPU operator's own, and the
# ServiceMonitor and discovery Role of the monitoring concern.
_EXCEPTION_OWNERS = frozenset({"gpu-operator", "monitoring"})


@stack_rule("psa-exception-exclusive", "Only the stack's reviewed namespaces claim a Pod Security exception, and "
            "nothing but their own component runs in them.",
            "Remove the exception annotation, or move the object out of the GPU operator's namespace; exceptions "
            "are set by gpu_operator.namespace only.")
def psa_exception_exclusive(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    allowed = {e.namespace for e in pod_security_exceptions(ctx.config)}
    for obj in objects:
        meta = _meta(obj)
        if obj.get("kind") == "Namespace":
            name = meta.get("name")
            if PSA_EXCEPTION_ANNOTATION in as_dict(meta.get("annotations")) and name not in allowed:
                yield obj, f"claims a Pod Security exception ({PSA_EXCEPTION_ANNOTATION}) the stack does not grant"
            if name in allowed and TENANT_LABEL in as_dict(meta.get("labels")):
                yield obj, "is a Pod Security exception and cannot be a tenant namespace"
        elif meta.get("namespace") in allowed:
            owner = as_dict(meta.get("labels")).get(COMPONENT_LABEL)
            if owner not in _EXCEPTION_OWNERS:
                yield obj, (f"lives in the privileged namespace {meta.get('namespace')}, which is reserved for the "
                            f"GPU operator (its {COMPONENT_LABEL} is {owner or 'unset'})")


_WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection", "*"})


def _writes_params(rule: object) -> bool:
    rule = as_dict(rule)
    groups, resources = set(as_list(rule.get("apiGroups"))), set(as_list(rule.get("resources")))
    return bool(groups & {policy_params.GROUP, "*"}) and bool(resources & {policy_params.PLURAL, "*"}) \
        and bool(set(as_list(rule.get("verbs"))) & _WRITE_VERBS) \
        and (not rule.get("resourceNames") or policy_params.NAME in as_list(rule.get("resourceNames")))


@stack_rule("tenant-policy-params",
            "Every tenant namespace holds the admission policies' params as the stack's config renders them, "
            "and no Role there may write them.",
            f"The params ({policy_params.KIND} {policy_params.NAME}) come from the stack (lineage, serving, tenants, "
            f"quotas): change the stack, not the object; grant no writes on {policy_params.PLURAL} in tenant "
            "namespaces.")
def tenant_policy_params(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    if not ctx.config.security.admission.enabled:
        return
    wanted = {p["metadata"]["namespace"]: p for p in admission.tenant_params(ctx.config).values()}
    present: dict[str, list[Manifest]] = {}
    for obj in objects:
        if policy_params.is_params(obj):
            present.setdefault(str(_meta(obj).get("namespace")), []).append(obj)
    for name, namespace in tenant_namespaces(objects, ctx).items():
        want = wanted.get(name)
        if not present.get(name):
            yield namespace, (f"tenant namespace {name} has no {policy_params.KIND} {policy_params.NAME}: every "
                              "parameterised admission policy refuses requests there")
        for found in present.get(name, []):
            have = as_dict(found.get("data"))
            if want is None:
                yield found, f"tenant namespace {name} is no tenant of the stack, so it has no admission params"
            elif have != want["data"]:
                keys = sorted(str(k) for k in {*have, *want["data"]} if have.get(k) != want["data"].get(k))
                yield found, f"data differs from what the stack's config renders, keys: {', '.join(keys)}"
    roles = _in_namespace(objects, "Role")
    for name in tenant_namespaces(objects, ctx):
        for role in roles.get(name, []):
            if any(_writes_params(r) for r in as_list(role.get("rules"))):
                yield role, (f"lets its subjects write {policy_params.PLURAL} in tenant namespace {name}, among "
                             f"them the admission params {policy_params.NAME}")


RULES = (tenant_default_deny, tenant_local_queue, tenant_resource_quota, tenant_psa_restricted, psa_no_weaker_level,
         psa_exception_exclusive, tenant_policy_params)
