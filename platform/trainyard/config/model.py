"""The typed stack configuration: one frozen model per environment.

A stack file (``stacks/Pulumi.<env>.yaml``) carries the whole platform under the Pulumi
config key ``trainyard:platform``. Everything downstream (manifest builders, Pulumi
components, policy, review) reads only this model, never the raw YAML.

Unknown fields are forbidden everywhere so that a typo is an error, not a silently
ignored setting. Cross-field rules (a tenant's cohort exists, quotas fit the GPUs that
exist, topology labels are carried by the pools) live in ``PlatformConfig``'s validators,
so an invalid stack never reaches the builders.
"""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from trainyard import catalog
from trainyard.quantity import parse_quantity

# Ref: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A qualified label key: optional DNS-1123 subdomain prefix, then a name segment.
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$")
# A registry host (with an optional port) and at least the '/' that ends it.
_IMAGE_PREFIX = re.compile(
    r"^(?P<host>[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?)/(?P<path>([a-z0-9]([-a-z0-9._]*[a-z0-9])?/)*)$"
)
# Registries anyone can push to: the host alone approves every image of every user.
# Ref: https://docs.docker.com/reference/cli/docker/image/pull/ (docker.io is the default registry)
PUBLIC_REGISTRIES = frozenset({
    "docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com", "ghcr.io", "quay.io", "gcr.io",
    "nvcr.io", "registry.k8s.io", "k8s.gcr.io", "public.ecr.aws", "mcr.microsoft.com", "registry.gitlab.com",
})
# Kubernetes API integer fields (int32): priorities, thresholds, counts that become object fields.
# Ref: kueue CRDs (workloadpriorityclasses value, clusterqueues maxPriorityThreshold: format int32)
INT32_MAX = 2**31 - 1

HOSTNAME_LABEL = "kubernetes.io/hostname"


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS1123_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a valid DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )
    return value


def _label_key(value: str) -> str:
    prefix, _, name = value.rpartition("/")
    if len(name) > 63 or len(prefix) > 253 or not _LABEL_KEY.match(value):
        raise ValueError(f"{value!r} is not a valid label key (optional DNS prefix of at most 253 and '/', "
                         "then a name of at most 63)")
    return value


