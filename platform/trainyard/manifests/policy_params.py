"""The admission policies' data per tenant: one ``TenantPolicy`` ``trainyard-policy`` in each tenant namespace.

What differs from tenant to tenant (the datasets and base models its lineage approves, the bucket its
models are served from, whether it may expose models or define its own TrainingRuntimes, its default
priority class, the flavors its queue offers) is *data*, not policy. It lives here, one readable key per
fact, and the policies read it as their parameter: ``spec.paramKind`` TenantPolicy (``trainyard.dev/v1alpha1``,
Trainyard's own CRD, below) on the policy, ``spec.paramRef`` on the binding with ``name: trainyard-policy``,
no ``namespace`` (so the API server looks the params up in the namespace of the object under admission) and
``parameterNotFoundAction: Deny`` (a tenant namespace without params is refused). A change of approval is
then a change of one key in one tenant's namespace, which ``trainyard diff`` shows as ``data[key]: old -> new``
for that tenant, instead of an edit deep inside a CEL literal that every tenant shares.

Why a CRD of our own and not a ConfigMap: kube-apiserver (v1.35, v1.36) watches a *built-in* param kind
through its shared informer factory, started with a context it cancels as soon as no binding names that kind
for one policy refresh (~1 s); a shared informer never restarts, so where the policy source had started it (seen
after an API server restart with the policy in place) the process from then on resolves no new ConfigMap param
("no params found for policy binding with `Deny` parameterNotFoundAction": every tenant request refused) and
keeps serving the deleted or outdated ones (a withdrawn approval admitted), until the API server restarts.
Removing the bindings (admission switched off and on, a teardown and a new ``pulumi up``) is enough. A custom
kind gets a fresh dynamic informer each time and recovers. The rehearsal hit it: its yardstick applies and
deletes every object before ``pulumi up``.
Ref: kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/generic/policy_source.go
(calculatePolicyData cancels unused param informers; ensureParamsForPolicyLocked: informerFactory.Start with
the instance context for built-in kinds, NewFilteredDynamicInformer for others); kubernetes/kubernetes#130887.

What is the same for every tenant stays in the policies (approved registries and runtimes, the runtimes'
node figures, the flavors' nodes, the cache image): that is the rule itself, reviewed as the policy.

Encoding: the values are strings (``data``, a map of strings, as a ConfigMap's), and Kubernetes CEL has no
JSON decoder, so lists are one key per item and every field of an entry is its own key: ``dataset.<entry>.uri``,
``dataset.<entry>.version``, ... The policies find the entries by the ``.name`` key (``dataset.<entry>.name``
holds ``<entry>``), so they need no string parsing (no ``split`` over a value a separator could occur in), only
map lookups. Entry, flavor and tenant names are DNS labels (config/base.py ``Name``).

Tenants can read their params (what is approved for them) and cannot edit them: the tenant Role grants
read on tenantpolicies and nothing else (manifests/tenants.py; the rule ``tenant-policy-params`` holds the
object to the stack and refuses a Role that writes it, docs/architecture.md).
Ref: https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/#parameter-resources
Ref: https://kubernetes.io/docs/reference/kubernetes-api/definitions/param-ref-v1-admissionregistration/
"""

from __future__ import annotations

from trainyard.config.model import PlatformConfig, Tenant
from trainyard.manifests.meta import POLICY_PARAMS_GROUP, POLICY_PARAMS_PLURAL, TENANT_LABEL, Manifest, metadata
from trainyard.manifests.serving import model_bucket

NAME = "trainyard-policy"
GROUP = POLICY_PARAMS_GROUP
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TenantPolicy"
PLURAL = POLICY_PARAMS_PLURAL
PARAM_KIND = {"apiVersion": API_VERSION, "kind": KIND}
# The binding's paramRef: the TenantPolicy of this name in the namespace of the request; none there is a refusal.
PARAM_REF = {"name": NAME, "parameterNotFoundAction": "Deny"}

TENANT = "tenant"
OWN_TRAINING_RUNTIMES = "own-training-runtimes"
DEFAULT_PRIORITY_CLASS = "default-priority-class"
MODEL_BUCKET = "serving.model-bucket"
PUBLIC_SERVING = "serving.public"
DATASET = "dataset"
BASE_MODEL = "base-model"
QUEUE_FLAVOR = "queue-flavor"
# The fields of one approved entry, each its own key ``<kind>.<entry>.<field>``.
DATASET_FIELDS = ("name", "uri", "version", "digest", "licence", "classification")
BASE_MODEL_FIELDS = ("name", "uri", "revision")

