"""Node tier: the lab's CPU image (``rehearsal/lab_image.py``) pulled and run by containerd on a real node, as pods.

The first step of "the lab, live" (issue #22 item 5): the image the ``lora-peft`` runtime pulls, built here, pushed
to the node's loopback registry under its own name (``registry.trainyard.internal/...``, which the node's containerd
maps to that registry) and run by digest as the runtime runs its ``node`` container: user 1000:1000, no
capabilities, RuntimeDefault seccomp, the runtime's command ``torchrun /opt/trainyard/programs/lora_peft.py`` with
the ``PET_*`` environment Trainer's torch plugin gives a one-node job. The inputs are the lab test's (its tiny random
Llama, made by a pod of the image with the lab helper, and its generated dataset) on a directory of the node
(``hostPath``: what the initializers' volume and the checkpoints bucket are in the platform), so that one pod's
checkpoint is the next pod's start:

- a reference pod trains 8 steps uninterrupted;
- an attempt is deleted after step 4 (the kubelet sends SIGTERM to torchrun, the container's first process, as on a
  drain or a preemption): its rank finishes the step, writes the SIGTERM checkpoint and exits 143;
- a second attempt resumes from that checkpoint and ends with the reference's adapter, byte for byte, and its loss curve.

Not yet (the next steps, docs/rehearsal.md "The lab's image"): a TrainJob through a tenant's queue (the platform's
pools are fake GPU nodes; the runtime's initializers' images are not built here), the tenant's bucket, MLflow.

Needs root, the tools of ``tools/build.sh node`` (control plane, kubelet, crane), Debian's containerd, runc and CNI
plugins, and ~5 GB of disk while it runs (the image in the factory's cache, the registry's memory, containerd's
content and snapshot: removed after). Run under ``flock /tmp/trainyard-node.lock``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.lab.test_lab import WORDS, _dataset
from tests.node.one_node import Running, one_real_node
from trainyard.project import open_stack
from trainyard.rehearsal import factory, lab_image
from trainyard.rehearsal.image_cache import BuiltImage, cache_root
from trainyard.rehearsal.kube import Kube, wait_until

pytestmark = pytest.mark.node
NAMESPACE = "default"
PROGRAM = f"/{lab_image.PROGRAMS_IN_IMAGE}/lora_peft.py"
MAX_STEPS, INTERRUPT_AT = 8, 4
ARGS = ["--max-steps", str(MAX_STEPS), "--checkpoint-every", "3", "--keep-checkpoints", "2", "--micro-batch-size", "2",
        "--grad-accumulation", "2", "--seq-len", "16", "--precision", "fp32", "--learning-rate", "0.02",
        "--warmup-steps", "2", "--lora-rank", "4", "--lora-alpha", "8", "--lora-dropout", "0.1"]
# Loads the lab helper from the ConfigMap and points it at the image's program, then makes the tiny Llama.
MAKE_BASE = """import importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("lab_helper", "/lab/lab_helper.py")
helper = importlib.util.module_from_spec(spec)
spec.loader.exec_module(helper)
helper.PROGRAM = Path("/opt/trainyard/programs/lora_peft.py")
print(json.dumps(helper.make_base(sys.argv[1], sys.argv[2])), flush=True)
"""
TIMINGS: dict[str, float] = {}
LOG: list[str] = []


@dataclass(frozen=True)
class Lab:
    running: Running
    image: BuiltImage
    workspace: Path  # on the node: the pods' /workspace


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if os.geteuid() != 0:
        pytest.skip("a real node needs root (containerd, kubelet, network namespaces)")
    stack = open_stack("local", ROOT)
    start = time.monotonic()
    image = lab_image.build(stack.config, ROOT, cache_root())
    TIMINGS[f"image {'from the cache' if image.cached else 'built'}"] = time.monotonic() - start
    workspace = tmp_path_factory.mktemp("lab-workspace")
    os.chown(workspace, lab_image.USER, lab_image.USER)
    try:
        with one_real_node(tmp_path_factory, "lab-node", ("etcd", "kube-apiserver", "kubelet", "crane"),
                           "node-0 up (registry, images, containerd, kubelet, Ready)",
                           registry_hosts=(image.target.registry,)) as running:
            start = time.monotonic()
            factory.push_images([image], running.node.registry.address)
            TIMINGS["push to the node's loopback registry"] = time.monotonic() - start
            running.timings.update(TIMINGS)
            yield Lab(running, image, workspace)
            running.timings.update(TIMINGS)
        left = running.node.leftovers()  # after the fixture's down: no process, mount, bridge or chain of node-0
        assert left == [], left
    finally:
        print("\n==== lab image on node-0 ====\n" + "\n".join(LOG))
        for directory in tmp_path_factory.getbasetemp().glob("lab-*"):  # containerd's content and snapshots, inputs
            shutil.rmtree(directory, ignore_errors=True)


def _kube(lab: Lab) -> Kube:
    return lab.running.plane.kube()


def _pod(lab: Lab, name: str, command: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod of the image as the runtime's ``node`` container runs (securityContext of runtimes/lora-peft.yaml)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"restartPolicy": "Never", "nodeName": lab.running.node.name, "terminationGracePeriodSeconds": 30,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{
                         "name": "node", "image": lab.image.reference, "imagePullPolicy": "IfNotPresent",
                         "command": command, "env": [{"name": k, "value": v} for k, v in sorted((env or {}).items())],
                         "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                             "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                         "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"},
                                          {"name": "lab", "mountPath": "/lab"}]}],
                     "volumes": [{"name": "workspace", "hostPath": {"path": str(lab.workspace), "type": "Directory"}},
                                 {"name": "lab", "configMap": {"name": "lab-inputs"}}]}}


def _phase(kube: Kube, name: str) -> str:
    status = kube.get("pod", name, NAMESPACE).get("status") or {}
    return str(status.get("phase", ""))


def _run_pod(lab: Lab, name: str, command: list[str], env: dict[str, str] | None = None,
             delete_after: str | None = None) -> tuple[str, list[str]]:
    """Create the pod, follow its log; ``delete_after``: delete the pod once a log line starts with it (SIGTERM)."""
    kube, started = _kube(lab), time.monotonic()
    kube.apply([_pod(lab, name, command, env)], field_manager="trainyard-test")
    wait_until(f"pod {name} to start", lambda: _phase(kube, name) in {"Running", "Succeeded", "Failed"}, 600, interval=1)
    TIMINGS.setdefault("first pod created -> Running (pulls the image)", time.monotonic() - started)
    follow = subprocess.Popen([str(kube.kubectl), "--kubeconfig", str(kube.kubeconfig), "logs", "-f", name, "-n",
                               NAMESPACE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert follow.stdout is not None
    lines, phase, deleted = [], "", False
    for line in follow.stdout:
        lines.append(line.rstrip())
        if delete_after is not None and line.startswith(delete_after):
            kube.run("delete", "pod", name, "-n", NAMESPACE, "--wait=false")  # the kubelet sends SIGTERM
            LOG.append(f"  [{name}] deleted after: {line.strip()}")
            delete_after, deleted = None, True
    follow.wait(timeout=60)
    if deleted:  # a deleted pod is removed once its container ended: there is no phase to wait for
        wait_until(f"deleted pod {name} to be removed", lambda: not kube.exists("pod", name, NAMESPACE), 300, interval=1)
    else:
        phase = wait_until(f"pod {name} to finish", lambda: _phase(kube, name) if _phase(kube, name) in
                           {"Succeeded", "Failed"} else None, 300, interval=1)
        described = kube.run("get", "pod", name, "-n", NAMESPACE, "-o", "wide").stdout.strip()
        LOG.append(f"$ kubectl get pod {name} -o wide\n{described}")
    LOG.append(f"$ [{name}] {' '.join(command[:2])} ... -> {phase or 'deleted'} ({time.monotonic() - started:.1f}s)")
    LOG.extend(f"    {line}" for line in lines if line.startswith(("[lora-peft]", "lora-peft: error", "{", "torch")))
    return phase, lines


def test_the_lab_image_trains_on_node_0_and_a_deleted_pods_checkpoint_resumes_to_the_same_adapter(lab: Lab) -> None:
    kube = _kube(lab)
    data = _dataset(1, 48)
    kube.apply([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lab-inputs", "namespace": NAMESPACE},
                 "data": {"lab_helper.py": (ROOT / "tests" / "lab" / "lab_helper.py").read_text(),
                          "make_base.py": MAKE_BASE, "chat.jsonl": data}}], field_manager="trainyard-test")

    # What the node runs: the digest the factory built, by the name the runtime pulls.
    phase, lines = _run_pod(lab, "lab-base", ["python3", "/lab/make_base.py", "/workspace/model", " ".join(WORDS)])
    assert phase == "Succeeded", "\n".join(lines[-40:])
    base = json.loads(lines[-1])
    pod = kube.get("pod", "lab-base", NAMESPACE)
    assert pod["spec"]["nodeName"] == "node-0"
    assert pod["status"]["containerStatuses"][0]["imageID"].endswith(lab.image.digest)
    (lab.workspace / "dataset").mkdir()
    (lab.workspace / "dataset" / "chat.jsonl").write_text(data)
    env = {"TRAINYARD_DATASET_URI": "s3://lab-datasets/lab/chat.jsonl", "TRAINYARD_DATASET_VERSION": "v1",
           "TRAINYARD_DATASET_DIGEST": "sha256:" + hashlib.sha256(data.encode()).hexdigest(),
           "TRAINYARD_BASE_MODEL_URI": "s3://lab-models/base/tiny-llama/", "TRAINYARD_BASE_MODEL_REVISION": base["digest"],
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           # What Trainer's torch plugin gives the node's container of a one-node, one-process TrainJob.
           "PET_NNODES": "1", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "127.0.0.1",
           "PET_MASTER_PORT": "29400"}

    def torchrun(job: str) -> list[str]:
        return ["torchrun", PROGRAM, *ARGS, "--checkpoint-uri", f"/workspace/{job}/checkpoints",
                "--output-dir", f"/workspace/{job}/out"]

    phase, reference = _run_pod(lab, "lab-reference", torchrun("reference"), env)
    assert phase == "Succeeded", "\n".join(reference[-40:])
    start = time.monotonic()
    phase, first = _run_pod(lab, "lab-attempt-1", torchrun("job"), {**env, "TRAINYARD_PAUSE_AFTER_STEP": "3"},
                            delete_after=f"[lora-peft] step {INTERRUPT_AT}/")
    TIMINGS["attempt deleted at step 4 -> its container ended"] = time.monotonic() - start
    assert f"[lora-peft] checkpoint step {INTERRUPT_AT} (SIGTERM) complete at /workspace/job/checkpoints/" \
           f"step-{INTERRUPT_AT:08d}/" in first, "\n".join(first[-40:])
    manifest = json.loads((lab.workspace / "job" / "checkpoints" / f"step-{INTERRUPT_AT:08d}" / "CHECKPOINT.json")
                          .read_text())
    assert manifest["reason"] == "SIGTERM" and manifest["step"] == INTERRUPT_AT

    phase, second = _run_pod(lab, "lab-attempt-2", torchrun("job"), env)
    assert phase == "Succeeded", "\n".join(second[-40:])
    assert f"[lora-peft] resumed from checkpoint step {INTERRUPT_AT} at /workspace/job/checkpoints/" in second
    reference_out, job_out = lab.workspace / "reference" / "out", lab.workspace / "job" / "out"
    curve_ref, curve = (json.loads((d / "loss_curve.json").read_text()) for d in (reference_out, job_out))
    adapters = [hashlib.sha256((d / "adapter" / "adapter_model.safetensors").read_bytes()).hexdigest()
                for d in (reference_out, job_out)]
    LOG.append(f"  loss curve uninterrupted: {curve_ref}\n  loss curve resumed:       {curve}")
    LOG.append(f"  adapter_model.safetensors sha256: reference {adapters[0]}, resumed {adapters[1]}")
    assert curve == curve_ref and len(curve) == MAX_STEPS and curve[-1] < curve[0]
    assert adapters[0] == adapters[1]
    print("\n".join(f"    {k}: {v:.1f}s" for k, v in TIMINGS.items()))
