"""Node tier, first of tests/node/platform (conftest.ORDER): the platform's controllers installed by `pulumi up` from
their real charts, running as pods on a real node, from images built here and pulled from the rehearsal's loopback
mirror by digest (issue #22).

`trainyard cluster up local --real-nodes` as a test: the control plane, one real node (containerd, kubelet, kube-proxy,
CoreDNS) beside the local stack's fake GPU nodes; the image factory builds Kueue's, JobSet's and Trainer's images
from the binaries `tools/build.sh` built, pushes them and the three charts to the node's loopback registry and locks
their digests; then the real engine deploys the local stack with those three controllers no longer external
(`stack.InCluster`). The package's one deployment (conftest.live) also declares the MLflow database and the
site's Prometheus, which the later modules prove. What is proven here, each by the live cluster:

- every Deployment of the three charts is Available, its pods Ready on the real node (never on a fake GPU node), and
  each runs the very digest the factory built and the rehearsal's lock holds;
- the platform works through those pods: their webhooks (the API server dials the pods) admit and default a
  TrainJob of each tenant, Kueue admits it on its flavor, Trainer makes the JobSet, JobSet the Jobs, and the job
  completes on its fake GPU pool;
- all of it with the stack's NetworkPolicies enforced on that node (kube-router's firewall, as in
  tests/node/test_network_policy.py): the controllers' namespaces are default-deny for ingress but their webhooks;
- KServe's controller (and its chart's kube-rbac-proxy sidecar) Ready on the real node by the built digests, with the
  webhook certificate the rehearsal's cert-manager stand-in issued (cert-manager stays external: it is not built
  here), self-signed as the chart's selfSigned Issuer asks, and injected into every webhook configuration; its
  webhooks answer: a dry-run
  InferenceService the stack's policies allow comes back defaulted by KServe's mutating webhook, an invalid one is
  refused by its validating webhook with its own message; a real one gets its Deployment and Service from the
  controller, and its pod the storage initializer from KServe's pod mutator;
- a CPU-only TrainJob through a tenant's LocalQueue is admitted on the `cpu` flavor (node-0 serves the local stack's
  CPU pool) and its container really runs there, as uid 1000 with Trainer's `PET_*` environment: the first
  TrainJob whose container starts (the room node-0 has beside the platform's pods is printed);
- a second `pulumi up` changes nothing, and leaves the injected CA bundles alone;
- `trainyard cluster lab-images`: the lab's CPU image and Trainer's initializers pushed and locked; Trainer's
  own dataset initializer, by the locked digest, fetches a tenant's dataset from SeaweedFS in the cluster with the
  tenant's credentials, as the runtimes give them, through the stack's NetworkPolicies; the next `pulumi up` pins the
  two runtimes that name those images to the pushed digests and changes nothing else (test_lab.py runs them).

Needs root, the cluster and node tools (``shared.TOOLS``), Debian's containerd, runc, CNI plugins and nftables; skips
saying which is missing elsewhere (`make test-node`).
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from typing import Any

import pytest

from tests.node.platform.shared import (
    TIMINGS,
    mlflow_server,
    node_room,
    pod_finished,
    pods,
    provisioner_image,
    run_jobs,
    run_python,
    store,
)
from trainyard.rehearsal import site_manifests
from trainyard.rehearsal.kube import Kube, wait_until
from trainyard.rehearsal.session import REAL_NODE, Rehearsal
from trainyard.supply.lock import load_lock

pytestmark = pytest.mark.node


def test_the_controllers_run_from_the_mirror_by_the_built_digest_on_the_real_node(live: Rehearsal) -> None:
    assert live.in_cluster is not None
    lock = load_lock(live.in_cluster.lock_file)
    seen, site = [], []
    for namespace in live.installed_namespaces():
        # What the rehearsal installs as the site would (the barman-cloud plugin beside CloudNativePG): built here too,
        # but not the stack's, so not in its lock (tests/node/platform/test_postgres.py checks it).
        installed_by_site = [d["metadata"]["name"] for d in
                             live.kube.items("deployments", namespace, selector=site_manifests.LABEL_KEY)]
        for pod in pods(live, namespace):
            assert pod["spec"]["nodeName"] == REAL_NODE, pod["metadata"]["name"]
            if pod["status"].get("phase") == "Succeeded":
                continue  # the object store's provisioning Job (its own test below)
            if any(pod["metadata"]["name"].startswith(f"{name}-") for name in installed_by_site):
                site.append(f"{namespace}/{pod['metadata']['name']}")
                continue
            if "cnpg.io/cluster" in pod["metadata"].get("labels", {}):
                continue  # a PostgreSQL instance, the operator's pod with the site's plugin in it: test_postgres
            assert all(c["ready"] for c in pod["status"]["containerStatuses"]), pod["status"]
            statuses = {status["name"]: status for status in pod["status"]["containerStatuses"]}
            for container in pod["spec"]["containers"]:
                status = statuses[container["name"]]  # the kubelet lists statuses by name, not in the spec's order
                image = container["image"]
                assert image.startswith("trainyard.local/mirror/") and "@sha256:" in image, image
                tagged, digest = image.split("@")
                entry = lock.entries[tagged]
                assert entry.source == "registry" and entry.digest == digest, (tagged, entry)
                assert status["imageID"].endswith(digest), status["imageID"]  # what containerd ran
                seen.append(f"{namespace}/{pod['metadata']['name']}: {image}")
    print("\n".join(seen) + f"\n(installed as a site would, checked elsewhere: {', '.join(site)})")
    # Kueue, JobSet, Trainer, SeaweedFS, KServe's manager and kube-rbac-proxy, CloudNativePG's operator, MLflow's
    # server and its tenant-user-sync sidecar.
    assert len(seen) == 9, seen


def test_mlflows_server_runs_from_the_built_images_and_refuses_a_request_without_credentials(live: Rehearsal) -> None:
    """MLflow's chart on the real node: its init containers (the database check and the auth ini-file, on the busybox
    compiled here; the schema migration, on the server's image) ran by the locked digests, the server and its
    tenant-user-sync sidecar are Ready, ``/health`` answers, and the API refuses a request without credentials."""
    import urllib.error

    from trainyard.rehearsal import busybox_image

    assert live.in_cluster is not None
    lock = load_lock(live.in_cluster.lock_file)
    namespace = live.config.mlflow.namespace
    (pod,) = live.kube.items("pods", namespace, selector="app.kubernetes.io/name=mlflow")
    assert pod["spec"]["nodeName"] == REAL_NODE
    statuses = {s["name"]: s for s in [*pod["status"].get("initContainerStatuses", []),
                                       *pod["status"]["containerStatuses"]]}
    busybox = busybox_image.target(live.config).tagged
    for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
        tagged, digest = container["image"].split("@")
        assert lock.entries[tagged].digest == digest and statuses[container["name"]]["imageID"].endswith(digest)
        state = statuses[container["name"]]["state"]
        print(f"{namespace}/{pod['metadata']['name']} {container['name']}: {container['image']} "
              f"({'exit ' + str(state['terminated']['exitCode']) if 'terminated' in state else 'running'})")
    init = {c["name"]: c["image"].split("@")[0] for c in pod["spec"]["initContainers"]}
    assert init["dbchecker"] == init["ini-file-initializer"] == busybox, init
    assert all(s["state"]["terminated"]["exitCode"] == 0 for s in pod["status"]["initContainerStatuses"])
    assert all(s["ready"] for s in pod["status"]["containerStatuses"]), pod["status"]
    log = live.kube.run("logs", "-n", namespace, pod["metadata"]["name"], "-c", "dbchecker").stdout.strip()
    print(f"dbchecker said: {log}")
    assert "Database OK" in log
    with mlflow_server(live) as open_:
        with open_("/health") as response:
            health = response.read().decode()
        try:
            open_("/api/2.0/mlflow/experiments/search?max_results=1")
            refused = 0
        except urllib.error.HTTPError as exc:
            refused = exc.code
    print(f"/health: {health}; the API without credentials: HTTP {refused}")
    assert health.strip() == "OK" and refused == 401


def test_trainjobs_go_through_the_controllers_running_as_pods(live: Rehearsal) -> None:
    policies = live.kube.items("networkpolicies", "*")
    chains = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True).stdout
    enforced = sorted({p["metadata"]["namespace"] for p in policies})
    print(f"{len(policies)} NetworkPolicies in {', '.join(enforced)}; kube-router's chains: "
          f"{chains.count(':KUBE-NWPLCY-')} policy, {chains.count(':KUBE-POD-FW-')} pod firewall")
    assert {"kueue-system", "jobset-system", "kubeflow-system", "team-a", "team-b"} <= set(enforced)
    assert ":KUBE-NWPLCY-" in chains and ":KUBE-POD-FW-" in chains  # enforced on the node the controllers run on
    start = time.monotonic()
    run_jobs(live, "a")
    TIMINGS["one TrainJob per tenant, submitted -> completed"] = time.monotonic() - start
    workloads = live.workloads("*")
    assert workloads and all(any(c["type"] == "Finished" and c["status"] == "True"
                                 for c in w["status"].get("conditions", [])) for w in workloads), workloads


# ------------------------------------------------------------------------------------------ the object store


def test_the_object_store_runs_on_the_real_node_and_the_provisioning_job_completed(live: Rehearsal) -> None:
    namespace = store(live)
    assert live.in_cluster is not None
    lock = load_lock(live.in_cluster.lock_file)
    (server,) = [p for p in pods(live, namespace) if p["status"].get("phase") == "Running"]
    (status,) = server["status"]["containerStatuses"]
    image = server["spec"]["containers"][0]["image"]
    tagged, digest = image.split("@")
    assert server["spec"]["nodeName"] == REAL_NODE and status["ready"], server["status"]
    assert tagged == "trainyard.local/mirror/chrislusf/seaweedfs:4.44", tagged  # the name the stack's chart pulls
    assert lock.entries[tagged].digest == digest and status["imageID"].endswith(digest)
    version = live.kube.run("exec", "-n", namespace, server["metadata"]["name"], "--", "/usr/bin/weed", "version").stdout
    claim = live.kube.get("persistentvolumeclaim", "seaweedfs-data", namespace)
    volume = live.kube.get("persistentvolume", claim["spec"]["volumeName"])
    assert claim["status"]["phase"] == "Bound" and volume["spec"]["local"]["path"].startswith(str(live.settings.state_dir))
    (job,) = live.provisioning_jobs()
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"]), job["status"]
    job_pods = live.kube.items("pods", namespace, selector=f"job-name={job['metadata']['name']}")
    assert job_pods and all(p["spec"]["nodeName"] == REAL_NODE for p in job_pods)
    log = live.kube.run("logs", f"job/{job['metadata']['name']}", "-n", namespace).stdout
    print(f"{namespace}/{server['metadata']['name']} Ready on {REAL_NODE}: {image}\n  weed says: {version.splitlines()[0]}"
          f"\n  claim seaweedfs-data -> {volume['metadata']['name']} ({volume['spec']['local']['path']})"
          f"\n  Job {job['metadata']['name']}: Complete, {job['status'].get('failed', 0)} failed runs, "
          f"{provisioner_image(live)}\n{log}")
    assert "4.53" in version  # the stand-in the module proxy serves for 4.44 (rehearsal/seaweedfs_image.py)


LIST_BUCKETS = """
import boto3, json
from botocore.config import Config
s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
out = {}
for bucket in sorted(b["Name"] for b in s3.list_buckets()["Buckets"]):
    entry = {"versioning": s3.get_bucket_versioning(Bucket=bucket).get("Status")}
    try:
        rule = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"].get("Rule", {})
        entry["lock"] = rule.get("DefaultRetention")
    except Exception as exc:
        entry["lock"] = None
    out[bucket] = entry
