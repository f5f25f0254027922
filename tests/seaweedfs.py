"""One way to run a real SeaweedFS S3 server in the tests: ``weed mini`` on loopback, every port free.

``weed`` is built from Go modules by ``tools/build.sh seaweedfs`` (``make tools``). ``weed mini``'s
defaults (master 9333, volume 8080, filer 8888 and their gRPC ports) would collide with any other
server on the machine, so every port is chosen here. Its S3 port answers before the filer is ready:
callers wait with ``until_ready`` on a real request.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests import loopback
from tests.loopback import free_port


def weed_binary() -> Path | None:
    """``TRAINYARD_WEED`` (a weed built elsewhere), else the one ``tools/build.sh seaweedfs`` caches, else PATH."""
    return loopback.tool_binary("TRAINYARD_WEED", "weed")


@contextmanager
def weed_mini(work: Path, identities_json: str) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """A running ``weed mini`` with ``identities_json`` as its ``-s3.config``: (endpoint, process, log file)."""
    weed = weed_binary()
    assert weed is not None, "weed is not built (run `make tools` or tools/build.sh seaweedfs)"
    work.mkdir(parents=True, exist_ok=True)
    config = work / "s3.json"
    config.write_text(identities_json)
    config.chmod(0o600)
    (work / "data").mkdir(exist_ok=True)
    s3_port = free_port()
    ports = {"master.port": free_port(), "volume.port": free_port(), "filer.port": free_port()}
    args = [str(weed), "mini", f"-dir={work / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.port={s3_port}", f"-s3.config={config}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-webdav=false", "-admin.ui=false", "-master.telemetry=false",
            *(f"-{flag}={port}" for flag, port in ports.items()),
            *(f"-{flag}.grpc={free_port()}" for flag in ports)]
    log = work / "weed.log"
    with loopback.running(args, log, cwd=work) as proc:
        yield f"http://127.0.0.1:{s3_port}", proc, log


def until_ready(attempt: Callable[[], object], proc: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    """Repeat ``attempt`` (a real S3 request) until it succeeds; fail with the server's log if it never does."""
    loopback.until_ready("weed", attempt, proc, log, timeout)
