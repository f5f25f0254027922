"""The bill of materials: every upstream version, chart, CRD file and image Trainyard uses.

One module owns these pins so that an upgrade is one reviewed diff. Stack configs may
override a component's version, but only to a version listed here: CRDs are verified
against the git blob SHAs recorded below, so an unknown version has nothing to verify
against.

Ref: ../shared/crds/SOURCES.md (how the CRD copies and their blob SHAs were taken).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CrdFile:
    """One upstream CRD file: its name, path inside the upstream repository and git blob SHA."""

    name: str
    repo_path: str
    blob_sha: str


@dataclass(frozen=True)
class ChartRef:
    """Where a component's Helm chart lives. ``repo`` is None for OCI references."""

    chart: str
    repo: str | None = None

    @property
    def name(self) -> str:
        """The chart's name (``Chart.yaml`` ``name``): the last segment of an OCI reference."""
        return chart_name(self.chart)

    @property
    def mirror_dir(self) -> str:
        """The chart's directory in a chart mirror laid out like ../shared/charts."""
        return chart_mirror_dir(self.name)


@dataclass(frozen=True)
class Image:
    """A controller image as upstream publishes it."""

    registry: str
    repository: str
    tag: str


@dataclass(frozen=True)
class Release:
    """One pinned upstream release of a component."""

    component: str
    version: str
    repository: str
    tag: str
    chart: ChartRef
    namespace: str
    crds: tuple[CrdFile, ...]
    image: Image

    def crd_url(self, crd: CrdFile) -> str:
        """The raw URL of a CRD file at this release's tag (used when no mirror is configured)."""
        owner_repo = self.repository.removeprefix("https://github.com/")
        return f"https://raw.githubusercontent.com/{owner_repo}/{self.tag}/{crd.repo_path}"