print(json.dumps(out))
"""

OWN_AND_OTHER = """
import boto3, json, os
from botocore.config import Config
from botocore.exceptions import ClientError
s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
own, other = os.environ["OWN"], os.environ["OTHER"]
def attempt(call):
    try:
        return call() or "ok"
    except ClientError as exc:
        return exc.response["Error"]["Code"]
key = "probe/" + os.environ["HOSTNAME"]
out = {"endpoint": os.environ["AWS_ENDPOINT_URL"],
       "put own": attempt(lambda: s3.put_object(Bucket=own, Key=key, Body=b"checkpoint bytes") and None),
       "get own": attempt(lambda: s3.get_object(Bucket=own, Key=key)["Body"].read().decode()),
       "list own": attempt(lambda: [o["Key"] for o in s3.list_objects_v2(Bucket=own).get("Contents", [])]),
       "put other": attempt(lambda: s3.put_object(Bucket=other, Key=key, Body=b"x") and None),
       "list other": attempt(lambda: s3.list_objects_v2(Bucket=other) and None),
       "buckets listed": attempt(lambda: sorted(b["Name"] for b in s3.list_buckets()["Buckets"]))}
print(json.dumps(out))
"""


def test_every_tenants_buckets_exist_as_planned(live: Rehearsal) -> None:
    from trainyard.manifests import object_store

    namespace = store(live)
    # The admin identity, from a pod the object store's policy admits (the provisioner's label).
    seen = run_python(live, namespace, "list-buckets", LIST_BUCKETS, object_store.ADMIN_SECRET,
                       {object_store.PROVISIONER_LABEL: "true"},
                       {"AWS_ENDPOINT_URL": object_store.endpoint_url(live.config),
                        "AWS_DEFAULT_REGION": object_store.region(live.config)})
    TIMINGS["a pod of the provisioner image listed every bucket"] = seen.pop("seconds")
    print(json.dumps(seen, indent=1))
    planned = {b["name"]: b for b in object_store.buckets(live.config)}
    assert set(planned) <= set(seen), sorted(set(planned) - set(seen))
    for name, bucket in planned.items():
        assert seen[name]["versioning"] == ("Enabled" if bucket["versioning"] else None), (name, seen[name])
        lock = bucket["objectLock"]
        assert (seen[name]["lock"] or None) == ({"Mode": lock["mode"], "Days": lock["days"]} if lock else None), \
            (name, seen[name])


def test_a_tenant_reads_and_writes_its_own_bucket_and_is_refused_the_others(live: Rehearsal) -> None:
    from trainyard.manifests import object_store
    from trainyard.manifests.meta import OBJECT_STORE_SECRET

    tenants = list(live.config.tenants)
    for tenant, other in zip(tenants, tenants[1:] + tenants[:1], strict=True):
        own = object_store.bucket_name(live.config, tenant, "checkpoints")
        theirs = object_store.bucket_name(live.config, other, "checkpoints")
        script = f"import os\nos.environ.update(OWN={own!r}, OTHER={theirs!r})\n" + OWN_AND_OTHER
        seen = run_python(live, tenant.namespace_name, "s3-probe", script, OBJECT_STORE_SECRET)
        TIMINGS[f"{tenant.name}'s pod: own bucket written and read, {other.name}'s refused"] = seen.pop("seconds")
        print(f"{tenant.name} ({tenant.namespace_name}) -> {json.dumps(seen)}")
        assert seen["put own"] == "ok" and seen["get own"] == "checkpoint bytes", seen
        assert any(key.startswith("probe/") for key in seen["list own"]), seen
        assert seen["put other"] == "AccessDenied" and seen["list other"] == "AccessDenied", seen
        assert theirs not in seen["buckets listed"], seen


def _cpu_trainjob(name: str, namespace: str, tenant: str, image: str, script: str) -> dict[str, Any]:
    """A CPU-only TrainJob as a tenant writes it: through its LocalQueue, the approved ``torch-distributed`` runtime,
    its own image (an approved registry's) and command, and a small resourcesPerNode (no accelerator)."""
    from trainyard.manifests.meta import DEFAULT_LOCAL_QUEUE, QUEUE_NAME_LABEL, TENANT_LABEL

    # node-0 holds the platform's pods too: 1900m of its 2000m CPU are requested before any job (printed by the test).
    requests, limits = {"cpu": "50m", "memory": "128Mi"}, {"cpu": "1", "memory": "256Mi"}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {QUEUE_NAME_LABEL: DEFAULT_LOCAL_QUEUE, TENANT_LABEL: tenant}},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 1, "image": image, "command": ["python3", "-c", script],
                                 "resourcesPerNode": {"requests": requests, "limits": limits}}}}


