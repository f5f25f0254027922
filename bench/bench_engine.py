"""Engine benchmark: `pulumi up` next to a plain server-side apply of the same objects, by stack size.

For the local stack and local-shaped stacks of 5, 50 and 200 tenants (10 fake GPU nodes per
tenant: 2,000 for 200), each on a fresh rehearsal cluster of its own (own state dir, free
loopback ports, the stack's fake nodes, the real Kueue/JobSet/Trainer controllers):

1. ``kubectl apply --server-side`` of the rendered objects (``trainyard.rehearsal.apply``: CRDs,
   Established, Namespaces, the rest), then the same apply again (nothing changes), then the
   applied objects are removed (CRDs and Namespaces stay, as after ``pulumi destroy``);
2. ``tools/pulumi-local.sh up`` (real engine and provider), then a second ``up`` that changes nothing.

Prints one table (step, objects, pulumi wall and engine seconds, server-side apply seconds,
ratio, load average) and asserts nothing. ``--repo DIR`` runs the engine from another checkout
(the "before" numbers: the same bench against the code of an earlier revision); ``--sizes``
picks stacks. Slow: the 200-tenant stack takes a quarter of an hour or more on 2 cores. ``make bench``
runs it for the local stack (when the tools are built), ``make bench-engine`` for every size.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("TRAINYARD_CRDS_DIR", str(ROOT.parent / "shared" / "crds"))

import yaml  # noqa: E402
from bench_render import without_tenant_keyed  # noqa: E402
from tests.cluster.conftest import private_env, tools_problem  # noqa: E402

from trainyard.config import load_stack  # noqa: E402
from trainyard.manifests import render_platform  # noqa: E402
from trainyard.project import open_stack  # noqa: E402
from trainyard.rehearsal.apply import remove_applied, server_side_apply  # noqa: E402
from trainyard.rehearsal.cluster import Settings  # noqa: E402
from trainyard.rehearsal.session import Rehearsal  # noqa: E402

NODES_PER_TENANT = 10
ENGINE_TIME = re.compile(r"engine time (\d+) ms")


def scaled_local_stack(tenants: int, nodes_per_tenant: int = NODES_PER_TENANT) -> dict[str, Any]:
    """The local stack with ``tenants`` tenants on its two fake pools, ``nodes_per_tenant`` nodes per tenant in all.

    The node count changes no platform object (a pool is one ResourceFlavor whatever its size), only
    the fake Nodes the rehearsal cluster carries.
    """
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    platform = document["config"]["trainyard:platform"]
    pools = {p["name"]: p for p in platform["gpu_pools"]}
    a100, l4 = pools["fake-a100"], pools["fake-l4"]
    a100["nodes"] = l4["nodes"] = max(1, tenants * nodes_per_tenant // 2)
    template = platform["tenants"][0]
    platform = document["config"]["trainyard:platform"] = without_tenant_keyed(platform)
    platform["tenants"] = []
    for t in range(tenants):
        tenant = copy.deepcopy(template)
        tenant["name"] = f"team-{t:03d}"
        tenant["groups"] = [f"team-{t:03d}-engineers"]
        # Each tenant's nominal share of both pools: the quotas add up to the physical GPUs.
        tenant["quotas"] = [
            {"flavor": "fake-a100", "gpus": a100["gpus_per_node"] * a100["nodes"] // tenants, "borrowing_limit": 4},
            {"flavor": "fake-l4", "gpus": l4["gpus_per_node"] * l4["nodes"] // tenants}]
        platform["tenants"].append(tenant)
    return document


@dataclass
class Row:
    stack: str
    step: str
    objects: int
    pulumi_wall: float | None = None
    pulumi_engine: float | None = None
    ssa: float | None = None
    load: str = ""

    def line(self) -> str:
        def cell(v: float | None) -> str:
            return "" if v is None else f"{v:.1f}"
        ratio = "" if self.pulumi_engine is None or not self.ssa else f"{self.pulumi_engine / self.ssa:.1f}x"
        return (f"| {self.stack} | {self.step} | {self.objects} | {cell(self.pulumi_wall)} | {cell(self.pulumi_engine)} "
                f"| {cell(self.ssa)} | {ratio} | {self.load} |")


def progress(message: str) -> None:
    """A measurement as soon as it is made (stderr), so a run cut short still tells what it measured."""
    print(f"    {message} (load {load()})", file=sys.stderr, flush=True)


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def pulumi_up(repo: Path, env: dict[str, str], stack_file: Path, *args: str) -> tuple[float, float | None]:
    start = time.monotonic()
    result = subprocess.run([str(repo / "tools" / "pulumi-local.sh"), "up", "local", "--yes", "--skip-preview", *args],
                            env={**env, "TRAINYARD_STACK_FILE": str(stack_file)}, capture_output=True, text=True,
                            timeout=7200, check=False)
    wall = time.monotonic() - start
    if result.returncode != 0:
        raise SystemExit(f"pulumi up failed ({result.returncode}):\n{(result.stdout + result.stderr)[-4000:]}")
    found = ENGINE_TIME.findall(result.stderr)
    return wall, (int(found[-1]) / 1000 if found else None)


def bench_stack(name: str, document: dict[str, Any], repo: Path, base: Path) -> list[Row]:
    work = base / name
    work.mkdir(parents=True)
    stack_file = work / f"Pulumi.{name}.yaml"
    stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
    objects = list(render_platform(load_stack(stack_file), ROOT, ROOT / "stacks").all_objects)
    env = private_env(work / "cluster")
    env.update({"TRAINYARD_STATE_DIR": str(work / "state"), "TRAINYARD_RUN_DIR": str(work / "run"),
                "TRAINYARD_PULUMI_HOME": str(work / "pulumi-home")})
    settings = Settings.from_env(env)
    session = Rehearsal(open_stack(str(stack_file), ROOT), settings, env=env)
    rows = [Row(name, "first apply", len(objects)), Row(name, "no-op apply", len(objects))]
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the rehearsal's progress lines; the table goes to stdout
            session.up()
        kube = settings.kube()
        rows[0].load = load()
        rows[0].ssa = server_side_apply(kube, objects).seconds
        rows[1].ssa = server_side_apply(kube, objects).seconds
        progress(f"{name}: server-side apply {rows[0].ssa:.1f} s, again {rows[1].ssa:.1f} s ({len(objects)} objects)")
        remove_applied(kube, objects)
        rows[0].pulumi_wall, rows[0].pulumi_engine = pulumi_up(repo, env, stack_file)
        progress(f"{name}: first pulumi up {rows[0].pulumi_wall:.1f} s (engine {rows[0].pulumi_engine} s)")
        rows[1].load = load()
        rows[1].pulumi_wall, rows[1].pulumi_engine = pulumi_up(repo, env, stack_file, "--expect-no-changes")
    finally:
        with contextlib.redirect_stdout(sys.stderr):
            session.down(purge=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="local,5,50,200", help="comma-separated: local and/or tenant counts")
    parser.add_argument("--repo", type=Path, default=ROOT, help="checkout whose tools/pulumi-local.sh and program run")
    parser.add_argument("--nodes-per-tenant", type=int, default=NODES_PER_TENANT,
                        help="fake nodes per tenant (the rehearsal sets up each node with two kubectl calls: "
                             "2,000 nodes take longer than the benchmark itself on a loaded machine)")
    parser.add_argument("--skip-without-tools", action="store_true",
                        help="print why and exit 0 when the tools are not built (make bench on a fresh clone)")
    args = parser.parse_args()
    problem = tools_problem()
    if problem:
        if args.skip_without_tools:
            print(f"engine benchmark skipped: {problem}")
            return
        raise SystemExit(f"cannot run: {problem}")
    header = ["| stack | step | objects | pulumi wall (s) | pulumi engine (s) | server-side apply (s) | ratio "
              "| load (1/5/15 min) |", "|---|---|---:|---:|---:|---:|---:|---|"]
    print(f"engine benchmark, code from {args.repo} (ratio = pulumi engine / server-side apply)", flush=True)
    print("\n".join(header), flush=True)
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-engine-") as tmp:
        for size in args.sizes.split(","):
            if size == "local":
                document = yaml.safe_load((ROOT / "stacks" / "Pulumi.local.yaml").read_text())
                name = "local"
            else:
                document, name = scaled_local_stack(int(size), args.nodes_per_tenant), f"tenants-{int(size)}"
            for row in bench_stack(name, document, args.repo.resolve(), Path(tmp)):
                print(row.line(), flush=True)


if __name__ == "__main__":
    main()
