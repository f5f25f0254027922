"""`pulumi up` on the air-gapped side, from only what the air-gap import wrote (issue #24).

The connected side: a loopback *source* registry filled with small images for the BOM of the local stack as
an air-gapped site runs it (``tests/airgap.py``: images and charts from the site's mirror, Kueue's chart
installed), then ``trainyard bom STACK --export FILE --from PREFIX``.

The air-gapped side: an *empty* loopback registry and an empty CRD directory; the stack points at them
(``charts.mirror: oci://127.0.0.1:PORT/charts`` with ``plain_http``, the loopback exception the config allows;
``crds.source: mirror`` with ``mirror_dir`` the empty directory, which reads nothing else: not
``TRAINYARD_CRDS_DIR``, not the cache); ``trainyard bom STACK --import FILE``, ``images lock``, ``images verify``;
then ``pulumi up`` with the real engine and provider against a private control plane (the program of
tests/cluster/test_chart_crds_owned_once.py: the stack's Kueue CRDs and Kueue's release, with the chart left as
the stack renders it, so the provider's helm pulls it from the OCI mirror). The engine runs with
``HTTPS_PROXY``/``HTTP_PROXY`` at a closed loopback port (``NO_PROXY`` only for loopback), the chart and CRD
mirrors of the connected side unset: any reach for an upstream repository would fail, and none is made.

What is proven: the provider rendered the Kueue chart pulled from the imported OCI chart mirror (the
registry's log shows helm's manifest and blob requests for ``charts/kueue``) and applied it, with the Kueue
CRDs the render read from the imported bundle, whose live specs are those files'. What is not: that the Kueue
Deployment becomes Ready (no container runs on this control plane; the Chart is ``skipAwait``, as in the
test this program comes from), and that its image is pulled (its reference names the mirror with the locked
digest; no kubelet pulls here).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.airgap import MIRROR_HOST, SOURCE_HOST, SOURCE_PREFIX, airgap_overlay, fill_source, registry_catalog, write_stack
from tests.cluster.conftest import private_cluster, tools_problem
from tests.cluster.test_chart_crds_owned_once import STACK, engine_env, pulumi, run_dir
from tests.conftest import ROOT
from tests.oci_registry import CRANE, serve_registry
from trainyard import catalog
from trainyard.manifests.crds import git_blob_sha
from trainyard.project import open_stack
from trainyard.supply.bom import build_bom
from trainyard.supply.lock import load_lock

pytestmark = pytest.mark.cluster

TRAINYARD = ROOT / ".venv" / "bin" / "trainyard"
KUEUE = catalog.release("kueue", catalog.DEFAULT_VERSIONS["kueue"])
CLOSED_PROXY = "http://127.0.0.1:9"


@dataclass(frozen=True)
class AirgapUp:
    outputs: dict[str, str]
    returncode: int
    output: str
    seconds: float
    resources: list[dict[str, Any]]
    live_crds: dict[str, Any]
    deployment: dict[str, Any] | None
    mirror_log: str
    bundle: Path
    digests: dict[str, str]
    lock: Path


def trainyard(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINYARD), *args], capture_output=True, text=True, check=False, cwd=ROOT, env=env,
                          timeout=900)


@pytest.fixture(scope="module")
def airgap_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirgapUp]:
    problem = tools_problem("etcd", "kube-apiserver", "pulumi", "pulumi-kubernetes")
    if problem is not None:
        pytest.skip(problem)
    if not CRANE.is_file():
        pytest.skip(f"crane not built ({CRANE}): run `make tools` (tools/build.sh crane)")
    base = tmp_path_factory.mktemp("airgap-up")
    outputs: dict[str, str] = {}
    with serve_registry(base / "source.log") as source, serve_registry(base / "mirror.log") as mirror:
        # The connected side.
        lock = base / "images.lock.yaml"
        shutil.copy(ROOT / "images.lock.yaml", lock)
        (base / "connected").mkdir()
        connected = write_stack(base / "connected", airgap_overlay(), lock)
        digests = fill_source(source, build_bom(open_stack(str(connected))), base / "layers")
        archive = base / "local-airgap.tar"
        done = trainyard("bom", str(connected), "--export", str(archive), "--from", SOURCE_PREFIX,
                         "--endpoint", f"{SOURCE_HOST}=http://{source.address}", "--insecure")
        outputs["export"] = done.stderr + done.stdout
        assert done.returncode == 0, outputs["export"]

        # The air-gapped side: nothing but the empty mirror, the empty bundle and the archive.
        bundle = base / "crd-bundle"
        bundle.mkdir()
        assert registry_catalog(mirror) == []
        (base / "site").mkdir()
        site = write_stack(base / "site", airgap_overlay(
            {"source": "mirror", "mirror_dir": str(bundle)},
            {"mirror": f"oci://{mirror.address}/charts", "plain_http": True}), lock)
        endpoint = ["--endpoint", f"{MIRROR_HOST}=http://{mirror.address}", "--insecure"]
        done = trainyard("bom", str(site), "--import", str(archive), *endpoint)
        outputs["import"] = done.stderr + done.stdout
        assert done.returncode == 0, outputs["import"]
        for step in (("images", "lock", str(site), *endpoint), ("images", "verify", str(site))):
            done = trainyard(*step)
            outputs[" ".join(step[:2])] = done.stderr + done.stdout
            assert done.returncode == 0, done.stderr + done.stdout

        before_up = len((base / "mirror.log").read_text(errors="replace"))
        with private_cluster(base / "cluster", with_fake_nodes=False) as cluster:
            env = engine_env(cluster, base, site)
            # Only the site's mirrors: the connected side's CRD and chart mirrors are not there, and the network
            # beyond loopback is a closed port.
            env.update({"TRAINYARD_CRDS_DIR": str(base / "no-crds-here"), "TRAINYARD_CHARTS_DIR": str(base / "no-charts-here"),
                        "HTTPS_PROXY": CLOSED_PROXY, "HTTP_PROXY": CLOSED_PROXY, "https_proxy": CLOSED_PROXY,
                        "http_proxy": CLOSED_PROXY, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
            run = run_dir(base, site, None, "trainyard")
            for args in (("login", env["PULUMI_BACKEND_URL"]),
                         ("stack", "select", "--create", "--secrets-provider", "passphrase", STACK)):
                done_pulumi = pulumi(run, env, *args)
                assert done_pulumi.returncode == 0, done_pulumi.stdout + done_pulumi.stderr
            start = time.monotonic()
            up = pulumi(run, env, "up", "--yes", "--skip-preview", "--stack", STACK)
            seconds = time.monotonic() - start
            listed = cluster.kubectl("get", "crd", "-o", "json", check=False)
            live = {c["metadata"]["name"]: c for c in json.loads(listed.stdout or '{"items": []}')["items"]}
            found = cluster.kubectl("get", "deployment", "-n", "kueue-system", "kueue-controller-manager", "-o", "json",
                                    check=False)
            deployment = json.loads(found.stdout) if found.returncode == 0 else None
        mirror_log = (base / "mirror.log").read_text(errors="replace")[before_up:]
    (base / "pulumi-up.log").write_text(up.stdout + up.stderr)
    state_file = base / "state" / ".pulumi" / "stacks" / "trainyard" / f"{STACK}.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"checkpoint": {"latest": {}}}
    shutil.rmtree(base / "cluster", ignore_errors=True)
    yield AirgapUp(outputs, up.returncode, up.stdout + up.stderr, seconds,
                   state["checkpoint"]["latest"].get("resources") or [], live, deployment, mirror_log, bundle, digests,
                   lock)


@pytest.fixture
def up(airgap_up: AirgapUp) -> AirgapUp:
    if airgap_up.returncode != 0:
        pytest.fail(f"pulumi up exited {airgap_up.returncode}:\n{airgap_up.output[-6000:]}")
    return airgap_up


def test_pulumi_up_installs_the_chart_from_the_imported_oci_mirror(up: AirgapUp, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        for step, text in up.outputs.items():
            print(f"\n--- trainyard {step} ---\n{text.strip()}")
        print(f"\n--- pulumi up ({up.seconds:.1f}s) ---\n" + "\n".join(up.output.strip().splitlines()[-14:]))
    (chart,) = [r for r in up.resources if r["type"] == "kubernetes:helm.sh/v4:Chart"]
    children = [r for r in up.resources if r.get("parent") == chart["urn"]]
    assert {r["type"].rsplit(":", 1)[-1] for r in children} >= {"Deployment", "ValidatingWebhookConfiguration"}
    assert up.deployment is not None, "the chart's Deployment is not on the cluster"
    # Helm fetched the chart from the imported mirror during the up (the registry's request log).
    assert "/v2/charts/kueue/manifests/0.19.2" in up.mirror_log, up.mirror_log[-3000:]
    # The chart's image names the site's mirror, pinned by the digest the import pushed and the lock recorded.
    (container,) = [c for c in up.deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "manager"]
    reference = f"{MIRROR_HOST}/mirror/kueue/kueue:v0.19.2"
    assert container["image"] == f"{reference}@{up.digests[reference]}"
    assert load_lock(up.lock).entries[reference].digest == up.digests[reference]


def test_the_kueue_crds_on_the_cluster_are_the_imported_bundles_files(up: AirgapUp) -> None:
    for crd in KUEUE.crds:
        content = (up.bundle / "kueue" / f"v{KUEUE.version}" / crd.name).read_bytes()
        assert git_blob_sha(content) == crd.blob_sha, crd.name
        upstream = yaml.safe_load(content)
        assert up.live_crds[upstream["metadata"]["name"]]["spec"]["versions"] == upstream["spec"]["versions"], crd.name