def test_a_cpu_trainjob_through_a_tenants_queue_runs_its_container_on_the_real_node(live: Rehearsal) -> None:
    """The CPU pool is node-0 here (rehearsal/stack.py ``real_node_pool``): a TrainJob with no accelerator is admitted
    on the ``cpu`` flavor by the tenant's ClusterQueue, and its pod is a real container on the real node that runs to
    completion and says where it ran: the first TrainJob whose container really starts."""
    from trainyard.rehearsal.stack import real_node_pool

    pool = real_node_pool(live.config)
    assert pool is not None, "the local stack has a CPU pool; the real-node overlay serves it with node-0"
    tenant = next(t for t in live.config.tenants if any(q.flavor == pool for q in t.quotas))
    namespace, name = tenant.namespace_name, "cpu-on-node-0"
    script = ("import json, os, socket; print(json.dumps({'host': socket.gethostname(), 'uid': os.getuid(), "
              "'rank': os.environ.get('PET_NODE_RANK'), 'nodes': os.environ.get('PET_NNODES')}))")
    print(node_room(live))
    start = time.monotonic()
    live.kube.create(_cpu_trainjob(name, namespace, tenant.name, provisioner_image(live), script))
    live.wait_finished([name], namespace, timeout=240)
    TIMINGS["a CPU TrainJob on the real node, submitted -> completed"] = time.monotonic() - start
    workload = next(w for w in live.workloads(namespace)
                    if any(r["name"] == name for r in w["metadata"].get("ownerReferences", [])))
    admission = workload["status"]["admission"]
    flavors = {f for a in admission["podSetAssignments"] for f in a.get("flavors", {}).values()}
    pods = live.kube.items("pods", namespace, selector=f"jobset.sigs.k8s.io/jobset-name={name}")
    print(f"{namespace}/{name}: ClusterQueue {admission['clusterQueue']}, flavor {', '.join(sorted(flavors))}, pods "
          + ", ".join(f"{p['metadata']['name']} {p['status'].get('phase')} on {p['spec'].get('nodeName')}" for p in pods))
    # Kueue's topology-aware scheduling counts what node-0's pods request: a job that does not fit the room left
    # there is given the next flavor whose quota fits (a fake GPU node's CPU: docs/components/kueue.md "CPU pools").
    assert flavors == {pool}, (admission, node_room(live))
    assert len(pods) == 1 and pods[0]["spec"]["nodeName"] == REAL_NODE and pods[0]["status"]["phase"] == "Succeeded"
    log = live.kube.run("logs", pods[0]["metadata"]["name"], "-n", namespace).stdout.strip()
    print(f"its output: {log}")
    ran = json.loads(log.splitlines()[-1])
    assert ran == {"host": ran["host"], "uid": 1000, "rank": "0", "nodes": "1"}, ran
    live.kube.delete("trainjobs.trainer.kubeflow.org", name, namespace=namespace, wait=True)


