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


@dataclass(frozen=True)
class Image:
    """A controller image as upstream publishes it."""

    registry: str
    repository: str
    tag: str


@dataclass(frozen=True)
class Release:
    """One pinned upstream release of a component.

    A CRD-only component (the prometheus-operator CRDs, whose operator the site runs itself)
    has no chart, namespace or image: ``installed()`` refuses it.
    """

    component: str
    version: str
    repository: str
    tag: str
    crds: tuple[CrdFile, ...]
    chart: ChartRef | None = None
    namespace: str = ""
    image: Image | None = None

    def installed(self) -> tuple[ChartRef, str, Image]:
        """(chart, namespace, image) of a component Trainyard installs."""
        if self.chart is None or self.image is None or not self.namespace:
            raise KeyError(f"{self.component} {self.version} is pinned for its CRDs only; it has no chart")
        return self.chart, self.namespace, self.image

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

# Ref: deployments/gpu-operator/crds/ at v26.7.0 (the files the chart's crds/ directory installs);
# blob SHAs from ../shared/crds/SOURCES.md. The resource.nvidia.com CRDs belong to the bundled DRA
# driver, which Trainyard does not use (device plugin, not DRA).
_GPU_OPERATOR_CRDS = tuple(
    CrdFile(f"nvidia.com_{plural}.yaml", f"deployments/gpu-operator/crds/nvidia.com_{plural}.yaml", sha)
    for plural, sha in (
        ("clusterpolicies", "f589282b2001c999f233747f263bd29abaebe8b3"),
        ("gpuclusters", "30ff8543d7025f0abb110a4575c8a79e571d54dc"),
        ("nvidiadrivers", "959d57c5dcf6f6edf58e088695e3c7cefdd072ee"),
    )
)

# Only the three kinds Trainyard emits. Ref: example/prometheus-operator-crd/ at v0.93.0.
_PROMETHEUS_OPERATOR_CRDS = tuple(
    CrdFile(f"monitoring.coreos.com_{plural}.yaml", f"example/prometheus-operator-crd/monitoring.coreos.com_{plural}.yaml",
            sha)
    for plural, sha in (
        ("servicemonitors", "f5736255990a0e152851fadb55f84d6fd0f91d87"),
        ("podmonitors", "5c1bde3d4a5f3131fd6c148ab933193b867173f2"),
        ("prometheusrules", "b423c3225b18489ca7bbc5091f38f7003c4bf3fc"),
    )
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
            component="gpu_operator",
            version="26.7.0",
            repository="https://github.com/NVIDIA/gpu-operator",
            tag="v26.7.0",
            # Ref: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html
            chart=ChartRef("gpu-operator", repo="https://helm.ngc.nvidia.com/nvidia"),
            namespace="gpu-operator",
            crds=_GPU_OPERATOR_CRDS,
            image=Image("nvcr.io", "nvidia/gpu-operator", "v26.7.0"),
        ),
        Release(
            component="prometheus_operator",
            version="0.93.0",
            repository="https://github.com/prometheus-operator/prometheus-operator",
            tag="v0.93.0",
            crds=_PROMETHEUS_OPERATOR_CRDS,
        ),
    )
}

# The GPU operator's operands, as its v26.7.0 chart pins them (deployments/gpu-operator/values.yaml;
# the operator and validator default to the chart's appVersion, NFD to its subchart's appVersion).
# Pinned here too, so that a mirror serves exactly these and an upgrade is one reviewed diff.
GPU_OPERATOR_OPERANDS: dict[str, Image] = {
    "operator": Image("nvcr.io", "nvidia/gpu-operator", "v26.7.0"),
    "validator": Image("nvcr.io", "nvidia/gpu-operator", "v26.7.0"),
    "driver": Image("nvcr.io", "nvidia/driver", "595.91.07"),
    "driver.manager": Image("nvcr.io", "nvidia/cloud-native/k8s-driver-manager", "v0.12.0"),
    "toolkit": Image("nvcr.io", "nvidia/k8s/container-toolkit", "v1.20.0"),
    "devicePlugin": Image("nvcr.io", "nvidia/k8s-device-plugin", "v0.20.0"),
    "gfd": Image("nvcr.io", "nvidia/k8s-device-plugin", "v0.20.0"),
    "dcgmExporter": Image("nvcr.io", "nvidia/k8s/dcgm-exporter", "4.6.0-4.8.3-distroless"),
    "migManager": Image("nvcr.io", "nvidia/cloud-native/k8s-mig-manager", "v0.15.0"),
    "node-feature-discovery": Image("registry.k8s.io", "nfd/node-feature-discovery", "v0.19.0"),
}

# The directory name of each component inside a CRD mirror (layout of ../shared/crds).
MIRROR_DIRS: dict[str, str] = {"kueue": "kueue", "jobset": "jobset", "trainer": "kubeflow-trainer",
                               "gpu_operator": "gpu-operator", "prometheus_operator": "prometheus-operator"}

DEFAULT_VERSIONS: dict[str, str] = {"kueue": "0.19.2", "jobset": "0.12.0", "trainer": "2.3.0",
                                    "gpu_operator": "26.7.0", "prometheus_operator": "0.93.0"}

# API versions Trainyard emits. Kueue v1beta1 is still served by v0.19 but deprecated.
KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
NVIDIA_API = "nvidia.com/v1alpha1"
MONITORING_API = "monitoring.coreos.com/v1"

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
