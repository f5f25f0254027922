"""The admission policies' data per tenant: one ConfigMap ``trainyard-policy`` in each tenant namespace.

What differs from tenant to tenant (the datasets and base models its lineage approves, the bucket its
models are served from, whether it may expose models or define its own TrainingRuntimes, its default
priority class, the flavors its queue offers) is *data*, not policy. It lives here, one readable key per
fact, and the policies read it as their parameter: ``spec.paramKind`` ConfigMap on the policy,
``spec.paramRef`` on the binding with ``name: trainyard-policy``, no ``namespace`` (so the API server looks
the params up in the namespace of the object under admission) and ``parameterNotFoundAction: Deny`` (a
tenant namespace without params is refused). A change of approval is then a change of one ConfigMap key
in one tenant's namespace, which ``trainyard diff`` shows as ``data[key]: old -> new`` for that tenant,
instead of an edit deep inside a CEL literal that every tenant shares.

What is the same for every tenant stays in the policies (approved registries and runtimes, the runtimes'
node figures, the flavors' nodes, the cache image): that is the rule itself, reviewed as the policy.

Encoding: ConfigMap values are strings, and Kubernetes CEL has no JSON decoder, so lists are one key
per item and every field of an entry is its own key: ``dataset.<entry>.uri``, ``dataset.<entry>.version``,
... The policies find the entries by the ``.name`` key (``dataset.<entry>.name`` holds ``<entry>``), so
they need no string parsing (no ``split`` over a value a separator could occur in), only map lookups.
Entry, flavor and tenant names are DNS labels (config/base.py ``Name``), which are valid ConfigMap keys.

Tenants cannot edit these params: the tenant Role grants no verb on ConfigMaps (manifests/tenants.py;
the rule ``tenant-policy-params`` holds the ConfigMap to the stack, docs/architecture.md).
Ref: https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/#parameter-resources
Ref: https://kubernetes.io/docs/reference/kubernetes-api/definitions/param-ref-v1-admissionregistration/
"""

from __future__ import annotations

from trainyard.config.model import PlatformConfig, Tenant
from trainyard.manifests.meta import TENANT_LABEL, Manifest, metadata
from trainyard.manifests.serving import model_bucket

NAME = "trainyard-policy"
PARAM_KIND = {"apiVersion": "v1", "kind": "ConfigMap"}
# The binding's paramRef: the ConfigMap of this name in the namespace of the request; none there is a refusal.
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

# Every parameterised policy reads the params through this variable, its first: the ConfigMap's data
# (a ConfigMap without data has none).
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
    """Every fact the admission policies need of ``tenant``, as ConfigMap data. ``flavors``: by name, a
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
    """The ``trainyard-policy`` ConfigMap of one tenant namespace."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(NAME, namespace=tenant.namespace_name, labels={TENANT_LABEL: tenant.name}),
            "data": data_for(config, tenant, flavors)}