KSERVE = "kserve"
INJECT = "cert-manager.io/inject-ca-from"


def _webhook_configurations(live: Rehearsal) -> list[dict[str, Any]]:
    """KServe's webhook configurations: those asking for the CA of its Certificate (with their managed fields)."""
    return [w for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
            for w in json.loads(live.kube.run("get", kind, "-o", "json", "--show-managed-fields").stdout)["items"]
            if (w["metadata"].get("annotations") or {}).get(INJECT)]


def _with_managed_fields(live: Rehearsal, kind: str, name: str, namespace: str) -> dict[str, Any]:
    """The object as the API server holds it, managedFields included (kubectl leaves them out by default)."""
    found: dict[str, Any] = json.loads(live.kube.run("get", kind, name, "-n", namespace, "-o", "json",
                                                     "--show-managed-fields").stdout)
    return found


def test_the_cert_manager_stand_in_issued_kserves_certificate_and_injected_its_ca(live: Rehearsal) -> None:
    from trainyard.rehearsal import cert_standin

    certificate = live.kube.get("certificates.cert-manager.io", "serving-cert", KSERVE)
    ready = next(c for c in certificate["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", certificate["status"]
    secret = _with_managed_fields(live, "secret", certificate["spec"]["secretName"], KSERVE)
    managers = {m["manager"] for m in secret["metadata"]["managedFields"]}
    assert managers == {cert_standin.FIELD_MANAGER}, managers
    # KServe's Issuer is selfSigned (files/common/certmanager.yaml): the certificate is signed by its own key and is
    # its own ca.crt, as cert-manager's SelfSigned issuer writes it.
    ca = base64.b64decode(secret["data"]["ca.crt"])
    crt = base64.b64decode(secret["data"]["tls.crt"])
    assert ca == crt
    issuer = live.kube.get("issuers.cert-manager.io", certificate["spec"]["issuerRef"]["name"], KSERVE)
    assert "selfSigned" in issuer["spec"], issuer["spec"]
    text = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-enddate"], input=crt,
                          capture_output=True, check=True).stdout.decode()
    print(f"Certificate kserve/serving-cert: Ready ({ready['message']}); Secret {secret['metadata']['name']} "
          f"({secret['type']}, {', '.join(sorted(secret['data']))}) by {', '.join(managers)}: "
          + " ".join(text.split()))
    assert f"DNS:{certificate['spec']['dnsNames'][0]}" in text
    configurations = _webhook_configurations(live)
    assert len(configurations) == 6, [c["metadata"]["name"] for c in configurations]  # 1 mutating, 5 validating
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            assert ca in base64.b64decode(webhook["clientConfig"]["caBundle"]), webhook["name"]  # merged, as cainjector
        owners = {m["manager"] for m in configuration["metadata"]["managedFields"]}
        assert cert_standin.FIELD_MANAGER in owners and any(o.startswith("pulumi") for o in owners), owners
    print(f"caBundle holds the self-signed certificate in {sum(len(c['webhooks']) for c in configurations)} webhooks of "
          f"{len(configurations)} configurations (managed by {cert_standin.FIELD_MANAGER} beside Pulumi)")


def _inference_service(live: Rehearsal, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """An InferenceService of team-a that the stack's admission policies allow: an approved runtime, the tenant's
    model bucket, cluster-local, its serving ServiceAccount."""
    from trainyard.manifests.serving import SERVICE_ACCOUNT, model_bucket

    tenant = next(t for t in live.config.tenants if t.name == "team-a")
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": tenant.namespace_name,
                         "labels": {"networking.kserve.io/visibility": "cluster-local"},
                         **({"annotations": annotations} if annotations else {})},
            "spec": {"predictor": {"serviceAccountName": SERVICE_ACCOUNT, "model": {
                "modelFormat": {"name": "huggingface"}, "runtime": "huggingface-server",
                "storageUri": f"s3://{model_bucket(live.config, tenant)}/llama-3.2-1b/adapter/"}}}}


