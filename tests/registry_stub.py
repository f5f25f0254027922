"""A registry on loopback that answers only presence questions, for tests that need no real images.

``GET /v2/`` answers 200; ``HEAD``/``GET /v2/<name>/manifests/<tag or digest>`` answer 200 with
``Docker-Content-Digest`` for the references it holds, else 404 ``MANIFEST_UNKNOWN``, as the OCI distribution
spec (and go-containerregistry's ``pkg/registry/manifest.go``) do. It records every request, so a test sees what
was asked. The program and CLI tiers use it where the registry tier's real ``crane registry serve`` is not needed.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from trainyard.supply.reference import ImageRef


@dataclass
class StubRegistry:
    address: str = ""  # 127.0.0.1:PORT
    # "<repository>/manifests/<tag or digest>" -> the digest it serves
    manifests: dict[str, str] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hold(self, refs: Iterable[ImageRef]) -> None:
        """Serve each reference by its tag and by its digest (``registry/repository:tag@digest``)."""
        for ref in refs:
            digest = ref.digest or "sha256:" + "0" * 64
            if ref.tag:
                self.manifests[f"{ref.repository}/manifests/{ref.tag}"] = digest
            self.manifests[f"{ref.repository}/manifests/{digest}"] = digest

    def drop(self, ref: ImageRef) -> None:
        for key in (f"{ref.repository}/manifests/{ref.tag}", f"{ref.repository}/manifests/{ref.digest}"):
            self.manifests.pop(key, None)


def _handler(stub: StubRegistry) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer()

        def do_HEAD(self) -> None:
            self._answer()

        def _answer(self) -> None:
            with stub.lock:
                stub.requests.append((self.command, self.path))
            if self.path in ("/v2/", "/v2"):
                self._send(200, b"{}")
                return
            digest = stub.manifests.get(self.path.removeprefix("/v2/"))
            if digest is None:
                self._send(404, json.dumps({"errors": [{"code": "MANIFEST_UNKNOWN", "message": "Unknown manifest"}]})
                           .encode())
                return
            self._send(200, b"{}", {"Docker-Content-Digest": digest,
                                    "Content-Type": "application/vnd.oci.image.manifest.v1+json"})

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler


class _Server(http.server.ThreadingHTTPServer):
    # socketserver's default backlog is 5: eight concurrent connects would overflow it, and the kernel's SYN retry
    # (one second) would be all the check's time. A registry (Go's net/http) listens with the system's maximum.
    request_queue_size = 128


@contextmanager
def serve_stub(stub: StubRegistry | None = None) -> Iterator[StubRegistry]:
    """The stub on a free loopback port, stopped afterwards."""
    running = stub if stub is not None else StubRegistry()
    server = _Server(("127.0.0.1", 0), _handler(running))
    running.address = f"127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield running
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
