"""MultiKueue, live: a manager and a worker rehearsal cluster, each with the real Kueue 0.19.2, JobSet and Trainer.

The two stacks are tests/fixtures/multikueue/Pulumi.{manager,worker-1}.yaml, deployed with the real
Pulumi engine (tools/pulumi-local.sh), the worker's kubeconfig reaching the manager only as the Pulumi
config secret ``trainyard:worker1Kubeconfig``. A TrainJob submitted to the manager must be dispatched:
the manager's Workload gets the MultiKueue AdmissionCheck Ready, the TrainJob is created on the worker
and runs there on kwok's fake GPU nodes, and its status is mirrored back to the manager, which runs
nothing itself. The transcript (object names, conditions, seconds after submit) is printed.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import private_env, tools_problem
from tests.conftest import ROOT
from trainyard.project import open_stack
from trainyard.rehearsal.cluster import Settings
from trainyard.rehearsal.multikueue import MULTIKUEUE_MANAGED_BY, ORIGIN, PREBUILT_WORKLOAD, MultiKueueRehearsal
from trainyard.rehearsal.scenario import Job

pytestmark = pytest.mark.cluster

FIXTURES = ROOT / "tests" / "fixtures" / "multikueue"
WORKER = "worker-1"
SECRET_KEY = "worker1Kubeconfig"


@pytest.fixture(scope="module")
def multikueue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MultiKueueRehearsal, dict[str, float]]]:
    problem = tools_problem()
    if problem is not None:
        pytest.skip(problem)
    envs, settings = {}, {}
    for name in ("manager", WORKER):
        base = tmp_path_factory.mktemp(f"mk-{name}")
        env = private_env(base / "cluster")
        # Each cluster's Pulumi state, run dir and home of its own (tools/pulumi-local.sh).
        env.update({"TRAINYARD_STATE_DIR": str(base / "state"), "TRAINYARD_RUN_DIR": str(base / "run"),
                    "TRAINYARD_PULUMI_HOME": str(base / "pulumi-home")})
        envs[name], settings[name] = env, Settings.from_env(env)
    session = MultiKueueRehearsal(open_stack(str(FIXTURES / "Pulumi.manager.yaml"), ROOT),
                                  {WORKER: open_stack(str(FIXTURES / f"Pulumi.{WORKER}.yaml"), ROOT)}, settings, envs)
    timings: dict[str, float] = {}
    try:
        start = time.monotonic()
        session.up()
        timings["both clusters up"] = time.monotonic() - start
        yield session, timings
    finally:
        session.down(purge=True)


def test_both_stacks_deploy_with_the_worker_kubeconfig_only_as_a_pulumi_secret(
        multikueue: tuple[MultiKueueRehearsal, dict[str, float]]) -> None:
    session, timings = multikueue
    runs = session.deploy()
    for name, run in runs.items():
        timings[f"pulumi up {name}"] = run.seconds
        assert run.returncode == 0, f"{name}: {run.output[-5000:]}"
    assert set(runs) == {WORKER, "manager"}
    worker_kubeconfig = session.workers[WORKER].settings.kubeconfig.read_text()
    client_key = next(line.split(":", 1)[1].strip() for line in worker_kubeconfig.splitlines()
                      if "client-key-data" in line)
    manager = session.manager
    # The live Secret holds the worker's kubeconfig; Kueue builds its worker client from it.
    secret = manager.kube.get("secret", "multikueue-worker-1", "kueue-system")
    # (`pulumi config set` drops the trailing newline of a value read from stdin.)
    assert base64.b64decode(secret["data"]["kubeconfig"]).decode() == worker_kubeconfig.rstrip("\n")
    # ...and nowhere else in plaintext: not the engine's output, the stack file it ran, or the Pulumi state.
    run_dir = Path(manager.env["TRAINYARD_RUN_DIR"])
    state_dir = Path(manager.env["TRAINYARD_STATE_DIR"])
    stack_file = (run_dir / "stacks" / "Pulumi.manager.yaml").read_text()
    assert f"trainyard:{SECRET_KEY}:" in stack_file and "secure: v1:" in stack_file
    places = {"engine output": runs["manager"].output, "run stack file": stack_file,
              **{str(p.relative_to(state_dir)): p.read_text(errors="replace")
                 for p in state_dir.rglob("*.json")}}
    for place, text in places.items():
        assert client_key not in text and base64.b64decode(client_key).decode() not in text, place


def test_a_trainjob_submitted_to_the_manager_runs_on_the_worker_and_its_status_comes_back(
        multikueue: tuple[MultiKueueRehearsal, dict[str, float]], capsys: pytest.CaptureFixture[str]) -> None:
    session, timings = multikueue
    start = time.monotonic()
    check = session.wait_clusters_active()
    timings["MultiKueueCluster Active"] = time.monotonic() - start
    assert any(c["type"] == "Active" and c["status"] == "True" for c in check["status"]["conditions"]), check
    job = Job(name="mk-dispatch", tenant="team-a", nodes=2, gpus_per_node=4, flavor="fake-a100", run_for="5s")
    dispatch = session.dispatch(job, WORKER, timeout=240)
    timings["submit -> manager TrainJob Complete"] = dispatch.events[-1].at if dispatch.events else 0
    with capsys.disabled():
        print("\n" + dispatch.transcript())
        print("\n".join(f"  {what}: {seconds:.1f}s" for what, seconds in timings.items()))

    assert dispatch.manager_trainjob["spec"].get("managedBy") == MULTIKUEUE_MANAGED_BY, dispatch.transcript()
    checks = {c["name"]: c for c in dispatch.manager_workload["status"].get("admissionChecks") or []}
    assert checks["multikueue"]["state"] == "Ready", dispatch.transcript()
    assert dispatch.seen("AdmissionCheck multikueue state=Ready"), dispatch.transcript()
    # The worker got the job: its Kueue admitted the Workload the manager pre-built, Trainer there
    # (managedBy cleared) made the JobSet, and the pods ran on the worker's fake A100 nodes.
    copy = dispatch.worker_trainjob
    assert copy and copy["spec"].get("managedBy") in (None, "trainer.kubeflow.org/trainjob-controller"), copy
    workload_name = dispatch.manager_workload["metadata"]["name"]
    assert (copy["metadata"].get("annotations") or {}).get(PREBUILT_WORKLOAD, copy["metadata"]["labels"].get(
        PREBUILT_WORKLOAD)) == workload_name == dispatch.worker_workload["metadata"]["name"]
    assert copy["metadata"]["labels"][ORIGIN] == "mk-manager"  # the origin the manager stack renders
    assert dispatch.manager_workload["status"]["clusterName"] == WORKER
    assert dispatch.seen("JobSet created by Trainer"), dispatch.transcript()
    worker_nodes = {n["metadata"]["name"]: n for n in session.workers[WORKER].kube.items("nodes", None)}
    assert len(dispatch.worker_pod_nodes) == 2, dispatch.worker_pod_nodes
    assert {worker_nodes[n]["metadata"]["labels"]["trainyard.dev/pool"]
            for n in dispatch.worker_pod_nodes.values()} == {"fake-a100"}
    # Mirrored back: the manager's TrainJob carries the worker Trainer's status (jobsStatus, Complete);
    # the manager's own Trainer left the job alone (managedBy MultiKueue): no JobSet, no pod there.
    status = dispatch.manager_trainjob["status"]
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in status["conditions"]), dispatch.transcript()
    assert [j["succeeded"] for j in status["jobsStatus"]] == [1], status
    finished = {c["type"]: c for c in dispatch.manager_workload["status"]["conditions"]}["Finished"]
    assert finished["status"] == "True" and finished["reason"] == "Succeeded", finished
    assert not dispatch.manager_pods and not dispatch.seen("UNEXPECTED"), dispatch.transcript()