def _as_tenant(live: Rehearsal) -> Kube:
    return Kube(live.settings.binary("kubectl"), live.tenant_kubeconfig("team-a"))


def test_kserves_webhooks_default_an_allowed_inference_service_and_refuse_an_invalid_one(live: Rehearsal) -> None:
    tenant = _as_tenant(live)
    allowed = _inference_service(live, "webhook-probe")
    start = time.monotonic()
    created = json.loads(tenant.run("create", "--dry-run=server", "-o", "json", "-f", "-",
                                    stdin=json.dumps(allowed)).stdout)
    TIMINGS["dry-run InferenceService through KServe's webhooks"] = time.monotonic() - start
    annotations = created["metadata"].get("annotations") or {}
    predictor = created["spec"]["predictor"]
    print(f"defaulted by KServe's mutating webhook: annotation serving.kserve.io/deploymentMode="
          f"{annotations.get('serving.kserve.io/deploymentMode')}, predictor.automountServiceAccountToken="
          f"{predictor.get('automountServiceAccountToken')}, model.protocolVersion="
          f"{predictor['model'].get('protocolVersion')}")
    # kserve@v0.20.0 pkg/apis/serving/v1beta1/inference_service_defaults.go:176-185 (the ConfigMap's
    # defaultDeploymentMode, Standard here) and :219-225 (the chart's security.autoMountServiceAccountToken: false).
    # The CRD's schema defaults neither: only the webhook in the controller's pod can have set them.
    assert annotations.get("serving.kserve.io/deploymentMode") == "Standard"
    assert predictor.get("automountServiceAccountToken") is False
    # Valid to the stack's admission policies, invalid to KServe: an autoscaler class it does not know
    # (pkg/apis/serving/v1beta1/inference_service_validation.go:487).
    invalid = _inference_service(live, "webhook-probe", {"serving.kserve.io/autoscalerClass": "bogus"})
    result = tenant.run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(invalid), check=False)
    print(result.stderr.strip())
    assert result.returncode != 0
    assert 'admission webhook "inferenceservice.kserve-webhook-server.validator" denied the request' in result.stderr
    assert "[bogus] is not a supported autoscaler class type" in result.stderr


