"""The rules across sections of a stack: what no section can check alone.

A tenant's cohort, flavors and priority classes exist; quotas fit the GPUs (and the MIG slices or
time-sliced replicas) the pools advertise, and a CPU pool's CPU and memory; topology labels are carried by every pool; the object
store's buckets, services and network allow agree with the tenants and MLflow; MLflow is reachable
where tenants are allowed to reach it; the data cache has what it needs. Each check reads the
assembled sections (``PlatformFields``) and raises ``FieldError`` with the field path it is about;
``PlatformConfig`` (``config/model.py``) runs them, in this order, when a stack is validated.
"""

from __future__ import annotations

from trainyard import catalog
from trainyard.config.base import HOSTNAME_LABEL, FieldError, unique
from trainyard.config.data_cache import CACHE_RUNTIME, LWS_FOR_TRAINER
from trainyard.config.gpu_operator import COMPUTE_SLICES, MIG_PREFIX
from trainyard.config.gpu_pools import advertised_resources, mig_gpus
from trainyard.config.mlflow import MLFLOW_POD_LABELS, MLFLOW_PORT
from trainyard.config.object_store import BUCKET_NAME, PURPOSES, ObjectStore
from trainyard.config.sections import FlavorQuota, PlatformFields
from trainyard.quantity import format_quantity, parse_quantity


def check_platform(config: PlatformFields) -> None:  # noqa: PLR0912 - one place for every cross-field rule
    _check_pool_names(config)
    unique("cohorts", [c.name for c in config.cohorts])
    unique("tenants", [t.name for t in config.tenants])
    unique("tenants (namespace)", [t.namespace_name for t in config.tenants])
    unique("priority_classes", [p.name for p in config.priority_classes])
    unique("runtimes.approved", list(config.runtimes.approved))

    pools = {p.name for p in config.pools}
    cohorts = {c.name for c in config.cohorts}
    priorities = {p.name for p in config.priority_classes}
    for i, cohort in enumerate(config.cohorts):
        if cohort.parent is not None and cohort.parent not in cohorts:
            raise FieldError(("cohorts", i, "parent"), f"cohort {cohort.parent!r} is not defined in cohorts")

    system = config.system_namespaces()
    for i, tenant in enumerate(config.tenants):
        if tenant.namespace_name in system or tenant.namespace_name.startswith("kube-"):
            # A tenant's Role, RoleBinding and default-deny policies would land in a system namespace.
            raise FieldError(("tenants", i, "namespace" if tenant.namespace else "name"),
                             f"namespace {tenant.namespace_name!r} is a system namespace (default, kube-*, "
                             "a controller's or a platform service's); give the tenant its own")
        if tenant.cohort is not None and tenant.cohort not in cohorts:
            raise FieldError(("tenants", i, "cohort"), f"cohort {tenant.cohort!r} is not defined in cohorts")
        for j, quota in enumerate(tenant.quotas):
            if quota.flavor not in pools:
                raise FieldError(
                    ("tenants", i, "quotas", j, "flavor"),
                    f"flavor {quota.flavor!r} is not a GPU or CPU pool (pools: {', '.join(sorted(pools))})",
                )
            _check_quota_kind(config, quota, ("tenants", i, "quotas", j))
            if tenant.cohort is None and quota.borrowing_limit is not None:
                # Mirrors the ClusterQueue CRD rule: borrowingLimit must be nil when cohort is empty.
                raise FieldError(
                    ("tenants", i, "quotas", j, "borrowing_limit"),
                    "a tenant without a cohort cannot borrow; remove borrowing_limit or set cohort",
                )
        for j, priority in enumerate(tenant.priority_classes):
            if priority not in priorities:
                raise FieldError(
                    ("tenants", i, "priority_classes", j), f"priority class {priority!r} is not defined in priority_classes"
                )

    _check_gpu_stack(config)
    _check_shared_quotas(config)
    _check_slice_budget(config)
    if not config.allow_overcommit:
        for pool in config.gpu_pools:
            committed = sum(q.gpus for t in config.tenants for q in t.quotas if q.flavor == pool.name)
            whole = advertised_resources(pool).get(catalog.GPU_RESOURCE, 0)
            if committed > whole:
                index = next(i for i, p in enumerate(config.gpu_pools) if p.name == pool.name)
                raise FieldError(
                    ("gpu_pools", index),
                    f"nominal GPU quotas on flavor {pool.name!r} add up to {committed}, but the pool has "
                    f"{whole} GPUs ({pool.nodes} nodes x {whole // pool.nodes} {catalog.GPU_RESOURCE}); lower "
                    "the quotas, add nodes, or set allow_overcommit: true",
                )

        _check_cpu_capacity(config)

    if config.topology is not None:
        for level_index, level in enumerate(config.topology.levels):
            if level.node_label == HOSTNAME_LABEL:
                continue
            for node_pool in config.pools:
                if level.node_label not in node_pool.topology_labels:
                    kind = "GPU" if config.gpu_pool(node_pool.name) else "CPU"
                    raise FieldError(
                        ("topology", "levels", level_index, "node_label"),
                        f"topology label {level.node_label!r} is not carried by {kind} pool {node_pool.name!r} "
                        f"(its topology_labels: {', '.join(node_pool.topology_labels) or 'none'})",
                    )
    if config.runtimes.topology is not None:
        levels = {lvl.name for lvl in config.topology.levels} if config.topology else set()
        if config.runtimes.topology.level not in levels:
            raise FieldError(
                ("runtimes", "topology", "level"),
                f"level {config.runtimes.topology.level!r} is not a topology level"
                + ("" if config.topology else " (the stack defines no topology)"),
            )
    if config.serving is not None:
        tenant_names = {t.name for t in config.tenants}
        for i, name in enumerate(config.serving.exposure.public_tenants):
            if name not in tenant_names:
                raise FieldError(("serving", "exposure", "public_tenants", i), f"{name!r} is not a tenant")
        unique("serving.approved_runtimes", list(config.serving.approved_runtimes))
    check_object_store(config)


