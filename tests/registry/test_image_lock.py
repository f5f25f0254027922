"""The image lock against a real OCI registry on loopback: go-containerregistry's ``crane registry serve``.

Small images built from a one-file tarball (``crane append``, no Docker) are pushed under the
prod stack's mirror names, one of them as a multi-platform index; ``trainyard images lock prod``
then asks the registry (``--endpoint registry.trainyard.internal=http://127.0.0.1:PORT``) and
must write exactly the digests ``crane digest`` reports. A second run goes through a bearer
token gate in front of the same registry, with credentials from the environment.

Needs the ``crane`` binary from ``make tools`` (``tools/build.sh crane``); skips, saying so, without it.
"""

from __future__ import annotations

import base64
import http.server
import json
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, needs_crds, stack
from tests.oci_registry import CRANE, Registry, serve_registry
from trainyard.cli import main
from trainyard.supply.bom import build_bom, lock_references
from trainyard.supply.lock import load_lock

pytestmark = [pytest.mark.registry, needs_crds]
MIRROR_HOST = "registry.trainyard.internal"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    if not CRANE.is_file():
        pytest.skip(f"crane not built ({CRANE}): run `make tools` (tools/build.sh crane)")
    with serve_registry(tmp_path_factory.mktemp("registry") / "registry.log") as running:
        yield running


@pytest.fixture(scope="module")
def mirrored(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Push one small image for every image of the prod BOM, under its mirror name; reference -> crane digest."""
    work = tmp_path_factory.mktemp("images")
    digests = {}
    refs = lock_references(build_bom(stack("prod")))
    for index, ref in enumerate(refs):
        if index == 0:
            # A multi-platform index: the lock must hold the index digest, not one platform's.
            target = f"{registry.address}/{ref.repository}:{ref.tag}"
            children = [f"{registry.address}/{ref.repository}:{ref.tag}-{arch}" for arch in ("amd64", "arm64")]
            for arch in ("amd64", "arm64"):
                registry.push(ref, work, f"{ref} {arch}", tag=f"{ref.tag}-{arch}")
            registry.crane("index", "append", "--insecure", "-t", target, *[f"-m={c}" for c in children])
            digests[ref.tagged] = registry.crane("digest", "--insecure", target)
        else:
            digests[ref.tagged] = registry.push(ref, work)
    return digests


def _prod_stack_with_lock(tmp_path: Path) -> Path:
    """A copy of the prod stack whose images.lock_file is a copy of the committed lock (placeholders)."""
    lock = tmp_path / "images.lock.yaml"
    shutil.copy(ROOT / "images.lock.yaml", lock)
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    doc["config"]["trainyard:platform"]["images"]["lock_file"] = str(lock)
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_lock_fills_the_digests_the_registry_reports(registry: Registry, mirrored: dict[str, str], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    stack_file = _prod_stack_with_lock(tmp_path)
    assert main(["images", "verify", str(stack_file)]) == 1  # placeholders: prod refuses them
    assert main(["images", "lock", str(stack_file), "--endpoint", f"{MIRROR_HOST}=http://{registry.address}",
                 "--insecure"]) == 0
    out = capsys.readouterr().out
    print(out)
    lock = load_lock(tmp_path / "images.lock.yaml")
    for reference, digest in mirrored.items():
        assert lock.entries[reference].digest == digest, reference
        assert lock.entries[reference].source == "registry"
    assert main(["images", "verify", str(stack_file)]) == 0
    # Entries of other stacks (local pulls upstream) are kept, not dropped.
    assert "registry.k8s.io/kueue/kueue:v0.19.2" in lock.entries


def test_a_refresh_that_cannot_resolve_every_image_changes_nothing(registry: Registry, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    stack_file = _prod_stack_with_lock(tmp_path)
    before = (tmp_path / "images.lock.yaml").read_text()
    empty_path = f"http://{registry.address}/nothing-here"  # every manifest 404s under this prefix
    assert main(["images", "lock", str(stack_file), "--endpoint", f"{MIRROR_HOST}={empty_path}", "--insecure"]) == 1
    assert "not found in the registry" in capsys.readouterr().err
    assert (tmp_path / "images.lock.yaml").read_text() == before


def test_plain_http_needs_insecure(registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack_file = _prod_stack_with_lock(tmp_path)
    assert main(["images", "lock", str(stack_file), "--endpoint", f"{MIRROR_HOST}=http://{registry.address}"]) == 1
    assert "pass --insecure" in capsys.readouterr().err


class TokenGate(http.server.BaseHTTPRequestHandler):
    """A registry front door that wants a bearer token (issued at /token for basic credentials), then proxies."""

    upstream = ""
    user, password, token = "mirror-bot", "s3cret-for-test", "t0ken"
    seen_token_requests: list[str] = []

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def _handle(self) -> None:
        if self.path.startswith("/token"):
            expected = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            self.seen_token_requests.append(self.path)
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.end_headers()
                return
            body = json.dumps({"token": self.token}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            host = self.headers.get("Host")
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="http://{host}/token",service="test-registry"')
            self.end_headers()
            return
        request = urllib.request.Request(self.upstream + self.path, method=self.command,
                                         headers={"Accept": self.headers.get("Accept", "")})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body, status, headers = response.read(), response.status, response.headers
        except urllib.error.HTTPError as exc:
            body, status, headers = b"", exc.code, exc.headers
        self.send_response(status)
        for key in ("Content-Type", "Docker-Content-Digest", "Content-Length"):
            if headers.get(key):
                self.send_header(key, headers[key])
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_lock_follows_the_bearer_token_flow_with_credentials_from_the_environment(
        registry: Registry, mirrored: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    TokenGate.upstream = f"http://{registry.address}"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TokenGate)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        gate = f"http://127.0.0.1:{server.server_address[1]}"
        stack_file = _prod_stack_with_lock(tmp_path)
        args = ["images", "lock", str(stack_file), "--endpoint", f"{MIRROR_HOST}={gate}", "--insecure"]
        assert main(args) == 1  # no credentials: the token endpoint refuses
        assert "token endpoint" in capsys.readouterr().err
        monkeypatch.setenv("TRAINYARD_REGISTRY_USERNAME", TokenGate.user)
        monkeypatch.setenv("TRAINYARD_REGISTRY_PASSWORD", TokenGate.password)
        assert main(args) == 0
        out = capsys.readouterr()
        assert TokenGate.password not in out.out + out.err
    finally:
        server.shutdown()
        thread.join(timeout=5)
    lock = load_lock(tmp_path / "images.lock.yaml")
    assert {ref: lock.entries[ref].digest for ref in mirrored} == mirrored
    assert any("scope=repository%3Amirror%2Fkueue%2Fkueue%3Apull" in path for path in TokenGate.seen_token_requests)
