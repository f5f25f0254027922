"""Chart truth for serving: the KServe and cert-manager charts rendered by helm with Trainyard's values.

The generic chart-truth test renders every release; this one states what serving relies on: KServe in
Standard mode with ingress creation off, every image from the mirror, the storage initializer restricted,
no CRDs from either chart, and no hook Job left for Pulumi to wait on. Skips without helm
(``tools/build.sh helm``) or the upstream chart copies (``TRAINYARD_CHARTS_DIR``, default ../shared/charts).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, rendered
from trainyard.supply.lock import load_lock

CHARTS = Path(os.environ.get("TRAINYARD_CHARTS_DIR") or ROOT.parent / "shared" / "charts")
HELM = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools") / "bin" / "helm"
MIRROR = "registry.trainyard.internal/mirror/"
LOCK = load_lock(ROOT / "images.lock.yaml")


def pinned(reference: str) -> str:
    """``reference`` as prod pulls it: with the image lock's digest."""
    return f"{reference}@{LOCK.entries[reference].digest}"


def helm_template(release_name: str, tmp_path: Path) -> list[dict[str, Any]]:
    if not HELM.is_file():
        pytest.skip(f"helm not built ({HELM}): run tools/build.sh helm")
    release = next(r for r in rendered("prod").releases if r.name == release_name)
    chart = CHARTS / release.chart.rsplit("/", 1)[-1] / release.version
    if not chart.is_dir():
        pytest.skip(f"chart copy {chart} not found: set TRAINYARD_CHARTS_DIR (default ../shared/charts)")
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(release.values))
    # --no-hooks as Pulumi's helm.v4.Chart renders (DisableHooks), so a hook Job never exists.
    out = subprocess.run([str(HELM), "template", release.name, str(chart), "-n", release.namespace, "--no-hooks",
                          "-f", str(values)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def images(docs: list[dict[str, Any]]) -> set[str]:
    out: set[str] = set()
    for doc in docs:
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        out |= {c["image"] for key in ("containers", "initContainers") for c in pod.get(key, [])}
    return out


def test_kserve_renders_in_standard_mode_with_ingress_off_and_mirror_images(tmp_path: Path) -> None:
    docs = helm_template("kserve", tmp_path)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "inferenceservice-config")
    deploy, ingress = json.loads(config["data"]["deploy"]), json.loads(config["data"]["ingress"])
    storage, credentials = json.loads(config["data"]["storageInitializer"]), json.loads(config["data"]["credentials"])
    print("deploy:", deploy, "| disableIngressCreation:", ingress["disableIngressCreation"], "| images:", sorted(images(docs)))
    assert deploy == {"defaultDeploymentMode": "Standard"}
    assert ingress["disableIngressCreation"] is True and ingress["enableGatewayApi"] is False
    assert images(docs) == {pinned(f"{MIRROR}kserve/kserve-controller:v0.20.0"),
                            pinned(f"{MIRROR}brancz/kube-rbac-proxy:v0.18.0")}
    assert storage["image"] == pinned(f"{MIRROR}kserve/storage-initializer:v0.20.0")
    assert json.loads(config["data"]["security"]) == {"autoMountServiceAccountToken": False}
    assert (credentials["s3"]["s3AccessKeyIDName"], credentials["s3"]["s3SecretAccessKeyName"]) == (
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    container = next(d for d in docs if d["kind"] == "ClusterStorageContainer")["spec"]["container"]
    assert container["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not [d for d in docs if d["kind"] in ("CustomResourceDefinition", "Ingress", "Gateway", "Namespace")]


def test_cert_manager_renders_without_crds_or_hook_jobs_with_mirror_images(tmp_path: Path) -> None:
    docs = helm_template("cert-manager", tmp_path)
    print("kinds:", sorted({d["kind"] for d in docs}), "| images:", sorted(images(docs)))
    assert images(docs) == {pinned(f"{MIRROR}jetstack/cert-manager-{c}:v1.21.1") for c in ("controller", "webhook", "cainjector")}
    controller = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "cert-manager")
    args = controller["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--acme-http01-solver-image={pinned(MIRROR + 'jetstack/cert-manager-acmesolver:v1.21.1')}" in args
    assert not [d for d in docs if d["kind"] in ("CustomResourceDefinition", "Job")]
    leases = {d["metadata"]["namespace"] for d in docs if d["kind"] == "Role" and "leaderelection" in d["metadata"]["name"]}
    assert leases == {"cert-manager"}