def check_lineage_tenants(config: PlatformFields) -> None:
    names = {t.name for t in config.tenants}
    for tenant in config.lineage.tenants:
        if tenant not in names:
            raise FieldError(("lineage", "tenants", tenant), f"{tenant!r} is not a tenant of this stack "
                                                             f"({', '.join(sorted(names))})")


def check_mlflow_reachable(config: PlatformFields) -> None:
    """Tenants' egress allow to MLflow must point at the MLflow that is deployed (namespace, pods, port)."""
    if not config.mlflow.enabled:
        return
    if config.object_store is None:
        raise FieldError(("mlflow", "enabled"), "MLflow is enabled: its artifacts and backups need object_store "
                                                "(platform_buckets and a service in the MLflow namespace)")
    endpoint = config.security.network.mlflow
    where = ("security", "network", "mlflow")
    if endpoint is None:
        raise FieldError(where, "MLflow is enabled: tenants need security.network.mlflow to reach it "
                                f"(namespace {config.mlflow.namespace}, port {MLFLOW_PORT})")
    if endpoint.namespace != config.mlflow.namespace:
        raise FieldError((*where, "namespace"), f"MLflow runs in namespace {config.mlflow.namespace!r}, "
                                                f"not {endpoint.namespace!r}")
    if endpoint.ports != (MLFLOW_PORT,):
        raise FieldError((*where, "ports"), f"the MLflow pods listen on {MLFLOW_PORT} only (chart service.containerPort)")
    unknown = {k: v for k, v in endpoint.pod_labels.items() if MLFLOW_POD_LABELS.get(k) != v}
    if unknown:
        raise FieldError((*where, "pod_labels"), f"the MLflow pods do not carry {unknown} "
                                                 f"(they carry {MLFLOW_POD_LABELS})")


def _check_pool_names(config: PlatformFields) -> None:
    unique("gpu_pools", [p.name for p in config.gpu_pools])
    unique("cpu_pools", [p.name for p in config.cpu_pools])
    for index, pool in enumerate(config.cpu_pools):
        if config.gpu_pool(pool.name) is not None:
            raise FieldError(("cpu_pools", index, "name"), f"{pool.name!r} is also a GPU pool: a pool is one "
                                                           "ResourceFlavor, its name unique across gpu_pools and cpu_pools")


