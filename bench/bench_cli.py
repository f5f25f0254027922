"""End-to-end benchmark: `trainyard render prod`, `check prod` and `check`/`validate` of the 200-tenant stack.

Each command runs as a new process, as a user or CI job runs it: interpreter start, imports,
loading and validating the stack, rendering (and writing, or the policy rules). Wall-clock and
CPU time (user + system of the child) are printed; on a shared machine the CPU figure is the
steadier one. The first run may fill the CRD caches (``$XDG_CACHE_HOME/trainyard``); best and
median are over all runs.

Prints figures; asserts nothing. Run with `make bench`.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("TRAINYARD_CRDS_DIR", str(ROOT.parent / "shared" / "crds"))

import yaml  # noqa: E402
from bench_render import TENANTS, generated_platform  # noqa: E402

TRAINYARD = str(Path(sys.executable).with_name("trainyard"))


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(label: str, argv: list[str], runs: int) -> None:
    walls, cpus, code = [], [], 0
    for _ in range(runs):
        cpu, start = child_cpu(), time.perf_counter()
        code = subprocess.run([TRAINYARD, *argv], cwd=ROOT, capture_output=True, check=False).returncode
        walls.append(time.perf_counter() - start)
        cpus.append(child_cpu() - cpu)
    print(f"  {label:<40} wall best {min(walls) * 1000:7.0f} ms  median {statistics.median(walls) * 1000:7.0f} ms   "
          f"cpu best {min(cpus) * 1000:7.0f} ms  median {statistics.median(cpus) * 1000:7.0f} ms   "
          f"(exit {code}, {runs} runs)")


def main() -> None:
    print(f"end to end, new process each run (load average {os.getloadavg()[0]:.1f}):")
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-cli-") as tmp:
        timed("trainyard render prod", ["render", "prod", "--out", str(Path(tmp) / "prod")], 7)
        timed("trainyard check prod", ["check", "prod"], 7)
        bench = Path(tmp) / "Pulumi.bench.yaml"
        bench.write_text(yaml.safe_dump({"config": {"trainyard:platform": generated_platform()}}, sort_keys=False))
        timed(f"trainyard validate ({TENANTS} tenants)", ["validate", str(bench)], 5)
        timed(f"trainyard check ({TENANTS} tenants)", ["check", str(bench)], 5)
        timed(f"trainyard render ({TENANTS} tenants)", ["render", str(bench), "--out", str(Path(tmp) / "bench")], 3)


if __name__ == "__main__":
    main()
