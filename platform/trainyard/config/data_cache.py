"""The data-cache section of a stack: Trainer's distributed data cache, off by default.

With it on, a TrainJob on the cache runtime names ``spec.initializer.dataset.storageUri:
cache://<schema>/<table>`` (an Iceberg table, ``METADATA_LOC`` its metadata.json in S3) and
Trainer's dataset-initializer starts, in the tenant's namespace, a LeaderWorkerSet of Arrow
Flight cache pods (head and workers, image ``data-cache``) that the training pods stream from.

What it takes, each part refused below where the stack leaves it out:

- the LeaderWorkerSet controller (the Trainer chart's LWS subchart) and its CRD;
- in every tenant namespace, the initializer's ServiceAccount with an API token, bound to the
  chart's ClusterRole (create LeaderWorkerSets, Services, ServiceAccounts) and allowed to get
  its TrainJob, and an egress path to the kube-apiserver: a reviewed exception to "tenant pods
  hold no API credentials" (``trainyard check`` prints it);
- credentials for the cache pods. Upstream makes them AWS-shaped: the initializer gives the cache
  pods a ServiceAccount annotated ``eks.amazonaws.com/role-arn: <IAM_ROLE>`` and no other
  credential. ``web-identity`` relies on that: EKS, or on-prem the amazon-eks-pod-identity-webhook
  (it turns the annotation into ``AWS_ROLE_ARN`` and a projected token) in front of an object store
  that serves STS ``AssumeRoleWithWebIdentity`` (MinIO does). ``tenant-secret`` is Trainyard's
  on-prem path: a MutatingAdmissionPolicy gives the cache pods the tenant's
  ``trainyard-object-store`` Secret (static keys and the endpoint) with ``envFrom``;
- Pod Security "restricted" in tenant namespaces: the initializer creates the cache pods with no
  securityContext, which restricted refuses; the same MutatingAdmissionPolicy sets the restricted
  fields on them (``run_as_user``: the image's user is a name, so runAsNonRoot needs a uid).

Ref: kubeflow/trainer v2.3.0 pkg/initializers/dataset/cache.py, pkg/initializers/types/types.py
(CacheDatasetInitializer), charts/kubeflow-trainer/templates/data-cache/cluster-role.yaml,
manifests/overlays/data-cache/namespace-rbac/, cmd/data_cache/Dockerfile; docs/components/data-cache.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from trainyard.config.base import Count, Model, Name, Quantity
from trainyard.config.security import Endpoint

# The reviewed runtime that uses the cache (runtimes/<name>.yaml); listed in runtimes.approved exactly when the cache is on.
CACHE_RUNTIME = "torch-distributed-with-cache"
# The Trainer chart versions whose LWS subchart Trainyard has checked, and that subchart's version.
# Ref: charts/kubeflow-trainer/Chart.yaml (2.3.0): dependency lws 0.8.0.
LWS_FOR_TRAINER = {"2.3.0": "0.8.0"}

# Ref: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-arns
# (arn:partition:iam::account:role/path/name); MinIO STS takes a role ARN of the same form.
_ROLE_ARN = re.compile(r"^arn:[a-z0-9-]+:iam::[0-9A-Za-z_-]*:role/[\w+=,.@/-]{1,512}$")


def _role_arn(value: str) -> str:
    if not _ROLE_ARN.match(value):
        raise ValueError(f"{value!r} is not an IAM role ARN (arn:<partition>:iam::<account>:role/<name>)")
    return value


RoleArn = Annotated[str, AfterValidator(_role_arn)]


class DataCacheCredentials(Model):
    """How the cache pods (not the initializer) read the Iceberg table from the object store."""

    mode: Literal["web-identity", "tenant-secret"] = Field(
        description="web-identity: the cache pods assume tenant_roles[tenant] with their ServiceAccount token "
        "(EKS IRSA, or on-prem the amazon-eks-pod-identity-webhook plus an STS-capable object store such as MinIO; "
        "neither is installed by Trainyard). tenant-secret: a MutatingAdmissionPolicy gives the cache pods the "
        "tenant's trainyard-object-store Secret with envFrom (needs the object-store wiring).")
    tenant_roles: dict[Name, RoleArn] = Field(
        default_factory=dict,
        description="web-identity only: tenant name -> the role ARN its cache pods assume (upstream's IAM_ROLE); "
        "one per tenant, scoped to that tenant's buckets.")


class DataCacheCluster(Model):
    """The size of each TrainJob's cache cluster (the initializer's CLUSTER_SIZE, HEAD_*, WORKER_* settings)."""

    size: int = Field(default=3, ge=2, le=64, description="Pods per cache cluster: one head and size-1 workers.")
    head_cpu: Quantity = Field(default="1", description="CPU request and limit of the head pod.")
    head_memory: Quantity = Field(default="1Gi", description="Memory request and limit of the head pod.")
    worker_cpu: Quantity = Field(default="2", description="CPU request and limit of each worker pod.")
    worker_memory: Quantity = Field(default="2Gi", description="Memory request and limit of each worker pod (the "
                                    "cache holds the table in memory: size it to the table).")


class DataCache(Model):
    """Trainer's distributed data cache (cache:// datasets on LeaderWorkerSet)."""

    enabled: bool = Field(default=False, description="Install the LeaderWorkerSet controller and CRD, the cache "
                          "runtime, and the per-tenant RBAC, network path and admission policy the cache needs.")
    credentials: DataCacheCredentials | None = Field(
        default=None, description="How the cache pods get object-store credentials; required when enabled.")
    api_server: Endpoint | None = Field(
        default=None, description="The kube-apiserver's addresses (cidrs) and port, which the cache initializer "
        "calls from the tenant namespace; required when enabled (tenant egress is otherwise denied).")
    cluster: DataCacheCluster = Field(default=DataCacheCluster(), description="Size of each cache cluster.")
    run_as_user: Count = Field(
        default=65532, gt=0, description="UID the admission policy runs the cache pods as (the data-cache image's "
        "USER is a name, which runAsNonRoot cannot verify).")
