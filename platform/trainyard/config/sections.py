"""The core sections of a stack (cluster, versions, queues, tenants, runtimes, images, lifecycle, rehearsal)
and the fields of the whole platform.

``PlatformFields`` assembles every section, the core ones here and each concern's own (``config/<concern>.py``);
the rules across sections (``config/checks.py``) read it, and ``config/model.py``'s ``PlatformConfig`` is it
with those rules applied. Each section validates only itself.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

from pydantic import Field, model_validator

from trainyard import catalog
from trainyard.config.base import (
    HOSTNAME_LABEL,
    INT32_MAX,
    Count,
    Duration,
    FieldError,
    Group,
    ImagePrefix,
    Int32,
    LabelKey,
    Labels,
    Model,
    Name,
    ProjectPath,
    Quantity,
    Text,
    unique,
)
from trainyard.config.data_cache import DataCache
from trainyard.config.gpu_operator import GpuOperator
from trainyard.config.gpu_pools import GpuPool
from trainyard.config.lineage import Lineage
from trainyard.config.mlflow import Mlflow
from trainyard.config.monitoring import Monitoring
from trainyard.config.multikueue import MultiKueue
from trainyard.config.node_pools import CpuPool, NodePool, Taint
from trainyard.config.object_store import ObjectStore
from trainyard.config.security import Security
from trainyard.config.serving import Serving
from trainyard.quantity import parse_quantity


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
        "'mirror': only mirror_dir (the bundle `trainyard bom STACK --import` writes), never TRAINYARD_CRDS_DIR, the "
        "cache or the network.")
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



# Hosts a registry may be reached on without TLS: the machine running `pulumi up` itself.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_OCI_CHART_MIRROR = re.compile(
    r"^oci://(?P<host>[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?|\[::1\](:[0-9]{1,5})?)"
    r"(?P<path>(/[a-z0-9]+([._-][a-z0-9]+)*)*)$")


class ChartSource(Model):
    """Where Helm charts come from: their upstream repositories, or the site's OCI chart mirror (air gap).

    With ``mirror`` set, every chart release is pulled as ``<mirror>/<chart name>`` at its pinned version
    (the layout ``helm push CHART.tgz <mirror>`` and ``trainyard bom STACK --import`` write), and no upstream
    repository is ever asked. Registry credentials are never in the stack: ``helm registry login`` on the
    machine that runs ``pulumi up`` (helm's registry config file) provides them.
    Ref: pulumi-kubernetes provider/pkg/provider/helm/v4/chart.go (``plainHttp``; ``repositoryOpts.caFile``
    reaches helm's registry client, pkg/helm/tool.go ``newRegistryClient``).
    """

    mirror: str | None = Field(
        default=None,
        description="OCI chart mirror, e.g. 'oci://registry.example.com/charts': every chart is pulled as "
        "<mirror>/<chart name>:<version>. Unset: each chart's upstream repository (needs internet).")
    plain_http: bool = Field(
        default=False,
        description="Reach the chart mirror over plain HTTP (helm --plain-http). Only for a loopback mirror "
        "(127.0.0.1, localhost, [::1]): anywhere else chart bytes would cross the network unauthenticated.")
    ca_file: str | None = Field(
        default=None,
        description="PEM file of the CA that signed the chart mirror's TLS certificate (a private CA); relative to "
        "the stack file. Unset: the system's trust store.")

    @model_validator(mode="after")
    def _mirror(self) -> ChartSource:
        if self.mirror is not None:
            match = _OCI_CHART_MIRROR.match(self.mirror)
            if not match:
                raise ValueError(f"mirror {self.mirror!r} is not an OCI chart mirror: oci://HOST[:PORT][/PATH], "
                                 "lowercase path segments, no trailing '/', no tag")
            host = match["host"]
            name = host[:host.index("]") + 1] if host.startswith("[") else host.split(":", 1)[0]
            if self.plain_http and name not in LOOPBACK_HOSTS:
                raise ValueError(f"plain_http is allowed only for a loopback mirror ({', '.join(LOOPBACK_HOSTS)}), "
                                 f"not {match['host']!r}: give the mirror TLS (ca_file for a private CA)")
        elif self.plain_http or self.ca_file:
            raise ValueError("plain_http and ca_file need mirror")
        if self.plain_http and self.ca_file:
            raise ValueError("plain_http and ca_file exclude each other (plain HTTP has no TLS to verify)")
        return self

    @property
    def mirror_host(self) -> str | None:
        """``HOST[:PORT]`` of the mirror (the registry its charts are pushed to)."""
        return self.mirror.removeprefix("oci://").split("/", 1)[0] if self.mirror else None

    @property
    def mirror_path(self) -> str:
        """The repository path under the host that every chart's repository starts with ('' for none)."""
        return self.mirror.removeprefix("oci://").partition("/")[2] if self.mirror else ""


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
    """A tenant's quota on one flavor. On a GPU pool it names GPUs (CPU and memory default to the GPU share of a
    node); on a CPU pool it names CPU and memory (and no GPUs)."""

    flavor: Name = Field(description="Pool (ResourceFlavor) name: a GPU pool or a CPU pool.")
    gpus: Count = Field(default=0, description="Nominal quota of whole GPUs (nvidia.com/gpu as the pool advertises "
                                               "it); required on a GPU pool, unset on a CPU pool.")
    shared: tuple[SharedQuota, ...] = Field(
        default=(), description="Quotas of the pool's shared-GPU resources (MIG profiles, time-sliced replicas).")
    borrowing_limit: Count | None = Field(default=None, description="GPUs above nominal it may borrow; unset = no limit.")
    lending_limit: Count | None = Field(default=None, description="GPUs of its nominal it may lend; unset = all.")
    cpu: Quantity | None = Field(default=None, description="Nominal CPU; default on a GPU pool: the GPU share of the "
                                                          "pool's node CPU; required on a CPU pool.")
    memory: Quantity | None = Field(default=None, description="Nominal memory; default on a GPU pool: the GPU share "
                                                             "of node memory; required on a CPU pool.")

    @model_validator(mode="after")
    def _lending(self) -> FlavorQuota:
        if self.lending_limit is not None and self.lending_limit > self.gpus:
            raise ValueError(f"lending_limit {self.lending_limit} exceeds the nominal quota of {self.gpus} GPUs")
        unique("shared (resource)", [q.resource for q in self.shared])
        return self


class Tenant(Model):
    """An ML team: a namespace, a LocalQueue on its own ClusterQueue, quotas and member groups."""

    name: Name = Field(description="Tenant name; also its ClusterQueue's name.")
    namespace: Name | None = Field(default=None, description="Defaults to the tenant name.")
    cohort: Name | None = Field(default=None, description="Cohort to borrow from and lend to; none = isolated quota.")
    # Ref: ClusterQueue CRD spec.resourceGroups[].flavors maxItems 16.
    quotas: tuple[FlavorQuota, ...] = Field(min_length=1, max_length=16, description="Quota per flavor (GPU or CPU pool).")
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
        unique("groups", list(self.groups))
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

    verify_in_mirror: bool | None = Field(
        default=None,
        description="Before `pulumi preview`/`up` declares anything, ask each image's registry for every image the "
        "stack pulls (by the lock's digest) and fail naming each one that is missing and the `trainyard bom STACK "
        "--format sync` line that mirrors it, instead of pods in ImagePullBackOff until a Deployment times out. "
        "Needs the registries reachable from where Pulumi runs (TRAINYARD_REGISTRY_ENDPOINTS maps a host to another "
        "address). Unset: on exactly where lifecycle.protect_data is on (staging, prod), off elsewhere "
        "(docs/supply-chain.md, \"In the mirror\").",
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


class ContainerResources(Model):
    """CPU and memory of a controller's container, over its chart's defaults: a figure given here replaces the chart's
    figure of the same name; every other figure stays the chart's (Helm merges values key by key)."""

    requests: dict[Literal["cpu", "memory"], Quantity] = Field(
        default_factory=dict, description="What the scheduler reserves on the system node (cpu, memory).")
    limits: dict[Literal["cpu", "memory"], Quantity] = Field(
        default_factory=dict, description="The most the container may use (cpu, memory).")

    @model_validator(mode="after")
    def _request_within_limit(self) -> ContainerResources:
        for name, request in self.requests.items():
            limit = self.limits.get(name)
            if limit is not None and parse_quantity(request) > parse_quantity(limit):
                raise FieldError(("requests", name), f"{request} is above limits.{name} {limit}")
        return self


class SystemPods(Model):
    """Where the platform's own controllers run (Kueue, JobSet, Trainer, cert-manager, KServe): a site's system
    node pool, away from the GPU nodes that tenants' quotas count. Unset: wherever the scheduler puts them.

    Applied to every chart the platform installs that takes a node selector and tolerations for its controller
    pods (``manifests/placement.py`` names each chart's value paths). The rehearsal sets it to its real nodes, so
    that no controller lands on a fake GPU node.
    """

    node_selector: Labels = Field(
        default_factory=dict, description="Node labels the controller pods require (their nodeSelector).")
    tolerations: tuple[Taint, ...] = Field(
        default=(), max_length=8, description="Taints of the system nodes the controller pods tolerate.")
    resources: dict[Literal["kueue", "jobset", "trainer", "cert-manager", "kserve", "cnpg", "seaweedfs"],
                    ContainerResources] = Field(
        default_factory=dict,
        description="Requests and limits of a chart's controller container, by chart (cert-manager: its controller, "
        "webhook and cainjector alike), over the chart's defaults; a small system pool, or a node that also runs "
        "jobs, lowers them. A request above the chart's own limit needs the limit given too.")


class Rehearsal(Model):
    """Local rehearsal: which upstream controllers are external (CRDs and config applied, no Deployments)."""

    external_controllers: tuple[Literal["kueue", "jobset", "trainer", "seaweedfs", "minio", "cnpg", "mlflow", "kserve",
                                        "cert-manager"], ...] = Field(
        default=(), description="Controllers whose charts are not installed (CRDs and Trainyard objects still are); "
        "seaweedfs and minio name the object store's charts.")



class PlatformFields(Model):
    """The sections of a whole platform, before the rules across them (``PlatformConfig`` adds those)."""

    environment: Name = Field(description="Environment name (local, staging, prod); shown in reports.")
    cluster: ClusterAccess = Field(description="How Pulumi reaches the cluster.")
    versions: Versions = Field(default=Versions(), description="Upstream component versions.")
    crds: CrdSource = Field(default=CrdSource(), description="Where the upstream CRDs come from.")
    charts: ChartSource = Field(default=ChartSource(), description="Where the Helm charts come from.")
    gpu_pools: tuple[GpuPool, ...] = Field(min_length=1, description="GPU node pools; one ResourceFlavor each.")
    cpu_pools: tuple[CpuPool, ...] = Field(
        default=(), description="CPU node pools (no GPUs); one ResourceFlavor each, for CPU-only jobs (data "
        "preparation, evaluation, the CPU rehearsal of the lab). Pool names are unique across gpu_pools and cpu_pools.")
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
    system_pods: SystemPods = Field(default=SystemPods(), description="Where the platform's controllers run.")
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

    @property
    def pools(self) -> tuple[NodePool, ...]:
        """Every pool, hence every flavor a quota can name: the GPU pools, then the CPU pools."""
        return (*self.gpu_pools, *self.cpu_pools)

    def pool(self, name: str) -> NodePool:
        return next(p for p in self.pools if p.name == name)

    def gpu_pool(self, name: str) -> GpuPool | None:
        """The GPU pool called ``name``; None for a CPU pool."""
        return next((p for p in self.gpu_pools if p.name == name), None)

    def system_namespaces(self) -> set[str]:
        network = self.security.network
        endpoints = [network.object_store, network.mlflow, network.egress_proxy]
        return ({"default", network.dns.namespace, *network.metrics_from}
                | {release.namespace for release in catalog.RELEASES.values()}
                | {e.namespace for e in endpoints if e is not None and e.namespace is not None})
