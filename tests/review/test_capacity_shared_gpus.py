"""Reviewing shared-GPU pools: `trainyard diff` and `trainyard capacity` count MIG slices and time-sliced replicas
in the units tenants request, each on the physical GPUs it lives on, and the highlights say what the table says."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.review.conftest import side
from tests.unit.test_gpu_sharing import SHARING, sharing_platform
from trainyard.cli import main
from trainyard.config.model import PlatformConfig
from trainyard.review.diff import review_platforms
from trainyard.review.markdown import to_markdown

pytestmark = pytest.mark.usefixtures("crds")

# The same stack before its H200 MIG pool was added.
BASE = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.gpu-sharing-base.yaml")


def sharing_config(edit: Any = None) -> PlatformConfig:
    data = sharing_platform()
    if edit is not None:
        edit(data)
    return PlatformConfig.model_validate(data)


def table_rows(markdown: str) -> dict[tuple[str, str], list[str]]:
    """The capacity table of a review: (flavor, resource) -> [physical GPUs, units, committed, free]."""
    section = markdown.split("### Capacity", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in section.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[(cells[0], cells[1])] = cells[2:]
    return rows


def test_adding_a_mig_pool_highlights_the_slices_promised_not_a_zero_gpu_quota(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", SHARING, "--against", BASE, "--no-policy"]) == 0
    out = capsys.readouterr().out
    assert "- `notebooks` h200-mig nvidia.com/mig-1g.18gb quota added: nominal 40, borrowing limit 16, " \
           "lending limit unlimited" in out
    assert "- flavor `h200-mig` added: 8 GPUs (1 x 8, mig-mixed)" in out
    assert "- flavor `h200-mig` nvidia.com/mig-1g.18gb: 56 on 8 GPUs, committed 56, free 0" in out
    assert "quota added: nominal 0" not in out
    assert table_rows(out)[("h200-mig", "nvidia.com/mig-1g.18gb")] == ["(new) 8", "(new) 56", "(new) 56", "(new) 0"]


def test_the_highlighted_free_figure_is_the_tables_for_every_changed_resource() -> None:
    def lower_notebooks_slices(data: dict[str, Any]) -> None:
        notebooks = next(t for t in data["tenants"] if t["name"] == "notebooks")
        next(q for q in notebooks["quotas"] if q["flavor"] == "h200-mig")["shared"][0]["nominal"] = 30
        eval_ = next(t for t in data["tenants"] if t["name"] == "eval")
        next(q for q in eval_["quotas"] if q["flavor"] == "h100-mixed")["shared"][0]["nominal"] = 10

    review = review_platforms(side("base", sharing_config()), side("head", sharing_config(lower_notebooks_slices)),
                              title="gpu-sharing", evaluator=None)
    rows = table_rows(to_markdown(review))
    assert rows[("h200-mig", "nvidia.com/mig-1g.18gb")] == ["8", "56", "56 -> 46 (-10)", "0 -> 10 (+10)"]
    assert "`notebooks` h200-mig nvidia.com/mig-1g.18gb nominal quota 40 -> 30 (-10)" in review.highlights
    said = [h for h in review.highlights if h.startswith("flavor `")]
    assert said == ["flavor `h100-mixed` nvidia.com/mig-1g.10gb: 16 on 8 GPUs, committed 16 -> 10 (-6), free 6",
                    "flavor `h200-mig` nvidia.com/mig-1g.18gb: 56 on 8 GPUs, committed 56 -> 46 (-10), free 10"]
    for line in said:
        match = re.fullmatch(r"flavor `(\S+)` (\S+): .*, free (\d+)", line)
        assert match is not None
        flavor, resource, free = match.groups()
        assert rows[(flavor, resource)][3].split(" (")[0].split(" -> ")[-1] == free


def test_capacity_counts_each_mig_profile_on_the_gpus_partitioned_with_it(capsys: pytest.CaptureFixture[str]) -> None:
    # h100-mixed: 2 nodes, GPUs 0-3 split into 2x 1g.10gb + 2g.20gb + 3g.40gb, GPUs 4-7 whole.
    assert main(["capacity", SHARING]) == 0
    out = capsys.readouterr().out
    assert "| h100-mixed | mig-mixed | nvidia.com/gpu | 8 | 8 | 1 | 8 | 0 | 100% |" in out
    assert "| h100-mixed | mig-mixed | nvidia.com/mig-1g.10gb | 8 | 16 | 1/7 | 16 | 0 | 100% |" in out
    assert "| h100-mixed | mig-mixed | nvidia.com/mig-3g.40gb | 8 | 8 | 3/7 | 8 | 0 | 100% |" in out
    assert "| l40s-shared | time-sliced x4 | nvidia.com/gpu.shared | 16 | 64 | 1/4 | 64 | 0 | 100% |" in out
