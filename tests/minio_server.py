"""One way to run a real MinIO server in the tests: ``minio server`` on loopback, every port free.

``minio`` is built from its Go module by ``tools/build.sh minio`` (a test server only: MinIO is
AGPL-3.0 and is never shipped or linked into Trainyard, docs/tools.md). It serves S3 and the admin
API on one port and its console on another; both are chosen here, on 127.0.0.1. The root user is
the caller's (``MINIO_ROOT_USER``/``MINIO_ROOT_PASSWORD``, as the operator's ``config.env`` sets
them). Callers wait with ``until_ready`` on a real request. (Not ``tests/minio.py``: that name would
shadow the minio SDK for anything that puts ``tests/`` on ``sys.path``.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.seaweedfs import free_port


def minio_binary() -> Path | None:
    """``TRAINYARD_MINIO`` (a minio built elsewhere), else the one ``tools/build.sh minio`` caches, else PATH."""
    if os.environ.get("TRAINYARD_MINIO"):
        return Path(os.environ["TRAINYARD_MINIO"])
    tools = Path(os.environ.get("TRAINYARD_TOOLS_DIR", Path.home() / ".cache" / "trainyard" / "tools"))
    candidate = tools / "bin" / "minio"
    found = candidate if candidate.is_file() else shutil.which("minio")
    return Path(found) if found else None


@contextmanager
def minio_server(work: Path, root_user: str, root_password: str) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """A running single-drive ``minio server`` with that root user: (endpoint, process, log file)."""
    minio = minio_binary()
    assert minio is not None, "minio is not built (run tools/build.sh minio)"
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    port, console = free_port(), free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work),
           "MINIO_ROOT_USER": root_user, "MINIO_ROOT_PASSWORD": root_password,
           # No phoning home, no update checks, no browser console: a quiet test server.
           "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", "MINIO_CALLHOME_ENABLE": "off"}
    args = [str(minio), "server", "--quiet", "--address", f"127.0.0.1:{port}",
            "--console-address", f"127.0.0.1:{console}", str(data)]
    log = work / "minio.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=work, env=env)
        try:
            yield f"http://127.0.0.1:{port}", proc, log
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def until_ready(attempt: Callable[[], object], proc: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    """Repeat ``attempt`` (a real S3 request) until it succeeds; fail with the server's log if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            attempt()
            return
        except Exception as exc:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"minio did not answer ({exc}):\n{log.read_text(errors='replace')[-3000:]}") from None
            time.sleep(1)
