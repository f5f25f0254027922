"""Test servers on loopback: a free port, a tool binary from the tools cache, a process that is stopped
afterwards, and waiting until it answers a real request (tests/seaweedfs.py, tests/minio_server.py)."""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# Ports this process reserved (lock file descriptors kept open until it exits): see ``free_port``.
RESERVATIONS = Path(os.environ.get("TRAINYARD_PORT_RESERVATIONS", "/tmp/trainyard-ports"))
_HELD: dict[int, int] = {}


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for ports it picks itself (``net.ipv4.ip_local_port_range``; Linux's default if unreadable)."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(exclude: Collection[int] = ()) -> int:
    """A loopback port that is free now and that no other test process on this machine is given until this one exits.

    "Free now" alone is a race between test processes that run at once (CI runs two cluster-tier workers, the node
    tier and the data-plane tiers side by side): each asks the kernel for a free port, closes it and starts a server
    on it later, so two of them could pick the same port in between, and one cluster failed to start ("port ... is in
    use by another process"). So each port handed out is also reserved: an exclusive ``flock`` on
    ``$TRAINYARD_PORT_RESERVATIONS/<port>`` (default ``/tmp/trainyard-ports``), held by this process until it exits
    (the kernel drops the lock with the process, so a killed test leaves no stale reservation).

    And it is taken below the kernel's ephemeral range (``ephemeral_ports``), which a reservation cannot cover: the
    kernel gives those to every outgoing connection and every server that binds port 0 (Pulumi's engine, provider
    and language host do), so a port handed out from it could be taken before its server started (a cold CI run:
    etcd's peer port "bind: address already in use" while the cluster tier ran beside the node tier)."""
    RESERVATIONS.mkdir(parents=True, exist_ok=True)
    low, _ = ephemeral_ports()
    below = range(10000, low) if low > 12000 else None
    for _ in range(1000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", random.choice(below) if below else 0))
            except OSError:  # in use
                continue
            port = int(s.getsockname()[1])
        if port in exclude or port in _HELD:
            continue
        fd = os.open(RESERVATIONS / str(port), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another test process holds it
            os.close(fd)
            continue
        _HELD[port] = fd
        return port
    raise RuntimeError(f"no free loopback port that is not reserved in {RESERVATIONS} after 1000 tries")


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