def _label_value(value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(f"{value!r} is not a valid label value")
    return value


def _quantity(value: int | str) -> int | str:
    # Kubernetes keeps quantities as scaled int64; Kueue reads them as int64 (Value/MilliValue).
    if parse_quantity(value) > 2**63 - 1:
        raise ValueError(f"{value!r} is out of range for a Kubernetes quantity (at most 2^63-1)")
    return value


def _project_relative(value: str) -> str:
    parts = PurePosixPath(value).parts
    if not value or value.startswith("/") or ".." in parts or "\\" in value:
        raise ValueError(f"{value!r} must be a directory inside the project (relative, no '..'): "
                         "runtimes are reviewed with the stack")
    return value


def _image_prefix(value: str) -> str:
    """An approved-registry or mirror prefix: a registry host, '/', then whole path segments."""
    if any(ch in value for ch in "*?[]"):
        raise ValueError(f"{value!r}: image prefixes are matched literally (startsWith); wildcards never match")
    match = _IMAGE_PREFIX.match(value)
    if not match:
        raise ValueError(
            f"{value!r} is not an image prefix: a registry host, '/', then optional path segments each ending in '/' "
            "(e.g. 'registry.example.com/ml/'); without the final '/' it would also match "
            f"'{value}-evil/...' or '{value}.evil.io/...'"
        )
    host = match["host"]
    if "." not in host and ":" not in host and host != "localhost":
        raise ValueError(f"{value!r}: {host!r} is not a registry host (a Docker Hub namespace would be docker.io/{host}/)")
    if host.split(":")[0] in PUBLIC_REGISTRIES and not match["path"]:
        raise ValueError(f"{value!r} approves every image anyone pushes to the public registry {host}; "
                         "name the organisation's path (e.g. 'nvcr.io/nvidia/')")
    return value


def _duration(value: str) -> str:
    if not _DURATION.match(value):
        raise ValueError(f"{value!r} is not a duration (examples: 10m, 1h30m, 90s)")
    return value


Name = Annotated[str, AfterValidator(_dns_label)]
LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
Quantity = Annotated[int | str, AfterValidator(_quantity)]
Duration = Annotated[str, AfterValidator(_duration)]
Labels = dict[LabelKey, LabelValue]
Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
ImagePrefix = Annotated[str, AfterValidator(_image_prefix)]
ProjectPath = Annotated[str, AfterValidator(_project_relative)]
# Free text that lands in an object (e.g. WorkloadPriorityClass.description, maxLength 2048 in the CRD).
Text = Annotated[str, Field(max_length=2048)]
# Identity-provider group bound by RoleBindings. 'system:' groups are Kubernetes' own (system:authenticated
# is every user, system:masters is cluster-admin): binding a tenant role to one hands the tenant to all of them.
# Ref: https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-subjects
Group = Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^\S(.*\S)?$")]


class Model(BaseModel):
    """Base of every config model: frozen, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# gpu_operator.py builds on Model and the name types above, so it is imported here, not at the top.
from trainyard.config.gpu_operator import (  # noqa: E402
    COMPUTE_SLICES,
    MIG_PREFIX,
    GpuOperator,
    Mig,
    TimeSlicing,
    advertised_resources,
    mig_gpus,
    validate_pool_sharing,
)


class ClusterAccess(Model):
    """How Pulumi reaches the cluster. An explicit provider is always used; there is no default provider."""

    name: Name = Field(description="Cluster identifier; appears in labels and review output.")
    # An empty context would be the kubeconfig's current context: whatever cluster the shell points at.
    context: str = Field(min_length=1, description="kubeconfig context the Kubernetes provider uses.")
    kubeconfig: str | None = Field(
        default=None, min_length=1,
        description="Path to a kubeconfig file; unset means the provider's usual lookup (KUBECONFIG, ~/.kube/config).",
    )


class Versions(Model):
    """Upstream component versions. Defaults come from ``trainyard.catalog``."""

    kueue: str = Field(default=catalog.DEFAULT_VERSIONS["kueue"], description="Kueue release (chart and CRDs).")
    jobset: str = Field(default=catalog.DEFAULT_VERSIONS["jobset"], description="JobSet release (chart and CRD).")
    trainer: str = Field(default=catalog.DEFAULT_VERSIONS["trainer"], description="Kubeflow Trainer release (chart and CRDs).")
    seaweedfs: str = Field(default=catalog.DEFAULT_VERSIONS["seaweedfs"], description="SeaweedFS chart release.")
    minio: str = Field(default=catalog.DEFAULT_VERSIONS["minio"],
                       description="MinIO Operator release (operator and tenant charts, CRDs).")
    cnpg: str = Field(default=catalog.DEFAULT_VERSIONS["cnpg"], description="CloudNativePG operator release (chart and CRDs).")
    mlflow: str = Field(default=catalog.DEFAULT_VERSIONS["mlflow"], description="MLflow community chart release.")
    prometheus_operator: str = Field(
        default=catalog.DEFAULT_VERSIONS["prometheus_operator"],
        description="prometheus-operator release whose CRDs (ServiceMonitor, PodMonitor, PrometheusRule) are declared.")
    kserve: str = Field(default=catalog.DEFAULT_VERSIONS["kserve"], description="KServe release (controller chart and CRDs).")
    cert_manager: str = Field(default=catalog.DEFAULT_VERSIONS["cert_manager"],
                              description="cert-manager release (chart and CRDs), where Trainyard installs it.")

    @model_validator(mode="after")
    def _known(self) -> Versions:
        for component in ("kueue", "jobset", "trainer", "seaweedfs", "minio", "cnpg", "mlflow", "prometheus_operator",
                          "kserve", "cert_manager"):
            version = getattr(self, component)
            if (component, version) not in catalog.RELEASES:
                known = ", ".join(catalog.known_versions(component))
                raise ValueError(f"{component} {version} is not in the catalog (known: {known})")
        chosen = (self.kueue, self.jobset, self.trainer)
        if chosen not in catalog.PROVEN_TOGETHER:
            proven = "; ".join(f"kueue {k}, jobset {j}, trainer {t}" for k, j, t in sorted(catalog.PROVEN_TOGETHER))
            raise ValueError(f"kueue {self.kueue}, jobset {self.jobset} and trainer {self.trainer} are not proven to "
                             f"work together (catalog.PROVEN_TOGETHER: {proven})")
        return self


class CrdSource(Model):
    """Where CRDs come from: the pinned upstream release, or a mirror directory for air-gapped sites.

    Either way every file is verified against the git blob SHA pinned in the catalog.
    """

    source: Literal["release", "mirror"] = Field(
        default="release", description="'release': the pinned upstream files (a mirror or the cache is used first if present); "
        "'mirror': only the mirror directory, never the network.")
    mirror_dir: str | None = Field(
        default=None,
        description="Directory laid out as <component>/v<version>/<file>.yaml; relative to the stack file. "
        "With source=release, the environment variable TRAINYARD_CRDS_DIR may name such a mirror too.",
    )

    @model_validator(mode="after")
    def _mirror_needs_dir(self) -> CrdSource:
        if self.source == "mirror" and not self.mirror_dir:
            raise ValueError("source 'mirror' needs mirror_dir")
        return self


class Taint(Model):
    key: LabelKey = Field(description="Taint key carried by the pool's nodes.")
    value: LabelValue | None = Field(default=None, description="Taint value; unset tolerates any value.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(description="Taint effect.")


class GpuPool(Model):
    """A set of identical GPU nodes. Each pool becomes one Kueue ResourceFlavor."""

    name: Name = Field(description="Pool name; also the ResourceFlavor name.")
    gpu_product: LabelValue = Field(min_length=1, description="GPU product, as the GPU feature discovery label reports it.")
    gpus_per_node: int = Field(gt=0, le=INT32_MAX, description="Allocatable nvidia.com/gpu per node.")
    nodes: int = Field(gt=0, le=INT32_MAX, description="Number of nodes; physical GPUs = nodes x gpus_per_node.")
    cpu_per_node: Quantity = Field(description="Allocatable CPU per node.")
    memory_per_node: Quantity = Field(description="Allocatable memory per node.")
    # Ref: ResourceFlavor CRD spec.nodeLabels maxProperties 8, spec.tolerations maxItems 8.
    node_labels: Labels = Field(max_length=8, description="Labels that select exactly this pool's nodes.")
    taints: tuple[Taint, ...] = Field(
        default=(), max_length=8, description="Taints of the pool's nodes; the flavor tolerates them for admitted pods.")
    topology_labels: tuple[LabelKey, ...] = Field(
        default=(),
        description=f"Topology label keys the pool's nodes carry (e.g. block, rack); {HOSTNAME_LABEL} is implied.",
    )
    fake: bool = Field(default=False, description="Rehearsal only: nodes are fake Node objects with GPU capacity.")
    driver: Literal["operator", "preinstalled"] = Field(
        default="operator",
        description="operator: the GPU operator installs the driver (one NVIDIADriver per pool); preinstalled: the "
        "host image carries it and the nodes are labelled nvidia.com/gpu.deploy.driver=false.")
    driver_version: str | None = Field(
        default=None, description="Driver version for this pool; unset = gpu_operator.driver_version.")
    mig: Mig | None = Field(default=None, description="MIG strategy and layout; unset = MIG off (whole GPUs).")
    time_slicing: TimeSlicing | None = Field(default=None, description="Time-slicing replicas; unset = no sharing.")

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @model_validator(mode="after")
    def _selects_nodes(self) -> GpuPool:
        if not self.node_labels:
            raise ValueError("node_labels must select the pool's nodes (at least one label)")
        if self.fake:
            # Fake nodes are named <pool>-<index>, and that name is their hostname label value (at most 63).
            # Their topology labels are <pool>-<key suffix>-<domain index> (manifests/rehearsal.py).
            values = [f"{self.name}-{self.nodes - 1}"] + [
                f"{self.name}-{key.rsplit('/', 1)[-1].rsplit('-', 1)[-1]}-{self.nodes - 1}" for key in self.topology_labels]
            longest = max(values, key=len)
            if self.nodes > MAX_FAKE_NODES or len(longest) > 63:
                raise FieldError(("nodes",), f"a fake pool has at most {MAX_FAKE_NODES} nodes, whose names and "
                                             f"topology label values fit in 63 characters ({longest!r})")
        if self.driver == "preinstalled" and self.driver_version is not None:
            raise ValueError("driver_version only applies to driver: operator")
        validate_pool_sharing(self)
        return self


MAX_FAKE_NODES = 10_000


class TopologyLevel(Model):
    name: Name = Field(description="Level name used by runtimes.topology.level (e.g. block, rack, host).")
    node_label: LabelKey = Field(description="Node label whose value identifies the domain at this level.")


class Topology(Model):
    """Topology-aware scheduling (TAS): the hierarchy of node labels, widest level first.

    Ref: https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/
    """

    name: Name = Field(default="default", description="Name of the Kueue Topology object.")
    # Ref: Topology CRD spec.levels maxItems 16.
    levels: tuple[TopologyLevel, ...] = Field(
        min_length=1, max_length=16, description="Levels, widest first; kubernetes.io/hostname only last.")

    @model_validator(mode="after")
    def _levels(self) -> Topology:
        labels = [level.node_label for level in self.levels]
        dupes = sorted(label for label, count in Counter(labels).items() if count > 1)
        if dupes:
            raise ValueError(f"levels repeat node labels: {', '.join(dupes)}")
        # Mirrors the Topology CRD rule: hostname may only be the lowest level.
        if HOSTNAME_LABEL in labels[:-1]:
            raise ValueError(f"{HOSTNAME_LABEL} can only be the last (lowest) level")
        return self


class Requeuing(Model):
    """Ref: Kueue config v1beta2 RequeuingStrategy (apis/config/v1beta2/configuration_types.go)."""

    timestamp: Literal["Eviction", "Creation"] = Field(default="Eviction", description="Requeue ordering timestamp.")
    backoff_limit_count: int | None = Field(
        default=5, ge=0, le=INT32_MAX, description="Requeues before the workload is deactivated; null = forever.")
    backoff_base_seconds: int = Field(default=60, gt=0, le=INT32_MAX, description="Base of the exponential requeue backoff.")
    backoff_max_seconds: int = Field(default=3600, gt=0, le=INT32_MAX, description="Longest requeue backoff.")


class WaitForPodsReady(Model):
    """All-or-nothing admission: an admitted workload whose pods are not all ready in time is evicted."""

    timeout: Duration = Field(default="10m", description="Time for all pods of an admitted workload to become ready.")
    recovery_timeout: Duration | None = Field(default=None, description="Time to recover after a pod fails while running.")
    block_admission: bool = Field(default=False, description="Admit nothing else until the admitted workload's pods are ready.")
    requeuing: Requeuing = Field(default=Requeuing(), description="How evicted workloads are requeued.")


class FairSharing(Model):
    enabled: bool = Field(default=True, description="Fair sharing between ClusterQueues of a cohort.")
    preemption_strategies: tuple[Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"], ...] = Field(
        default=("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
        description="Which preemptions fair sharing allows, tried in order.")


class BorrowWithinCohort(Model):
    policy: Literal["Never", "LowerPriority"] = Field(default="LowerPriority", description="Preempt to borrow within the cohort.")
    max_priority_threshold: Int32 | None = Field(default=None, description="Only preempt workloads at or below this priority.")


class Preemption(Model):
    """ClusterQueue preemption. Ref: ClusterQueue v1beta2 spec.preemption."""

    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        default="LowerPriority", description="Preemption among a tenant's own workloads.")
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        default="Any", description="Preempt borrowers to reclaim nominal quota.")
    borrow_within_cohort: BorrowWithinCohort = Field(default=BorrowWithinCohort(), description="Preemption while borrowing.")

    @model_validator(mode="after")
    def _crd_rule(self) -> Preemption:
        # Mirrors the ClusterQueue CRD rule on spec.preemption.
        if self.reclaim_within_cohort == "Never" and self.borrow_within_cohort.policy != "Never":
            raise ValueError("reclaim_within_cohort 'Never' requires borrow_within_cohort.policy 'Never'")
        return self


class KueueSettings(Model):
    wait_for_pods_ready: WaitForPodsReady = Field(default=WaitForPodsReady(), description="All-or-nothing admission.")
    fair_sharing: FairSharing = Field(default=FairSharing(), description="Fair sharing across the cohort tree.")
    preemption: Preemption = Field(default=Preemption(), description="ClusterQueue preemption policy (every tenant).")
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO"] = Field(
        default="BestEffortFIFO", description="BestEffortFIFO lets smaller jobs pass a blocked head of queue.")
    manage_jobs_without_queue_name: bool = Field(
        default=True, description="Suspend jobs in managed namespaces that name no queue (nothing bypasses quota)."
    )
    mig_slice_budget: bool = Field(
        default=False,
        description="Also count every MIG instance as its compute slices (1g = 1 ... 7g = 7, a seventh of a GPU each) "
        "in one budget per tenant (tenants[].mig_slices), through a Kueue resource transformation; per-profile quotas "
        "still apply. See docs/components/gpu-operator.md.")


class PriorityClass(Model):
    name: Name = Field(description="WorkloadPriorityClass name; TrainJobs select it with kueue.x-k8s.io/priority-class.")
    value: Int32 = Field(description="Higher runs first and may preempt lower.")
    description: Text = Field(default="", description="Shown to tenants.")


class Cohort(Model):
    name: Name = Field(description="Cohort name; tenants in one cohort lend and borrow unused quota.")
    parent: Name | None = Field(default=None, description="Parent cohort (hierarchical cohorts).")
    fair_share_weight: Quantity | None = Field(default=None, description="Share of the parent under fair sharing.")


class SharedQuota(Model):
    """A tenant's quota of one shared-GPU resource (a MIG profile or time-sliced replicas) on one flavor."""

    resource: str = Field(description="Resource the pool advertises, e.g. nvidia.com/mig-1g.18gb or nvidia.com/gpu.shared.")
    nominal: int = Field(ge=0, description="Nominal quota, in units of the resource (slices or replicas).")
    borrowing_limit: int | None = Field(default=None, ge=0, description="Units above nominal it may borrow; unset = no limit.")
    lending_limit: int | None = Field(default=None, ge=0, description="Units of its nominal it may lend; unset = all.")

    @model_validator(mode="after")
    def _lending(self) -> SharedQuota:
        if self.lending_limit is not None and self.lending_limit > self.nominal:
            raise ValueError(f"lending_limit {self.lending_limit} exceeds the nominal quota of {self.nominal}")
        return self


class FlavorQuota(Model):
    """A tenant's quota on one GPU flavor. CPU and memory default to the GPU share of a node."""

    flavor: Name = Field(description="GPU pool (ResourceFlavor) name.")
    gpus: Count = Field(description="Nominal quota of whole GPUs (nvidia.com/gpu as the pool advertises it).")
    shared: tuple[SharedQuota, ...] = Field(
        default=(), description="Quotas of the pool's shared-GPU resources (MIG profiles, time-sliced replicas).")
    borrowing_limit: Count | None = Field(default=None, description="GPUs above nominal it may borrow; unset = no limit.")
    lending_limit: Count | None = Field(default=None, description="GPUs of its nominal it may lend; unset = all.")
    cpu: Quantity | None = Field(default=None, description="Nominal CPU; default: the GPU share of the pool's node CPU.")
    memory: Quantity | None = Field(default=None, description="Nominal memory; default: the GPU share of node memory.")

    @model_validator(mode="after")
    def _lending(self) -> FlavorQuota:
        if self.lending_limit is not None and self.lending_limit > self.gpus:
            raise ValueError(f"lending_limit {self.lending_limit} exceeds the nominal quota of {self.gpus} GPUs")
        _unique("shared (resource)", [q.resource for q in self.shared])
        return self


class Tenant(Model):
    """An ML team: a namespace, a LocalQueue on its own ClusterQueue, quotas and member groups."""

    name: Name = Field(description="Tenant name; also its ClusterQueue's name.")
    namespace: Name | None = Field(default=None, description="Defaults to the tenant name.")
    cohort: Name | None = Field(default=None, description="Cohort to borrow from and lend to; none = isolated quota.")
    # Ref: ClusterQueue CRD spec.resourceGroups[].flavors maxItems 16.
    quotas: tuple[FlavorQuota, ...] = Field(min_length=1, max_length=16, description="Quota per GPU flavor.")
    fair_share_weight: Quantity | None = Field(default=None, description="Share within the cohort under fair sharing.")
    priority_classes: tuple[Name, ...] = Field(default=(), description="Allowed WorkloadPriorityClasses.")
    default_priority_class: Name | None = Field(
        default=None, description="Priority class a TrainJob of the tenant gets when it names none (the admission "
        "policy trainyard-trainjob-default-priority labels it; Kueue would otherwise give it priority 0).")
    groups: tuple[Group, ...] = Field(default=(), description="Identity-provider groups bound to the tenant role.")
    max_trainjobs: Count = Field(default=50, description="ResourceQuota on TrainJob objects in the namespace.")
    mig_slices: Count | None = Field(
        default=None,
        description="Budget of MIG compute slices across every MIG profile and pool (needs kueue.mig_slice_budget).")

    @property
    def namespace_name(self) -> str:
        return self.namespace or self.name

    @model_validator(mode="after")
    def _unique_flavors(self) -> Tenant:
        flavors = [q.flavor for q in self.quotas]
        dupes = sorted(f for f, c in Counter(flavors).items() if c > 1)
        if dupes:
            raise ValueError(f"quotas repeat flavors: {', '.join(dupes)}")
        if self.default_priority_class and self.default_priority_class not in self.priority_classes:
            raise ValueError("default_priority_class must be one of priority_classes")
        for i, group in enumerate(self.groups):
            if group.startswith("system:"):
                raise FieldError(("groups", i), f"{group!r} is a Kubernetes system group (system:authenticated is every "
                                                "user); bind identity-provider groups only")
        _unique("groups", list(self.groups))
        return self


class TopologyRequest(Model):
    """How approved runtimes ask Kueue to place a job's pods (a podset topology annotation)."""

    mode: Literal["preferred", "required"] = Field(
        default="preferred", description="required: wait for a domain that fits; preferred: pack as tightly as possible.")
    level: Name = Field(description="Name of a topology level.")


class Runtimes(Model):
    """The approved ClusterTrainingRuntimes and where their images may come from."""

    directory: ProjectPath = Field(default="runtimes", description="Directory of reviewed runtime YAML, relative to the project.")
    approved: tuple[Name, ...] = Field(min_length=1, description="Runtime names (file stems) to install.")
    approved_registries: tuple[ImagePrefix, ...] = Field(
        min_length=1, description="Image prefixes allowed in runtimes and tenant workloads (e.g. 'registry.example.com/ml/')."
    )
    topology: TopologyRequest | None = Field(default=None, description="Topology annotation added to the runtimes' GPU pods.")
    checkpoints_keep: int = Field(
        default=2, ge=1, description="Complete checkpoints a run keeps (TRAINYARD_CHECKPOINT_KEEP); older ones are deleted "
        "by the program, and what is left expires with the checkpoints bucket's lifecycle.")


class Images(Model):
    """Where the controller images come from."""

    registry_mirror: ImagePrefix | None = Field(
        default=None,
        description="Prefix of the platform's image mirror (e.g. 'registry.example.com/mirror/'); controller images "
        "are pulled as <mirror><upstream repository>. Unset: the upstream registries.",
    )

    lock_file: str = Field(
        default="images.lock.yaml",
        description="The image lock (relative to the project): image reference -> digest in the mirror. Runtimes and "
        "chart values take their digests from it; `trainyard images lock STACK` fills it (docs/supply-chain.md).",
    )

    @model_validator(mode="after")
    def _prefix(self) -> Images:
        if self.registry_mirror is not None and not self.registry_mirror.endswith("/"):
            raise ValueError("registry_mirror must end with '/' (it is a prefix)")
        return self


class Lifecycle(Model):
    protect_data: bool = Field(
        default=True,
        description="Pulumi-protect CRDs and data-holding resources (destroy refuses). "
        "Independently of this, they are always retained on delete.",
    )


class Rehearsal(Model):
    """Local rehearsal: which upstream controllers are external (CRDs and config applied, no Deployments)."""

    external_controllers: tuple[Literal["kueue", "jobset", "trainer", "seaweedfs", "minio", "cnpg", "mlflow", "kserve",
                                        "cert-manager"], ...] = Field(
        default=(), description="Controllers whose charts are not installed (CRDs and Trainyard objects still are); "
        "seaweedfs and minio name the object store's charts.")


# security.py, multikueue.py, mlflow.py, monitoring.py, object_store.py, serving.py, lineage.py and data_cache.py
# build on Model and the name types above, so they are imported here.
from trainyard.config.data_cache import DataCache, validate_data_cache  # noqa: E402
from trainyard.config.lineage import Lineage  # noqa: E402
from trainyard.config.mlflow import Mlflow  # noqa: E402
from trainyard.config.monitoring import Monitoring  # noqa: E402
from trainyard.config.multikueue import MultiKueue  # noqa: E402
from trainyard.config.object_store import ObjectStore, check_object_store  # noqa: E402
from trainyard.config.security import Security  # noqa: E402
from trainyard.config.serving import Serving  # noqa: E402


class PlatformConfig(Model):
    """The whole platform for one environment."""

    environment: Name = Field(description="Environment name (local, staging, prod); shown in reports.")
    cluster: ClusterAccess = Field(description="How Pulumi reaches the cluster.")
    versions: Versions = Field(default=Versions(), description="Upstream component versions.")
    crds: CrdSource = Field(default=CrdSource(), description="Where the upstream CRDs come from.")
    gpu_pools: tuple[GpuPool, ...] = Field(min_length=1, description="GPU node pools; one ResourceFlavor each.")
    gpu_operator: GpuOperator | None = Field(
        default=None, description="The NVIDIA GPU operator; unset = not installed (fake GPUs, or a site-managed stack).")
    monitoring: Monitoring = Field(default=Monitoring(), description="Metrics, alerts and dashboards.")
    allow_overcommit: bool = Field(default=False, description="Allow nominal GPU quotas above the physical GPUs.")
    topology: Topology | None = Field(default=None, description="Topology-aware scheduling levels; none = TAS off.")
    kueue: KueueSettings = Field(default=KueueSettings(), description="Kueue controller and queue settings.")
    priority_classes: tuple[PriorityClass, ...] = Field(default=(), description="WorkloadPriorityClasses.")
    cohorts: tuple[Cohort, ...] = Field(default=(), description="Cohorts (a tree through parent).")
    tenants: tuple[Tenant, ...] = Field(min_length=1, description="ML teams.")
    runtimes: Runtimes = Field(description="Approved ClusterTrainingRuntimes.")
    images: Images = Field(default=Images(), description="Controller image sources.")
    lifecycle: Lifecycle = Field(default=Lifecycle(), description="Protection of data-holding resources.")
    rehearsal: Rehearsal = Field(default=Rehearsal(), description="Local rehearsal settings.")
    security: Security = Security()
    multikueue: MultiKueue | None = Field(
        default=None, description="MultiKueue role of this cluster (manager or worker); none = a single cluster.")
    object_store: ObjectStore | None = Field(
        default=None, description="Object storage (buckets and credentials per tenant); unset = none.")
    mlflow: Mlflow = Field(default=Mlflow(), description="MLflow tracking server and model registry.")
    serving: Serving | None = Field(default=None, description="Model serving (KServe); unset = no serving on this stack.")
    lineage: Lineage = Field(default=Lineage(), description="Approved datasets and base models TrainJobs may initialise from.")
    data_cache: DataCache = Field(default=DataCache(), description="Trainer's distributed data cache (cache:// "
                                  "datasets on LeaderWorkerSet); off by default. See docs/components/data-cache.md.")

    def pool(self, name: str) -> GpuPool:
        return next(p for p in self.gpu_pools if p.name == name)

    def _system_namespaces(self) -> set[str]:
        network = self.security.network
        endpoints = [network.object_store, network.mlflow, network.egress_proxy]
        return ({"default", network.dns.namespace, *network.metrics_from}
                | {release.namespace for release in catalog.RELEASES.values()}
                | {e.namespace for e in endpoints if e is not None and e.namespace is not None})

    @model_validator(mode="after")
    def _cross_field(self) -> PlatformConfig:  # noqa: PLR0912 - one place for every cross-field rule
        _unique("gpu_pools", [p.name for p in self.gpu_pools])
        _unique("cohorts", [c.name for c in self.cohorts])
        _unique("tenants", [t.name for t in self.tenants])
        _unique("tenants (namespace)", [t.namespace_name for t in self.tenants])
        _unique("priority_classes", [p.name for p in self.priority_classes])
        _unique("runtimes.approved", list(self.runtimes.approved))

        pools = {p.name for p in self.gpu_pools}
        cohorts = {c.name for c in self.cohorts}
        priorities = {p.name for p in self.priority_classes}
        for i, cohort in enumerate(self.cohorts):
            if cohort.parent is not None and cohort.parent not in cohorts:
                raise FieldError(("cohorts", i, "parent"), f"cohort {cohort.parent!r} is not defined in cohorts")

        system = self._system_namespaces()
        for i, tenant in enumerate(self.tenants):
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
                        f"flavor {quota.flavor!r} is not a GPU pool (pools: {', '.join(sorted(pools))})",
                    )
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

        self._check_gpu_stack()
        self._check_shared_quotas()
        self._check_slice_budget()
        if not self.allow_overcommit:
            for pool in self.gpu_pools:
                committed = sum(q.gpus for t in self.tenants for q in t.quotas if q.flavor == pool.name)
                whole = advertised_resources(pool).get(catalog.GPU_RESOURCE, 0)
                if committed > whole:
                    index = next(i for i, p in enumerate(self.gpu_pools) if p.name == pool.name)
                    raise FieldError(
                        ("gpu_pools", index),
                        f"nominal GPU quotas on flavor {pool.name!r} add up to {committed}, but the pool has "
                        f"{whole} GPUs ({pool.nodes} nodes x {whole // pool.nodes} {catalog.GPU_RESOURCE}); lower "
                        "the quotas, add nodes, or set allow_overcommit: true",
                    )

        if self.topology is not None:
            for level_index, level in enumerate(self.topology.levels):
                if level.node_label == HOSTNAME_LABEL:
                    continue
                for pool in self.gpu_pools:
                    if level.node_label not in pool.topology_labels:
                        raise FieldError(
                            ("topology", "levels", level_index, "node_label"),
                            f"topology label {level.node_label!r} is not carried by GPU pool {pool.name!r} "
                            f"(its topology_labels: {', '.join(pool.topology_labels) or 'none'})",
                        )
        if self.runtimes.topology is not None:
            levels = {lvl.name for lvl in self.topology.levels} if self.topology else set()
            if self.runtimes.topology.level not in levels:
                raise FieldError(
                    ("runtimes", "topology", "level"),
                    f"level {self.runtimes.topology.level!r} is not a topology level"
                    + ("" if self.topology else " (the stack defines no topology)"),
                )
        if self.serving is not None:
            tenant_names = {t.name for t in self.tenants}
            for i, name in enumerate(self.serving.exposure.public_tenants):
                if name not in tenant_names:
                    raise FieldError(("serving", "exposure", "public_tenants", i), f"{name!r} is not a tenant")
            _unique("serving.approved_runtimes", list(self.serving.approved_runtimes))
        check_object_store(self)
        return self

    @model_validator(mode="after")
    def _lineage_tenants_exist(self) -> PlatformConfig:
        names = {t.name for t in self.tenants}
        for tenant in self.lineage.tenants:
            if tenant not in names:
                raise FieldError(("lineage", "tenants", tenant), f"{tenant!r} is not a tenant of this stack "
                                                                 f"({', '.join(sorted(names))})")
        return self

    @model_validator(mode="after")
    def _mlflow_reachable(self) -> PlatformConfig:
        """Tenants' egress allow to MLflow must point at the MLflow that is deployed (namespace, pods, port)."""
        if not self.mlflow.enabled:
            return self
        if self.object_store is None:
            raise FieldError(("mlflow", "enabled"), "MLflow is enabled: its artifacts and backups need object_store "
                                                    "(platform_buckets and a service in the MLflow namespace)")
        endpoint = self.security.network.mlflow
        where = ("security", "network", "mlflow")
        if endpoint is None:
            raise FieldError(where, "MLflow is enabled: tenants need security.network.mlflow to reach it "
                                    f"(namespace {self.mlflow.namespace}, port {MLFLOW_PORT})")
        if endpoint.namespace != self.mlflow.namespace:
            raise FieldError((*where, "namespace"), f"MLflow runs in namespace {self.mlflow.namespace!r}, "
                                                    f"not {endpoint.namespace!r}")
        if endpoint.ports != (MLFLOW_PORT,):
            raise FieldError((*where, "ports"), f"the MLflow pods listen on {MLFLOW_PORT} only (chart service.containerPort)")
        unknown = {k: v for k, v in endpoint.pod_labels.items() if MLFLOW_POD_LABELS.get(k) != v}
        if unknown:
            raise FieldError((*where, "pod_labels"), f"the MLflow pods do not carry {unknown} "
                                                     f"(they carry {MLFLOW_POD_LABELS})")
        return self


    @model_validator(mode="after")
    def _data_cache(self) -> PlatformConfig:
        validate_data_cache(self)
        return self

    def _check_gpu_stack(self) -> None:
        """Sharing needs the operator; the operator's and monitoring's namespaces are no tenant's."""
        for index, pool in enumerate(self.gpu_pools):
            if self.gpu_operator is None and (pool.mig or pool.time_slicing) and not pool.fake:
                what = "mig" if pool.mig else "time_slicing"
                raise FieldError(("gpu_pools", index, what),
                                 f"pool {pool.name!r} uses {what}, which the GPU operator configures; set gpu_operator")
        prometheus = self.monitoring.prometheus.namespace
        if self.monitoring.enabled and prometheus not in self.security.network.metrics_from:
            # The controllers' NetworkPolicies admit their metrics port only from these namespaces.
            raise FieldError(("monitoring", "prometheus", "namespace"),
                             f"Prometheus in {prometheus!r} could not reach the controllers' metrics port: add "
                             f"{prometheus!r} to security.network.metrics_from")
        system = {"gpu_operator.namespace": self.gpu_operator.namespace if self.gpu_operator else None,
                  "monitoring.namespace": self.monitoring.namespace if self.monitoring.enabled else None}
        for index, tenant in enumerate(self.tenants):
            for field, namespace in system.items():
                if namespace is not None and tenant.namespace_name == namespace:
                    raise FieldError(("tenants", index, "namespace"),
                                     f"namespace {namespace!r} is the {field}; a tenant cannot live there")

    def _check_slice_budget(self) -> None:
        """With the budget on, every tenant holding MIG quota has a budget, and the budgets fit the MIG GPUs."""
        on = self.kueue.mig_slice_budget
        total = sum(COMPUTE_SLICES * gpus for pool in self.gpu_pools for gpus in [mig_gpus(pool)])
        committed = 0
        for index, tenant in enumerate(self.tenants):
            mig = any(q.resource.startswith(MIG_PREFIX) for quota in tenant.quotas for q in quota.shared)
            if tenant.mig_slices is not None and not on:
                raise FieldError(("tenants", index, "mig_slices"), "set kueue.mig_slice_budget: true to use mig_slices")
            if on and mig and tenant.mig_slices is None:
                raise FieldError(("tenants", index, "mig_slices"),
                                 "the tenant has MIG quotas and kueue.mig_slice_budget is on: give it a mig_slices budget")
            committed += tenant.mig_slices or 0
            if on and not self.allow_overcommit and committed > total:
                raise FieldError(("tenants", index, "mig_slices"),
                                 f"mig_slices budgets add up to {committed} with this one, but the MIG pools have "
                                 f"{total} compute slices ({total // COMPUTE_SLICES} MIG GPUs x {COMPUTE_SLICES})")

    def _check_shared_quotas(self) -> None:
        """Shared quotas name resources their pool advertises and, summed, fit its slices or replicas."""
        committed: dict[tuple[str, str], int] = {}
        for i, tenant in enumerate(self.tenants):
            for j, quota in enumerate(tenant.quotas):
                if quota.flavor not in {p.name for p in self.gpu_pools}:
                    continue
                pool = self.pool(quota.flavor)
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
                    if not self.allow_overcommit and committed[key] > offered[shared.resource]:
                        raise FieldError((*path, "nominal"),
                                         f"nominal quotas of {shared.resource} on flavor {pool.name!r} add up to "
                                         f"{committed[key]} with this one, but the pool advertises "
                                         f"{offered[shared.resource]} ({pool.nodes} nodes x "
                                         f"{offered[shared.resource] // pool.nodes}); lower the quota, change the "
                                         "layout, or set allow_overcommit: true")



# The MLflow chart's container port and pod selector labels (values.yaml service.containerPort;
# templates/_helpers.tpl mlflow.selectorLabels with release name "mlflow").
MLFLOW_PORT = 5000
MLFLOW_POD_LABELS = {"app": "mlflow", "app.kubernetes.io/name": "mlflow", "app.kubernetes.io/instance": "mlflow"}


class FieldError(ValueError):
    """A cross-field violation that knows the exact field path it is about."""

    def __init__(self, path: tuple[str | int, ...], reason: str) -> None:
        super().__init__(reason)
        self.path = path
        self.reason = reason


def _unique(field: str, names: list[str]) -> None:
    dupes = sorted(n for n, c in Counter(names).items() if c > 1)
    if dupes:
        raise ValueError(f"{field}: names must be unique; repeated: {', '.join(dupes)}")


def gpu_share(pool: GpuPool, gpus: int | Fraction, per_node: int | str) -> Fraction:
    """The part of a per-node resource that ``gpus`` GPUs of ``pool`` stand for."""
    return parse_quantity(per_node) * gpus / pool.gpus_per_node
