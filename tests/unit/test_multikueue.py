"""MultiKueue: a manager dispatches every tenant's queue to its workers; a worker runs the same queues.

The manager and worker stacks in tests/fixtures/multikueue are the local rehearsal stack with a
MultiKueue role. Every object they render passes the strict Kueue v1beta2 CRD schemas.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, needs_crds
from trainyard.cli import main
from trainyard.config import ConfigError
from trainyard.manifests import RenderedPlatform, kueue
from trainyard.project import open_stack
from trainyard.schemas import Validator

FIXTURES = ROOT / "tests" / "fixtures" / "multikueue"
MANAGER, WORKER = FIXTURES / "Pulumi.manager.yaml", FIXTURES / "Pulumi.worker-1.yaml"


def render(path: Path) -> RenderedPlatform:
    return open_stack(str(path), ROOT).render()


def by_kind(platform: RenderedPlatform, kind: str) -> list[dict]:  # type: ignore[type-arg]
    return platform.by_kind(kind)


@needs_crds
def test_manager_declares_the_admission_check_config_clusters_and_queues_that_use_it() -> None:
    platform = render(MANAGER)
    [check] = by_kind(platform, "AdmissionCheck")
    assert check["spec"] == {"controllerName": "kueue.x-k8s.io/multikueue",
                             "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "multikueue"}}
    [config] = by_kind(platform, "MultiKueueConfig")
    assert config["spec"] == {"clusters": ["worker-1"]}
    [cluster] = by_kind(platform, "MultiKueueCluster")
    assert cluster["spec"]["clusterSource"] == {"kubeConfig": {"locationType": "Secret", "location": "multikueue-worker-1"}}
    [secret] = by_kind(platform, "Secret")
    assert secret["metadata"]["namespace"] == "kueue-system"
    # The kubeconfig is a deploy-time value: the stack names its source, never the content.
    assert secret["stringData"] == {"kubeconfig": "<deploy-time: pulumi config secret trainyard:worker1Kubeconfig>"}
    for queue in by_kind(platform, "ClusterQueue"):
        assert queue["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "multikueue"}]}


@needs_crds
def test_worker_declares_the_same_tenant_queues_and_no_dispatching() -> None:
    manager, worker = render(MANAGER), render(WORKER)
    for kind in ("AdmissionCheck", "MultiKueueConfig", "MultiKueueCluster", "Secret"):
        assert by_kind(worker, kind) == []
    assert all("admissionChecksStrategy" not in q["spec"] for q in by_kind(worker, "ClusterQueue"))

    def queues(platform: RenderedPlatform) -> set[tuple[str, str, str]]:
        return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in platform.all_objects
                if o["kind"] in ("ClusterQueue", "LocalQueue", "Namespace", "WorkloadPriorityClass")}
    assert queues(worker) == queues(manager)


def test_the_manager_kueue_labels_what_it_creates_on_workers_with_its_own_origin() -> None:
    """Kueue's MultiKueue garbage collector deletes worker objects of its origin whose manager copy is gone;
    with the default origin two managers sharing a worker would delete each other's jobs."""
    manager, worker = open_stack(str(MANAGER), ROOT).config, open_stack(str(WORKER), ROOT).config
    assert kueue.controller_configuration(manager)["multiKueue"] == {"origin": "mk-manager"}
    assert "multiKueue" not in kueue.controller_configuration(worker)


@pytest.fixture(scope="module")
def validator(crds: Path) -> Validator:
    return Validator(crds)


@needs_crds
@pytest.mark.parametrize("path", [MANAGER, WORKER], ids=["manager", "worker"])
def test_every_object_passes_the_strict_kueue_v1beta2_and_kubernetes_schemas(path: Path, validator: Validator) -> None:
    errors = [str(e) for obj in render(path).all_objects for e in validator.errors(obj)]
    assert errors == [], "\n".join(errors)


def _stack_pair(tmp_path: Path, change_worker: dict | None = None) -> Path:  # type: ignore[type-arg]
    manager = yaml.safe_load(MANAGER.read_text())
    worker = yaml.safe_load(WORKER.read_text())
    for key, value in (change_worker or {}).items():
        worker["config"]["trainyard:platform"][key] = value
    (tmp_path / "Pulumi.worker-1.yaml").write_text(yaml.safe_dump(worker))
    path = tmp_path / "Pulumi.manager.yaml"
    path.write_text(yaml.safe_dump(manager))
    return path


