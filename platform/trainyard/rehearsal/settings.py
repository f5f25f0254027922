"""Where one rehearsal cluster lives and how it is reached: its state directory, tools, loopback ports.

State (certificates, etcd data, logs, pid files, kubeconfig, controller configs) lives in
``$TRAINYARD_CLUSTER_DIR`` (default ``~/.cache/trainyard/cluster``); every port comes from a
``TRAINYARD_*_PORT`` variable (``Ports``), so several clusters (a person's ``make up``, a test session,
another engineer) can run side by side.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from trainyard.rehearsal.kube import Kube

HOST = "127.0.0.1"
# What every real node carries (rehearsal/node.py), and what the rehearsal places controller pods by (stack.py).
REAL_NODE_LABELS = {"trainyard.dev/node": "real"}
CONTEXT = "trainyard-local"


class ClusterError(Exception):
    """The control plane could not be started or reached; says what to look at."""


@dataclass(frozen=True)
class Ports:
    """Every loopback port of one rehearsal cluster (``TRAINYARD_<FIELD>_PORT`` overrides each)."""

    etcd: int = 23791
    etcd_peer: int = 23801
    apiserver: int = 26443
    kcm: int = 26257
    scheduler: int = 26259
    kwok: int = 26247
    kueue_webhook: int = 29443
    kueue_health: int = 28081
    kueue_metrics: int = 28443
    jobset_webhook: int = 29444
    jobset_health: int = 28091
    trainer_webhook: int = 29445
    trainer_health: int = 28101
    # Real nodes (rehearsal/node.py): their loopback image registry, the kubelets' ports (each on its node's
    # address), kube-proxy's (rehearsal/proxy.py) and kube-router's health port (rehearsal/netpol.py).
    registry: int = 25000
    kubelet: int = 26250
    kubelet_healthz: int = 26248
    kube_proxy_healthz: int = 26256
    kube_proxy_metrics: int = 26249
    kube_router_health: int = 26244

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Ports:
        values = {}
        for f in fields(cls):
            variable = f"TRAINYARD_{f.name.upper()}_PORT"
            raw = env.get(variable, "")
            if raw:
                if not raw.isdigit() or not 0 < int(raw) < 65536:
                    raise ClusterError(f"{variable}={raw!r} is not a port number")
                values[f.name] = int(raw)
        return cls(**values)

    @staticmethod
    def variable(name: str) -> str:
        return f"TRAINYARD_{name.upper()}_PORT"


@dataclass(frozen=True)
class Settings:
    """Where one rehearsal cluster lives and how it is reached."""

    tools_dir: Path
    state_dir: Path
    ports: Ports
    # kube-controller-manager --resource-quota-sync-period (kube's default). See docs/rehearsal.md:
    # the rehearsal makes sure the quota controller knows TrainJobs before any tenant quota exists.
    quota_sync_period: str = "5m0s"
    ready_timeout: float = 120

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = Path.home() / ".cache" / "trainyard"
        return cls(
            tools_dir=Path(env.get("TRAINYARD_TOOLS_DIR") or home / "tools"),
            state_dir=Path(env.get("TRAINYARD_CLUSTER_DIR") or home / "cluster"),
            ports=Ports.from_env(env),
            quota_sync_period=env.get("TRAINYARD_QUOTA_SYNC_PERIOD") or "5m0s",
            ready_timeout=float(env.get("TRAINYARD_READY_TIMEOUT") or 120),
        )

    def binary(self, name: str) -> Path:
        return self.tools_dir / "bin" / name

    def share(self, tool: str) -> Path:
        """Manifests tools/build.sh copied from a controller's module (webhooks, CRDs, kwok stages)."""
        return self.tools_dir / "share" / tool

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    def kube(self) -> Kube:
        return Kube(self.binary("kubectl"), self.kubeconfig)

    def env(self) -> dict[str, str]:
        """The variables that reach this cluster (what ``trainyard cluster env`` prints)."""
        out = {"KUBECONFIG": str(self.kubeconfig), "TRAINYARD_CLUSTER_DIR": str(self.state_dir),
               "TRAINYARD_TOOLS_DIR": str(self.tools_dir)}
        out.update({Ports.variable(f.name): str(getattr(self.ports, f.name)) for f in fields(Ports)})
        return out