# Every parameterised policy reads the params through this variable, its first: the TenantPolicy's data
# (one without data has none).
DATA = "variables.policyParams"
VARIABLE = {"name": "policyParams", "expression": "has(params.data) ? params.data : {}"}


def flag(value: bool) -> str:
    return "true" if value else "false"


def entry_key(kind: str, entry: str, field: str) -> str:
    return f"{kind}.{entry}.{field}"


def entries_cel(kind: str, fields: tuple[str, ...]) -> str:
    """CEL: the key prefixes ``<kind>.<entry>.`` of the entries of ``kind`` in the params that have every field."""
    needed = "[" + ", ".join(f"'{f}'" for f in fields) + "]"
    return (f"{DATA}.filter(k, k.startsWith('{kind}.') && k.endsWith('.name'))"
            f".map(k, '{kind}.' + {DATA}[k] + '.')"
            f".filter(p, {needed}.all(f, p + f in {DATA}))")


def value_cel(key: str) -> str:
    """CEL: the value of ``key`` in the params, '' where absent."""
    return f"('{key}' in {DATA} ? {DATA}['{key}'] : '')"


def data_for(config: PlatformConfig, tenant: Tenant, flavors: dict[str, str] | None = None) -> dict[str, str]:
    """Every fact the admission policies need of ``tenant``, as the params' data. ``flavors``: by name, a
    description of each flavor the tenant's queue offers (the TrainJob resources policy reads the names)."""
    data = {TENANT: tenant.name,
            OWN_TRAINING_RUNTIMES: flag(tenant.name in config.security.admission.training_runtime_tenants)}
    if tenant.default_priority_class:
        data[DEFAULT_PRIORITY_CLASS] = tenant.default_priority_class
    if config.serving is not None:
        data[MODEL_BUCKET] = model_bucket(config, tenant)
        data[PUBLIC_SERVING] = flag(tenant.name in config.serving.exposure.public_tenants)
    approved = config.lineage.approved_for(tenant.name)
    for d in approved.datasets:
        data |= {entry_key(DATASET, d.name, f): str(getattr(d, f)) for f in DATASET_FIELDS}
    for m in approved.base_models:
        data |= {entry_key(BASE_MODEL, m.name, f): str(getattr(m, f)) for f in BASE_MODEL_FIELDS}
    for name, description in (flavors or {}).items():
        data[f"{QUEUE_FLAVOR}.{name}"] = description
    return dict(sorted(data.items()))


def params_for(config: PlatformConfig, tenant: Tenant, flavors: dict[str, str] | None = None) -> Manifest:
    """The ``trainyard-policy`` TenantPolicy of one tenant namespace."""
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": metadata(NAME, namespace=tenant.namespace_name, labels={TENANT_LABEL: tenant.name}),
            "data": data_for(config, tenant, flavors)}


def is_params(obj: Manifest) -> bool:
    """Whether ``obj`` is a tenant namespace's params (of any version of the kind)."""
    return obj.get("kind") == KIND and str(obj.get("apiVersion", "")).startswith(f"{GROUP}/") \
        and (obj.get("metadata") or {}).get("name") == NAME


def crd() -> Manifest:
    """The CRD of the params' kind: namespaced, ``data`` a map of strings (``key: value`` as a ConfigMap's, so
    the policies read ``params.data`` as before), nothing else. Like every CRD, protected and kept on destroy."""
    schema = {
        "type": "object",
        "description": "The admission policies' params for one tenant namespace, rendered by Trainyard from the "
                       "stack (lineage, serving, tenants, queues). Change the stack, not this object.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "data": {"type": "object", "additionalProperties": {"type": "string"},
                     "description": "One fact per key: dataset.<entry>.<field>, base-model.<entry>.<field>, "
                                    "queue-flavor.<flavor>, serving.*, tenant, own-training-runtimes, "
                                    "default-priority-class."},
        },
    }
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": metadata(f"{PLURAL}.{GROUP}"),
            "spec": {"group": GROUP, "scope": "Namespaced",
                     "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": KIND.lower()},
                     "versions": [{"name": VERSION, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema},
                                   "additionalPrinterColumns": [
                                       {"name": "Tenant", "type": "string", "jsonPath": ".data.tenant"},
                                       {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]}]}}
