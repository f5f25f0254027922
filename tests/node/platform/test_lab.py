"""Node tier, tests/node/platform after test_controllers (conftest.ORDER): the lab as a TrainJob on the real node
(issue #22 item 5), tracked in the cluster's MLflow. It needs what test_controllers did first: `trainyard cluster
lab-images` pushed and locked the lab's image and Trainer's initializers, and the next `pulumi up` pinned the runtimes
to them.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.node.platform.shared import TIMINGS, mlflow_versions, node_room, pod_finished, run_python
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.node import RealNode
from trainyard.rehearsal.session import REAL_NODE, Rehearsal
from trainyard.rehearsal.stack import merge
from trainyard.supply.lock import load_lock

pytestmark = pytest.mark.node


def _claim_of(pod: dict[str, Any]) -> str:
    """The claim a TrainJob's pod mounts as ``initializer`` (JobSet names it from the runtime's claim template)."""
    name: str = next(v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                     if v["name"] == "initializer" and v.get("persistentVolumeClaim"))
    return name


def test_the_lab_runs_as_a_trainjob_on_the_real_node_and_resumes_to_the_same_adapter(live: Rehearsal) -> None:
    """Issue #22 item 5 as a tenant lives it, on node-0: the lab's inputs uploaded to the tenant's buckets and approved
    in the stack's lineage (one ``pulumi up``); a ``lora-peft`` TrainJob through the tenant's queue, admitted on the
    ``cpu`` flavor, whose initializers (Trainer's images, by digest) fetch the pinned dataset and base model from
    SeaweedFS into the job's claim (a ``local`` volume the rehearsal's provisioner made on node-0) and whose trainer
    (the lab image) trains and checkpoints to the tenant's checkpoints bucket; the same TrainJob interrupted by deleting
    its trainer pod after step 4 (SIGTERM: a checkpoint, exit 143), replaced by the Job and resumed from that
    checkpoint, while Kueue's pod and the node's containerd are killed, ends with the uninterrupted run's adapter, byte
    for byte, and its losses. Each TrainJob has one run in the MLflow server of the cluster (its chart, on the
    CloudNativePG database), the interrupted one continued by its second attempt, with the losses its pods printed,
    and a model version whose source is the adapter in the tenant's models bucket, as the tenant reads them with its
    own credentials. Deleting the TrainJobs deletes their claims, and the provisioner their volumes."""
    from tests.node.platform import lab_trainjob as lab
    from trainyard.manifests import object_store
    from trainyard.manifests.meta import OBJECT_STORE_SECRET
    from trainyard.rehearsal.local_provisioner import PROVISIONED_BY, PROVISIONER

    assert live.in_cluster is not None
    lock = load_lock(live.in_cluster.lock_file)
    image = f"{lab.LAB_IMAGE}@{lock.entries[lab.LAB_IMAGE].digest}"
    tenant = live.config.tenants[1]  # team-b: no object lock on its datasets bucket (test_controllers)
    namespace = tenant.namespace_name
    datasets, models, checkpoints = (object_store.bucket_name(live.config, tenant, kind)
                                     for kind in ("datasets", "models", "checkpoints"))
    dataset_uri, model_uri = f"s3://{datasets}/lab/train.jsonl", f"s3://{models}/lab/tiny-llama/"

    # 1. The inputs, uploaded with the tenant's keys; what the upload returned is what the platform team approves.
    live.kube.apply([lab.inputs_configmap(namespace)], field_manager="trainyard-test")
    start = time.monotonic()
    live.kube.create(lab.lab_pod("lab-inputs", namespace, image, ["python3", "-c", lab.PUT_INPUTS, model_uri,
                                                                   dataset_uri], OBJECT_STORE_SECRET))
    try:
        phase = pod_finished(live, namespace, "lab-inputs", 300)
        log = lab.pod_log(live.kube, namespace, "lab-inputs")
    finally:
        live.kube.delete("pod", "lab-inputs", namespace=namespace)
    assert phase == "Succeeded", "\n".join(log[-40:])
    uploaded = json.loads(log[-1])
    TIMINGS["the lab's inputs made and uploaded by a pod of the lab image"] = time.monotonic() - start
    print(f"uploaded: {json.dumps(uploaded)}")
    assert uploaded["dataset_digest"] == lab.dataset_sha256()
    lineage = {"lineage": {"tenants": {tenant.name: {
        "datasets": [{"name": "lab-chat", "uri": dataset_uri, "version": uploaded["dataset_version"],
                      "digest": uploaded["dataset_digest"], "licence": "CC-BY-4.0",
                      "source": "tests/lab: generated sentences", "classification": "internal"}],
        "base_models": [{"name": "tiny-llama", "uri": model_uri, "revision": uploaded["model_digest"],
                         "licence": "Apache-2.0", "source": "tests/lab: a tiny random Llama", "classification": "internal"}],
    }}}}
    approved = live.with_overrides(merge(live.overrides, lineage))  # the package's platform, and the lineage
    try:
        run = approved.deploy()
        assert run.returncode == 0, run.output[-4000:]
        TIMINGS["pulumi up approving the lab's inputs (lineage)"] = run.seconds
        pins = approved.config.lineage.pins(tenant.name, dataset=dataset_uri, model=model_uri)
        print(node_room(live))

        # 2. The uninterrupted reference.
        live.kube.create(lab.trainjob("lab-reference", namespace, tenant.name, dataset_uri, model_uri, pins))
        start = time.monotonic()
        live.wait_finished(["lab-reference"], namespace, timeout=900)
        TIMINGS["lab TrainJob (reference): submitted -> Complete"] = time.monotonic() - start
        workload = next(w for w in live.workloads(namespace)
                        if any(r["name"] == "lab-reference" for r in w["metadata"].get("ownerReferences", [])))
        flavors = {f for a in workload["status"]["admission"]["podSetAssignments"] for f in a.get("flavors", {}).values()}
        pods = live.kube.items("pods", namespace, selector="jobset.sigs.k8s.io/jobset-name=lab-reference")
        print(f"{namespace}/lab-reference: ClusterQueue {workload['status']['admission']['clusterQueue']}, flavors "
              f"{sorted(flavors)}; pods " + ", ".join(f"{p['metadata']['name']} {p['status'].get('phase')} on "
                                                       f"{p['spec'].get('nodeName')}" for p in pods))
        assert flavors == {"cpu"}, workload["status"]["admission"]
        assert {p["spec"]["nodeName"] for p in pods} == {REAL_NODE} and len(pods) == 3, pods
        (reference_pod,) = lab.trainer_pods(live.kube, namespace, "lab-reference")
        reference = lab.pod_log(live.kube, namespace, reference_pod["metadata"]["name"])
        print("\n".join(line for line in reference if line.startswith("[lora-peft]")))
        dataset_log = next(lab.pod_log(live.kube, namespace, p["metadata"]["name"]) for p in pods
                           if "dataset-initializer" in p["metadata"]["name"])
        print("\n".join(dataset_log[-4:]))
        assert len(lab.steps(reference)) == lab.MAX_STEPS, reference[-30:]
        assert any(line.startswith(f"[lora-peft] dataset {dataset_uri} version {uploaded['dataset_version']}")
                   and f"base model {model_uri} {uploaded['model_digest']}" in line for line in reference), reference
        claims = {"lab-reference": _claim_of(reference_pod)}  # JobSet's claim from the runtime's volumeClaimPolicies
        claim = live.kube.get("persistentvolumeclaim", claims["lab-reference"], namespace)
        volume = live.kube.get("persistentvolume", claim["spec"]["volumeName"])
        print(f"claim {namespace}/{claim['metadata']['name']} {claim['status']['phase']} -> {volume['metadata']['name']} "
              f"(local {volume['spec']['local']['path']}, {volume['spec']['persistentVolumeReclaimPolicy']})")
        assert volume["metadata"]["annotations"][PROVISIONED_BY] == PROVISIONER

        # 3. The same job, interrupted after step 4 by deleting its trainer pod, then resumed by the Job's next pod.
        live.kube.create(lab.trainjob("lab-lora", namespace, tenant.name, dataset_uri, model_uri, pins,
                                      {"TRAINYARD_PAUSE_AFTER_STEP": "2"}))
        start = time.monotonic()
        first_pod, first = lab.follow_and_interrupt(live.kube, namespace, "lab-lora",
                                                    f"[lora-peft] step {lab.INTERRUPT_AT}/{lab.MAX_STEPS}")
        # While the replacement trains: Kueue's pod and the node's containerd killed (issue #22, "Bad input and
        # faults"); the platform recovers around the running job, which loses nothing (its adapter, below).
        replacement = wait_until("the trainer's replacement pod to run", lambda: next(
            (p for p in lab.trainer_pods(live.kube, namespace, "lab-lora")
             if p["metadata"]["name"] != first_pod and p["status"].get("phase") == "Running"), None), 300, interval=1)
        kueue = next(n for n in live.installed_namespaces() if n.startswith("kueue"))
        (kueue_pod,) = [p["metadata"]["name"] for p in live.kube.items("pods", kueue)]
        live.kube.run("delete", "pod", "-n", kueue, kueue_pod, "--grace-period=0", "--wait=false")
        node = RealNode(live.settings, REAL_NODE, 0, proxy=True, dns=True)
        pid = node.processes.pid(node.containerd)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until("containerd to be gone", lambda: not node.processes.running(node.containerd), 30)
        node.up()
        print(f"during {replacement['metadata']['name']}: deleted {kueue}/{kueue_pod}, killed containerd "
              f"(pid {pid}) and started it again")
        live.wait_finished(["lab-lora"], namespace, timeout=900)
        live.wait_platform_ready(timeout=300)
        TIMINGS["lab TrainJob interrupted at step 4 (and Kueue, containerd killed): submitted -> Complete"] = \
            time.monotonic() - start
        (second_pod,) = [p for p in lab.trainer_pods(live.kube, namespace, "lab-lora")
                         if p["metadata"]["name"] != first_pod]
        assert second_pod["metadata"]["uid"] == replacement["metadata"]["uid"]  # the pod outlived containerd
        second = lab.pod_log(live.kube, namespace, second_pod["metadata"]["name"])
        claims["lab-lora"] = _claim_of(second_pod)
        print(f"--- {first_pod} (deleted after step {lab.INTERRUPT_AT})\n"
              + "\n".join(line for line in first if line.startswith("[lora-peft]"))
              + f"\n--- {second_pod['metadata']['name']} (the Job's replacement)\n"
              + "\n".join(line for line in second if line.startswith("[lora-peft]")))
        assert f"[lora-peft] checkpoint step {lab.INTERRUPT_AT} (SIGTERM) complete at s3://{checkpoints}/lab-lora/" \
               f"step-{lab.INTERRUPT_AT:08d}/" in first
        assert f"[lora-peft] resumed from checkpoint step {lab.INTERRUPT_AT} at s3://{checkpoints}/lab-lora/" in second
        assert lab.steps(first) + lab.steps(second) == lab.steps(reference)  # the same losses, step by step

        # 4. The final checkpoints in the tenant's bucket: the same adapter, byte for byte.
        read = run_python(live, namespace, "lab-checkpoints", lab.READ_CHECKPOINTS, OBJECT_STORE_SECRET,
                           env={"BUCKET": checkpoints, "JOBS": "lab-reference,lab-lora"})
        print(f"s3://{checkpoints}: " + json.dumps({job: {"steps": found["steps"],
                                                           "adapter": found["final"]["files"]["adapter_model.safetensors"]}
                                                     for job, found in read.items() if job != "seconds"}))
        ref_final, resumed_final = read["lab-reference"]["final"], read["lab-lora"]["final"]
        assert ref_final["step"] == resumed_final["step"] == lab.MAX_STEPS
        assert ref_final["files"]["adapter_model.safetensors"] == resumed_final["files"]["adapter_model.safetensors"]
        assert read["lab-lora"]["steps"] == [f"step-{6:08d}", f"step-{lab.MAX_STEPS:08d}"]  # retention: newest two

        # 5. The tracking server in the cluster (MLflow's chart, on CloudNativePG): each TrainJob's run, as the tenant
        # sees it with its own credentials, and its model version, whose source is the adapter in the tenant's bucket.
        start = time.monotonic()
        tracked = mlflow_versions(live, namespace, ("lab-reference", "lab-lora"))
        TIMINGS["MLflow asked for the lab's runs and model versions (tenant's credentials)"] = time.monotonic() - start
        for job, found in tracked.items():
            print(f"MLflow {found['experiment']}: run {found['run_id']} {job} {found['status']}, attempts "
                  f"{found['attempts']}, loss {found['loss']}; model {found['model']} version {found['version']} "
                  f"({found['version_status']}) source {found['source']}")
        losses = {job: [float(line.split("loss ")[1].split()[0]) for line in lab.steps(log)]
                  for job, log in (("lab-reference", reference), ("lab-lora", first + second))}
        for job, found in tracked.items():
            assert found["status"] == "FINISHED" and found["version_status"] == "READY", found
            assert [step for step, _ in found["loss"]] == list(range(1, lab.MAX_STEPS + 1)), found["loss"]
            assert [round(value, 6) for _, value in found["loss"]] == losses[job], (found["loss"], losses[job])
            assert found["source"].startswith(f"s3://{models}/") and found["source"].endswith(f"/{job}/adapter"), found
        # One run per TrainJob: the resumed attempt continued the interrupted one's run (docs/lab.md).
        assert tracked["lab-reference"]["attempts"] == "1" and tracked["lab-lora"]["attempts"] == "2", tracked

        # 6. Deleting the TrainJobs deletes their claims (the runtime's retention policy) and then their volumes.
        volumes = [live.kube.get("persistentvolumeclaim", claim, namespace)["spec"]["volumeName"]
                   for claim in claims.values()]
        paths = [Path(live.kube.get("persistentvolume", v)["spec"]["local"]["path"]) for v in volumes]
        for job in ("lab-reference", "lab-lora"):
            live.kube.delete("trainjobs.trainer.kubeflow.org", job, namespace=namespace, wait=True)
        wait_until("the provisioner to delete the lab's volumes",
                   lambda: not any(live.kube.exists("persistentvolume", v) for v in volumes), 120)
        assert not any(p.exists() for p in paths), paths
    finally:
        for job in ("lab-reference", "lab-lora"):
            live.kube.delete("trainjobs.trainer.kubeflow.org", job, namespace=namespace)
        live.kube.delete("configmap", "lab-inputs", namespace=namespace)
        live.with_overrides(live.overrides)  # the rehearsal stack file as the package's other tests deploy it
