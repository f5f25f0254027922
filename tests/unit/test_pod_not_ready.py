"""``kube.pod_not_ready``: the one line a failed ``pulumi up`` on real nodes prints per pod that is not Ready.

The objects are shaped as the API server returns them (core/v1 Pod and Event, ``kubectl get -o json``)."""

from __future__ import annotations

from typing import Any

from trainyard.rehearsal.kube import pod_not_ready


def pod(name: str, conditions: dict[str, str], statuses: list[dict[str, Any]], node: str | None = "node-0",
        phase: str = "Running", owner: str = "ReplicaSet") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "kueue-system", "uid": f"uid-{name}",
                         "ownerReferences": [{"kind": owner, "name": "x"}]},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "containerStatuses": statuses,
                       "conditions": [{"type": t, "status": s} for t, s in conditions.items()]}}


def event(uid: str, reason: str, message: str, when: str, kind: str = "Warning", count: int = 1) -> dict[str, Any]:
    return {"type": kind, "reason": reason, "message": message, "count": count, "lastTimestamp": when,
            "involvedObject": {"kind": "Pod", "uid": uid}}


def test_a_ready_pod_and_a_finished_job_pod_say_nothing() -> None:
    ready = pod("ok", {"PodScheduled": "True", "Ready": "True"},
                [{"name": "manager", "ready": True, "restartCount": 0, "state": {"running": {}}}])
    done = pod("provision-abc", {"Ready": "False"}, [{"name": "mc", "ready": False, "restartCount": 0,
               "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}], phase="Succeeded", owner="Job")
    assert pod_not_ready(ready) is None
    assert pod_not_ready(done) is None


def test_a_pull_that_fails_names_the_image_and_the_event() -> None:
    p = pod("kueue-1", {"Ready": "False"}, [{"name": "manager", "ready": False, "restartCount": 0, "state": {
        "waiting": {"reason": "ImagePullBackOff",
                    "message": 'Back-off pulling image "trainyard.local/mirror/kueue/kueue:v0.19.2"'}}}])
    events = [event("uid-kueue-1", "Failed", "Failed to pull image ...: not found", "2026-12-07T10:00:01Z", count=4),
              event("uid-other", "Failed", "another pod's", "2026-12-07T10:00:02Z"),
              event("uid-kueue-1", "Pulling", "Pulling image", "2026-12-07T10:00:03Z", kind="Normal")]
    line = pod_not_ready(p, events)
    assert line == ('kueue-system/kueue-1: manager waiting: ImagePullBackOff Back-off pulling image '
                    '"trainyard.local/mirror/kueue/kueue:v0.19.2" (restarts 0) '
                    '[events: Failed: Failed to pull image ...: not found (x4)]')


def test_a_crash_loop_gives_the_last_exit_and_a_failing_probe_its_latest_events() -> None:
    crashing = pod("mlflow-1", {"Ready": "False"}, [{"name": "mlflow", "ready": False, "restartCount": 3,
                   "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                   "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}])
    assert pod_not_ready(crashing) == ("kueue-system/mlflow-1: mlflow waiting: CrashLoopBackOff back-off 40s "
                                       "(restarts 3, last exit 137 (OOMKilled))")
    backing_off = pod("mlflow-2", {"Ready": "False"}, [{"name": "mlflow", "ready": False, "restartCount": 2,
                      "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}])
    assert pod_not_ready(backing_off) == "kueue-system/mlflow-2: mlflow exited 3 (Error, restarts 2)"
    slow = pod("cnpg-1", {"Ready": "False"}, [{"name": "manager", "ready": False, "restartCount": 1,
               "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}}}])
    events = [event("uid-cnpg-1", "Unhealthy", f"Readiness probe failed: {n}", f"2026-12-07T10:00:0{n}Z")
              for n in (3, 1, 2)]
    assert pod_not_ready(slow, events) == (
        "kueue-system/cnpg-1: manager running, not ready (restarts 1, last exit 2 (Error)) "
        "[events: Unhealthy: Readiness probe failed: 2 | Unhealthy: Readiness probe failed: 3]")


def test_an_unscheduled_pod_says_why_the_scheduler_left_it() -> None:
    p = pod("pending", {}, [], node=None, phase="Pending")
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                  "message": "0/7 nodes are available: 1 Insufficient cpu."}]
    assert pod_not_ready(p) == ("kueue-system/pending: not scheduled (Unschedulable: "
                                "0/7 nodes are available: 1 Insufficient cpu.)")
    fresh = pod("fresh", {}, [], node=None, phase="Pending")
    assert pod_not_ready(fresh) == "kueue-system/fresh: not scheduled (no decision yet)"