def _check_quota_kind(config: PlatformFields, quota: FlavorQuota, path: tuple[str | int, ...]) -> None:
    """A quota on a GPU pool names its GPUs; one on a CPU pool names CPU and memory, and nothing in GPUs."""
    if config.gpu_pool(quota.flavor) is not None:
        if "gpus" not in quota.model_fields_set:
            raise FieldError((*path, "gpus"), f"flavor {quota.flavor!r} is a GPU pool: give the nominal GPUs "
                                              "(gpus: 0 for a quota of shared GPUs only)")
        return
    gpu_fields = ("gpus", "shared", "borrowing_limit", "lending_limit")
    for field in gpu_fields:
        if field in quota.model_fields_set:
            raise FieldError((*path, field), f"flavor {quota.flavor!r} is a CPU pool: its quota is cpu and memory; "
                                             f"{', '.join(gpu_fields)} count GPUs")
    for field in ("cpu", "memory"):
        if getattr(quota, field) is None:
            raise FieldError((*path, field), f"flavor {quota.flavor!r} is a CPU pool: give the nominal {field} "
                                             "(there is no GPU share to derive it from)")


def _check_cpu_capacity(config: PlatformFields) -> None:
    """Nominal CPU and memory quotas on a CPU pool fit its nodes (the GPU pools' follow their GPUs)."""
    for index, pool in enumerate(config.cpu_pools):
        for field in ("cpu", "memory"):
            per_node = getattr(pool, f"{field}_per_node")
            whole = parse_quantity(per_node) * pool.nodes
            committed = sum((parse_quantity(getattr(q, field)) for t in config.tenants for q in t.quotas
                             if q.flavor == pool.name and getattr(q, field) is not None), parse_quantity(0))
            if committed > whole:
                raise FieldError(("cpu_pools", index),
                                 f"nominal {field} quotas on flavor {pool.name!r} add up to "
                                 f"{format_quantity(committed, binary=field == 'memory')}, but the pool has "
                                 f"{format_quantity(whole, binary=field == 'memory')} ({pool.nodes} nodes x "
                                 f"{per_node}); lower the quotas, add nodes, or set allow_overcommit: true")


def _check_gpu_stack(config: PlatformFields) -> None:
    """Sharing needs the operator; the operator's and monitoring's namespaces are no tenant's."""
    for index, pool in enumerate(config.gpu_pools):
        if config.gpu_operator is None and (pool.mig or pool.time_slicing) and not pool.fake:
            what = "mig" if pool.mig else "time_slicing"
            raise FieldError(("gpu_pools", index, what),
                             f"pool {pool.name!r} uses {what}, which the GPU operator configures; set gpu_operator")
    prometheus = config.monitoring.prometheus.namespace
    if config.monitoring.enabled and prometheus not in config.security.network.metrics_from:
        # The controllers' NetworkPolicies admit their metrics port only from these namespaces.
        raise FieldError(("monitoring", "prometheus", "namespace"),
                         f"Prometheus in {prometheus!r} could not reach the controllers' metrics port: add "
                         f"{prometheus!r} to security.network.metrics_from")
    system = {"gpu_operator.namespace": config.gpu_operator.namespace if config.gpu_operator else None,
              "monitoring.namespace": config.monitoring.namespace if config.monitoring.enabled else None}
    for index, tenant in enumerate(config.tenants):
        for field, namespace in system.items():
            if namespace is not None and tenant.namespace_name == namespace:
                raise FieldError(("tenants", index, "namespace"),
                                 f"namespace {namespace!r} is the {field}; a tenant cannot live there")


def _check_slice_budget(config: PlatformFields) -> None:
    """With the budget on, every tenant holding MIG quota has a budget, and the budgets fit the MIG GPUs."""
    on = config.kueue.mig_slice_budget
    total = sum(COMPUTE_SLICES * gpus for pool in config.gpu_pools for gpus in [mig_gpus(pool)])
    committed = 0
    for index, tenant in enumerate(config.tenants):
        mig = any(q.resource.startswith(MIG_PREFIX) for quota in tenant.quotas for q in quota.shared)
        if tenant.mig_slices is not None and not on:
            raise FieldError(("tenants", index, "mig_slices"), "set kueue.mig_slice_budget: true to use mig_slices")
        if on and mig and tenant.mig_slices is None:
            raise FieldError(("tenants", index, "mig_slices"),
                             "the tenant has MIG quotas and kueue.mig_slice_budget is on: give it a mig_slices budget")
        committed += tenant.mig_slices or 0
        if on and not config.allow_overcommit and committed > total:
            raise FieldError(("tenants", index, "mig_slices"),
                             f"mig_slices budgets add up to {committed} with this one, but the MIG pools have "
                             f"{total} compute slices ({total // COMPUTE_SLICES} MIG GPUs x {COMPUTE_SLICES})")


