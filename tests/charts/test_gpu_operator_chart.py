"""Chart truth for the GPU operator: `helm template` of the real v26.7.0 chart with Trainyard's values.

It shows the per-pool settings arriving where the operator reads them (the ClusterPolicy the chart
renders), that the chart deploys no default NVIDIADriver (each pool has its own), that every image
comes from the stack's mirror, and that the ClusterPolicy passes the strict schema of its CRD.
Needs helm (`make tools` builds it into the tools cache, or PATH) and the chart mirror
(TRAINYARD_CHARTS_DIR, default ../shared/charts); skips with the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, rendered
from trainyard.manifests import gpu_operator
from trainyard.schemas import Validator

CHARTS = Path(os.environ.get("TRAINYARD_CHARTS_DIR") or ROOT.parent / "shared" / "charts")
CHART = CHARTS / "gpu-operator" / "v26.7.0"
TOOLS = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools") / "bin"
HELM = str(TOOLS / "helm") if (TOOLS / "helm").is_file() else shutil.which("helm")
SHARING = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.gpu-sharing.yaml")

pytestmark = [
    pytest.mark.skipif(HELM is None, reason="helm not found: run `make tools` or put helm on PATH"),
    pytest.mark.skipif(not CHART.is_dir(), reason=f"chart mirror not found at {CHART}: set TRAINYARD_CHARTS_DIR"),
]


def helm_template(stack: str, tmp_path: Path) -> list[dict[str, Any]]:
    (release,) = rendered(stack).concern("gpu-operator").releases
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(release.values))
    assert HELM is not None
    result = subprocess.run([HELM, "template", release.name, str(CHART), "--namespace", release.namespace,
                             "--values", str(values), "--skip-crds"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def cluster_policy(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (policy,) = [d for d in docs if d["kind"] == "ClusterPolicy"]
    return policy


def test_cluster_policy_carries_trainyards_per_pool_configs(tmp_path: Path) -> None:
    docs = helm_template(SHARING, tmp_path)
    spec = cluster_policy(docs)["spec"]
    assert spec["devicePlugin"]["config"] == {"name": gpu_operator.DEVICE_PLUGIN_CONFIG, "default": "default"}
    assert spec["migManager"]["enabled"] is True
    assert spec["migManager"]["config"]["name"] == gpu_operator.MIG_PARTED_CONFIG
    assert spec["migManager"]["config"]["default"] == "all-disabled"
    assert spec["mig"] == {"strategy": "mixed"}
    assert spec["driver"]["enabled"] is True and spec["driver"]["useNvidiaDriverCRD"] is True
    assert spec["cdi"]["enabled"] is True
    assert spec["sandboxWorkloads"]["enabled"] is False
    assert spec["dcgmExporter"]["serviceMonitor"]["enabled"] is False
    # Trainyard's ConfigMaps are the ones the operator reads: the chart creates none of its own.
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    assert not names & {gpu_operator.DEVICE_PLUGIN_CONFIG, gpu_operator.MIG_PARTED_CONFIG}
    assert [d for d in docs if d["kind"] == "NVIDIADriver"] == []  # one per pool, from Trainyard


def test_every_image_comes_from_the_mirror(tmp_path: Path) -> None:
    docs = helm_template("prod", tmp_path)
    mirror = "registry.trainyard.internal/mirror/"
    for doc in docs:
        template = (doc.get("spec") or {}).get("template") or (doc.get("spec", {}).get("jobTemplate") or {}).get("spec", {})
        for container in ((template.get("spec") or {}).get("containers") or []):
            assert container["image"].startswith(mirror), (doc["kind"], doc["metadata"]["name"], container["image"])
    spec = cluster_policy(docs)["spec"]
    for operand in ("validator", "driver", "toolkit", "devicePlugin", "gfd", "dcgmExporter", "migManager"):
        if "repository" in spec.get(operand, {}):
            assert spec[operand]["repository"].startswith(mirror), operand


def test_rendered_cluster_policy_passes_the_strict_crd_schema(tmp_path: Path, crds: Path) -> None:
    validator = Validator(crds)
    for stack in ("prod", SHARING):
        policy = cluster_policy(helm_template(stack, tmp_path))
        assert [str(e) for e in validator.errors(policy)] == []
