"""A private control plane and one real node on it, for a node-tier module's fixture: started, timed, stopped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from tests.cluster.conftest import private_env, tools_problem
from tests.node.test_real_node import free_pod_network
from trainyard.rehearsal.cluster import ControlPlane, Settings
from trainyard.rehearsal.node import RealNode


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
