"""Rules on the data cache's one exception to tenant isolation: the cache initializer's API access.

Tenant pods hold no API credentials (the tenant ServiceAccount mounts no token). The data cache
needs one exception: Trainer's dataset-initializer creates the cache's LeaderWorkerSet, Service
and ServiceAccount itself, as ``kubeflow-trainer-cache-initializer`` bound to the Trainer chart's
ClusterRole of that name. This rule keeps the exception to what the stack reviewed: the
ClusterRole is bound only by RoleBindings in tenant namespaces, only to that namespace's
initializer ServiceAccount, only with ``data_cache.enabled``, never cluster-wide.
``trainyard check`` prints the exception (``reviewed_exceptions``).

Ref: kubeflow/trainer v2.3.0 charts/kubeflow-trainer/templates/data-cache/cluster-role.yaml,
manifests/overlays/data-cache/namespace-rbac/role_binding.yaml.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from trainyard.config.model import PlatformConfig
from trainyard.manifests.data_cache import CHART_CLUSTER_ROLE, INITIALIZER_ACCOUNT
from trainyard.manifests.meta import Manifest
from trainyard.policy.model import Context, stack_rule
from trainyard.policy.pods import as_dict, as_list


def reviewed_exceptions(config: PlatformConfig) -> list[str]:
    """The data cache's reviewed exceptions, as ``trainyard check`` prints them."""
    if not config.data_cache.enabled:
        return []
    namespaces = ", ".join(t.namespace_name for t in config.tenants)
    return [f"RoleBinding/<tenant>/{INITIALIZER_ACCOUNT} binds ClusterRole {CHART_CLUSTER_ROLE} (create "
            f"LeaderWorkerSets, Services, ServiceAccounts) and get TrainJobs to ServiceAccount {INITIALIZER_ACCOUNT}, "
            f"which mounts an API token, in every tenant namespace ({namespaces}): Trainer's cache initializer "
            "creates each TrainJob's cache cluster (data_cache.enabled)"]


@stack_rule("data-cache-rbac-scoped",
            f"ClusterRole {CHART_CLUSTER_ROLE} is bound only in tenant namespaces, only to their {INITIALIZER_ACCOUNT} "
            "ServiceAccount, and only with the data cache on.",
            "Bind the cache initializer's ClusterRole with the RoleBindings manifests/data_cache.py declares "
            "(data_cache.enabled); never with a ClusterRoleBinding or to another subject.")
def data_cache_rbac_scoped(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    enabled = ctx.config.data_cache.enabled
    for obj in objects:
        if obj.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = as_dict(obj.get("roleRef"))
        if ref.get("kind") != "ClusterRole" or ref.get("name") != CHART_CLUSTER_ROLE:
            continue
        namespace = as_dict(obj.get("metadata")).get("namespace")
        if obj.get("kind") == "ClusterRoleBinding":
            yield obj, f"grants {CHART_CLUSTER_ROLE} cluster-wide"
            continue
        if not enabled:
            yield obj, f"binds {CHART_CLUSTER_ROLE} but data_cache is not enabled"
            continue
        if namespace not in ctx.tenants_by_namespace:
            yield obj, f"binds {CHART_CLUSTER_ROLE} in {namespace}, which is no tenant namespace"
        for item in as_list(obj.get("subjects")):
            subject = as_dict(item)
            if (subject.get("kind"), subject.get("name"), subject.get("namespace")) != \
                    ("ServiceAccount", INITIALIZER_ACCOUNT, namespace):
                yield obj, f"binds {CHART_CLUSTER_ROLE} to {subject.get('kind')} {subject.get('name')}, not to this " \
                           f"namespace's {INITIALIZER_ACCOUNT}"


RULES = (data_cache_rbac_scoped,)
