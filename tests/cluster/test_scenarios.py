"""Every shipped scenario (scenarios/*.yaml) on the session's rehearsal cluster, with the real Kueue, JobSet and Trainer.

One deployment of the local stack serves every scenario that does not override the platform; the ones
that do (a runtime topology mode, waitForPodsReady timeouts) run last, each redeployed with the real
engine (and Kueue restarted with the changed configuration). Between scenarios every TrainJob is deleted
and the test waits until their Workloads and pods are gone. Each scenario's table of Kueue's decisions
is printed; the test fails with the expectations that were not met.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trainyard.rehearsal.scenario import load_scenario
from trainyard.rehearsal.session import Rehearsal

pytestmark = pytest.mark.cluster


def ordered_scenarios() -> list[Path]:
    """The local stack's scenarios; those that change the platform last (each one costs a deploy)."""
    paths = [p for p in sorted((ROOT / "scenarios").glob("*.yaml")) if "local" in load_scenario(p).stacks]
    return sorted(paths, key=lambda p: (bool(load_scenario(p).platform), p.name))


@pytest.mark.parametrize("path", ordered_scenarios(), ids=lambda p: p.stem)
def test_scenario_meets_its_expectations(deployed_rehearsal: Rehearsal, path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    scenario = load_scenario(path)
    rehearsal = deployed_rehearsal.with_overrides(scenario.platform)
    rehearsal.controllers.up()
    run = rehearsal.deploy_if_changed()
    assert run is None or run.returncode == 0, run.output[-4000:] if run else ""
    rehearsal.reset_jobs()
    report = io.StringIO()
    failures = rehearsal.run_scenario(scenario, report)
    with capsys.disabled():
        print(report.getvalue())
    rehearsal.reset_jobs()
    assert failures == []
