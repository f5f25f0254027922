"""The NVIDIA GPU operator: its chart release, one NVIDIADriver per operator-managed pool, and per-pool configs.

One ClusterPolicy (rendered by the chart) runs the toolkit, device plugin, GPU feature
discovery, DCGM exporter and mig-manager on every GPU node. What differs per pool is selected
by node labels (``expected_node_labels``):

- the device plugin's ConfigMap holds one named config per pool (MIG strategy, time-slicing);
  a node picks its pool's config by ``nvidia.com/device-plugin.config=<pool>``;
- mig-manager's ConfigMap holds one mig-parted config per MIG pool, ``trainyard-<pool>``,
  picked by ``nvidia.com/mig.config``;
- drivers come from one NVIDIADriver per operator-managed pool (its nodeSelector is the
  pool's node labels); pools with a pre-installed driver opt out with
  ``nvidia.com/gpu.deploy.driver=false``.

CDI is on; sandbox workloads (KubeVirt, Kata) are off. The operator's namespace enforces
Pod Security "privileged": its operands load kernel modules and mount host paths. That is
the platform's one reviewed exception (``pod_security_exceptions``); ``trainyard check``
lists it and a policy rule refuses any other namespace that claims it.

Ref: deployments/gpu-operator/values.yaml and templates/ at v26.7.0; k8s-device-plugin v0.20.0
README ("Shared Access to GPUs", "Multiple Config Files"); mig-parted v0.15.0 config format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from trainyard import catalog
from trainyard.config.gpu_operator import (
    DEPLOY_DRIVER_LABEL,
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU,
    MIG_CONFIG_LABEL,
    GpuOperator,
)
from trainyard.config.gpu_pools import mig_config_name
from trainyard.config.model import GpuPool, PlatformConfig
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.concern import Concern
from trainyard.manifests.installs import COMPONENT_LABEL, pinned_image
from trainyard.manifests.kueue import toleration_for
from trainyard.manifests.meta import Manifest, metadata
from trainyard.supply.lock import ImageLock

DEVICE_PLUGIN_CONFIG = "trainyard-device-plugin-config"
MIG_PARTED_CONFIG = "trainyard-mig-parted-config"
DEFAULT_DEVICE_PLUGIN_CONFIG = "default"
MIG_DISABLED = "all-disabled"
PSA_EXCEPTION_ANNOTATION = "trainyard.dev/pod-security-exception"
PRIVILEGED_LABELS = {f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")}
# The operator's own DaemonSet toleration (values.yaml daemonsets.tolerations), kept when pool taints are added.
_DEFAULT_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@dataclass(frozen=True)
class PodSecurityException:
    """A namespace allowed to enforce a Pod Security level weaker than 'restricted', and why."""

    namespace: str
    level: str
    reason: str


def pod_security_exceptions(config: PlatformConfig) -> tuple[PodSecurityException, ...]:
    """The reviewed exceptions to Pod Security 'restricted' of a stack: the GPU operator's namespace, if installed."""
    if config.gpu_operator is None:
        return ()
    return (PodSecurityException(
        config.gpu_operator.namespace, "privileged",
        "NVIDIA GPU operator: driver, toolkit, device plugin, DCGM and mig-manager pods load kernel modules, "
        "mount host paths and run privileged"),)


def managed_pools(config: PlatformConfig) -> list[GpuPool]:
    """The pools whose GPU stack the operator runs (fake rehearsal pools have none)."""
    return [pool for pool in config.gpu_pools if not pool.fake] if config.gpu_operator is not None else []


def expected_node_labels(pool: GpuPool) -> dict[str, str]:
    """Every label Trainyard expects on the pool's nodes: its selector plus the operator's per-pool choices."""
    labels = dict(pool.node_labels)
    labels[DEVICE_PLUGIN_CONFIG_LABEL] = pool.name
    if pool.mig is not None:
        labels[MIG_CONFIG_LABEL] = mig_config_name(pool)
    if pool.driver == "preinstalled":
        labels[DEPLOY_DRIVER_LABEL] = "false"
    return dict(sorted(labels.items()))


