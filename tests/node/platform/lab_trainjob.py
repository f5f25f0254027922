"""The lab as a tenant runs it on the real node: inputs uploaded and approved, a ``lora-peft`` TrainJob through the
tenant's queue, interrupted and resumed (used by tests/node/platform/test_lab.py).

The inputs are the lab tier's (tests/lab: a tiny random Llama made by the lab image with the lab helper, and the
generated dataset), put in the tenant's buckets of the in-cluster SeaweedFS by a pod of the lab image with the
tenant's credentials; what the upload returned (the dataset's version id and sha256, the model directory's digest)
becomes the stack's lineage entries, as docs/lab.md step 1 says a platform team approves inputs.
"""

from __future__ import annotations

import hashlib
import subprocess
from typing import Any

from tests.conftest import ROOT
from tests.lab.test_lab import WORDS, _dataset
from trainyard.rehearsal.kube import Kube, wait_until

# The lab tier's settings: 8 steps, a checkpoint every 3, the interruption after step 4.
MAX_STEPS, INTERRUPT_AT = 8, 4
ARGS = ["--max-steps", str(MAX_STEPS), "--checkpoint-every", "3", "--keep-checkpoints", "2", "--micro-batch-size", "2",
        "--grad-accumulation", "2", "--seq-len", "16", "--precision", "fp32", "--learning-rate", "0.02",
        "--warmup-steps", "2", "--lora-rank", "4", "--lora-alpha", "8", "--lora-dropout", "0.1"]
# Kueue counts every step's requests together: 250m + 250m for the initializers (the runtime's) and this trainer
# fit a tenant's 1-CPU quota on the cpu flavor and node-0's room beside the platform; the limit lets torch start fast.
TRAINER_RESOURCES = {"requests": {"cpu": "500m", "memory": "3Gi"}, "limits": {"cpu": "2", "memory": "3Gi"}}
LAB_IMAGE = "registry.trainyard.internal/trainyard/lora-peft:0.1.0"
HELPER = ROOT / "tests" / "lab" / "lab_helper.py"

# In a pod of the lab image: the tiny Llama (lab helper) uploaded as a model directory, the dataset as one object.
PUT_INPUTS = """import hashlib, importlib.util, json, sys, boto3
from pathlib import Path
spec = importlib.util.spec_from_file_location("lab_helper", "/lab/lab_helper.py")
helper = importlib.util.module_from_spec(spec)
spec.loader.exec_module(helper)
helper.PROGRAM = Path("/opt/trainyard/programs/lora_peft.py")
model_uri, dataset_uri = sys.argv[1], sys.argv[2]
base = helper.make_base("/work/base", open("/lab/words.txt").read())
helper.upload("/work/base", model_uri)
data = open("/lab/train.jsonl", "rb").read()
bucket, key = helper.split(dataset_uri)
put = boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=data)
print(json.dumps({"model_digest": base["digest"], "model_files": helper.keys_under(model_uri),
                  "dataset_version": put.get("VersionId") or "null",
                  "dataset_digest": "sha256:" + hashlib.sha256(data).hexdigest()}), flush=True)
"""

# In a pod of the provisioner image: the final checkpoint of each TrainJob, as the program wrote it to the bucket.
READ_CHECKPOINTS = """import json, os, boto3
s3, bucket = boto3.client("s3"), os.environ["BUCKET"]
out = {}
for job in os.environ["JOBS"].split(","):
    keys = sorted(o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=job + "/")
                  for o in page.get("Contents", []))
    steps = sorted({k.split("/")[1] for k in keys})
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=f"{job}/{steps[-1]}/CHECKPOINT.json")["Body"].read())
    out[job] = {"steps": steps, "final": manifest}
print(json.dumps(out))
"""


def inputs_configmap(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lab-inputs", "namespace": namespace},
            "data": {"lab_helper.py": HELPER.read_text(), "words.txt": " ".join(WORDS),
                     "train.jsonl": _dataset(seed=11, lines=64)}}