def test_the_controller_makes_a_standard_inference_services_deployment_and_service(live: Rehearsal) -> None:
    tenant = _as_tenant(live)
    isvc = _inference_service(live, "adapter")
    namespace = isvc["metadata"]["namespace"]
    start = time.monotonic()
    tenant.run("create", "-f", "-", stdin=json.dumps(isvc))
    try:
        def made() -> bool:
            deployments = live.kube.items("deployments", namespace, selector="serving.kserve.io/inferenceservice=adapter")
            services = live.kube.items("services", namespace, selector="serving.kserve.io/inferenceservice=adapter")
            return bool(deployments) and bool(services)

        wait_until("KServe's controller to make the predictor's Deployment and Service", made, 120)
        TIMINGS["InferenceService created -> its Deployment and Service made"] = time.monotonic() - start
        (deployment,) = live.kube.items("deployments", namespace, selector="serving.kserve.io/inferenceservice=adapter")
        services = live.kube.items("services", namespace, selector="serving.kserve.io/inferenceservice=adapter")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        print(f"Deployment {namespace}/{deployment['metadata']['name']}: {container['name']} {container['image']}; "
              f"Services: {', '.join(s['metadata']['name'] for s in services)}")
        assert container["image"] == next(
            c["image"] for c in live.kube.get("clusterservingruntime", "huggingface-server")["spec"]["containers"])
        # The ReplicaSet's pod goes through KServe's pod mutator, which adds the storage initializer (its image from
        # the chart's values: the mirror's name). The model server's own image is not in the mirror yet.
        def mutated() -> list[dict[str, Any]]:
            return [p for p in live.kube.items("pods", namespace, selector="serving.kserve.io/inferenceservice=adapter")
                    if p["spec"].get("initContainers")]
        try:
            wait_until("the predictor's pod, mutated by KServe's webhook", lambda: bool(mutated()), 60)
        except TimeoutError:
            events = live.kube.run("get", "events", "-n", namespace, "--field-selector", "type=Warning").stdout
            pytest.fail(f"no predictor pod with the storage initializer:\n{events[-3000:]}")
        pod = mutated()[0]
        (init,) = [c for c in pod["spec"]["initContainers"] if c["name"] == "storage-initializer"]
        print(f"pod {pod['metadata']['name']}: init container storage-initializer {init['image']} "
              f"{' '.join(init.get('args', []))}; phase {pod['status'].get('phase')} on {pod['spec'].get('nodeName')}")
        assert init["image"].startswith("trainyard.local/mirror/kserve/storage-initializer:v0.20.0")
        assert init["args"][0] == isvc["spec"]["predictor"]["model"]["storageUri"]
    finally:
        tenant.run("delete", "inferenceservice", "adapter", "-n", namespace, "--wait=true", "--timeout=120s",
                   check=False)


