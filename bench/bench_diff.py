"""Diff benchmark: `trainyard diff prod --base HEAD~1` where the last commit adds one tenant.

Works in a throwaway clone of this repository (never in the work tree itself): one commit
adds a tenant (and the node it needs) to prod, then the review of HEAD~1 -> work tree is
timed in-process (after one untimed run that fills the CRD cache) and as a new process,
which is what a CI job pays: interpreter start, imports, worktree, two renders, policy
rules and the Markdown; the new process both ways: the base side prepared in a forked child
beside the head (the default), and one after the other (``TRAINYARD_SERIAL=1``). The same
is done for the generated 200-tenant / 2,000-node stack of bench_render.py.

Prints figures; asserts nothing. Run with `make bench`.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("TRAINYARD_CRDS_DIR", str(ROOT.parent / "shared" / "crds"))

import yaml  # noqa: E402
from bench_render import generated_platform  # noqa: E402

from trainyard.review.diff import review_against_revision  # noqa: E402
from trainyard.review.markdown import to_markdown  # noqa: E402
from trainyard.review.policy_delta import default_evaluator  # noqa: E402

NEW_TENANT = {"name": "bench-new", "cohort": "product", "quotas": [{"flavor": "h100", "gpus": 8}],
              "groups": ["bench-new"]}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), "-c", "user.name=bench", "-c", "user.email=bench@example.invalid",
                    "-c", "commit.gpgsign=false", *args], check=True, capture_output=True)


def write_stack(path: Path, platform: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump({"config": {"trainyard:platform": platform}}, sort_keys=False))


def add_one_tenant(platform: dict[str, Any], flavor: str, cohort: str) -> dict[str, Any]:
    pool = next(p for p in platform["gpu_pools"] if p["name"] == flavor)
    pool["nodes"] += 1
    platform["tenants"].append({**NEW_TENANT, "cohort": cohort,
                                "quotas": [{"flavor": flavor, "gpus": pool["gpus_per_node"]}]})
    return platform


def commit_tenant_change(repo: Path, stack: str, platform: dict[str, Any], flavor: str, cohort: str) -> None:
    path = repo / "stacks" / f"Pulumi.{stack}.yaml"
    write_stack(path, platform)
    git(repo, "add", str(path))
    git(repo, "commit", "--quiet", "--allow-empty", "-m", f"{stack}: base")
    write_stack(path, add_one_tenant(platform, flavor, cohort))
    git(repo, "commit", "--quiet", "-am", f"{stack}: add one tenant")


def timed(label: str, fn: Callable[[], Any], runs: int) -> None:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    print(f"  {label:<44} first {times[0] * 1000:8.1f} ms   best {min(times) * 1000:8.1f} ms   "
          f"median {statistics.median(times) * 1000:8.1f} ms   ({runs} runs)")


def bench_stack(repo: Path, stack: str, runs: int) -> None:
    evaluator = default_evaluator()
    review = review_against_revision(stack, "HEAD~1", repo, evaluator=evaluator)
    counts = review.counts()
    print(f"{stack}: {counts['added']} added, {counts['changed']} changed, {review.unchanged} unchanged objects; "
          f"policy rules {'on' if evaluator else 'absent'}")
    timed("review in-process (worktree, 2 renders, policy)",
          lambda: to_markdown(review_against_revision(stack, "HEAD~1", repo, evaluator=evaluator)), runs)
    timed("review in-process, no policy",
          lambda: to_markdown(review_against_revision(stack, "HEAD~1", repo, evaluator=None)), runs)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "platform")}
    command = [str(Path(sys.executable).with_name("trainyard")), "diff", stack, "--base", "HEAD~1"]
    for serial, how in (("0", "base beside the head"), ("1", "TRAINYARD_SERIAL=1")):
        timed(f"`trainyard diff {stack} --base HEAD~1` (new process, {how})",
              lambda serial=serial: subprocess.run(command, cwd=repo, env={**env, "TRAINYARD_SERIAL": serial},
                                                   check=True, capture_output=True), max(3, runs // 2))


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-diff-") as tmp:
        repo = Path(tmp) / "repo"
        git(ROOT, "clone", "--quiet", "--no-hardlinks", str(ROOT), str(repo))
        prod = yaml.safe_load((repo / "stacks" / "Pulumi.prod.yaml").read_text())["config"]["trainyard:platform"]
        # Each stack's change is the last commit when it is timed: HEAD~1 is the revision without the tenant.
        commit_tenant_change(repo, "prod", prod, "h100", "product")
        bench_stack(repo, "prod", runs=7)
        commit_tenant_change(repo, "bench", generated_platform(), "pool-0", "cohort-0")
        bench_stack(repo, "bench", runs=3)
        shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
