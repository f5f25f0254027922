"""Cluster tier: a private local control plane for the test session.

The control plane is the one ``tools/cluster.sh`` runs (etcd, kube-apiserver and
kube-controller-manager built from Go modules by ``tools/build.sh``), started with its own
state directory in the session's tmp dir and on free loopback ports other than the defaults,
so it never touches a cluster a person started with ``make up``. It carries the local stack's
fake GPU nodes and is stopped and purged at the end of the session.

Every test here skips, saying why, when the tools are not built (``tools/build.sh --check``
fails) or when the upstream CRD mirror is absent.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CRDS_DIR, ROOT

TOOLS_DIR = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools")
BIN_DIR = TOOLS_DIR / "bin"
CLUSTER_SH = ROOT / "tools" / "cluster.sh"
# tools/cluster.sh's defaults (etcd client, etcd peer, kube-apiserver, kube-controller-manager):
# the private control plane never uses them.
DEFAULT_PORTS = frozenset({23791, 23801, 26443, 26257})
PORT_VARS = ("TRAINYARD_ETCD_PORT", "TRAINYARD_ETCD_PEER_PORT", "TRAINYARD_APISERVER_PORT", "TRAINYARD_KCM_PORT")
TRAINYARD = Path(sys.executable).parent / "trainyard"
QUOTA_SYNC_PERIOD = "15s"


def tools_problem(*tools: str) -> str | None:
    """Why the cluster tier (or a test needing only ``tools``, e.g. "etcd", "kube-apiserver") cannot run here, or None."""
    if CRDS_DIR is None:
        return "upstream CRD mirror not found: set TRAINYARD_CRDS_DIR (default ../shared/crds)"
    check = subprocess.run([str(ROOT / "tools" / "build.sh"), "--check", *tools], capture_output=True, text=True,
                           check=False)
    if check.returncode != 0:
        missing = ", ".join(line.split(": ", 1)[-1] for line in check.stderr.splitlines() if line.startswith("stale"))
        return f"platform tools not built ({missing or check.stderr.strip()}): run `make tools` (tools/build.sh, ~27 min cold)"
    return None


def free_ports(count: int) -> list[int]:
    """Loopback ports that are free now and are not tools/cluster.sh's defaults."""
    ports: list[int] = []
    sockets = []
    try:
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
            port = sock.getsockname()[1]
            if port not in DEFAULT_PORTS:
                ports.append(port)
    finally:
        for sock in sockets:
            sock.close()
    return ports


@dataclass(frozen=True)
class Cluster:
    """A running private control plane and the environment that reaches it."""

    state_dir: Path
    env: dict[str, str]

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(BIN_DIR / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
                                input=stdin, capture_output=True, text=True, env=self.env, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)


@contextmanager
def private_cluster(state_dir: Path, with_fake_nodes: bool = True) -> Iterator[Cluster]:
    """A control plane of our own (state in ``state_dir``, free ports), stopped and purged afterwards."""
    env = {**os.environ, "TRAINYARD_CLUSTER_DIR": str(state_dir), "TRAINYARD_TOOLS_DIR": str(TOOLS_DIR),
           "TRAINYARD_CRDS_DIR": str(CRDS_DIR)}
    env.update(zip(PORT_VARS, map(str, free_ports(len(PORT_VARS))), strict=True))
    # The quota controller counts TrainJobs (count/trainjobs... in the tenant ResourceQuota) only
    # after it has discovered their CRD, and recounts a quota it synced before that only every
    # sync period (5m by default): short here, so admission tests need not wait minutes.
    env["TRAINYARD_QUOTA_SYNC_PERIOD"] = QUOTA_SYNC_PERIOD
    args = [str(CLUSTER_SH), "up"]
    if with_fake_nodes:
        nodes = state_dir / "fake-nodes.yaml"
        nodes.write_text(subprocess.run([str(TRAINYARD), "fake-nodes", "local"], capture_output=True, text=True,
                                        cwd=ROOT, env=env, check=True).stdout)
        args += ["--nodes", str(nodes)]
    up = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, check=False)
    try:
        if up.returncode != 0:
            raise AssertionError(f"tools/cluster.sh up failed ({up.returncode}):\n{up.stderr}")
        yield Cluster(state_dir=state_dir, env=env)
    finally:
        subprocess.run([str(CLUSTER_SH), "down", "--purge"], capture_output=True, text=True, env=env, timeout=120,
                       check=False)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    problem = tools_problem()
    if problem is not None:
        pytest.skip(problem)
    with private_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running