def test_a_second_up_changes_nothing(live: Rehearsal) -> None:
    run = live.deploy()
    assert run.returncode == 0, run.output[-4000:]
    TIMINGS["no-op pulumi up"] = run.seconds
    resources = [line for line in run.output.splitlines() if "unchanged" in line or "updated" in line
                 or "created" in line or "replaced" in line or "deleted" in line]
    print("\n".join(resources))
    assert any("unchanged" in line for line in resources), run.output[-3000:]
    assert not any(word in line for line in resources for word in ("updated", "created", "replaced", "deleted")), \
        resources
    # Pulumi's server-side apply never sets caBundle: the stand-in's injection (the webhook certificate itself, as
    # KServe's Issuer is selfSigned) outlives the second up.
    secret = live.kube.get("secret", "kserve-webhook-server-cert", KSERVE)
    ca = base64.b64decode(secret["data"]["ca.crt"])
    assert all(ca in base64.b64decode(w["clientConfig"]["caBundle"])
               for c in _webhook_configurations(live) for w in c["webhooks"])


PUT_DATASET = """
import boto3, hashlib, json, os
from botocore.config import Config
s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
files = {"lab-dataset/train.jsonl": b"".join(b'{"text": "line %d"}\\n' % i for i in range(48)),
         "lab-dataset/README.md": b"the lab's dataset, written by the node test\\n"}
for key, body in files.items():
    s3.put_object(Bucket=os.environ["BUCKET"], Key=key, Body=body)
print(json.dumps({key.split("/", 1)[1]: hashlib.sha256(body).hexdigest() for key, body in files.items()}))
"""

LIST_WORKSPACE = """
import hashlib, json, os
root = "/workspace/dataset"
print(json.dumps({name: hashlib.sha256(open(os.path.join(root, name), "rb").read()).hexdigest()
                  for name in sorted(os.listdir(root))}))
"""


