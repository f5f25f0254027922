"""Background processes of one rehearsal cluster, by name, tracked by pid file.

Processes run in their own session (a Ctrl-C in the calling shell does not stop them) and are
tracked by pid file in the cluster's ``run/`` directory, their output in ``logs/``; ``stop`` ends
exactly those pids.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from trainyard.rehearsal.settings import HOST, Settings


class Processes:
    """Background processes of one cluster, by name: pid file in run/, log in logs/."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _pid_file(self, name: str) -> Path:
        return self.settings.run_dir / f"{name}.pid"

    def pid(self, name: str) -> int | None:
        try:
            return int(self._pid_file(name).read_text().strip())
        except (OSError, ValueError):
            return None

    def running(self, name: str) -> bool:
        pid = self.pid(name)
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        # A zombie (exited, not yet reaped by us) is not running.
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
                return False
        return True

    def start(self, name: str, args: list[str], env: Mapping[str, str] | None = None) -> None:
        if self.running(name):
            return
        self.settings.logs.mkdir(parents=True, exist_ok=True)
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        log = (self.settings.logs / f"{name}.log").open("ab")
        with log:
            process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,  # noqa: S603 - our built binaries
                                       env={**os.environ, **(env or {})}, start_new_session=True)
        self._pid_file(name).write_text(f"{process.pid}\n")
        print(f"    started {name} (pid {process.pid}, log {self.settings.logs / (name + '.log')})", flush=True)

    def stop(self, name: str, grace: float = 10) -> None:
        pid = self.pid(name)
        if pid is not None and self.running(name):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.running(name) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.1)
            if self.running(name):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            _reap(pid)
            print(f"    stopped {name} (pid {pid})", flush=True)
        self._pid_file(name).unlink(missing_ok=True)

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.settings.logs / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0
