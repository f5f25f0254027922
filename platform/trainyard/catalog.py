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
    )
}

# The directory name of each component inside a CRD mirror (layout of ../shared/crds).
MIRROR_DIRS: dict[str, str] = {"kueue": "kueue", "jobset": "jobset", "trainer": "kubeflow-trainer"}

DEFAULT_VERSIONS: dict[str, str] = {"kueue": "0.19.2", "jobset": "0.12.0", "trainer": "2.3.0"}

# (kueue, jobset, trainer) sets proven to work together on the real controllers: a TrainJob is admitted
# by Kueue, run by Trainer through JobSet, preempted (suspended) and resumed (`trainyard rehearse`,
# docs/rehearsal.md "Versions"). A stack may only name one of these sets (config.model.Versions).
# Kueue v0.19.2 is built against Trainer v2.2.1 upstream (its go.mod; kubernetes-sigs/kueue#14504 moved
# main to v2.3.0 and notes the two APIs are not compatible); see PROVEN_TOGETHER_EVIDENCE.
PROVEN_TOGETHER: frozenset[tuple[str, str, str]] = frozenset({("0.19.2", "0.12.0", "2.3.0")})
PROVEN_TOGETHER_EVIDENCE: dict[tuple[str, str, str], str] = {
    # Rehearsal of 2026-12-01, `trainyard rehearse local priority-preemption` and the smoke test: Workload
    # trainjob-probe1-89dfe QuotaReserved/Admitted/PodsReady/Finished=True, admission clusterQueue team-a,
    # flavors fake-a100, topologyAssignment on fake-a100-0/1; TrainJob conditions Suspended=False
    # (Resumed), Complete=True (AllJobsCompleted). A preempted TrainJob was suspended (Evicted: Preempted)
    # and, readmitted, resumed and completed.
    ("0.19.2", "0.12.0", "2.3.0"): "admitted, run, preempted, resumed and completed on the real controllers",
}

# API versions Trainyard emits. Kueue v1beta1 is still served by v0.19 but deprecated.
KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"

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
