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
    """One pinned upstream release of a component."""

    component: str
    version: str
    repository: str
    tag: str
    chart: ChartRef
    namespace: str
    crds: tuple[CrdFile, ...]
    image: Image
    # The chart's own version string where it differs from ``version`` (KServe and cert-manager publish
    # their charts as v<version>).
    chart_version: str | None = None

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

# KServe's CRDs live in subdirectories of config/crd/full at the tag; the file names are unique.
_KSERVE_CRDS = tuple(
    CrdFile(f"serving.kserve.io_{plural}.yaml", f"config/crd/full/{subdir}serving.kserve.io_{plural}.yaml", sha)
    for plural, subdir, sha in (
        ("clusterservingruntimes", "", "1ce0a2e5b3d7c05192f7c817eff4d614a80cb432"),
        ("clusterstoragecontainers", "clusterstoragecontainer/", "265b4ebd6442da87cd2e81ca3a660a347857d800"),
        ("inferencegraphs", "", "b1056dc1a0bb377e5dc2bab6c4da134604fd9cb9"),
        ("inferenceservices", "", "1e37d05b7a741eb40b9eb01c378dc9dc80eab3d9"),
        ("llminferenceserviceconfigs", "llmisvc/", "08a3666e74d90521fdf1e0ab9fc03f25e7bdbdd0"),
        ("llminferenceservices", "llmisvc/", "18f10e0315037213c99f714b1334fef0cff339e3"),
        ("localmodelcaches", "localmodel/", "5575177a53ded63bb94be54c77a541638692b721"),
        ("localmodelnamespacecaches", "localmodel/", "30e106e4d92087d0fa563c200d042492a726ba56"),
        ("localmodelnodegroups", "localmodel/", "c8080f91fd0a7b9459ee5ae441d1c043611ff2f7"),
        ("localmodelnodes", "localmodel/", "fa091fa0f0b646a9f4edfd8e40bea2732094bb92"),
        ("servingruntimes", "", "59deb0d14aed7be7edfd32ca0577f9ba789fa747"),
        ("trainedmodels", "", "c844b92b1af48717e25dec849d5d97ef92236bbd"),
    )
)

_CERT_MANAGER_CRDS = tuple(
    CrdFile(f"{group}_{plural}.yaml", f"deploy/crds/{group}_{plural}.yaml", sha)
    for group, plural, sha in (
        ("acme.cert-manager.io", "challenges", "a0add06b1dca62f50a5c16ccf1b0afd71d9d27a1"),
        ("acme.cert-manager.io", "orders", "9938939fec864054515a2e7fb4db68041897a300"),
        ("cert-manager.io", "certificaterequests", "9b5f18c7807948dfbca2fded3b4e58db2a375f2c"),
        ("cert-manager.io", "certificates", "1eb46fbeed2127650fe4ec06ddc7289163f75e3b"),
        ("cert-manager.io", "clusterissuers", "f24cab2d55ebe37a8c000d10d7f9de19636027f9"),
        ("cert-manager.io", "issuers", "bfa8262b5628e1d8ea7cc398cf1ad321a2bedc62"),
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
            component="kserve",
            version="0.20.0",
            repository="https://github.com/kserve/kserve",
            tag="v0.20.0",
            # The controller chart; kserve-crd is not installed (Trainyard declares the CRDs) and neither is
            # kserve-runtime-configs (only the reviewed runtimes in serving-runtimes/ are installed).
            # Ref: https://kserve.github.io/website/docs/admin-guide/kubernetes-deployment (helm install ... oci://ghcr.io/kserve/charts/...)
            chart=ChartRef("oci://ghcr.io/kserve/charts/kserve-resources"),
            namespace="kserve",
            crds=_KSERVE_CRDS,
            image=Image("docker.io", "kserve/kserve-controller", "v0.20.0"),
            chart_version="v0.20.0",
        ),
        Release(
            component="cert_manager",
            version="1.21.1",
            repository="https://github.com/cert-manager/cert-manager",
            tag="v1.21.1",
            # Ref: https://cert-manager.io/docs/installation/helm/ (repo https://charts.jetstack.io, versions v-prefixed)
            chart=ChartRef("cert-manager", "https://charts.jetstack.io"),
            namespace="cert-manager",
            crds=_CERT_MANAGER_CRDS,
            image=Image("quay.io", "jetstack/cert-manager-controller", "v1.21.1"),
            chart_version="v1.21.1",
        ),
    )
}

# The other images the KServe controller puts into InferenceService pods or runs beside itself, as
# kserve-resources v0.20.0 names them (values.yaml: kserve.storage.image, agent.image, router.image,
# controller.rbacProxyImage). Empty tags there default to kserve.version.
KSERVE_IMAGES: dict[str, Image] = {
    "storage-initializer": Image("docker.io", "kserve/storage-initializer", "v0.20.0"),
    "agent": Image("docker.io", "kserve/agent", "v0.20.0"),
    "router": Image("docker.io", "kserve/router", "v0.20.0"),
    "rbac-proxy": Image("quay.io", "brancz/kube-rbac-proxy", "v0.18.0"),
}

# The directory name of each component inside a CRD mirror (layout of ../shared/crds).
MIRROR_DIRS: dict[str, str] = {"kueue": "kueue", "jobset": "jobset", "trainer": "kubeflow-trainer", "kserve": "kserve",
                               "cert_manager": "cert-manager"}

DEFAULT_VERSIONS: dict[str, str] = {"kueue": "0.19.2", "jobset": "0.12.0", "trainer": "2.3.0", "kserve": "0.20.0",
                                    "cert_manager": "1.21.1"}

# API versions Trainyard emits. Kueue v1beta1 is still served by v0.19 but deprecated.
KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
KSERVE_API = "serving.kserve.io/v1beta1"
KSERVE_RUNTIME_API = "serving.kserve.io/v1alpha1"

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
