"""The GPU operator concern: one operator, per-pool drivers and device-plugin configs, labels stated per pool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, rendered, stack
from trainyard.cli import main
from trainyard.manifests import gpu_operator
from trainyard.manifests.gpu_operator import expected_node_labels, pod_security_exceptions
from trainyard.schemas import Validator

SHARING = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.gpu-sharing.yaml")


def _objects(name: str, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in rendered(name).concern("gpu-operator").objects if o["kind"] == kind}


def test_prod_gets_one_nvidiadriver_per_operator_managed_pool_selecting_its_nodes() -> None:
    drivers = _objects("prod", "NVIDIADriver")
    assert sorted(drivers) == ["h100", "h200"]  # l40s boots with the driver pre-installed
    h100 = drivers["h100"]["spec"]
    assert h100["nodeSelector"] == {"trainyard.dev/pool": "h100"}
    assert h100["default"] is False
    assert h100["repository"] == "registry.trainyard.internal/mirror/nvidia"
    assert h100["image"] == "driver"
    assert h100["upgradePolicy"]["maxParallelUpgrades"] == 1
    # The pool's taint nvidia.com/gpu=present:NoSchedule is covered by the operator's own Exists toleration.
    assert h100["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_chart_values_turn_cdi_on_sandboxes_off_and_use_trainyards_configs() -> None:
    (release,) = rendered("prod").concern("gpu-operator").releases
    values = release.values
    assert (release.chart_name, release.version, release.namespace) == ("gpu-operator", "v26.7.0", "gpu-operator")
    # prod pulls it from its OCI chart mirror (charts.mirror), a copy of NVIDIA's Helm repository's chart.
    assert (release.chart, release.repo) == ("oci://registry.trainyard.internal/charts/gpu-operator", None)
    assert release.upstream == "https://helm.ngc.nvidia.com/nvidia/gpu-operator"
    assert values["cdi"] == {"enabled": True}
    assert values["sandboxWorkloads"] == {"enabled": False}
    assert values["driver"]["enabled"] is True
    assert values["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}
    assert values["devicePlugin"]["config"] == {"create": False, "name": gpu_operator.DEVICE_PLUGIN_CONFIG,
                                                "default": "default"}
    assert values["dcgmExporter"]["serviceMonitor"] == {"enabled": False}
    assert values["operator"]["repository"] == "registry.trainyard.internal/mirror/nvidia"
    assert values["node-feature-discovery"]["image"]["repository"] == (
        "registry.trainyard.internal/mirror/nfd/node-feature-discovery")
    assert values["migManager"]["enabled"] is False  # prod has no MIG pool


def test_every_pool_states_the_labels_its_nodes_must_carry() -> None:
    config = stack(SHARING).config
    labels = {pool.name: expected_node_labels(pool) for pool in config.gpu_pools}
    assert labels["h100"] == {"nvidia.com/device-plugin.config": "h100", "trainyard.dev/pool": "h100"}
    assert labels["h200-mig"]["nvidia.com/mig.config"] == "trainyard-h200-mig"
    assert labels["l40s-shared"]["nvidia.com/gpu.deploy.driver"] == "false"
    assert "nvidia.com/mig.config" not in labels["l40s-shared"]


def test_device_plugin_configs_are_named_per_pool_with_time_slicing_renamed() -> None:
    config_map = _objects(SHARING, "ConfigMap")[gpu_operator.DEVICE_PLUGIN_CONFIG]
    configs = {name: yaml.safe_load(text) for name, text in config_map["data"].items()}
    assert sorted(configs) == ["default", "h100", "h100-mixed", "h200-mig", "l40s-shared"]
    assert configs["h200-mig"]["flags"]["migStrategy"] == "mixed"
    assert configs["l40s-shared"]["sharing"]["timeSlicing"] == {
        "renameByDefault": True, "failRequestsGreaterThanOne": True,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}


def test_mig_parted_config_has_a_layout_per_mig_pool_and_all_disabled() -> None:
    config_map = _objects(SHARING, "ConfigMap")[gpu_operator.MIG_PARTED_CONFIG]
    parted = yaml.safe_load(config_map["data"]["config.yaml"])
    assert parted["version"] == "v1"
    assert parted["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert parted["mig-configs"]["trainyard-h200-mig"] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}]
    assert parted["mig-configs"]["trainyard-h100-mixed"][1] == {"devices": [4, 5, 6, 7], "mig-enabled": False}
    (release,) = rendered(SHARING).concern("gpu-operator").releases
    assert release.values["migManager"]["config"] == {"name": gpu_operator.MIG_PARTED_CONFIG, "default": "all-disabled"}
    assert release.values["mig"] == {"strategy": "mixed"}


def test_local_stack_keeps_fake_gpus_and_no_operator() -> None:
    platform = rendered("local")
    assert platform.concern("gpu-operator").objects == ()
    assert platform.concern("gpu-operator").releases == ()
    assert not [c for c in platform.crds if c["spec"]["group"] in ("nvidia.com", "monitoring.coreos.com")]
    assert pod_security_exceptions(stack("local").config) == ()


def test_gpu_and_monitoring_crds_are_declared_where_the_stack_turns_them_on() -> None:
    groups = sorted({c["spec"]["group"] for c in rendered("prod").crds})
    assert "nvidia.com" in groups and "monitoring.coreos.com" in groups
    names = [c["metadata"]["name"] for c in rendered("prod").crds]
    assert "servicemonitors.monitoring.coreos.com" in names and "nvidiadrivers.nvidia.com" in names


def test_operator_namespace_is_the_reviewed_privileged_exception(capsys: pytest.CaptureFixture[str]) -> None:
    namespace = _objects("prod", "Namespace")["gpu-operator"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert gpu_operator.PSA_EXCEPTION_ANNOTATION in namespace["metadata"]["annotations"]
    assert main(["check", "prod"]) == 0
    out = capsys.readouterr().out
    assert "reviewed exception: Namespace/gpu-operator enforces Pod Security privileged" in out


def test_sharing_stack_passes_the_strict_schemas(crds: Path) -> None:
    validator = Validator(crds)
    errors = [str(e) for obj in rendered(SHARING).all_objects for e in validator.errors(obj)]
    assert errors == []
