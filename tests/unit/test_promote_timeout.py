"""``trainyard promote`` against a registry that cannot be reached, or that never answers: a clean error within the
``--timeout``, exit 2, no traceback (MLflow's client alone retries for many minutes)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT


def promote(uri: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = str(ROOT / "platform")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "trainyard.cli", "promote", "prod", "--tenant", "assistant",
                           "--model", "m", "--version", "1", "--tracking-uri", uri, *extra],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False)
    return done, time.monotonic() - started


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_an_address_nothing_listens_on_is_named_at_once_with_exit_2() -> None:
    with socket.socket() as probe:  # a free port: bound, then released
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done, _ = promote(f"http://127.0.0.1:{port}")
    assert done.returncode == 2
    assert f"error: --tracking-uri http://127.0.0.1:{port}: cannot reach 127.0.0.1:{port} within 30 s" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_registry_that_never_answers_ends_after_the_timeout(silent_server: str) -> None:
    done, took = promote(silent_server, "--timeout", "1")
    assert done.returncode == 2
    assert done.stderr.startswith("error: model registry: ") and "Traceback" not in done.stderr
    assert took < 30  # one request and one retry of 1 s each, plus start-up; MLflow's defaults wait 15 minutes


def test_the_timeout_is_a_positive_number_of_seconds() -> None:
    done, _ = promote("http://127.0.0.1:1", "--timeout", "0")
    assert done.returncode == 2 and "--timeout: '0': give more than 0 and at most 3600 seconds" in done.stderr