def device_plugin_config(pool: GpuPool | None) -> dict[str, Any]:
    """One named device-plugin config (``version: v1``): MIG strategy and time-slicing of a pool.

    Ref: k8s-device-plugin v0.20.0 api/config/v1/config.go (Config, Flags.MigStrategy, Sharing.TimeSlicing).
    """
    strategy = "none" if pool is None or pool.mig is None else pool.mig.strategy
    out: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": strategy}}
    if pool is not None and pool.time_slicing is not None:
        sharing = pool.time_slicing
        out["sharing"] = {"timeSlicing": {
            "renameByDefault": sharing.rename_by_default,
            "failRequestsGreaterThanOne": sharing.fail_requests_greater_than_one,
            "resources": [{"name": GPU, "replicas": sharing.replicas}],
        }}
    return out


def device_plugin_config_map(config: PlatformConfig, operator: GpuOperator) -> Manifest:
    data = {DEFAULT_DEVICE_PLUGIN_CONFIG: _yaml(device_plugin_config(None))}
    data |= {pool.name: _yaml(device_plugin_config(pool)) for pool in managed_pools(config)}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(DEVICE_PLUGIN_CONFIG, namespace=operator.namespace,
                                 labels={COMPONENT_LABEL: "gpu-operator"}),
            "data": data}


def mig_parted_config(config: PlatformConfig) -> dict[str, Any]:
    """The mig-parted config (``version: v1``): all-disabled, and trainyard-<pool> for each MIG pool.

    A custom config replaces the one mig-manager would generate from the hardware, so
    all-disabled is kept for nodes that carry no layout label.
    Ref: mig-parted v0.15.0 README ("mig-configs", "devices", "mig-enabled", "mig-devices").
    """
    configs: dict[str, Any] = {MIG_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for pool in managed_pools(config):
        if pool.mig is None:
            continue
        configs[mig_config_name(pool)] = [
            {"devices": group.devices if group.devices == "all" else list(group.devices),
             "mig-enabled": bool(group.slices),
             **({"mig-devices": dict(group.slices)} if group.slices else {})}
            for group in pool.mig.layout
        ]
    return {"version": "v1", "mig-configs": configs}


def mig_parted_config_map(config: PlatformConfig, operator: GpuOperator) -> Manifest:
    # mig-manager reads the key config.yaml. Ref: gpu-operator values.yaml migManager.config.
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(MIG_PARTED_CONFIG, namespace=operator.namespace,
                                 labels={COMPONENT_LABEL: "gpu-operator"}),
            "data": {"config.yaml": _yaml(mig_parted_config(config))}}


def nvidia_driver(config: PlatformConfig, operator: GpuOperator, pool: GpuPool, lock: ImageLock | None = None) -> Manifest:
    """The NVIDIADriver of one operator-managed pool. Ref: api/nvidia/v1alpha1/nvidiadriver_types.go at v26.7.0.

    With a digest in the lock, ``version`` is ``<driver version>@<digest>``: ``GetImagePath`` then uses
    ``<repository>/<image>:<version>`` as it is and appends no ``-<os>`` (it does so only for a path
    without ``sha256:``), so the lock's ``driver:<version>`` entry must be the digest of the driver image
    built for the pool's node OS. Precompiled drivers refuse a digest (``GetPrecompiledImagePath``);
    Trainyard sets ``usePrecompiled: false``.
    """
    pins = lock if lock is not None else ImageLock()
    driver = catalog.GPU_OPERATOR_OPERANDS["driver"]
    repository, image, version = _parts(config, catalog.Image(driver.registry, driver.repository,
                                                              pool.driver_version or operator.driver_version), pins)
    manager_repository, manager_image, manager_version = _parts(config, catalog.GPU_OPERATOR_OPERANDS["driver.manager"],
                                                                pins)
    upgrade = operator.driver_upgrade
    spec: dict[str, Any] = {
        "default": False,
        "driverType": "gpu",
        "usePrecompiled": False,
        "kernelModuleType": "auto",
        "repository": repository,
        "image": image,
        "version": version,
        "manager": {"repository": manager_repository, "image": manager_image, "version": manager_version},
        "nodeSelector": dict(sorted(pool.node_labels.items())),
        "upgradePolicy": {
            "autoUpgrade": True,
            "maxParallelUpgrades": upgrade.max_parallel_upgrades,
            "maxUnavailable": upgrade.max_unavailable,
            "drain": {"enable": upgrade.drain, "force": False, "timeoutSeconds": upgrade.drain_timeout_seconds,
                      "deleteEmptyDir": False},
        },
    }
    if pool.taints:
        spec["tolerations"] = _tolerations([pool])
    return {"apiVersion": catalog.NVIDIA_API, "kind": "NVIDIADriver",
            "metadata": metadata(pool.name, labels={COMPONENT_LABEL: "gpu-operator"}), "spec": spec}


