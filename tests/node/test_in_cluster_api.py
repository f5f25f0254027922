"""Node tier: pods on a real node reach the API server through the ``kubernetes`` Service, and the API server reaches
a pod through its Service, as in a real cluster (docs/rehearsal.md "Real nodes": the API server for pods).

A pod with a ServiceAccount bound to a Role that may list pods in its namespace runs the kubectl image (the built
static kubectl) with in-cluster config: ``/version`` answers, its namespace's pods are listed, another namespace's
are Forbidden by RBAC as that service account. A validating webhook whose Service is backed by a pod on the node
refuses a ConfigMap with a message only that pod writes. Then the node stops and nothing of this is left.

Needs what tests/node/test_real_node.py needs, and ``go`` for the webhook (its test skips without it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.one_node import Running, one_real_node
from trainyard.rehearsal import images
from trainyard.rehearsal.cluster import SERVICE_IP
from trainyard.rehearsal.kube import Kube, KubeError, Manifest, wait_until

pytestmark = pytest.mark.node

HERE = Path(__file__).parent
TEST = "trainyard-test"
OWN, OTHER = "api-reach", "api-reach-other"  # the pod's namespace and one it may not read



@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with one_real_node(tmp_path_factory, "api-cluster", ("etcd", "kube-apiserver", "kubelet", "crane"),
                       ("node-0 up (registry, images with kubectl, API address and forwarder, containerd, kubelet, "
                 "kube-proxy)"), proxy=True) as running:
        yield running


def _finished(kube: Kube, name: str, namespace: str) -> Manifest | None:
    pod: Manifest = kube.get("pod", name, namespace)
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    containers = pod["spec"]["containers"]
    if len(statuses) == len(containers) and all("terminated" in (s.get("state") or {}) for s in statuses):
        return pod
    return None


def test_the_kubernetes_service_has_the_endpoints_its_reconciler_would_write(running: Running) -> None:
    kube, api = running.plane.kube(), running.node.api
    slices = kube.items("endpointslices", "default", "kubernetes.io/service-name=kubernetes")
    endpoints = kube.get("endpoints", "kubernetes", "default")
    print(kube.run("get", "service,endpointslices", "-n", "default", "-o", "wide").stdout)
    assert [s["metadata"]["name"] for s in slices] == ["kubernetes"]  # no mirrored copy beside it
    assert slices[0]["endpoints"][0]["addresses"] == [api.address]
    assert slices[0]["ports"] == [{"name": "https", "port": running.plane.settings.ports.apiserver, "protocol": "TCP"}]
    assert endpoints["subsets"][0]["addresses"] == [{"ip": api.address}]
    # host clients are untouched: the kubeconfig still names loopback
    assert f"server: https://127.0.0.1:{running.plane.settings.ports.apiserver}" in running.plane.settings.kubeconfig.read_text()


def test_a_pod_reaches_the_api_server_with_in_cluster_config_as_its_service_account(running: Running) -> None:
    kube = running.plane.kube()
    version = images.kubectl_version(running.plane.settings.binary("kubectl"))
    kubectl = f"{images.MIRROR_HOST}/{images.KUBECTL_REPOSITORY}:{version}"
    kube.apply([
        *({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in (OWN, OTHER)),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "lister", "namespace": OWN}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pod-lister", "namespace": OWN},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "lister-lists-pods", "namespace": OWN},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-lister"},
         "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": OWN}]},
    ], field_manager=TEST)
    wait_until("the lister ServiceAccount", lambda: kube.exists("serviceaccount", "lister", OWN), 30)

    def container(name: str, *args: str) -> Manifest:
        return {"name": name, "image": kubectl, "imagePullPolicy": "Always", "args": list(args),
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}

    start = time.monotonic()
    kube.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "in-cluster-kubectl", "namespace": OWN},
                 "spec": {"serviceAccountName": "lister", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                          "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
                          "containers": [container("version", "get", "--raw", "/version", "-v=6"),
                                         container("own", "get", "pods", "-o", "name"),
                                         container("other", "get", "pods", "-n", OTHER)]}}], field_manager=TEST)
    pod = wait_until("the kubectl pod's three containers to finish", lambda: _finished(kube, "in-cluster-kubectl", OWN),
                     180, interval=0.5)
    running.timings["kubectl pod created -> kubectl answered (3 containers, image pull included)"] = time.monotonic() - start
    exit_codes = {s["name"]: s["state"]["terminated"]["exitCode"] for s in pod["status"]["containerStatuses"]}
    logs = {name: kube.run("logs", "in-cluster-kubectl", "-n", OWN, "-c", name).stdout for name in exit_codes}
    print(kube.run("get", "pod", "in-cluster-kubectl", "-n", OWN, "-o", "wide").stdout)
    for name, log in logs.items():
        print(f"--- {name} (exit {exit_codes[name]})\n{log.strip()}")
    assert exit_codes == {"version": 0, "own": 0, "other": 1}, logs
    assert _json_object(logs["version"])["gitVersion"] == "v1.36.3"
    assert f"https://{SERVICE_IP}:443/version" in logs["version"]  # -v=6: in-cluster config, the kubernetes Service
    assert logs["own"].split() == ["pod/in-cluster-kubectl"]
    assert (f'pods is forbidden: User "system:serviceaccount:{OWN}:lister" cannot list resource "pods" in API group "" '
            f'in the namespace "{OTHER}"') in logs["other"]


def _json_object(text: str) -> Manifest:
    """The JSON object in a container's log (stdout) among kubectl's -v=6 lines (stderr). Both streams go to one log,
    so a klog line can land inside the object (seen: the response line before its closing brace): drop them first."""
    text = "\n".join(line for line in text.splitlines() if not re.match(r"[IWEF]\d{4} \d\d:\d\d:\d\d", line))
    decoder = json.JSONDecoder()
    for start in (i for i, c in enumerate(text) if c == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise AssertionError(f"no JSON object in {text!r}")


def _build_probe(out: Path) -> Path:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").is_file() else None)
    if go is None:
        pytest.skip("go not found: the webhook probe (tests/node/webhook_probe) is built here")
    binary = out / "webhook-probe"
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "", "GOWORK": "off"}
    built = subprocess.run([go, "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid=", "-o", str(binary),
                            "main.go"], cwd=HERE / "webhook_probe", env=env, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    return binary


def test_the_api_server_calls_a_webhook_served_by_a_pod_on_the_node(running: Running, tmp_path: Path) -> None:
    """The webhook names a Service; the API server dials one of its ready endpoints (--enable-aggregator-routing)
    and checks the pod's certificate for ``webhook-probe.<namespace>.svc`` against the caBundle."""
    kube, plane, node = running.plane.kube(), running.plane, running.node
    image = images.static_binary_image(_build_probe(tmp_path), "webhook-probe", "rehearsal/webhook-probe", "test",
                                       tmp_path / "images", {"Entrypoint": ["/webhook-probe"]}, "tests/node/webhook_probe")
    images.push(image, node.registry.address)
    service_name = f"webhook-probe.{OWN}.svc"
    plane.pki.issue_server("webhook-probe", f"/CN={service_name}", f"DNS:{service_name}")
    kube.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OWN}}], field_manager=TEST)
    kube.run("create", "secret", "tls", "webhook-probe-tls", "-n", OWN, "--cert", str(plane.pki.path("webhook-probe.crt")),
             "--key", str(plane.pki.path("webhook-probe.key")))
    kube.apply([
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "webhook-probe", "namespace": OWN,
                                                          "labels": {"app": "webhook-probe"}},
         "spec": {"terminationGracePeriodSeconds": 1,
                  "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
                  "containers": [{"name": "webhook", "image": image.reference, "imagePullPolicy": "Always",
                                  "ports": [{"containerPort": 8443}],
                                  "readinessProbe": {"tcpSocket": {"port": 8443}, "periodSeconds": 1},
                                  "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}]}],
                  "volumes": [{"name": "tls", "secret": {"secretName": "webhook-probe-tls"}}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook-probe", "namespace": OWN},
         "spec": {"selector": {"app": "webhook-probe"}, "ports": [{"port": 443, "targetPort": 8443}]}},
    ], field_manager=TEST)

    def ready_endpoint() -> bool:
        slices = kube.items("endpointslices", OWN, "kubernetes.io/service-name=webhook-probe")
        return any((e.get("conditions") or {}).get("ready") for s in slices for e in s.get("endpoints") or [])

    wait_until("the webhook pod to be a ready endpoint of its Service", ready_endpoint, 120, interval=0.5)
    start = time.monotonic()
    kube.apply([{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                 "metadata": {"name": "webhook-probe"},
                 "webhooks": [{"name": "probe.trainyard.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                               "failurePolicy": "Fail", "timeoutSeconds": 10,
                               "clientConfig": {"service": {"namespace": OWN, "name": "webhook-probe", "port": 443,
                                                            "path": "/validate"}, "caBundle": plane.pki.ca_bundle()},
                               "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                          "resources": ["configmaps"]}],
                               "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": OWN}},
                               "objectSelector": {"matchLabels": {"trainyard.dev/webhook-probe": "refuse"}}}]}],
               field_manager=TEST)
    try:
        def refused() -> str | None:
            attempt = kube.run("create", "-f", "-", check=False, stdin=json.dumps(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                    "name": "probed", "namespace": OWN, "labels": {"trainyard.dev/webhook-probe": "refuse"}}}))
            if attempt.returncode == 0:  # the API server had not loaded the configuration yet
                kube.delete("configmap", "probed", namespace=OWN, wait=True)
                return None
            return attempt.stderr.strip()

        message = wait_until("the webhook to refuse a ConfigMap", refused, 60, interval=0.5)
        running.timings["webhook configured -> the API server's call answered by the pod"] = time.monotonic() - start
        print(message)
        assert ('admission webhook "probe.trainyard.dev" denied the request: refused by pod webhook-probe for '
                "trainyard-admin") in message
        # a ConfigMap the webhook does not select is admitted: the refusal above is the pod's answer, not a failure
        kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-probed", "namespace": OWN}})
        print(kube.run("logs", "webhook-probe", "-n", OWN).stdout.strip())
    finally:
        kube.delete("validatingwebhookconfiguration", "webhook-probe", wait=True)


def test_the_last_node_down_leaves_no_address_forwarder_or_endpoints(running: Running) -> None:
    """Runs last in the module: the fixture's down() is idempotent."""
    kube, node = running.plane.kube(), running.node
    assert any(node.api.device in item for item in node.leftovers())
    start = time.monotonic()
    node.down()
    running.timings["node-0 down (test)"] = time.monotonic() - start
    assert node.leftovers() == []
    assert kube.items("endpointslices", "default", "kubernetes.io/service-name=kubernetes") == []
    with pytest.raises(KubeError, match=r"NotFound|not found"):
        kube.get("endpoints", "kubernetes", "default")
    assert kube.exists("service", "kubernetes", "default")  # the API server's own Service stays, without endpoints