def _check_shared_quotas(config: PlatformFields) -> None:
    """Shared quotas name resources their pool advertises and, summed, fit its slices or replicas."""
    committed: dict[tuple[str, str], int] = {}
    for i, tenant in enumerate(config.tenants):
        for j, quota in enumerate(tenant.quotas):
            pool = config.gpu_pool(quota.flavor)
            if pool is None:
                continue
            offered = advertised_resources(pool)
            for k, shared in enumerate(quota.shared):
                path: tuple[str | int, ...] = ("tenants", i, "quotas", j, "shared", k)
                if shared.resource == catalog.GPU_RESOURCE or shared.resource not in offered:
                    extra = sorted(set(offered) - {catalog.GPU_RESOURCE})
                    raise FieldError((*path, "resource"),
                                     f"pool {pool.name!r} does not advertise {shared.resource!r} as a shared "
                                     f"resource (it offers: {', '.join(extra) or 'whole GPUs only, use gpus'})")
                if tenant.cohort is None and shared.borrowing_limit is not None:
                    raise FieldError((*path, "borrowing_limit"),
                                     "a tenant without a cohort cannot borrow; remove borrowing_limit or set cohort")
                key = (pool.name, shared.resource)
                committed[key] = committed.get(key, 0) + shared.nominal
                if not config.allow_overcommit and committed[key] > offered[shared.resource]:
                    raise FieldError((*path, "nominal"),
                                     f"nominal quotas of {shared.resource} on flavor {pool.name!r} add up to "
                                     f"{committed[key]} with this one, but the pool advertises "
                                     f"{offered[shared.resource]} ({pool.nodes} nodes x "
                                     f"{offered[shared.resource] // pool.nodes}); lower the quota, change the "
                                     "layout, or set allow_overcommit: true")


def check_object_store(config: PlatformFields) -> None:
    """Cross-field rules of the object store: they need the tenant list, images and network settings."""

    store = config.object_store
    if store is None:
        return
    tenants = {t.name for t in config.tenants}
    for name in store.tenant_overrides:
        if name not in tenants:
            raise FieldError(("object_store", "tenant_overrides", name), f"{name!r} is not a tenant")
    if store.backend == "minio" and config.images.registry_mirror is None:
        raise FieldError(("object_store", "backend"),
                         "backend 'minio' needs images.registry_mirror: MinIO publishes no community images any more, "
                         "so its images must come from the platform mirror")
    buckets = {store.platform_bucket(b.name) for b in store.platform_buckets}
    buckets |= {store.tenant_bucket(t, p) for t in tenants for p in PURPOSES}
    for name in sorted(buckets):
        if not BUCKET_NAME.match(name):
            raise FieldError(("object_store", "bucket_prefix"),
                             f"bucket name {name!r} is not a valid S3 bucket name (3-63 characters); shorten the prefix "
                             "or the tenant name")
    _check_services(config, store, buckets)
    _check_network(config, store)
    _check_mlflow(config, store)


def _check_mlflow(config: PlatformFields, store: ObjectStore) -> None:
    """MLflow's artifacts and backups are platform buckets of the service in MLflow's namespace, at this endpoint.

    The service's credentials Secret (``trainyard-object-store`` in that namespace) is what the MLflow
    server and the barman-cloud ObjectStore read (docs/components/mlflow.md).
    """

    mlflow = config.mlflow
    if not mlflow.enabled or mlflow.object_store is None:
        return
    where = ("mlflow", "object_store")
    expected = store.endpoint_url()
    if mlflow.object_store.endpoint_url != expected:
        raise FieldError((*where, "endpoint_url"),
                         f"{mlflow.object_store.endpoint_url!r} is not the object store's endpoint {expected!r}")
    platform = {b.name for b in store.platform_buckets}
    service = next((s for s in store.services if s.namespace == mlflow.namespace), None)
    for field in ("artifacts_bucket", "backups_bucket"):
        bucket = getattr(mlflow.object_store, field)
        if bucket not in platform:
            raise FieldError((*where, field), f"{bucket!r} is not in object_store.platform_buckets")
        if service is None or service.access != "read-write" or bucket not in service.buckets:
            raise FieldError(("object_store", "services"),
                             f"MLflow needs a read-write service in namespace {mlflow.namespace!r} with bucket {bucket!r}")


