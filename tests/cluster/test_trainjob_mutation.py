"""The TrainJob MutatingAdmissionPolicies on a real kube-apiserver (1.36), server-side dry run.

``trainyard-trainjob-default-priority`` gives a new TrainJob without a priority class label its tenant's
``default_priority_class`` and leaves a label the job sets alone; ``trainyard-trainjob-initializer-env``
removes the empty initializer env lists the Kubeflow SDK writes. Only the mutating policies are applied
(the validating ones need Kueue's LocalQueues as params, which the rehearsal's tests cover): what is
asserted is what the API server itself wrote into the object.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import Cluster, bare_api_server, install_policy_params
from tests.conftest import rendered, stack
from trainyard import catalog
from trainyard.manifests import admission
from trainyard.manifests.meta import PRIORITY_CLASS_LABEL, TENANT_LABEL
from trainyard.rehearsal.kube import wait_until

pytestmark = pytest.mark.cluster

STACK = "local"


@pytest.fixture(scope="module")
def mutation_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    platform = rendered(STACK)
    crds = [c for c in platform.crds if c["spec"]["group"] == catalog.TRAINER_API.split("/")[0]]
    namespaces = [o for o in platform.objects if o["kind"] == "Namespace" and TENANT_LABEL in o["metadata"]["labels"]]
    # The pod policy has its own test (test_kueue_flavor_annotation.py): it would mutate nothing of a TrainJob.
    mutating = [o for o in platform.concern("admission").objects if o["kind"].startswith("MutatingAdmissionPolicy")
                and o["metadata"]["name"] != admission.KUEUE_FLAVOR_POLICY
                and o.get("spec", {}).get("policyName") != admission.KUEUE_FLAVOR_POLICY]
    assert len(mutating) == 4, [o["metadata"]["name"] for o in mutating]
    with bare_api_server(tmp_path_factory, "trainjob-mutation") as cluster:
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-",
                        stdin=yaml.safe_dump_all([*crds, *namespaces]))
        install_policy_params(cluster, platform)
        cluster.wait_established(*(c["metadata"]["name"] for c in crds))
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-", stdin=yaml.safe_dump_all(mutating))
        # Established is not yet served: the API server may still answer "Resource kind ... not found" for a while.
        probe = yaml.safe_dump(trainjob(namespaces[0]["metadata"]["name"], {PRIORITY_CLASS_LABEL: "probe"}))
        wait_until("TrainJobs to be served", lambda: cluster.kubectl(
            "create", "--dry-run=server", "-o", "name", "-f", "-", stdin=probe, check=False).returncode == 0, 60)
        yield cluster


def trainjob(namespace: str, labels: dict[str, str] | None, initializer_env: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "probe", "namespace": namespace}
    if labels is not None:
        metadata["labels"] = labels
    spec: dict[str, Any] = {"runtimeRef": {"name": "torch-distributed"}}
    if initializer_env:
        spec["initializer"] = {"dataset": {"storageUri": "s3://team-a-datasets/alpaca/train.jsonl", "env": []}}
    return {"apiVersion": catalog.TRAINER_API, "kind": "TrainJob", "metadata": metadata, "spec": spec}


NOT_YET_SERVED = "There can be a delay between when CustomResourceDefinitions are created and when they are available"


def admitted(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server would admit it. A loaded API server may answer "not found ... there can be
    a delay" even after a probe succeeded (CI saw it): that answer, and only that one, is retried."""
    def create() -> subprocess.CompletedProcess[str] | None:
        done = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=yaml.safe_dump(obj), check=False)
        return None if done.returncode != 0 and NOT_YET_SERVED in done.stderr else done

    done = wait_until("the API server to serve TrainJobs", create, 60, interval=1)
    assert done.returncode == 0, f"kubectl create --dry-run=server failed ({done.returncode}):\n{done.stderr}"
    return dict(yaml.safe_load(done.stdout))


def test_a_trainjob_without_a_priority_class_gets_its_tenants_default(mutation_cluster: Cluster) -> None:
    config = stack(STACK).config
    tenant = next(t for t in config.tenants if t.default_priority_class and len(t.priority_classes) > 1)
    namespace = tenant.namespace_name
    # The API server loads new policies asynchronously: wait until this one takes effect.
    wait_until("the default-priority policy to take effect",
               lambda: PRIORITY_CLASS_LABEL in (admitted(mutation_cluster, trainjob(namespace, None))["metadata"]
                                                .get("labels") or {}), 60)
    no_labels = admitted(mutation_cluster, trainjob(namespace, None))
    assert no_labels["metadata"]["labels"] == {PRIORITY_CLASS_LABEL: tenant.default_priority_class}
    other_labels = admitted(mutation_cluster, trainjob(namespace, {"app": "sweep"}))
    assert other_labels["metadata"]["labels"] == {"app": "sweep", PRIORITY_CLASS_LABEL: tenant.default_priority_class}
    chosen = next(c for c in tenant.priority_classes if c != tenant.default_priority_class)
    explicit = admitted(mutation_cluster, trainjob(namespace, {PRIORITY_CLASS_LABEL: chosen}))
    assert explicit["metadata"]["labels"] == {PRIORITY_CLASS_LABEL: chosen}


def test_the_sdks_empty_initializer_env_is_removed(mutation_cluster: Cluster) -> None:
    namespace = stack(STACK).config.tenants[0].namespace_name

    def removed() -> bool:
        obj = admitted(mutation_cluster, trainjob(namespace, None, initializer_env=True))
        return "env" not in obj["spec"]["initializer"]["dataset"]

    wait_until("the initializer-env policy to take effect", removed, 60)
