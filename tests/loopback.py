"""Test servers on loopback: a free port, a tool binary from the tools cache, a process that is stopped
afterwards, and waiting until it answers a real request (tests/seaweedfs.py, tests/minio_server.py)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tool_binary(setting: str, name: str) -> Path | None:
    """``$setting`` (a binary built elsewhere), else the one ``tools/build.sh`` caches, else PATH."""
    if os.environ.get(setting):
        return Path(os.environ[setting])
    tools = Path(os.environ.get("TRAINYARD_TOOLS_DIR", Path.home() / ".cache" / "trainyard" / "tools"))
    candidate = tools / "bin" / name
    found = candidate if candidate.is_file() else shutil.which(name)
    return Path(found) if found else None


@contextmanager
def running(args: Sequence[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``args`` running with its output in ``log``; terminated (killed after 30 s) on exit."""
    with log.open("wb") as out:
        proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def until_ready(name: str, attempt: Callable[[], object], proc: subprocess.Popen[bytes], log: Path,
                timeout: float = 180) -> None:
    """Repeat ``attempt`` (a real request) until it succeeds; fail with the server's log if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            attempt()
            return
        except Exception as exc:
            if proc.poll() is not None or time.monotonic() > deadline:
                detail = getattr(exc, "stderr", None) or exc
                raise RuntimeError(f"{name} did not answer ({detail}):\n{log.read_text(errors='replace')[-3000:]}") from None
            time.sleep(1)