def _check_services(config: PlatformFields, store: ObjectStore, buckets: set[str]) -> None:

    tenants = {t.name for t in config.tenants}
    tenant_namespaces = {t.namespace_name for t in config.tenants}
    for i, service in enumerate(store.services):
        if service.name in tenants:
            raise FieldError(("object_store", "services", i, "name"), f"{service.name!r} is also a tenant name")
        if service.namespace in tenant_namespaces:
            raise FieldError(("object_store", "services", i, "namespace"),
                             f"{service.namespace!r} is a tenant namespace; its Secret would replace the tenant's")
        for j, bucket in enumerate(service.buckets):
            if bucket not in buckets and store.platform_bucket(bucket) not in buckets:
                raise FieldError(("object_store", "services", i, "buckets", j),
                                 f"bucket {bucket!r} is neither a platform bucket nor a tenant bucket")


def _check_network(config: PlatformFields, store: ObjectStore) -> None:

    allow = config.security.network.object_store
    # Tenants reach the object store through security.network.object_store. For an in-cluster
    # backend it is derived from the server (namespace, pod labels, S3 port); a hand-written one
    # must say exactly the same, or tenants' pods would be allowed somewhere the server is not.
    server = store.server_endpoint()
    if server is None:
        if allow is None or not allow.cidrs:
            raise FieldError(("security", "network", "object_store"),
                             "backend 'external' needs security.network.object_store with the endpoint's cidrs and port")
    elif allow is not None and allow != server:
        raise FieldError(("security", "network", "object_store"),
                         f"does not match the {store.backend} server (namespace {server.namespace}, pod labels "
                         f"{dict(server.pod_labels)}, ports {list(server.ports)}); remove it: it is derived from "
                         "object_store")


def validate_data_cache(config: PlatformFields) -> None:
    """Refuse a data cache that could not work on this stack, naming the field that is missing."""

    cache = config.data_cache
    where = ("data_cache",)
    listed = CACHE_RUNTIME in config.runtimes.approved
    if listed and not cache.enabled:
        raise FieldError(("runtimes", "approved", config.runtimes.approved.index(CACHE_RUNTIME)),
                         f"{CACHE_RUNTIME} needs the data cache: set data_cache.enabled (docs/components/data-cache.md)")
    if not cache.enabled:
        return
    if not listed:
        raise FieldError(("runtimes", "approved"), f"data_cache.enabled installs the cache for the {CACHE_RUNTIME} "
                                                   "runtime: list it here")
    if config.versions.trainer not in LWS_FOR_TRAINER:
        raise FieldError(("versions", "trainer"), f"the data cache is checked with Trainer "
                                                  f"{', '.join(LWS_FOR_TRAINER)} only (its LWS subchart)")
    if cache.credentials is None:
        raise FieldError((*where, "credentials"),
                         "the cache pods need object-store credentials and upstream gives them none but an IAM role "
                         "annotation: set mode web-identity (EKS IRSA, or the pod-identity webhook and an STS-capable "
                         "object store on-prem) with tenant_roles, or tenant-secret (the tenant's object-store Secret)")
    if cache.api_server is None or not cache.api_server.cidrs:
        raise FieldError((*where, "api_server"), "the cache initializer calls the kube-apiserver from the tenant "
                                                 "namespace: name its addresses (cidrs) and port")
    credentials = cache.credentials
    tenants = [t.name for t in config.tenants]
    if credentials.mode == "web-identity":
        unknown = sorted(set(credentials.tenant_roles) - set(tenants))
        if unknown:
            raise FieldError((*where, "credentials", "tenant_roles", unknown[0]), "is not a tenant of this stack")
        missing = [name for name in tenants if name not in credentials.tenant_roles]
        if missing:
            raise FieldError((*where, "credentials", "tenant_roles"),
                             f"web-identity needs a role ARN for every tenant; missing: {', '.join(missing)}")
    else:
        if credentials.tenant_roles:
            raise FieldError((*where, "credentials", "tenant_roles"), "only used with mode web-identity")
        if config.object_store is None and config.security.network.object_store is None:
            raise FieldError((*where, "credentials", "mode"),
                             "tenant-secret gives the cache pods the tenant's trainyard-object-store Secret, which "
                             "only a stack with an object store delivers (object_store, or security.network.object_store)")
