"""The rehearsal's monitoring images (``rehearsal/prometheus_images.py``) from the real binaries, against a real registry.

Built twice in two empty cache directories (the same digests), once more from the cache, pushed under the mirror names
of the rehearsal's stack to ``crane registry serve`` on loopback, and read back by crane: the digest, the runtime config
(entrypoint, numeric user, the stand-in's labels) and the flattened filesystem (each binary where upstream's Dockerfile
puts it, byte for byte; Prometheus's data directory owned by nobody).

Needs crane, prometheus-operator, prometheus and promtool (`tools/build.sh crane prometheus-operator prometheus
promtool`); skips, saying so, without them. Timings are printed (``-s``), not asserted.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, needs_crds
from tests.oci_registry import CRANE, TOOLS_DIR, Registry, serve_registry
from trainyard.project import open_stack
from trainyard.rehearsal import factory, prometheus_images
from trainyard.rehearsal.stack import InCluster, write_rehearsal_stack

pytestmark = [pytest.mark.registry, needs_crds]
BINARIES = ("prometheus-operator", "prometheus-config-reloader", "prometheus", "promtool")
# Where each binary lies in its image (the Dockerfiles' COPY lines).
PATHS = {prometheus_images.OPERATOR: {"bin/operator": "prometheus-operator"},
         prometheus_images.RELOADER: {"bin/prometheus-config-reloader": "prometheus-config-reloader"},
         prometheus_images.PROMETHEUS: {"bin/prometheus": "prometheus", "bin/promtool": "promtool"}}


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    missing = [str(p) for p in (CRANE, *(TOOLS_DIR / "bin" / b for b in BINARIES)) if not p.is_file()]
    if missing:
        pytest.skip(f"not built: {', '.join(missing)}: run `tools/build.sh crane prometheus-operator prometheus promtool`")
    with serve_registry(tmp_path_factory.mktemp("registry") / "registry.log") as running:
        yield running


def test_the_monitoring_images_are_reproducible_and_pushed_under_the_operators_names(
        registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack_file = tmp_path / "Pulumi.rehearsal.yaml"
    write_rehearsal_stack(ROOT / "stacks" / "Pulumi.local.yaml", stack_file,
                          {"monitoring": {"enabled": True}, "security": {"network": {"metrics_from": ["monitoring"]}}},
                          in_cluster=InCluster(("kueue",), tmp_path / "lock.yaml", registry.address))
    config = open_stack(str(stack_file)).config
    timings = {}
    started = time.monotonic()
    built = prometheus_images.build(config, TOOLS_DIR, tmp_path / "cache-one")
    timings["cold build (3 images)"] = time.monotonic() - started
    started = time.monotonic()
    again = prometheus_images.build(config, TOOLS_DIR, tmp_path / "cache-two")
    timings["cold build in a second directory"] = time.monotonic() - started
    assert {r: b.digest for r, b in again.items()} == {r: b.digest for r, b in built.items()}  # reproducible
    started = time.monotonic()
    warm = prometheus_images.build(config, TOOLS_DIR, tmp_path / "cache-one")
    timings["warm build (from the cache)"] = time.monotonic() - started
    assert all(b.cached for b in warm.values()) and {r: b.digest for r, b in warm.items()} == \
        {r: b.digest for r, b in built.items()}
    started = time.monotonic()
    factory.push_images(list(built.values()), registry.address)
    timings["push to the loopback registry"] = time.monotonic() - started
    with capsys.disabled():
        for step, seconds in timings.items():
            print(f"{step}: {seconds:.2f}s")

    for role, image in built.items():
        assert image.target.registry == "trainyard.local" and str(image.upstream).startswith("quay.io/")
        pulled = f"{registry.address}/{image.target.repository}:{image.target.tag}"
        assert registry.crane("digest", "--insecure", pulled) == image.digest
        runtime = json.loads(registry.crane("config", "--insecure", pulled))["config"]
        assert runtime["User"] == "65534"
        exported = subprocess.run([str(CRANE), "export", "--insecure", pulled, "-"], capture_output=True, check=True,
                                  timeout=120).stdout
        with tarfile.open(fileobj=io.BytesIO(exported)) as flat:
            members = {m.name: m for m in flat.getmembers()}
            for path, binary in PATHS[role].items():
                inside = flat.extractfile(path)
                assert inside is not None
                assert hashlib.sha256(inside.read()).digest() == \
                    hashlib.sha256((TOOLS_DIR / "bin" / binary).read_bytes()).digest()
            assert {"bin/sh", "bin/busybox", "etc/passwd"} <= set(members)  # upstream's busybox base
        size = sum(p.stat().st_size for p in image.layout.rglob("*") if p.is_file())
        with capsys.disabled():
            print(f"{image.reference} ({size / 1e6:.1f} MB uncompressed){'; ' + image.note if image.note else ''}")
        if role == prometheus_images.PROMETHEUS:
            assert runtime["Entrypoint"] == ["/bin/prometheus"] and runtime["WorkingDir"] == "/prometheus"
            assert runtime["Labels"]["dev.trainyard.stands-in-for"] == "quay.io/prometheus/prometheus:v3.13.1"
            assert runtime["Labels"]["org.opencontainers.image.version"] == "3.16.0"
            data = members["prometheus"]
            assert (data.uid, data.gid, data.mode & 0o777) == (65534, 65534, 0o775)
        else:
            assert runtime["Entrypoint"] == ["/" + next(iter(PATHS[role]))]
            assert "dev.trainyard.stands-in-for" not in runtime["Labels"]
