"""Node tier, tests/node/platform after test_lab (conftest.ORDER): the handover of issue #22 item 5, on the real node.

The adapter the lab's resumed TrainJob registered in the cluster's MLflow is promoted by the tenant and served by
KServe: ``trainyard promote --apply`` as the tenant (its MLflow user, its own kubeconfig), KServe's controller (its
chart on node-0, Standard mode) making the predictor, the storage initializer (KServe's code, the image built here)
fetching the base model and the adapter with the tenant's read-only serving identity, the ``peft-cpu`` runtime (the
lab image's libraries and Trainyard's server) loading them, and a pod of the tenant asking for completions through
the predictor's Service and the stack's NetworkPolicies. It needs what came before: `trainyard cluster lab-images`
pushed and locked the serving image and the deploy after it pinned the runtime (test_controllers); the lab trained
and registered the adapter (test_lab).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.node.platform.shared import TIMINGS, forwarded, mlflow_versions, run_python, tenant_mlflow_credentials
from trainyard.config.model import MLFLOW_PORT
from trainyard.rehearsal.cluster import CONTEXT
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.session import REAL_NODE, Rehearsal
from trainyard.supply.lock import load_lock

pytestmark = pytest.mark.node

TRAINYARD = Path(sys.executable).parent / "trainyard"
ISVC = "lab-lora"
PROMPT = "the cat sat on the"
SERVER = "registry.trainyard.internal/trainyard/peft-server:0.1.0"
STORAGE_INITIALIZER = "kserve/storage-initializer:v0.20.0"

# In a pod of the tenant: one completion of the adapter and one of the base model, through the predictor's Service.
ASK = """import json, os, urllib.request
url = os.environ["URL"]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def ask(path, body=None):
    request = urllib.request.Request(url + path, data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json"})
    with opener.open(request, timeout=120) as response:
        return json.loads(response.read())
models = ask("/v1/models")
out = {"models": [(m["id"], m["parent"]) for m in models["data"]]}
for name in (os.environ["ADAPTER"], os.environ["BASE"]):
    answer = ask("/v1/completions", {"model": name, "prompt": os.environ["PROMPT"], "max_tokens": 8, "logprobs": 1})
    choice = answer["choices"][0]
    out[name] = {"text": choice["text"], "tokens": choice["logprobs"]["tokens"],
                 "logprobs": choice["logprobs"]["token_logprobs"], "usage": answer["usage"]}
print(json.dumps(out))
"""


def _container(status: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in (*status.get("initContainerStatuses", ()), *status.get("containerStatuses", ()))
                                 if c["name"] == name)
    return found


def test_the_lab_adapter_is_promoted_by_the_tenant_and_served_by_kserve_on_the_real_node(live: Rehearsal) -> None:
    """``trainyard promote STACK --tenant team-b --model M --version V --runtime peft-cpu --apply`` with the tenant's
    MLflow credentials (MLflow through a port-forward on the address its server allows, 127.0.0.1:5000) and the
    tenant's own kubeconfig (its RBAC and the serving admission policies decide); the InferenceService Ready on node-0
    with the storage initializer and the server by the digests the mirror was locked with; the base model and the
    adapter fetched from the version's tags and source; a tenant pod's completions answered by the adapter and by the
    base model, whose token log-probabilities differ (the adapter is applied). The tenant deletes it afterwards."""
    from trainyard.manifests.serving import SERVICE_ACCOUNT

    assert live.in_cluster is not None
    lock = load_lock(live.in_cluster.lock_file)
    assert SERVER in lock.entries, "`trainyard cluster lab-images` (test_controllers) pushes and locks the server"
    tenant = live.config.tenants[1]  # team-b: the lab's tenant (test_lab)
    namespace = tenant.namespace_name
    versions = mlflow_versions(live, namespace, ("lab-lora",))
    model, version, source = (versions["lab-lora"][key] for key in ("model", "version", "source"))
    user, password = tenant_mlflow_credentials(live, namespace)
    kubeconfig = live.tenant_kubeconfig(tenant.name)
    out = live.settings.state_dir / "promote" / f"{namespace}-{ISVC}.yaml"

    # 1. The tenant promotes the registered version, on the runtime that serves LoRA adapters on CPU.
    (pod,) = live.kube.items("pods", live.config.mlflow.namespace, selector="app.kubernetes.io/name=mlflow")
    start = time.monotonic()
    with forwarded(live, live.config.mlflow.namespace, pod["metadata"]["name"], MLFLOW_PORT, local=MLFLOW_PORT) as port:
        promoted = subprocess.run(
            [str(TRAINYARD), "promote", str(live.stack_file), "--tenant", tenant.name, "--model", model,
             "--version", version, "--runtime", "peft-cpu", "--name", ISVC, "--gpus", "0", "--cpu", "500m",
             "--memory", "2Gi", "--tracking-uri", f"http://127.0.0.1:{port}", "--out", str(out),
             "--apply", "--kubeconfig", str(kubeconfig), "--context", CONTEXT, "--kubectl", str(live.kube.kubectl)],
            capture_output=True, text=True, cwd=ROOT, check=False, timeout=300,
            env={**os.environ, "MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password,
                 "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    TIMINGS["trainyard promote --apply (the tenant: MLflow, kubectl)"] = time.monotonic() - start
    print(f"$ trainyard promote {live.stack_file.name} --tenant {tenant.name} --model {model} --version {version} "
          f"--runtime peft-cpu --apply -> exit {promoted.returncode}\n{promoted.stdout}{promoted.stderr[-2000:]}")
    assert promoted.returncode == 0, promoted.stderr[-4000:]
    written = out.read_text()
    print(written)
    try:
        isvc = live.kube.get("inferenceservices.serving.kserve.io", ISVC, namespace)
        predictor = isvc["spec"]["predictor"]
        assert predictor["model"]["runtime"] == "peft-cpu" and predictor["serviceAccountName"] == SERVICE_ACCOUNT
        uris = {u["mountPath"]: u["uri"] for u in predictor["storageUris"]}
        assert uris[f"/mnt/adapters/{model}"] == source, uris  # the version's source: the adapter the lab trained
        assert predictor["model"]["args"] == ["--lora-modules", f"{model}=/mnt/adapters/{model}"]
        # A CPU predictor goes to the stack's CPU pool (node-0 is its node), never onto a GPU node.
        assert predictor["nodeSelector"] == dict(live.config.cpu_pools[0].node_labels), predictor
        shown = json.loads(live.kube.run("get", "inferenceservices.serving.kserve.io", ISVC, "-n", namespace, "-o", "json",
                                         "--show-managed-fields").stdout)
        managers = {m["manager"]: m["operation"] for m in shown["metadata"].get("managedFields", [])}
        assert managers.get("trainyard-promote") == "Apply", managers  # the tenant's server-side apply

        # 2. KServe makes the predictor on node-0: the storage initializer and the server, by the locked digests.
        start = time.monotonic()

        def ready() -> bool:
            found = live.kube.get("inferenceservices.serving.kserve.io", ISVC, namespace)
            return any(c["type"] == "Ready" and c["status"] == "True" for c in found.get("status", {}).get("conditions", []))

        try:
            wait_until(f"InferenceService {namespace}/{ISVC} Ready", ready, 600)
        finally:
            predictors = live.kube.items("pods", namespace, selector=f"serving.kserve.io/inferenceservice={ISVC}")
            for found in predictors:
                print(f"{namespace}/{found['metadata']['name']} on {found['spec'].get('nodeName')}: "
                      f"{found['status'].get('phase')}")
                for container in ("storage-initializer", "kserve-container"):
                    logs = live.kube.run("logs", found["metadata"]["name"], "-n", namespace, "-c", container,
                                         check=False)
                    print(f"--- {container}\n{(logs.stdout or logs.stderr)[-3000:]}")
        TIMINGS["InferenceService applied -> Ready (storage initializer, peft-cpu server)"] = time.monotonic() - start
        (predictor_pod,) = predictors
        assert predictor_pod["spec"]["nodeName"] == REAL_NODE
        status = predictor_pod["status"]
        initializer, server = _container(status, "storage-initializer"), _container(status, "kserve-container")
        assert initializer["state"]["terminated"]["exitCode"] == 0, initializer
        initializer_ref = next(c["image"] for c in predictor_pod["spec"]["initContainers"]
                               if c["name"] == "storage-initializer")
        print(f"storage-initializer: {initializer_ref} ({initializer['imageID']})\n"
              f"kserve-container: {server['image']} ({server['imageID']})")
        assert initializer_ref.split("@")[0].endswith(STORAGE_INITIALIZER), initializer_ref
        locked = next(entry for name, entry in lock.entries.items() if name.endswith(STORAGE_INITIALIZER)
                      and name.startswith(str(live.config.images.registry_mirror)))
        assert initializer["imageID"].endswith(locked.digest), (initializer, locked)
        assert server["imageID"].endswith(lock.entries[SERVER].digest), server

        # 3. A pod of the tenant asks the predictor's Service: the adapter's completion and the base model's.
        start = time.monotonic()
        answered = run_python(live, namespace, "ask-lab-lora", ASK, None,
                              env={"URL": f"http://{ISVC}-predictor.{namespace}.svc.cluster.local",
                                   "ADAPTER": model, "BASE": ISVC, "PROMPT": PROMPT})
        TIMINGS["a tenant pod's completions from the adapter and the base model"] = time.monotonic() - start
        print(f"POST /v1/completions {json.dumps(answered, indent=1)}")
        assert answered["models"] == [[ISVC, None], [model, ISVC]], answered["models"]
        adapter, base = answered[model], answered[ISVC]
        assert adapter["usage"]["completion_tokens"] == len(adapter["tokens"]) == 8, adapter
        assert adapter["logprobs"] != base["logprobs"], (adapter, base)  # the adapter changes what the model says
    finally:
        # The tenant takes it down with its own credentials, as it applied it.
        deleted = subprocess.run([str(live.kube.kubectl), "--kubeconfig", str(kubeconfig), "--context", CONTEXT, "delete",
                                  "inferenceservices.serving.kserve.io", ISVC, "-n", namespace, "--ignore-not-found",
                                  "--wait=true"], capture_output=True, text=True, check=False, timeout=180)
        print(f"$ kubectl delete inferenceservice {ISVC} (as {tenant.name}) -> {deleted.stdout.strip()}{deleted.stderr}")
    wait_until("the predictor's pods gone", lambda: not live.kube.items(
        "pods", namespace, selector=f"serving.kserve.io/inferenceservice={ISVC}"), 180)