def test_trainers_dataset_initializer_fetches_a_tenants_dataset_from_the_in_cluster_store(live: Rehearsal) -> None:
    """`trainyard cluster lab-images`: the lab's images built, pushed to the mirror and locked; then Trainer's own
    dataset initializer (the image the lora-* runtimes run first), by the locked digest, as uid 1000 on the real node,
    reads a tenant's dataset from SeaweedFS in the cluster with the tenant's credentials, through the stack's
    NetworkPolicies, exactly as the runtime's dataset-initializer container is given them (runtimes.INITIALIZER_S3_ENV)."""
    from trainyard.manifests import object_store
    from trainyard.manifests.meta import OBJECT_STORE_SECRET
    from trainyard.manifests.runtimes import INITIALIZER_S3_ENV

    assert live.in_cluster is not None
    start = time.monotonic()
    for line in live.push_lab_images():
        print(f"    {line}")
    TIMINGS["the lab's images built (or cached), pushed and locked"] = time.monotonic() - start
    lock = load_lock(live.in_cluster.lock_file)
    image = "registry.trainyard.internal/kubeflow/trainer/dataset-initializer:v2.3.0"
    entry = lock.entries[image]
    assert entry.digest.startswith("sha256:"), entry
    assert lock.entries["registry.trainyard.internal/trainyard/lora-peft:0.1.0"].digest.startswith("sha256:")

    tenant = live.config.tenants[1]  # team-b: its datasets bucket has no object lock (the seaweedfs tests say why)
    namespace, bucket = tenant.namespace_name, object_store.bucket_name(live.config, tenant, "datasets")
    written = run_python(live, namespace, "put-dataset", PUT_DATASET, OBJECT_STORE_SECRET, env={"BUCKET": bucket})
    written.pop("seconds")
    env = [{"name": "STORAGE_URI", "value": f"s3://{bucket}/lab-dataset/"},
           *({"name": name, "valueFrom": {"secretKeyRef": {"name": OBJECT_STORE_SECRET, "key": key}}}
             for name, key in INITIALIZER_S3_ENV)]
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    small = {"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}  # node-0's room
    mount = [{"name": "initializer", "mountPath": "/workspace"}]
    name = "dataset-initializer"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
           "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                    "nodeSelector": {"kubernetes.io/hostname": REAL_NODE},
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [{"name": "initializer", "emptyDir": {}}],
                    "initContainers": [{"name": name, "image": f"{image}@{entry.digest}", "env": env,
                                        "resources": small, "securityContext": restricted, "volumeMounts": mount}],
                    "containers": [{"name": "list", "image": provisioner_image(live),
                                    "command": ["python3", "-c", LIST_WORKSPACE], "resources": small,
                                    "securityContext": restricted, "volumeMounts": mount}]}}
    start = time.monotonic()
    live.kube.create(pod)
    try:
        phase = pod_finished(live, namespace, name, 300)
        fetched_log = live.kube.run("logs", name, "-n", namespace, "-c", name).stdout
        listed = live.kube.run("logs", name, "-n", namespace, "-c", "list").stdout
        status = live.kube.get("pod", name, namespace)["status"]
    finally:
        live.kube.delete("pod", name, namespace=namespace)
    TIMINGS["Trainer's dataset initializer on the real node: created -> dataset listed"] = time.monotonic() - start
    print(fetched_log[-3000:])
    assert phase == "Succeeded", (status, fetched_log[-3000:])
    (initializer,) = status["initContainerStatuses"]
    assert initializer["imageID"].endswith(entry.digest), initializer  # what containerd ran: the locked digest
    seen = json.loads(listed.strip().splitlines()[-1])
    print(f"{namespace}: s3://{bucket}/lab-dataset/ -> /workspace/dataset: {json.dumps(seen)}")
    assert seen == written, (seen, written)


def test_a_deploy_after_lab_images_pins_the_runtimes_to_the_pushed_digests(live: Rehearsal) -> None:
    """The runtimes name their images by tag; the lock supplies the digest. After `lab-images` locked the lab's
    images, the next `pulumi up` renders the approved runtimes with those digests (and changes nothing else)."""
    assert live.in_cluster is not None
    lock = load_lock(live.in_cluster.lock_file)
    start = time.monotonic()
    run = live.deploy()
    TIMINGS["pulumi up after lab-images (the runtimes re-pinned)"] = time.monotonic() - start
    assert run.returncode == 0, run.output[-4000:]
    print("\n".join(line for line in run.output.splitlines() if "updated" in line or "unchanged" in line))
    pinned = {}
    for runtime in ("lora-peft", "lora-finetune"):
        found = live.kube.get("clustertrainingruntimes.trainer.kubeflow.org", runtime)
        for job in found["spec"]["template"]["spec"]["replicatedJobs"]:
            for container in job["template"]["spec"]["template"]["spec"]["containers"]:
                pinned[f"{runtime}/{container['name']}"] = container["image"]
    print(json.dumps(pinned, indent=1))
    for name, tagged in (("dataset-initializer", "registry.trainyard.internal/kubeflow/trainer/dataset-initializer:v2.3.0"),
                         ("model-initializer", "registry.trainyard.internal/kubeflow/trainer/model-initializer:v2.3.0")):
        assert pinned[f"lora-peft/{name}"] == f"{tagged}@{lock.entries[tagged].digest}", pinned
        assert pinned[f"lora-finetune/{name}"] == pinned[f"lora-peft/{name}"], pinned
    lab = "registry.trainyard.internal/trainyard/lora-peft:0.1.0"
    assert pinned["lora-peft/node"] == f"{lab}@{lock.entries[lab].digest}", pinned
    # The serving runtime that serves what the lab trains names its image by tag too (serving-runtimes/peft-cpu.yaml).
    server = "registry.trainyard.internal/trainyard/peft-server:0.1.0"
    (served,) = live.kube.get("clusterservingruntimes.serving.kserve.io", "peft-cpu")["spec"]["containers"]
    print(f"peft-cpu/{served['name']}: {served['image']}")
    assert served["image"] == f"{server}@{lock.entries[server].digest}", served