def namespace(operator: GpuOperator, exception: PodSecurityException) -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": metadata(operator.namespace, labels={COMPONENT_LABEL: "gpu-operator", **PRIVILEGED_LABELS},
                                 annotations={PSA_EXCEPTION_ANNOTATION: exception.reason})}


def chart_values(config: PlatformConfig, operator: GpuOperator, lock: ImageLock | None = None) -> dict[str, Any]:
    """Values of the gpu-operator chart. Ref: deployments/gpu-operator/values.yaml at v26.7.0.

    Every image triple's ``version`` is ``<tag>@<digest>`` where the lock has the digest. The chart composes
    ``<repository>/<image>:<version>`` for the operator and its ``DRIVER_MANAGER_IMAGE``/``VALIDATOR_IMAGE``
    (templates/_helpers.tpl:72, :79, :86), and the operator the same for every ClusterPolicy operand
    (api/nvidia/v1/clusterpolicy_types.go ``imagePath``: ``:`` unless the version starts with ``sha256:``),
    so both give ``<repository>/<image>:<tag>@<digest>``; a bare ``sha256:`` version would make the chart's
    own ``<image>:sha256:...`` invalid. NFD composes ``<image.repository>:<image.tag>`` (subchart
    templates/master.yaml:60, worker.yaml:62, nfd-gc.yaml:52).
    """
    pools = managed_pools(config)
    operands = catalog.GPU_OPERATOR_OPERANDS
    pins = lock if lock is not None else ImageLock()

    def image(key: str) -> dict[str, str]:
        repository, name, version = _parts(config, operands[key], pins)
        return {"repository": repository, "image": name, "version": version}

    any_mig = any(pool.mig is not None for pool in pools)
    driver_managed = any(pool.driver == "operator" for pool in pools)
    nfd = pinned_image(config, operands["node-feature-discovery"], pins)
    values: dict[str, Any] = {
        # operator.upgradeCRD is a pre-upgrade hook; the Pulumi provider renders charts without hooks
        # (helm/v4 chart.go DisableHooks), and Trainyard applies the CRDs itself.
        "operator": {**image("operator"), "cleanupCRD": False},
        "validator": image("validator"),
        "nfd": {"enabled": operator.node_feature_discovery},
        "cdi": {"enabled": True},
        "sandboxWorkloads": {"enabled": False},
        # The cluster-wide default only; each pool's device-plugin config sets its own migStrategy.
        "mig": {"strategy": "mixed" if any(p.mig and p.mig.strategy == "mixed" for p in pools) else "single"},
        "daemonsets": {"tolerations": _tolerations(pools)},
        # The default NVIDIADriver is off: each operator-managed pool has its own (nodeSelector = its labels),
        # which carries the driver image; driver.repository/image/version only feed that default CR.
        "driver": {"enabled": driver_managed,
                   "nvidiaDriverCRD": {"enabled": True, "deployDefaultCR": False},
                   "manager": image("driver.manager")},
        "toolkit": {"enabled": True, **image("toolkit")},
        "devicePlugin": {"enabled": True, **image("devicePlugin"),
                         "config": {"create": False, "name": DEVICE_PLUGIN_CONFIG,
                                    "default": DEFAULT_DEVICE_PLUGIN_CONFIG}},
        "gfd": {"enabled": True, **image("gfd")},
        # Trainyard declares the DCGM ServiceMonitor itself (manifests/monitoring.py), with the labels its
        # Prometheus selects; the operator's own would be a second, unlabelled copy.
        "dcgmExporter": {"enabled": True, **image("dcgmExporter"), "enablePodLabels": operator.dcgm_pod_labels,
                         "serviceMonitor": {"enabled": False}},
        "migManager": {"enabled": any_mig, **image("migManager"),
                       # create stays at its default (false): the chart creates the ConfigMap only with data.
                       "config": {"name": MIG_PARTED_CONFIG if any_mig else "", "default": MIG_DISABLED},
                       "env": [{"name": "WITH_REBOOT", "value": "true"}] if operator.mig_reboot else []},
    }
    # The operands Trainyard leaves at the chart's switch are still named by the ClusterPolicy: from the mirror
    # too, so the policy names no image outside the bill of materials (catalog.GPU_OPERATOR_OPERANDS).
    for key in ("dcgm", "nodeStatusExporter", "gds", "gdrcopy", "vgpuDeviceManager", "vfioManager",
                "sandboxDevicePlugin", "kataSandboxDevicePlugin", "ccManager"):
        values[key] = image(key)
    values["vgpuManager"] = {"driverManager": image("vgpuManager.driverManager")}
    values["vfioManager"]["driverManager"] = image("vfioManager.driverManager")
    if operator.node_feature_discovery:
        values["node-feature-discovery"] = {"image": {"repository": nfd.name, "tag": nfd.tag_with_digest}}
    return values