def test_a_worker_without_one_of_the_managers_tenants_is_refused(tmp_path: Path) -> None:
    worker_tenants = yaml.safe_load(WORKER.read_text())["config"]["trainyard:platform"]["tenants"][:1]
    path = _stack_pair(tmp_path, {"tenants": worker_tenants})
    with pytest.raises(ConfigError) as caught:
        open_stack(str(path), ROOT)
    [problem] = caught.value.problems
    assert problem.path == "trainyard:platform.multikueue.workers[0].stack"
    assert "tenant 'team-b' has no queue on worker worker-1" in problem.reason


def test_a_worker_stack_that_is_not_a_worker_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _stack_pair(tmp_path, {"multikueue": None})
    assert main(["validate", str(path)]) == 2
    assert "is not a MultiKueue worker (set multikueue.role: worker)" in capsys.readouterr().err


@pytest.mark.parametrize(("multikueue", "reason"), [
    ({"role": "manager"}, "a manager needs at least one worker"),
    ({"role": "worker", "workers": [{"name": "w", "stack": "x.yaml", "kubeconfig": {"file": "k"}}]},
     "a worker lists no workers"),
    ({"role": "manager", "workers": [{"name": "w", "stack": "x.yaml",
                                      "kubeconfig": {"file": "k", "pulumi_secret": "k"}}]},
     "set exactly one of pulumi_secret and file"),
])
def test_multikueue_settings_are_checked_with_their_field_path(tmp_path: Path, multikueue: dict, reason: str,  # type: ignore[type-arg]
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(MANAGER.read_text())
    doc["config"]["trainyard:platform"]["multikueue"] = multikueue
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "trainyard:platform.multikueue" in err and reason in err


def _worker_problems(tmp_path: Path, change_worker: dict) -> list:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as caught:
        open_stack(str(_stack_pair(tmp_path, change_worker)), ROOT)
    return caught.value.problems


def _worker_tenants() -> list[dict]:  # type: ignore[type-arg]
    return yaml.safe_load(WORKER.read_text())["config"]["trainyard:platform"]["tenants"]


def test_a_worker_tenant_in_another_namespace_is_refused_naming_both_namespaces(tmp_path: Path) -> None:
    tenants = _worker_tenants()
    tenants[0]["namespace"] = "team-a-jobs"
    [problem] = _worker_problems(tmp_path, {"tenants": tenants})
    assert problem.path == "trainyard:platform.multikueue.workers[0].stack"
    assert problem.reason == "tenant 'team-a' uses namespace 'team-a' here but 'team-a-jobs' on worker worker-1"


def test_a_worker_without_a_priority_class_a_manager_tenant_uses_is_refused(tmp_path: Path) -> None:
    doc = yaml.safe_load(WORKER.read_text())["config"]["trainyard:platform"]
    tenants = doc["tenants"]
    tenants[0]["priority_classes"] = ["standard"]  # the worker stack itself must stay valid without "high"
    classes = [c for c in doc["priority_classes"] if c["name"] != "high"]
    [problem] = _worker_problems(tmp_path, {"tenants": tenants, "priority_classes": classes})
    assert problem.path == "trainyard:platform.multikueue.workers[0].stack"
    assert problem.reason == "tenant 'team-a': priority classes high are not defined on worker worker-1"


def test_a_worker_with_a_tenant_the_manager_does_not_dispatch_is_refused(tmp_path: Path) -> None:
    tenants = _worker_tenants()
    extra = {**tenants[1], "name": "team-c", "groups": ["team-c-engineers"]}
    extra["quotas"] = [{"flavor": q["flavor"], "gpus": 0} for q in extra["quotas"]]  # no quota left to share
    extra.pop("cohort", None)
    [problem] = _worker_problems(tmp_path, {"tenants": [*tenants, extra]})
    assert problem.path == "trainyard:platform.multikueue.workers[0].stack"
    assert problem.reason == "worker worker-1 has tenants the manager does not dispatch: team-c"


def test_an_invalid_worker_stack_is_refused_with_its_own_problem(tmp_path: Path) -> None:
    tenants = _worker_tenants()
    tenants[0]["default_priority_class"] = "urgent"
    [problem] = _worker_problems(tmp_path, {"tenants": tenants})
    assert problem.path == "trainyard:platform.multikueue.workers[0].stack"
    assert problem.reason.startswith("worker stack Pulumi.worker-1.yaml is not valid: ")
    assert problem.reason.endswith(
        "trainyard:platform.tenants[0]: default_priority_class must be one of priority_classes")
