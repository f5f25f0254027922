"""The loop of a rehearsal host process that looks at the API server every few seconds (the cert-manager stand-in,
``cert_standin.py``; the local volume provisioner, ``local_provisioner.py``): its pki check, its passes, its stop.

Each such process is started by the rehearsal as ``python -m trainyard.rehearsal.<module> --server URL --pki DIR ...``
with a client certificate of its own in the cluster's ``pki/`` directory (``ApiClient``), logs one line per thing it
did, survives a failed pass (the next one retries), and stops on SIGTERM or SIGINT between two passes.
"""

from __future__ import annotations

import argparse
import signal
import time
from collections.abc import Callable
from pathlib import Path

from trainyard.rehearsal.api_client import ApiClient


def arguments(module: str, description: str, interval: float) -> argparse.ArgumentParser:
    """The options every such process takes (``--server``, ``--pki``, ``--interval``, ``--once``); add its own."""
    parser = argparse.ArgumentParser(prog=f"python -m trainyard.rehearsal.{module}", description=description)
    parser.add_argument("--server", required=True, help="the rehearsal's API server, https://127.0.0.1:PORT")
    parser.add_argument("--pki", required=True, type=Path, help="the rehearsal cluster's pki/ directory")
    parser.add_argument("--interval", type=float, default=interval, help="seconds between two passes")
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    return parser


def client(server: str, pki: Path, client_cert: str, user_agent: str) -> ApiClient:
    """The process's client: its own certificate ``pki/<client_cert>.crt``, the cluster's CA, a loopback server only."""
    return ApiClient.from_files(server, pki / "ca.crt", pki / f"{client_cert}.crt", pki / f"{client_cert}.key",
                                user_agent=user_agent)


def missing_pki(pki: Path, client_cert: str) -> list[str]:
    """The files of the cluster's CA and of ``client_cert`` that ``pki`` lacks (none: it is a rehearsal cluster's)."""
    return [str(pki / f) for f in ("ca.crt", f"{client_cert}.crt", f"{client_cert}.key") if not (pki / f).exists()]


def stop_on_signals() -> Callable[[], bool]:
    """Install SIGTERM and SIGINT handlers; the returned function says whether one arrived."""
    stopping = [False]

    def stop(*_: object) -> None:
        stopping[0] = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return lambda: stopping[0]


def run_passes(pass_once: Callable[[], list[str]], interval: float, stop: Callable[[], bool],
               log: Callable[[str], None], retried: tuple[type[Exception], ...]) -> None:
    """``pass_once`` every ``interval`` seconds until ``stop()``, each line it returns logged; a pass that raises one
    of ``retried`` is logged and tried again at the next interval."""
    while not stop():
        try:
            for line in pass_once():
                log(line)
        except retried as error:
            log(f"pass failed, next in {interval:g}s: {error}")
        deadline = time.monotonic() + interval
        while not stop() and time.monotonic() < deadline:
            time.sleep(0.2)
