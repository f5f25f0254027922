"""Test processes that run at once never get the same loopback port (tests/loopback.py ``free_port``): a port another
process reserved is skipped, a port this process already holds is not handed out twice, and a reservation ends with
the process that held it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import loopback

HOLD = """import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


class _Kernel:
    """socket.socket stand-in whose bind to port 0 yields the given ports in turn."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports

    def __call__(self, *_: Any) -> _Kernel:
        return self

    def __enter__(self) -> _Kernel:
        return self

    def __exit__(self, *_: Any) -> None:
        return None

    def bind(self, _: Any) -> None:
        self.port = self.ports.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def test_a_port_another_process_reserved_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loopback, "RESERVATIONS", tmp_path)
    monkeypatch.setattr(loopback, "_HELD", {})
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "40001")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(loopback.socket, "socket", _Kernel([40001, 40002]))
        assert loopback.free_port() == 40002
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone, and the kernel dropped its lock with it: the port can be handed out again.
    monkeypatch.setattr(loopback.socket, "socket", _Kernel([40001]))
    assert loopback.free_port() == 40001


def test_a_port_this_process_holds_or_excludes_is_not_handed_out_again(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loopback, "RESERVATIONS", tmp_path)
    monkeypatch.setattr(loopback, "_HELD", {})
    monkeypatch.setattr(loopback.socket, "socket", _Kernel([40010, 40010, 40011, 40012]))
    assert loopback.free_port() == 40010
    assert loopback.free_port(exclude={40011}) == 40012


def test_ports_are_handed_out_below_the_range_the_kernel_picks_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outgoing connections and servers on port 0 take ports of the ephemeral range, which no reservation covers."""
    import os

    monkeypatch.setattr(loopback, "RESERVATIONS", tmp_path)
    monkeypatch.setattr(loopback, "_HELD", {})
    low, high = loopback.ephemeral_ports()
    assert 0 < low <= high
    ports = [loopback.free_port() for _ in range(20)]
    try:
        assert len(set(ports)) == 20
        assert all(10000 <= port < low for port in ports), (ports, low)
    finally:
        for fd in loopback._HELD.values():
            os.close(fd)
