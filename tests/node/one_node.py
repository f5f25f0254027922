"""A private control plane and one real node on it, for a node-tier module's fixture: started, timed, stopped."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import private_env, tools_problem
from tests.conftest import ROOT
from tests.node.test_real_node import free_pod_network
from trainyard.project import open_stack
from trainyard.rehearsal.cluster import ControlPlane, Settings
from trainyard.rehearsal.kube import KubeError
from trainyard.rehearsal.node import RealNode
from trainyard.rehearsal.session import REAL_NODE, Rehearsal


@dataclass(frozen=True)
class Running:
    plane: ControlPlane
    node: RealNode
    timings: dict[str, float]


@contextmanager
def one_real_node(tmp_path_factory: pytest.TempPathFactory, directory: str, tools: tuple[str, ...], up_step: str,
                  **node_options: Any) -> Iterator[Running]:
    """Skip (saying why) where ``tools`` or the node's prerequisites are missing; else the control plane and node-0
    (``node_options``: proxy, dns, ...), stopped afterwards; the timings are printed at the end."""
    problem = tools_problem(*tools)
    if problem is not None:
        pytest.skip(problem)
    settings = Settings.from_env(private_env(tmp_path_factory.mktemp(directory)))
    node = RealNode(settings, "node-0", 0, pod_network=free_pod_network(), **node_options)
    missing = node.problems()
    if missing:
        pytest.skip("; ".join(missing))
    plane, timings = ControlPlane(settings), {}
    try:
        start = time.monotonic()
        plane.up()
        timings["control plane up"] = time.monotonic() - start
        start = time.monotonic()
        node.up()
        timings[up_step] = time.monotonic() - start
        yield Running(plane, node, timings)
    finally:
        start = time.monotonic()
        node.down()
        timings["node down (fixture)"] = time.monotonic() - start
        plane.down()
        print("\n".join(f"    {k}: {v:.1f}s" for k, v in timings.items()))


@contextmanager
def deployed_platform(tmp_path_factory: pytest.TempPathFactory, directory: str, tools: tuple[str, ...],
                      timings: dict[str, float], ready_step: str,
                      overrides: Mapping[str, Any] | None = None,
                      failed: Callable[[], bool] = lambda: False) -> Iterator[Rehearsal]:
    """The local stack on a private control plane with node-0 (``make up``'s path: ``Rehearsal(real_nodes=True)``):
    up, ``pulumi up``, the platform Ready, each step timed into ``timings``; ``overrides`` as ``Rehearsal`` takes them.
    Skips (saying why) where ``tools`` are missing; afterwards down, purged, and nothing of the node left. Where
    ``failed()`` says a test on it failed, the pods that restarted or are not Ready are printed and the logs kept
    first (``keep_logs``), as for a failed deployment."""
    if os.geteuid() != 0:
        pytest.skip("a real node needs root (containerd, kubelet, network namespaces)")
    problem = tools_problem(*tools)
    if problem is not None:
        pytest.skip(problem)
    base = tmp_path_factory.mktemp(directory)
    env = {**private_env(base / "cluster"), "TRAINYARD_POD_NETWORK": free_pod_network(),
           "TRAINYARD_STATE_DIR": str(base / "state"), "TRAINYARD_RUN_DIR": str(base / "run"),
           "TRAINYARD_PULUMI_HOME": str(base / "pulumi-home")}
    os.environ["TRAINYARD_POD_NETWORK"] = env["TRAINYARD_POD_NETWORK"]  # RealNode reads it from the process
    session = Rehearsal(open_stack("local", ROOT), Settings.from_env(env), overrides, env=env, real_nodes=True)
    try:
        try:
            start = time.monotonic()
            session.up()
            timings["cluster up (control plane, real node, mirror filled)"] = time.monotonic() - start
            run = session.deploy()
            assert run.returncode == 0, run.output[-6000:] + "\nthe platform's pods not Ready:\n" + "\n".join(
                session.pods_not_ready())
            timings["first pulumi up"] = run.seconds
            start = time.monotonic()
            print(session.wait_platform_ready())
            timings[ready_step] = time.monotonic() - start
        except BaseException:
            keep_logs(session, base / "logs-of-the-failed-deployment")
            raise
        yield session
        if failed():
            print("\n".join(["the platform's pods after the failed tests:", *restarted_or_not_ready(session)]))
            keep_logs(session, base / "logs-of-the-failed-tests")
    finally:
        start = time.monotonic()
        session.down(purge=True)
        print(f"down in {time.monotonic() - start:.1f}s")
        os.environ.pop("TRAINYARD_POD_NETWORK", None)
        left = RealNode(session.settings, REAL_NODE, 0, proxy=True).leftovers()
        assert left == [], left


def restarted_or_not_ready(session: Rehearsal) -> list[str]:
    """One line per pod of the cluster whose containers restarted (each one's count and last end: OOMKilled, Error
    and its exit code), then ``pods_not_ready``: what an in-cluster service that failed a test went through."""
    lines = []
    try:
        pods = session.kube.items("pods", "*")
    except KubeError as error:
        return [f"(the pods could not be listed: {error})"]
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("restartCount"):
                ended = (status.get("lastState") or {}).get("terminated") or {}
                lines.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}: {status['name']} restarted "
                             f"{status['restartCount']}x, last {ended.get('reason', '?')} (exit {ended.get('exitCode', '?')}"
                             f" at {ended.get('finishedAt', '?')})")
    return lines + session.pods_not_ready() or ["(every pod Ready, none restarted)"]


def keep_logs(session: Rehearsal, into: Path) -> None:
    """The host processes' logs (API server, kubelet, containerd, ...) and the real node's pod logs, copied out of the
    state directory that ``down(purge=True)`` removes, so a failed deployment can be read after the run (pytest keeps
    its last three base directories)."""
    sources = [session.settings.logs, RealNode(session.settings, REAL_NODE, 0, proxy=True).layout.path("pod-logs")]
    for source in sources:
        if source.is_dir():
            shutil.copytree(source, into / source.name, dirs_exist_ok=True, ignore_dangling_symlinks=True)
    print(f"logs kept: {into}")