def dataset_sha256() -> str:
    return "sha256:" + hashlib.sha256(_dataset(seed=11, lines=64).encode()).hexdigest()


def lab_pod(name: str, namespace: str, image: str, command: list[str], secret: str) -> dict[str, Any]:
    """A restricted pod of the lab image on node-0, the tenant's object-store keys as its environment."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "nodeSelector": {"kubernetes.io/hostname": "node-0"},
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "lab", "image": image, "command": command,
                                     "envFrom": [{"secretRef": {"name": secret}}],
                                     "env": [{"name": "HOME", "value": "/work"}],
                                     "resources": {"requests": {"cpu": "250m", "memory": "1Gi"},
                                                   "limits": {"cpu": "1", "memory": "2Gi"}},
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}},
                                     "volumeMounts": [{"name": "work", "mountPath": "/work"},
                                                      {"name": "lab", "mountPath": "/lab"}]}],
                     "volumes": [{"name": "work", "emptyDir": {}}, {"name": "lab", "configMap": {"name": "lab-inputs"}}]}}


def trainjob(name: str, namespace: str, tenant: str, dataset_uri: str, model_uri: str, pins: dict[str, str],
             extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``lora-peft`` TrainJob as a tenant writes it (docs/lab.md): its queue, the approved inputs as the initializers'
    URIs and their pins in the trainer's environment, the lab's settings, a CPU size, one process."""
    from trainyard.manifests.meta import DEFAULT_LOCAL_QUEUE, QUEUE_NAME_LABEL, TENANT_LABEL

    env = {**pins, **(extra_env or {})}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {QUEUE_NAME_LABEL: DEFAULT_LOCAL_QUEUE, TENANT_LABEL: tenant}},
            "spec": {"runtimeRef": {"name": "lora-peft"},
                     "initializer": {"dataset": {"storageUri": dataset_uri}, "model": {"storageUri": model_uri}},
                     "trainer": {"numNodes": 1, "numProcPerNode": 1, "args": ARGS,
                                 "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
                                 "resourcesPerNode": TRAINER_RESOURCES}}}


def trainer_pods(kube: Kube, namespace: str, job: str) -> list[dict[str, Any]]:
    return kube.items("pods", namespace, selector=f"jobset.sigs.k8s.io/jobset-name={job},"
                                                  "jobset.sigs.k8s.io/replicatedjob-name=node")


def follow_and_interrupt(kube: Kube, namespace: str, job: str, after: str, timeout: float = 600) -> tuple[str, list[str]]:
    """Wait for the TrainJob's trainer pod to run, follow its log, delete the pod once a line starts with ``after``
    (the kubelet sends SIGTERM, as on a drain or a preemption); the pod's name and its log."""
    def running() -> str | None:
        pods = [p for p in trainer_pods(kube, namespace, job) if p["status"].get("phase") == "Running"]
        return str(pods[0]["metadata"]["name"]) if pods else None

    pod = wait_until(f"the trainer pod of {namespace}/{job} to run", running, timeout, interval=1)
    follow = subprocess.Popen([str(kube.kubectl), "--kubeconfig", str(kube.kubeconfig), "logs", "-f", pod, "-n",
                               namespace], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert follow.stdout is not None
    lines, deleted = [], False
    for line in follow.stdout:
        lines.append(line.rstrip())
        if not deleted and line.startswith(after):
            kube.run("delete", "pod", pod, "-n", namespace, "--wait=false")
            deleted = True
    follow.wait(timeout=60)
    assert deleted, "\n".join(lines[-40:])
    return pod, lines


def steps(lines: list[str]) -> list[str]:
    """The program's step lines (``[lora-peft] step N/M loss X``)."""
    return [line for line in lines if line.startswith("[lora-peft] step ")]


def pod_log(kube: Kube, namespace: str, pod: str, container: str | None = None) -> list[str]:
    args = ["logs", pod, "-n", namespace, *(["-c", container] if container else [])]
    return kube.run(*args, check=False).stdout.splitlines()
