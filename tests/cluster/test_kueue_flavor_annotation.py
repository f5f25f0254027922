"""``trainyard-pod-kueue-flavor`` on a real kube-apiserver (1.36), and on the rehearsal with the real Kueue.

Kueue v0.19.2 names a pod's ResourceFlavor on no pod field: it merges the flavor's ``nodeLabels`` into the
pod template's ``nodeSelector`` when it admits the workload. The policy writes the flavor's name into the
annotation ``trainyard.dev/kueue-flavor`` from that selector, and the runtimes read it as
``TRAINYARD_KUEUE_FLAVOR``.

1. Bare API server, server-side dry run: only the rendered admission objects and the tenant namespaces are
   applied (as tests/cluster/test_trainjob_mutation.py does for the TrainJob policies), and a restricted pod
   is created with a flavor's node labels in its ``nodeSelector`` (annotated with that flavor), with none
   (no annotation), and with a forged annotation and no flavor's labels (removed).
2. The session's rehearsal: a TrainJob that names no pool is admitted by Kueue, which picks the flavor; each
   of its pods carries the annotation naming the flavor its Workload's pod set was assigned.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import Cluster, bare_api_server
from tests.conftest import rendered, stack
from trainyard.manifests import admission
from trainyard.manifests.meta import KUEUE_FLAVOR_ANNOTATION, TENANT_LABEL
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.scenario import Job
from trainyard.rehearsal.session import Rehearsal

pytestmark = pytest.mark.cluster

STACK = "local"
ACCOUNT = "probe"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


def tenant_namespace() -> str:
    return stack(STACK).config.tenants[0].namespace_name


@pytest.fixture(scope="module")
def flavor_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    platform = rendered(STACK)
    namespaces = [o for o in platform.objects if o["kind"] == "Namespace" and TENANT_LABEL in o["metadata"]["labels"]]
    policies = [o for o in platform.concern("admission").objects
                if o["kind"].startswith("MutatingAdmissionPolicy") and o["metadata"]["name"] == admission.KUEUE_FLAVOR_POLICY]
    assert [o["kind"] for o in policies] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    # An explicit ServiceAccount: the ServiceAccount admission plugin refuses a pod whose account does not exist.
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT, "namespace": tenant_namespace()}}
    with bare_api_server(tmp_path_factory, "kueue-flavor") as cluster:
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-",
                        stdin=yaml.safe_dump_all(namespaces))
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-",
                        stdin=yaml.safe_dump_all([account, *policies]))
        yield cluster


def probe_pod(node_selector: dict[str, str] | None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod Pod Security "restricted" admits (the tenant namespaces enforce it)."""
    metadata: dict[str, Any] = {"name": "probe", "namespace": tenant_namespace()}
    if annotations is not None:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {
        "serviceAccountName": ACCOUNT,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "main", "image": "registry.trainyard.internal/probe:v1",
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def admitted(cluster: Cluster, pod: dict[str, Any]) -> dict[str, Any]:
    done: subprocess.CompletedProcess[str] = cluster.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=yaml.safe_dump(pod), check=False)
    assert done.returncode == 0, f"kubectl create --dry-run=server failed ({done.returncode}):\n{done.stderr}"
    return dict(yaml.safe_load(done.stdout))


def annotations_of(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


def test_a_pod_on_a_flavors_node_labels_is_annotated_with_that_flavor_and_others_are_not(flavor_cluster: Cluster) -> None:
    flavors = admission.flavor_node_labels(stack(STACK).config)
    assert len(flavors) >= 2, flavors
    first = next(iter(flavors))
    # The API server loads a new policy asynchronously: wait until this one takes effect.
    wait_until("the flavor policy to take effect", lambda: annotations_of(
        admitted(flavor_cluster, probe_pod(flavors[first]))).get(KUEUE_FLAVOR_ANNOTATION) == first, 60)
    for name, labels in flavors.items():
        pod = admitted(flavor_cluster, probe_pod({**labels, "kubernetes.io/arch": "amd64"}, {"team": "x"}))
        assert annotations_of(pod) == {"team": "x", KUEUE_FLAVOR_ANNOTATION: name}, name
    assert KUEUE_FLAVOR_ANNOTATION not in annotations_of(admitted(flavor_cluster, probe_pod(None)))
    assert KUEUE_FLAVOR_ANNOTATION not in annotations_of(admitted(flavor_cluster, probe_pod({"kubernetes.io/arch": "amd64"})))
    forged = admitted(flavor_cluster, probe_pod(None, {"team": "x", KUEUE_FLAVOR_ANNOTATION: first}))
    assert annotations_of(forged) == {"team": "x"}


def test_the_pods_of_a_trainjob_kueue_admits_name_the_flavor_of_their_pod_set(deployed_rehearsal: Rehearsal) -> None:
    rehearsal = deployed_rehearsal
    tenant = rehearsal.config.tenants[0]
    namespace = tenant.namespace_name
    # No pool named: the pods' nodeSelector is only what Kueue gives them for the flavor it picks.
    job = Job(name="flavor-probe", tenant=tenant.name, run_for="60s")
    created = rehearsal.submit(job)
    assert "nodeSelector" not in json.dumps(created["spec"]), created["spec"]

    def assigned() -> dict[str, set[str]] | None:
        for workload in rehearsal.workloads(namespace):
            owners = workload["metadata"].get("ownerReferences") or []
            admission_ = workload.get("status", {}).get("admission")
            if admission_ and any(o["kind"] == "TrainJob" and o["name"] == job.name for o in owners):
                return {a["name"]: set(a.get("flavors", {}).values()) for a in admission_["podSetAssignments"]}
        return None

    flavors = wait_until("the probe TrainJob to be admitted", assigned, 120, interval=1)

    def pods() -> list[dict[str, Any]] | None:
        found = rehearsal.kube.items("pods", namespace, selector=f"{JOBSET_NAME_LABEL}={job.name}")
        return found if {p["metadata"]["labels"][REPLICATED_JOB_LABEL] for p in found} == set(flavors) else None

    created_pods = wait_until("the probe TrainJob's pods", pods, 120, interval=1)
    for pod in created_pods:
        pod_set = pod["metadata"]["labels"][REPLICATED_JOB_LABEL]
        (flavor,) = flavors[pod_set]  # one flavor per pod set: its resources share one resource group
        assert annotations_of(pod).get(KUEUE_FLAVOR_ANNOTATION) == flavor, (pod["metadata"]["name"], flavors)
