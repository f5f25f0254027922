"""A real OCI registry on loopback for tests: go-containerregistry's ``crane registry serve``.

Small images are built from a one-file tarball (``crane append``, no Docker) and pushed under the
names a stack pulls, so that ``trainyard images lock STACK --endpoint HOST=http://127.0.0.1:PORT``
asks a registry that really serves them (the registry tier, the cluster tier's protected stack).

Needs the ``crane`` binary from ``make tools`` (``tools/build.sh crane``).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trainyard.supply.reference import ImageRef

TOOLS_DIR = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools")
CRANE = TOOLS_DIR / "bin" / "crane"


@dataclass(frozen=True)
class Registry:
    address: str  # 127.0.0.1:PORT

    def crane(self, *args: str) -> str:
        return subprocess.run([str(CRANE), *args], check=True, capture_output=True, text=True, timeout=120).stdout.strip()

    def push(self, ref: ImageRef, work: Path, text: str | None = None, tag: str | None = None) -> str:
        """Push a one-layer image (content ``text``, default the reference) as ``ref``'s repository:tag here;
        return the digest the registry reports for it."""
        target = f"{self.address}/{ref.repository}:{tag or ref.tag}"
        self.crane("append", "--insecure", "-f", str(layer(work, text or str(ref))), "-t", target)
        return self.crane("digest", "--insecure", target)


def layer(directory: Path, text: str) -> Path:
    """A tarball holding one file with ``text``: the layer of a small test image."""
    name = hashlib.sha256(text.encode()).hexdigest()[:16]
    content = directory / f"hello-{name}.txt"
    content.write_text(text)
    path = directory / f"layer-{name}.tar"
    with tarfile.open(path, "w") as tar:
        tar.add(content, arcname="hello.txt")
    return path


@contextmanager
def serve_registry(log: Path) -> Iterator[Registry]:
    """``crane registry serve`` on a free loopback port (in-memory), stopped afterwards."""
    with log.open("w") as out:
        process = subprocess.Popen([str(CRANE), "registry", "serve", "--address", "127.0.0.1:0"], stdout=out, stderr=out)
    try:
        port = None
        for _ in range(100):
            match = re.search(r"serving on port (\d+)", log.read_text())
            if match:
                port = match.group(1)
                break
            time.sleep(0.1)
        assert port, f"crane registry did not start: {log.read_text()}"
        yield Registry(f"127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=10)
