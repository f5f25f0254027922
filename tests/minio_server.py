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
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests import loopback
from tests.loopback import free_port


def minio_binary() -> Path | None:
    """``TRAINYARD_MINIO`` (a minio built elsewhere), else the one ``tools/build.sh minio`` caches, else PATH."""
    return loopback.tool_binary("TRAINYARD_MINIO", "minio")


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
    with loopback.running(args, log, cwd=work, env=env) as proc:
        yield f"http://127.0.0.1:{port}", proc, log


def until_ready(attempt: Callable[[], object], proc: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    """Repeat ``attempt`` (a real S3 request) until it succeeds; fail with the server's log if it never does."""
    loopback.until_ready("minio", attempt, proc, log, timeout)
