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
    # The chart's own version where it differs from the component's (CloudNativePG chart 0.29.0 = operator 1.30.0).
    version: str | None = None

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
    # The application version a chart deploys, where it differs from the chart version (MLflow chart 1.11.5 = MLflow 3.15.1).
    app_version: str | None = None
    # Further images the release runs besides ``image`` (init containers, operands), by role.
    images: tuple[tuple[str, Image], ...] = ()

    def image_for(self, role: str) -> Image:
        return next(image for name, image in self.images if name == role)

    def installed(self) -> tuple[ChartRef, str, Image]:
        """(chart, namespace, image) of a component Trainyard installs."""
        if self.chart is None or self.image is None or not self.namespace:
            raise KeyError(f"{self.component} {self.version} is pinned for its CRDs only; it has no chart")
        return self.chart, self.namespace, self.image

    def crd_url(self, crd: CrdFile) -> str:
        """The raw URL of a CRD file at this release's tag (used when no mirror is configured)."""
        owner_repo = self.repository.removeprefix("https://github.com/")
        return f"https://raw.githubusercontent.com/{owner_repo}/{self.tag}/{crd.repo_path}"


def _crd_files(group: str, directory: str, blobs: tuple[tuple[str, str], ...]) -> tuple[CrdFile, ...]:
    """The controller-gen CRD files ``<group>_<plural>.yaml`` in ``directory``, with their pinned blob SHAs."""
    return tuple(CrdFile(f"{group}_{plural}.yaml", f"{directory}/{group}_{plural}.yaml", sha) for plural, sha in blobs)