_KUEUE_CRDS = tuple(
    CrdFile(f"kueue.x-k8s.io_{plural}.yaml", f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml", sha)
    for plural, sha in (
        ("admissionchecks", "317662baa1e7653915510c627ac91c020926c0ca"),
        ("clusterqueues", "a605e10a33050f30a5a31a5240444216a2a4f553"),
        ("cohorts", "0a66adc3e955bf3ab7717452f67269ce2e84fd9b"),
        ("localqueues", "379c64452ad090fa12861c24aad7f102d0118a5f"),
        ("multikueueclusters", "f3c03c98e46045c2b161bd0064d7bb561e11d134"),
        ("multikueueconfigs", "005fc751e55970a1061ff04ed3f8f417275eef2d"),
        ("provisioningrequestconfigs", "95ed0039d027647ac09b3bfd7f529cb1cacfca31"),
        ("resourceflavors", "6c3216d8ce5f59a77dcee45e3697bc110a249df9"),
        ("topologies", "f5a2774bbc83a5aedbe4272ecb780c399da09532"),
        ("workloadpriorityclasses", "75c01e1ac63cc3f885437334dccb168364c6ed94"),
        ("workloads", "fc1fd767332d555e72b6330017309d7d9f8ff79d"),
    )
)

# The Kueue CRDs whose v1beta1 and v1beta2 schemas differ, so the API server converts between
# them through Kueue's conversion webhook. Upstream adds ``spec.conversion`` to exactly these
# in its kustomize config and its chart; the base CRD files have none.
# Ref: kueue v0.19.2 charts/kueue/templates/crd/*.yaml (spec.conversion.strategy: Webhook).
KUEUE_CONVERTED_CRDS = ("clusterqueues", "cohorts", "localqueues", "multikueueclusters", "workloads")

_TRAINER_CRDS = tuple(
    CrdFile(f"trainer.kubeflow.org_{plural}.yaml", f"manifests/base/crds/trainer.kubeflow.org_{plural}.yaml", sha)
    for plural, sha in (
        ("clustertrainingruntimes", "567ec335d01e171ba0e41f63fc59da6cc34e4b9f"),
        ("trainingruntimes", "92de7e94370bd4f2b2e8468a97f7251607a88367"),
        ("trainjobs", "a5f2a17714acd92c11be743562498e83e20c25d1"),
    )
)

_JOBSET_CRDS = (
    CrdFile(
        "jobset.x-k8s.io_jobsets.yaml",
        "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
        "96add10d030c2ab2c94b1c774edd23c814692808",
    ),
)

# MinIO Operator v7.1.1 ships its CRDs as plain templates (helm/operator/templates/*.yaml, no switch);
# Trainyard still declares them itself, from these verified files (same blobs as the chart's copies).
_MINIO_CRDS = (
    CrdFile("minio.min.io_tenants.yaml", "resources/base/crds/minio.min.io_tenants.yaml",
            "d1f4e303b0a71b712c127167be989989c458d145"),
    CrdFile("sts.min.io_policybindings.yaml", "resources/base/crds/sts.min.io_policybindings.yaml",
            "36099645884dbe98977581ccff3b994cfe8c4d96"),
)

RELEASES: dict[tuple[str, str], Release] = {
    (r.component, r.version): r
    for r in (
        Release(
            component="kueue",
            version="0.19.2",
            repository="https://github.com/kubernetes-sigs/kueue",
            tag="v0.19.2",
            # Ref: https://kueue.sigs.k8s.io/docs/installation/#install-via-helm
            chart=ChartRef("oci://registry.k8s.io/kueue/charts/kueue"),
            namespace="kueue-system",
            crds=_KUEUE_CRDS,
            image=Image("registry.k8s.io", "kueue/kueue", "v0.19.2"),
        ),
        Release(
            component="jobset",
            version="0.12.0",
            repository="https://github.com/kubernetes-sigs/jobset",
            tag="v0.12.0",
            chart=ChartRef("oci://registry.k8s.io/jobset/charts/jobset"),
            namespace="jobset-system",
            crds=_JOBSET_CRDS,
            image=Image("registry.k8s.io", "jobset/jobset", "v0.12.0"),
        ),
        Release(
            component="trainer",
            version="2.3.0",
            repository="https://github.com/kubeflow/trainer",
            tag="v2.3.0",
            # Ref: charts/kubeflow-trainer/README.md ("helm install kubeflow-trainer oci://ghcr.io/kubeflow/charts/...")
            chart=ChartRef("oci://ghcr.io/kubeflow/charts/kubeflow-trainer"),
            namespace="kubeflow-system",
            crds=_TRAINER_CRDS,
            image=Image("ghcr.io", "kubeflow/trainer/trainer-controller-manager", "v2.3.0"),
        ),
        Release(
            component="seaweedfs",
            version="4.44.0",
            repository="https://github.com/seaweedfs/seaweedfs",
            tag="4.44",
            # Ref: k8s/charts/seaweedfs/README.md ("helm repo add seaweedfs https://seaweedfs.github.io/seaweedfs/helm")
            chart=ChartRef("seaweedfs", "https://seaweedfs.github.io/seaweedfs/helm"),
            namespace="object-store",
            crds=(),
            # The chart's default image is chrislusf/seaweedfs:<appVersion> (templates/shared/_helpers.tpl seaweedfs.image).
            image=Image("docker.io", "chrislusf/seaweedfs", "4.44"),
        ),
        Release(
            component="minio",
            version="7.1.1",
            repository="https://github.com/minio/operator",
            tag="v7.1.1",
            # Ref: helm/operator/README.md ("helm repo add minio-operator https://operator.min.io")
            chart=ChartRef("operator", "https://operator.min.io"),
            namespace="minio-operator",
            crds=_MINIO_CRDS,
            image=Image("quay.io", "minio/operator", "v7.1.1"),
        ),
        Release(
            component="minio-tenant",
            version="7.1.1",
            repository="https://github.com/minio/operator",
            tag="v7.1.1",
            chart=ChartRef("tenant", "https://operator.min.io"),
            namespace="object-store",
            crds=(),
            # The tenant chart's own pin (helm/tenant/values.yaml tenant.image). MinIO publishes no community
            # images any more (minio/minio#21647; Docker Hub images deleted 2026-09): this tag must be in the
            # platform mirror, which is why a minio stack must set images.registry_mirror.
            image=Image("quay.io", "minio/minio", "RELEASE.2025-04-08T15-41-24Z"),
        ),
    )
}

# The directory name of each component inside a CRD mirror (layout of ../shared/crds).
MIRROR_DIRS: dict[str, str] = {"kueue": "kueue", "jobset": "jobset", "trainer": "kubeflow-trainer",
                               "minio": "minio-operator"}

# A chart mirror (../shared/charts, TRAINYARD_CHARTS_DIR) holds each chart as
# <dir>/<chart version>/, where <dir> is the chart's name except for these names, too generic
# to stand alone. Ref: ../shared/charts/SOURCES.md ("Directory layout").
CHART_MIRROR_DIRS: dict[str, str] = {
    "operator": "minio-operator",
    "tenant": "minio-tenant",
    "common": "bitnami-common",
    "cluster": "cnpg-grafana-dashboard-cluster",
}


# The listing hash of each chart directory in the mirror: sha256 over ``sha256sum`` of every file,
# sorted by path (C locale), paths relative to the mirror; a drifted or edited copy is an error.
# ``cd <mirror> && find <dir>/<version> -type f | LC_ALL=C sort | xargs sha256sum | sha256sum``.
# Ref: ../shared/charts/SOURCES.md (table "Charts", column "listing sha256"; which copies differ
# from upstream git and why).
CHART_LISTINGS: dict[str, str] = {
    "kueue/0.19.2": "c43fafe97656bd1f51d8fa9a6500047e899f9b3addf6fa732cde8949e9692429",
    "jobset/0.12.0": "13ffec1276425b5c26869a547721e547512680810578d79537d9378fb8c287d6",
    "kubeflow-trainer/2.3.0": "3478527d69eebadcf1697dcf1c3fd5e161d4e590076e45f3bcf00b4c08acc73d",
    "lws/v0.8.0": "629affda2ff2c269a09a8e462dd82996f9b15d4cfa23f4f8d64b54e8ddec2d4e",
    "gpu-operator/v26.7.0": "1125f95db47159ed964c70a038a7c6a66fc29b1b4efa8f2a640a729a14872781",
    "kserve-crd/v0.20.0": "1495feaed78db9ea7a8d7ba48f8f9b328399e1db1200051a09aeab085e0a2fe7",
    "kserve-resources/v0.20.0": "b745f4609c1228896e726705e7ce4932a184158ec7c87b6572b08db97a529f91",
    "kserve-runtime-configs/v0.20.0": "4a4e948bd1402ac93674a632facdcf44a75482a95a7beabae74eda0089343072",
    "cert-manager/v1.21.1": "d521e848616892bbd2bb3328fe7b7b92c2247cecbe3345ce96dba351d4496a44",
    "mlflow/1.11.5": "99c675caffc1d878b22e415aeaeaae3fcc761876f8e9b8ae1b6490835744d3dd",
    "mysql/14.0.3": "8e3d8eb25f829347737d4db3f79ec9017aa6ca373c3c6c5b5cf3ca30bdb4c736",
    "bitnami-common/2.31.4": "45535380389a45e48eaa5f0da39939819b015a3e5474941c549344765b9598d4",
    "minio/5.4.0": "a9e0a619d6c6366ab4df869074bd2edf20b925567f6727f286c272c7e1cb1e89",
    "cloudnative-pg/0.29.0": "e08d11161966a14eac0e972d2ba4dd8d05e47832fd58af2834ebd73f826a388e",
    "cnpg-grafana-dashboard-cluster/0.0.5": "435c5e558d877807aad4a005f12226119bd18907d7d57a05691f64564117ea4e",
    "minio-operator/7.1.1": "1c6cdefb72c1c3853fe3251408bb460b457d20fa4cb75c141ec48631ebb5eac4",
    "minio-tenant/7.1.1": "7a7d6b19c2cd322311f11daa04fb69f34e0f2248f3dbc504ca058b085adbc370",
    "seaweedfs/4.44.0": "5112eb39f24eb0e40567f7133404ab2bc8c0ae6e29909c2694950acf551a2d9b",
}


def chart_name(reference: str) -> str:
    """``oci://registry.k8s.io/kueue/charts/kueue`` -> ``kueue``; a plain name stays as it is."""
    return reference.rstrip("/").rsplit("/", 1)[-1]


def chart_mirror_dir(name: str) -> str:
    return CHART_MIRROR_DIRS.get(name, name)


DEFAULT_VERSIONS: dict[str, str] = {"kueue": "0.19.2", "jobset": "0.12.0", "trainer": "2.3.0", "seaweedfs": "4.44.0",
                                    "minio": "7.1.1"}

# The S3 port and pod labels of each in-cluster object store, as its chart renders them. Tenants'
# NetworkPolicy allow and the object store's own ingress policy are derived from these.
# SeaweedFS all-in-one: templates/all-in-one/all-in-one-deployment.yaml (labels; s3.port default 8333).
# MinIO Tenant: the operator labels every pod v1.min.io/tenant=<tenant name> (pkg/apis/minio.min.io/v2
# constants TenantLabel); the S3 API listens on 9000 (helm/tenant/values.yaml metrics.port / MinIOPort).
SEAWEEDFS_S3_PORT = 8333
SEAWEEDFS_POD_LABELS = {"app.kubernetes.io/name": "seaweedfs", "app.kubernetes.io/component": "seaweedfs-all-in-one"}
MINIO_S3_PORT = 9000
MINIO_TENANT_LABEL = "v1.min.io/tenant"

# API versions Trainyard emits. Kueue v1beta1 is still served by v0.19 but deprecated.
KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"

# Helm, built from Go modules by tools/build.sh, renders the charts in tests/charts.
HELM_VERSION = "v3.22.0"

# The Kubernetes version whose OpenAPI schemas the conformance gate validates against.
KUBERNETES_VERSION = "1.36.0"

# Resource names used in quotas.
GPU_RESOURCE = "nvidia.com/gpu"


def release(component: str, version: str) -> Release:
    """The pinned release of ``component`` at ``version``; KeyError names what is known."""
    try:
        return RELEASES[(component, version)]
    except KeyError:
        known = sorted(v for (c, v) in RELEASES if c == component)
        raise KeyError(f"{component} {version} is not in the catalog (known: {', '.join(known)})") from None


def known_versions(component: str) -> list[str]:
    return sorted(v for (c, v) in RELEASES if c == component)