def release(config: PlatformConfig, operator: GpuOperator, lock: ImageLock | None = None) -> ChartRelease:
    pinned = catalog.release("gpu_operator", operator.version)
    chart, _, _ = pinned.installed()
    return ChartRelease(name="gpu-operator", component="gpu-operator", chart=chart.chart, repo=chart.repo,
                        version=f"v{pinned.version}", namespace=operator.namespace,
                        values=chart_values(config, operator, lock))


def build(config: PlatformConfig, lock: ImageLock | None = None) -> Concern:
    """The GPU stack: nothing when the stack installs no operator (the local stack's fake GPUs)."""
    operator = config.gpu_operator
    if operator is None:
        return Concern("gpu-operator")
    (exception,) = pod_security_exceptions(config)
    objects: list[Manifest] = [namespace(operator, exception), device_plugin_config_map(config, operator)]
    if any(pool.mig is not None for pool in managed_pools(config)):
        objects.append(mig_parted_config_map(config, operator))
    objects += [nvidia_driver(config, operator, pool, lock) for pool in managed_pools(config) if pool.driver == "operator"]
    return Concern("gpu-operator", objects=tuple(objects), releases=(release(config, operator, lock),))


def _parts(config: PlatformConfig, image: catalog.Image, lock: ImageLock) -> tuple[str, str, str]:
    """(repository, image, version) as the operator's values take them: nvcr.io/nvidia + gpu-operator +
    v26.7.0, under the stack's mirror; the version ``<tag>@<digest>`` where the lock has the digest."""
    pinned = pinned_image(config, image, lock)
    path, _, name = pinned.repository.rpartition("/")
    return (f"{pinned.registry}/{path}" if path else pinned.registry), name, pinned.tag_with_digest


def _tolerations(pools: list[GpuPool]) -> list[dict[str, str]]:
    out = [_DEFAULT_TOLERATION]
    for pool in pools:
        for taint in pool.taints:
            if (taint.key, taint.effect) == (_DEFAULT_TOLERATION["key"], _DEFAULT_TOLERATION["effect"]):
                continue  # the operator's own Exists toleration covers it
            toleration = toleration_for(taint.key, taint.value, taint.effect)
            if toleration not in out:
                out.append(toleration)
    return out


def _yaml(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False)