_KUEUE_CRDS = _crd_files(
    "kueue.x-k8s.io", "config/components/crd/bases", (
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

_TRAINER_CRDS = _crd_files(
    "trainer.kubeflow.org", "manifests/base/crds", (

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

# MinIO Operator v7.1.1 ships its CRDs as plain templates (helm/operator/templates/*.yaml, no switch);
# Trainyard still declares them itself, from these verified files (same blobs as the chart's copies).
_MINIO_CRDS = (
    CrdFile("minio.min.io_tenants.yaml", "resources/base/crds/minio.min.io_tenants.yaml",
            "d1f4e303b0a71b712c127167be989989c458d145"),
    CrdFile("sts.min.io_policybindings.yaml", "resources/base/crds/sts.min.io_policybindings.yaml",
            "36099645884dbe98977581ccff3b994cfe8c4d96"),
)

# CloudNativePG 1.30.0 CRDs (config/crd/bases at v1.30.0); the chart ships the same in templates/crds/crds.yaml.
# Ref: ../shared/crds/SOURCES.md, "cloudnative-pg v1.30.0".
# The PostgreSQL operand images a stack may choose (mlflow.database.postgresql: the major). 18 is the image the operator
# defaults to at 1.30.0 (cloudnative-pg@v1.30.0:pkg/versions/versions.go:27). 17 is upstream's "minimal" flavour of
# the same Debian release (cloudnative-pg/postgres-containers Dockerfile, target minimal, tag <version>-minimal-trixie):
# the major Debian trixie itself ships (postgresql-17 17.12-0+deb13u1), so the rehearsal builds it here from Debian's
# packages (rehearsal/postgres_image.py); PostgreSQL 18 is only in Debian's rolling suites (docs/architecture.md,
# "The rehearsal's PostgreSQL is 17").
POSTGRESQL_OPERANDS: dict[str, Image] = {
    "18": Image("ghcr.io", "cloudnative-pg/postgresql", "18.4-system-trixie"),
    "17": Image("ghcr.io", "cloudnative-pg/postgresql", "17.12-minimal-trixie"),
}

_CNPG_CRDS = _crd_files(
    "postgresql.cnpg.io", "config/crd/bases", (
        ("backups", "ffe59ea881c254ad64c0a9539ea40a43aab5852a"),
        ("clusterimagecatalogs", "60b4af20a3cf17f81085f480e2226ad65883d186"),
        ("clusters", "a65a1f0e93d46f092440ac42d1516a40822ca640"),
        ("databaseroles", "7581f1f9cfe3180387e68be8f3d57b58b02dc197"),
        ("databases", "5ec7f65d6df2bb50818811d596e252a5ece6023c"),
        ("failoverquorums", "b35cf8bf9752da136fa319de643d8ff8d407f936"),
        ("imagecatalogs", "8c3d4b442af6abfec180e2314fc144cc53e6bc25"),
        ("poolers", "76df8b6022738f00c46839f0d896d7f0e0ddd60a"),
        ("publications", "c833e9501e56246276ed879451c358556b362221"),
        ("scheduledbackups", "8447e78fca3768de9caa03d717251da230513fcb"),
        ("subscriptions", "c7cd47631e6056a356a87f0f10587ea873e8ccb8"),
    ),
)

# LeaderWorkerSet v0.8.0 ships its CRD only in the chart's crds/ directory (the Trainer chart's LWS
# subchart); it is not in the CRD mirror. Blob of charts/lws/crds/ at v0.8.0, as ../shared/charts/SOURCES.md
# verified every file of lws/v0.8.0 against the upstream tree. Found through CHART_CRD_DIRS.
_LWS_CRDS = (
    CrdFile(
        "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        "charts/lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        "d9d88bb761cff300d14b47fd47087cc72253b822",
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
    # Operands Trainyard leaves at the chart's switch (off, or on only for sandbox/vGPU/confidential-computing
    # nodes) but which the ClusterPolicy names all the same: pinned under the mirror too, so that the policy
    # never names nvcr.io and a node that does run one (ccManager is on by default for CC-capable GPUs) pulls
    # from the mirror. Values.yaml lines: dcgm, nodeStatusExporter (tag = appVersion), gds, gdrcopy,
    # vgpuManager.driverManager, vgpuDeviceManager, vfioManager(.driverManager), sandboxDevicePlugin,
    # kataSandboxDevicePlugin, ccManager.
    "dcgm": Image("nvcr.io", "nvidia/cloud-native/dcgm", "4.6.0-1-ubuntu24.04"),
    "nodeStatusExporter": Image("nvcr.io", "nvidia/gpu-operator", "v26.7.0"),
    "gds": Image("nvcr.io", "nvidia/cloud-native/nvidia-fs", "2.29.4"),
    "gdrcopy": Image("nvcr.io", "nvidia/cloud-native/gdrdrv", "v2.6"),
    "vgpuManager.driverManager": Image("nvcr.io", "nvidia/cloud-native/k8s-driver-manager", "v0.12.0"),
    "vgpuDeviceManager": Image("nvcr.io", "nvidia/cloud-native/vgpu-device-manager", "v0.5.0"),
    "vfioManager": Image("nvcr.io", "nvidia/cloud-native/k8s-driver-manager", "v0.12.0"),
    "vfioManager.driverManager": Image("nvcr.io", "nvidia/cloud-native/k8s-driver-manager", "v0.12.0"),
    "sandboxDevicePlugin": Image("nvcr.io", "nvidia/kubevirt-gpu-device-plugin", "v1.6.0"),
    "kataSandboxDevicePlugin": Image("nvcr.io", "nvidia/cloud-native/nvidia-sandbox-device-plugin", "v0.0.5"),
    "ccManager": Image("nvcr.io", "nvidia/cloud-native/k8s-cc-manager", "v0.4.3"),
}

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
            chart=ChartRef("oci://ghcr.io/kserve/charts/kserve-resources", version="v0.20.0"),
            namespace="kserve",
            crds=_KSERVE_CRDS,
            image=Image("docker.io", "kserve/kserve-controller", "v0.20.0"),
            # The other images the controller puts into InferenceService pods or runs beside itself, as
            # kserve-resources v0.20.0 names them (values.yaml: kserve.storage.image, agent.image, router.image,
            # controller.rbacProxyImage). Empty tags there default to kserve.version.
            images=(
                ("storage-initializer", Image("docker.io", "kserve/storage-initializer", "v0.20.0")),
                ("agent", Image("docker.io", "kserve/agent", "v0.20.0")),
                ("router", Image("docker.io", "kserve/router", "v0.20.0")),
                ("rbac-proxy", Image("quay.io", "brancz/kube-rbac-proxy", "v0.18.0")),
            ),
        ),
        Release(
            component="cert_manager",
            version="1.21.1",
            repository="https://github.com/cert-manager/cert-manager",
            tag="v1.21.1",
            # Ref: https://cert-manager.io/docs/installation/helm/ (repo https://charts.jetstack.io, versions v-prefixed)
            chart=ChartRef("cert-manager", "https://charts.jetstack.io", version="v1.21.1"),
            namespace="cert-manager",
            crds=_CERT_MANAGER_CRDS,
            image=Image("quay.io", "jetstack/cert-manager-controller", "v1.21.1"),
            # The chart's other images (templates/_helpers.tpl "cert-manager.image": <imageRegistry>/<imageNamespace>/<name>
            # at the chart's appVersion); startupapicheck is a hook, never rendered.
            images=(
                ("webhook", Image("quay.io", "jetstack/cert-manager-webhook", "v1.21.1")),
                ("cainjector", Image("quay.io", "jetstack/cert-manager-cainjector", "v1.21.1")),
                ("acmesolver", Image("quay.io", "jetstack/cert-manager-acmesolver", "v1.21.1")),
            ),
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
            # The sidecar and init container the operator adds to every Tenant pod (the operator Deployment's
            # OPERATOR_SIDECAR_IMAGE, from the chart's operator.sidecarImage; helm/operator/values.yaml). Unset,
            # the operator falls back to its built-in default, quay.io/minio/operator-sidecar:v7.0.1 at v7.1.1,
            # which an air-gapped cluster cannot pull: Trainyard always sets it.
            images=(("sidecar", Image("quay.io", "minio/operator-sidecar", "v7.0.1")),),
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
        Release(
            component="cnpg",
            version="1.30.0",
            repository="https://github.com/cloudnative-pg/cloudnative-pg",
            tag="v1.30.0",
            # Chart cloudnative-pg 0.29.0 deploys operator 1.30.0 (charts/cloudnative-pg/Chart.yaml appVersion).
            # Ref: https://cloudnative-pg.github.io/charts (cloudnative-pg/charts tag cloudnative-pg-v0.29.0)
            chart=ChartRef("cloudnative-pg", "https://cloudnative-pg.github.io/charts", version="0.29.0"),
            namespace="cnpg-system",
            crds=_CNPG_CRDS,
            image=Image("ghcr.io", "cloudnative-pg/cloudnative-pg", "1.30.0"),
            app_version="1.30.0",
            # The operand image is not the operator's default but the stack's choice (POSTGRESQL_OPERANDS above,
            # mlflow.database.postgresql), pinned so that an operator upgrade never moves PostgreSQL by itself; the
            # bill of materials lists it from the rendered Cluster's imageName.
        ),
        Release(
            component="mlflow",
            version="1.11.5",
            repository="https://github.com/community-charts/helm-charts",
            tag="mlflow-1.11.5",
            # Ref: https://community-charts.github.io/docs/charts/mlflow/ (chart 1.11.5, appVersion 3.15.1)
            chart=ChartRef("mlflow", "https://community-charts.github.io/helm-charts"),
            namespace="mlflow",
            crds=(),
            # The chart's default image (values.yaml image.repository), not the official mlflow/mlflow one:
            # it bundles the PostgreSQL driver and boto3 the chart's server arguments rely on.
            image=Image("docker.io", "burakince/mlflow", "3.15.1"),
            app_version="3.15.1",
            # values.yaml initImages.dbchecker / iniFileInitializer.
            images=(("busybox", Image("docker.io", "library/busybox", "1.38.0")),),
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
            images=tuple((role, image) for role, image in GPU_OPERATOR_OPERANDS.items() if role != "operator"),
        ),
        Release(
            # Installed as the Trainer chart's subchart when the data cache is on (config/data_cache.py):
            # Trainer 2.3.0's Chart.yaml depends on lws 0.8.0, condition dataCache.enabled,dataCache.lws.install.
            component="lws",
            version="0.8.0",
            repository="https://github.com/kubernetes-sigs/lws",
            tag="v0.8.0",
            crds=_LWS_CRDS,
            # The released chart's image (the git copy's values say lws:main, pullPolicy Always;
            # ../shared/charts/SOURCES.md "values.yaml image rewrites").
            image=Image("registry.k8s.io", "lws/lws", "v0.8.0"),
            # What Trainer's cache initializer runs in the LeaderWorkerSet it creates (values.yaml
            # dataCache.cacheImage, tag = chart version) and the initializer image of the cache runtime.
            images=(("data-cache", Image("ghcr.io", "kubeflow/trainer/data-cache", "v2.3.0")),
                    ("dataset-initializer", Image("ghcr.io", "kubeflow/trainer/dataset-initializer", "v2.3.0"))),
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


# The directory name of each component inside a CRD mirror (layout of ../shared/crds).
MIRROR_DIRS: dict[str, str] = {"kueue": "kueue", "jobset": "jobset", "trainer": "kubeflow-trainer",
                               "minio": "minio-operator", "cnpg": "cloudnative-pg", "gpu_operator": "gpu-operator",
                               "prometheus_operator": "prometheus-operator", "kserve": "kserve",
                               "cert_manager": "cert-manager", "lws": "lws"}

# CRDs upstream ships only inside a chart's crds/ directory: (component, version) -> that directory in a
# chart mirror laid out like ../shared/charts. manifests/crds.py looks there after the CRD mirrors.
CHART_CRD_DIRS: dict[tuple[str, str], str] = {("lws", "0.8.0"): "lws/v0.8.0/crds"}

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
                                    "minio": "7.1.1", "cnpg": "1.30.0", "mlflow": "1.11.5", "gpu_operator": "26.7.0",
                                    "prometheus_operator": "0.93.0", "kserve": "0.20.0", "cert_manager": "1.21.1"}

# The S3 port and pod labels of each in-cluster object store, as its chart renders them. Tenants'
# NetworkPolicy allow and the object store's own ingress policy are derived from these.
# SeaweedFS all-in-one: templates/all-in-one/all-in-one-deployment.yaml (labels; s3.port default 8333).
# MinIO Tenant: the operator labels every pod v1.min.io/tenant=<tenant name> (pkg/apis/minio.min.io/v2
# constants TenantLabel); the S3 API listens on 9000 (helm/tenant/values.yaml metrics.port / MinIOPort).
SEAWEEDFS_S3_PORT = 8333
# The SeaweedFS chart's release name: its S3 Service is <release>-all-in-one (chart templates/all-in-one).
SEAWEEDFS_RELEASE = "seaweedfs"
SEAWEEDFS_POD_LABELS = {"app.kubernetes.io/name": "seaweedfs", "app.kubernetes.io/component": "seaweedfs-all-in-one"}
MINIO_S3_PORT = 9000
MINIO_TENANT_LABEL = "v1.min.io/tenant"

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
KSERVE_API = "serving.kserve.io/v1beta1"
KSERVE_RUNTIME_API = "serving.kserve.io/v1alpha1"
CNPG_API = "postgresql.cnpg.io/v1"
# The barman-cloud CNPG-I plugin's API. Its ObjectStore CRD is not in ../shared/crds: `tools/build.sh
# barman-cloud-crd` copies it out of the plugin's Go module into the tools cache, and the conformance tier
# validates the rendered ObjectStore against it, after checking this blob SHA (trainyard.schemas.pinned_crd).
# v0.15.0 (2026-09-03): the newest plugin release, built against CloudNativePG v1.30.0 (its go.mod), the operator
# DEFAULT_VERSIONS pins. Keep module, version and blob equal to tools/build.sh's BARMAN_CLOUD_* (a test checks it).
# Ref: cloudnative-pg/plugin-barman-cloud config/crd/bases/barmancloud.cnpg.io_objectstores.yaml
BARMAN_CLOUD_API = "barmancloud.cnpg.io/v1"
BARMAN_CLOUD_PLUGIN = "barman-cloud.cloudnative-pg.io"
BARMAN_CLOUD_PLUGIN_MODULE = "github.com/cloudnative-pg/plugin-barman-cloud"
BARMAN_CLOUD_PLUGIN_VERSION = "v0.15.0"
# The plugin's own image (its Deployment in cnpg-system, installed by the site) and the sidecar it injects into
# every instance pod of a Cluster that names the plugin (the plugin Deployment's SIDECAR_IMAGE). Trainyard renders
# neither, so these pins are their one source; the BOM lists them for every stack with a Cluster using the plugin.
# Ref: cloudnative-pg/plugin-barman-cloud v0.15.0 manifest.yaml (images ghcr.io/cloudnative-pg/plugin-barman-cloud
# and -sidecar at the release tag).
BARMAN_CLOUD_IMAGES: tuple[tuple[str, Image], ...] = (
    ("plugin", Image("ghcr.io", "cloudnative-pg/plugin-barman-cloud", BARMAN_CLOUD_PLUGIN_VERSION)),
    ("sidecar", Image("ghcr.io", "cloudnative-pg/plugin-barman-cloud-sidecar", BARMAN_CLOUD_PLUGIN_VERSION)),
)
# How upstream's manifest.yaml runs the plugin in the operator's namespace: its pods' label (Deployment and Service
# selector) and the gRPC port the operator calls it on (Service annotation cnpg.io/pluginPort, containerPort); the
# stack opens exactly this path (manifests/mlflow.py allow-barman-cloud-plugin).
BARMAN_CLOUD_PLUGIN_POD_LABELS = {"app": "barman-cloud"}
BARMAN_CLOUD_PLUGIN_PORT = 9090
BARMAN_CLOUD_CRD = CrdFile("barmancloud.cnpg.io_objectstores.yaml", "config/crd/bases/barmancloud.cnpg.io_objectstores.yaml",
                           "bb7db1e6e36cf04b137560d85d2ccdb57851aa9d")
NVIDIA_API = "nvidia.com/v1alpha1"
MONITORING_API = "monitoring.coreos.com/v1"

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
