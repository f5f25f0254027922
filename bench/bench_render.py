"""Render benchmark: prod, and a generated stack of 200 tenants on 2,000 GPU nodes.

Prints wall-clock figures (best and median of several runs) and peak memory. Run with
`make bench`; numbers are reported, never asserted (tests stay timing-free).
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
os.environ.setdefault("TRAINYARD_CRDS_DIR", str(ROOT.parent / "shared" / "crds"))

import yaml  # noqa: E402

from trainyard.config import validate_platform  # noqa: E402
from trainyard.manifests import render_platform  # noqa: E402
from trainyard.manifests.rehearsal import fake_nodes  # noqa: E402
from trainyard.review.render import rendered_files, write_rendered  # noqa: E402

POOLS, NODES_PER_POOL, GPUS_PER_NODE = 10, 200, 8
TENANTS, COHORTS = 200, 10


def without_tenant_keyed(platform: dict[str, Any]) -> dict[str, Any]:
    """``platform`` without the sections keyed by its tenants' names (``lineage``,
    ``object_store.tenant_overrides``): a generated stack with other tenants would name tenants it lacks."""
    out = {k: v for k, v in platform.items() if k != "lineage"}
    if isinstance(out.get("object_store"), dict):
        out["object_store"] = {k: v for k, v in out["object_store"].items() if k != "tenant_overrides"}
    return out


def generated_platform() -> dict[str, Any]:
    """A large but valid stack: 10 pools x 200 nodes x 8 GPUs; 200 tenants in 10 cohorts."""
    prod = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())["config"]["trainyard:platform"]
    pools = [{
        "name": f"pool-{p}", "gpu_product": "NVIDIA-H100-80GB-HBM3", "gpus_per_node": GPUS_PER_NODE,
        "nodes": NODES_PER_POOL, "cpu_per_node": 192, "memory_per_node": "1800Gi",
        "node_labels": {"trainyard.dev/pool": f"pool-{p}"},
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "topology_labels": ["network.trainyard.dev/block", "network.trainyard.dev/rack"],
    } for p in range(POOLS)]
    per_pool_share = NODES_PER_POOL * GPUS_PER_NODE // (TENANTS // POOLS * 2)
    tenants = []
    for t in range(TENANTS):
        first, second = t % POOLS, (t + 1) % POOLS
        tenants.append({
            "name": f"team-{t:03d}", "cohort": f"cohort-{t % COHORTS}",
            "quotas": [{"flavor": f"pool-{first}", "gpus": per_pool_share, "borrowing_limit": 16, "lending_limit": 8},
                       {"flavor": f"pool-{second}", "gpus": per_pool_share, "borrowing_limit": 8}],
            "priority_classes": ["standard", "preemptible"], "default_priority_class": "standard",
            "groups": [f"team-{t:03d}"],
        })
    return {**without_tenant_keyed(prod), "environment": "bench", "gpu_pools": pools, "tenants": tenants,
            "cohorts": [{"name": "org"}] + [{"name": f"cohort-{c}", "parent": "org"} for c in range(COHORTS)]}


def timed(label: str, fn: Callable[[], Any], runs: int) -> Any:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    print(f"  {label:<34} best {min(times) * 1000:8.1f} ms   median {statistics.median(times) * 1000:8.1f} ms   ({runs} runs)")
    return result


def bench(name: str, data: dict[str, Any], runs: int) -> None:
    print(f"{name}:")
    config = timed("validate config", lambda: validate_platform(data, name), runs)
    rendered = timed("render (pure builders + CRDs)", lambda: render_platform(config, ROOT), runs)
    timed("serialise to YAML", lambda: rendered_files(rendered), runs)
    with tempfile.TemporaryDirectory() as tmp:
        timed("write files", lambda: write_rendered(rendered, Path(tmp) / "out"), runs)
    print(f"  objects: {len(rendered.all_objects)} ({len(rendered.objects)} platform + {len(rendered.crds)} CRDs), "
          f"charts: {len(rendered.releases)}")
    # Nodes are not platform objects (a pool is one ResourceFlavor whatever its size); the rehearsal
    # generates them as fake Node objects, which is where the node count costs time.
    fake = config.model_copy(update={"gpu_pools": tuple(p.model_copy(update={"fake": True}) for p in config.gpu_pools)})
    nodes = timed("fake GPU nodes (rehearsal)", lambda: fake_nodes(fake), runs)
    print(f"  fake nodes: {len(nodes)}")


def main() -> None:
    prod = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())["config"]["trainyard:platform"]
    render_platform(validate_platform(prod, "prod"), ROOT)  # warm the CRD parse cache once
    bench("prod (5 tenants, 56 GPU nodes)", prod, runs=10)
    bench(f"generated ({TENANTS} tenants, {POOLS * NODES_PER_POOL} GPU nodes)", generated_platform(), runs=5)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS of the benchmark process: {peak_kib / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
