"""The MultiKueue rehearsal's wiring (no cluster): what joins the manager's rehearsal to its workers'.

The live dispatch is tests/cluster/test_multikueue_dispatch.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from trainyard.config import validate_platform
from trainyard.project import open_stack
from trainyard.rehearsal.cluster import ClusterError, Ports, Settings
from trainyard.rehearsal.multikueue import MultiKueueRehearsal, kubeconfig_secrets, manager_overrides
from trainyard.rehearsal.session import Rehearsal
from trainyard.rehearsal.stack import read_platform

FIXTURES = ROOT / "tests" / "fixtures" / "multikueue"


def settings(tmp_path: Path, name: str) -> Settings:
    return Settings(tools_dir=Path("/tools"), state_dir=tmp_path / name, ports=Ports())


def test_the_manager_reads_its_worker_from_the_workers_rehearsal_stack_and_gets_its_kubeconfig_as_a_secret(
        tmp_path: Path) -> None:
    manager, worker = open_stack(str(FIXTURES / "Pulumi.manager.yaml"), ROOT), open_stack(
        str(FIXTURES / "Pulumi.worker-1.yaml"), ROOT)
    session = MultiKueueRehearsal(manager, {"worker-1": worker},
                                  {"manager": settings(tmp_path, "m"), "worker-1": settings(tmp_path, "w")},
                                  {"manager": {}, "worker-1": {}})
    [entry] = session.manager.config.multikueue.workers  # type: ignore[union-attr]
    assert entry.stack == str(tmp_path / "w" / "stacks" / "Pulumi.worker-1.yaml")
    assert Path(entry.stack).exists()
    assert session.manager.config_secrets == {"worker1Kubeconfig": tmp_path / "w" / "kubeconfig"}
    # The overlay carries only the secret's name, never a kubeconfig.
    assert "worker1Kubeconfig" in session.manager.stack_file.read_text()
    assert "client-key-data" not in session.manager.stack_file.read_text()


def test_a_manager_whose_worker_has_no_rehearsal_cluster_is_refused(tmp_path: Path) -> None:
    manager = open_stack(str(FIXTURES / "Pulumi.manager.yaml"), ROOT)
    with pytest.raises(ClusterError, match="workers worker-1 have no rehearsal cluster"):
        manager_overrides(manager.config, {})


def test_a_worker_stack_cannot_be_the_manager(tmp_path: Path) -> None:
    worker = open_stack(str(FIXTURES / "Pulumi.worker-1.yaml"), ROOT)
    with pytest.raises(ClusterError, match=r"multikueue\.role: manager"):
        manager_overrides(worker.config, {})


def test_a_worker_kubeconfig_from_a_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    platform = read_platform(FIXTURES / "Pulumi.manager.yaml")
    platform["multikueue"]["workers"][0]["kubeconfig"] = {"file": "/secure/worker-1.kubeconfig"}
    from_file = validate_platform(platform, "manager (kubeconfig from a file)")
    worker = Rehearsal(open_stack(str(FIXTURES / "Pulumi.worker-1.yaml"), ROOT), settings(tmp_path, "w"), env={})
    with pytest.raises(ClusterError, match=r"set kubeconfig\.pulumi_secret"):
        kubeconfig_secrets(from_file, {"worker-1": worker})
