"""Cluster tier: a private rehearsal cluster for the test session.

The cluster is the one ``trainyard cluster up`` runs (``trainyard.rehearsal``: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok and the real Kueue, JobSet and Trainer controllers, all
built from Go modules by ``tools/build.sh``), started with its own state directory in the session's tmp
dir and on free loopback ports other than the defaults, so it never touches a cluster a person started
with ``make up``. It carries the local stack's fake GPU nodes and is stopped and purged at the end of
the session: webhook registrations first, then every process it started.

Every test here skips, saying why, when the tools are not built (``tools/build.sh --check``
fails) or when the upstream CRD mirror is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CRDS_DIR, ROOT
from tests.loopback import free_port
from trainyard.manifests import policy_params as policy_params_api
from trainyard.manifests.meta import Manifest
from trainyard.manifests.rehearsal import fake_nodes
from trainyard.project import open_stack
from trainyard.rehearsal.cluster import ControlPlane, Ports, Settings
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.session import Rehearsal

TOOLS_DIR = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools")
BIN_DIR = TOOLS_DIR / "bin"
# The rehearsal's default ports: the private cluster never uses them.
DEFAULT_PORTS = frozenset(getattr(Ports(), f.name) for f in fields(Ports))
TRAINYARD = Path(sys.executable).parent / "trainyard"


def tools_problem(*tools: str) -> str | None:
    """Why the cluster tier (``tools/build.sh``'s ``cluster`` group; or a test needing only ``tools``, e.g. "etcd",
    "kube-apiserver") cannot run here, or None."""
    if CRDS_DIR is None:
        return "upstream CRD mirror not found: set TRAINYARD_CRDS_DIR (default ../shared/crds)"
    check = subprocess.run([str(ROOT / "tools" / "build.sh"), "--check", *(tools or ("cluster",))],
                           capture_output=True, text=True, check=False)
    if check.returncode != 0:
        missing = ", ".join(line.split(": ", 1)[-1] for line in check.stderr.splitlines() if line.startswith("stale"))
        return f"platform tools not built ({missing or check.stderr.strip()}): run `make tools` (tools/build.sh)"
    return None


def free_ports(count: int) -> list[int]:
    """Loopback ports that are free now, reserved for this test process (``tests.loopback.free_port``), and are not
    the rehearsal's defaults."""
    ports: list[int] = []
    while len(ports) < count:
        ports.append(free_port(exclude={*DEFAULT_PORTS, *ports}))
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

    def create_missing(self, objects: list[dict[str, Any]]) -> None:
        """Create each object that does not exist yet; leave existing ones to their owner (on the session's cluster
        the local stack's deployment made them, from the same rendering: applying them again as another field
        manager would conflict with the engine's fields, and forcing would take them from it)."""
        result = self.kubectl("create", "-f", "-", stdin="\n".join(json.dumps(o) for o in objects), check=False)
        problems = [line for line in result.stderr.splitlines() if line.strip() and "AlreadyExists" not in line
                    and "already exists" not in line]
        if result.returncode != 0 and problems:
            raise AssertionError("kubectl create failed:\n" + "\n".join(problems))

    def wait_established(self, *crds: str, timeout: float = 120) -> None:
        """Wait until each CRD is Established. Not `kubectl wait`: on a CRD whose status has no conditions
        yet (right after its create, on a loaded machine) it fails with an accessor error instead of waiting."""
        def established(name: str) -> bool:
            conditions = (self.get_json("crd", name).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        for name in crds:
            wait_until(f"CRD {name} to be established", partial(established, name), timeout)


Key = tuple[str, str, str, str]  # group, kind, namespace, name


def key_of(obj: Manifest) -> Key:
    api_version: str = obj["apiVersion"]
    group = api_version.split("/", maxsplit=1)[0] if "/" in api_version else ""
    meta = obj["metadata"]
    return group, obj["kind"], meta.get("namespace", ""), meta["name"]


def resource_of(key: Key) -> str:
    group, kind, _, _ = key
    return f"{kind}.{group}" if group else kind


def live_objects(cluster: Cluster, keys: list[Key]) -> dict[Key, Manifest]:
    """The live objects with these keys (one `kubectl get` over all their kinds)."""
    kinds = sorted({resource_of(k) for k in keys})
    listed = cluster.get_json(",".join(kinds), "--all-namespaces")
    found = {key_of(item): item for item in listed["items"]}
    return {k: found[k] for k in keys if k in found}


def private_env(state_dir: Path) -> dict[str, str]:
    """The environment of a private cluster: its own state directory and free loopback ports."""
    env = {**os.environ, "TRAINYARD_CLUSTER_DIR": str(state_dir), "TRAINYARD_TOOLS_DIR": str(TOOLS_DIR),
           "TRAINYARD_CRDS_DIR": str(CRDS_DIR)}
    names = [Ports.variable(f.name) for f in fields(Ports)]
    env.update(zip(names, map(str, free_ports(len(names))), strict=True))
    return env


@contextmanager
def private_cluster(state_dir: Path, with_fake_nodes: bool = True) -> Iterator[Cluster]:
    """A bare control plane of our own (no controllers; state in ``state_dir``, free ports), stopped afterwards.

    For tests that need only the API server (CRD conversion, admission policies, recorded statuses).
    """
    env = private_env(state_dir)
    settings = Settings.from_env(env)
    plane = ControlPlane(settings)
    try:
        plane.up()
        if with_fake_nodes:
            plane.apply_nodes(fake_nodes(open_stack("local", ROOT).config))
        yield Cluster(state_dir=settings.state_dir, env=env)
    finally:
        plane.down()


def policy_params(platform: Any) -> list[Manifest]:
    """The admission policies' params, the ``trainyard-policy`` TenantPolicy of every tenant namespace, as rendered
    (manifests/policy_params.py): a parameterised policy refuses in a namespace without them."""
    return [o for objects in platform.concern("admission").tenant_objects.values() for o in objects
            if o["kind"] == policy_params_api.KIND]


def install_policy_params(cluster: Cluster, platform: Any, params: list[Manifest] | None = None) -> None:
    """The params' CRD (Trainyard's own), established and served, then every tenant namespace's params (``params``:
    others than the platform's, e.g. of a variant of its config); the tenant Namespaces must exist. Created where
    missing, like ``Cluster.create_missing``."""
    crds = [c for c in platform.crds if c["spec"]["group"] == policy_params_api.GROUP]
    assert [c["spec"]["names"]["kind"] for c in crds] == [policy_params_api.KIND]
    cluster.create_missing(crds)
    cluster.wait_established(*(c["metadata"]["name"] for c in crds))
    params = policy_params(platform) if params is None else params

    def created() -> bool:  # Established is not yet served: "the server could not find the requested resource"
        try:
            cluster.create_missing(params)
        except AssertionError as exc:
            if "the server could not find the requested resource" in str(exc) or "ensure CRDs are installed" in str(exc):
                return False
            raise
        return True
    wait_until("the params' kind to be served and every tenant's params created", created, 60, interval=1)


@contextmanager
def bare_api_server(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Cluster]:
    """A private control plane without controllers or fake nodes (admission and API tests); skips when not built."""
    problem = tools_problem("etcd", "kube-apiserver")  # no Pulumi engine needed
    if problem is not None:
        pytest.skip(problem)
    with private_cluster(tmp_path_factory.mktemp(name), with_fake_nodes=False) as running:
        yield running


@pytest.fixture(scope="session")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    problem = tools_problem()
    if problem is not None:
        pytest.skip(problem)
    env = private_env(tmp_path_factory.mktemp("cluster"))
    session = Rehearsal(open_stack("local", ROOT), Settings.from_env(env), env=env)
    try:
        session.up()
        yield session
    finally:
        session.down(purge=True)


@pytest.fixture(scope="session")
def cluster(rehearsal: Rehearsal) -> Cluster:
    return Cluster(state_dir=rehearsal.settings.state_dir, env=rehearsal.env)


@pytest.fixture(scope="session")
def rehearsal_engine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Pulumi state, run dir and home for every module that deploys the local stack on the session's cluster.

    One state, not one per module: the provider's server-side-apply field manager (``pulumi-kubernetes-<suffix>``)
    lives in the state, so a second state would meet the first's fields as another manager's (a conflict on every
    atomic field the API server defaulted, e.g. a ValidatingAdmissionPolicy's ``spec.matchConstraints``)."""
    return tmp_path_factory.mktemp("engine")


@pytest.fixture(scope="module")
def deployed_rehearsal(rehearsal: Rehearsal, rehearsal_engine: Path) -> Iterator[Rehearsal]:
    """The session's cluster with the local stack deployed by the real engine (the session's one Pulumi state);
    redeployed only when another module left a different rehearsal stack file deployed (an update of that state).
    Every TrainJob is deleted before and after the module."""
    base = rehearsal_engine
    env = {**rehearsal.env, "TRAINYARD_STATE_DIR": str(base / "state"), "TRAINYARD_RUN_DIR": str(base / "run"),
           "TRAINYARD_PULUMI_HOME": str(base / "pulumi-home")}
    session = Rehearsal(rehearsal.stack, rehearsal.settings, env=env)
    session.up()  # a no-op unless an earlier test stopped part of it (it restarts Kueue if a scenario changed it)
    run = session.deploy_if_changed()
    assert run is None or run.returncode == 0, run.output[-4000:] if run else ""
    session.reset_jobs()
    yield session
    session.reset_jobs()
