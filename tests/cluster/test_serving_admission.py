"""Serving admission on a real kube-apiserver: InferenceServices that break a rule are denied, a correct one is accepted.

A private API server of its own (``bare_api_server``, like every admission module: policies created here
must not meet a later ``pulumi up`` of the local stack on the session's cluster, whose field manager would
conflict with ``kubectl create``'s) gets KServe's CRDs, the serving admission policies and the local
stack's tenant namespaces, as rendered. Each InferenceService
is sent with a server-side dry run (``kubectl create --dry-run=server``): the API server runs
schema validation and the ValidatingAdmissionPolicies and stores nothing. No KServe controller
runs here, so KServe's own webhooks are not part of what is tested: these denials are Trainyard's.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.conftest import Cluster, bare_api_server, install_policy_params
from tests.conftest import rendered, stack
from trainyard.manifests.meta import TENANT_LABEL
from trainyard.manifests.serving import CLUSTER_LOCAL, VISIBILITY_LABEL

pytestmark = pytest.mark.cluster

TENANT_NS = "team-a"
GOOD: dict[str, Any] = {
    "apiVersion": "serving.kserve.io/v1beta1",
    "kind": "InferenceService",
    "metadata": {"name": "chat", "namespace": TENANT_NS,
                 "labels": {VISIBILITY_LABEL: CLUSTER_LOCAL}},
    "spec": {"predictor": {
        "serviceAccountName": "kserve-predictor",
        "model": {"modelFormat": {"name": "vLLM"}, "runtime": "vllm-openai",
                  "storageUri": "s3://team-a-models/mlflow/1/0f3c/artifacts/model"},
    }},
}


def with_change(change: dict[str, Any]) -> dict[str, Any]:
    isvc = copy.deepcopy(GOOD)
    isvc["spec"]["predictor"]["model"].update(change)
    return isvc


def without_visibility_label() -> dict[str, Any]:
    """What ``trainyard promote --expose`` writes: no cluster-local label, so KServe would expose it publicly."""
    isvc = copy.deepcopy(GOOD)
    del isvc["metadata"]["labels"][VISIBILITY_LABEL]
    return isvc


def with_transformer(image: str) -> dict[str, Any]:
    """A custom transformer container in front of the (correct) predictor."""
    isvc = copy.deepcopy(GOOD)
    isvc["spec"]["transformer"] = {"containers": [{"name": "kserve-container", "image": image}]}
    return isvc


DIGEST = "@sha256:" + "1" * 64
REGISTRIES = "registry.trainyard.internal/"  # the local stack's runtimes.approved_registries
# The local stack's serving.approved_runtimes, in its order: the policy's message lists them as configured.
APPROVED = ", ".join(stack("local").config.serving.approved_runtimes)
# Case: (InferenceService, the policy that denies it, what its message says).
CASES = {
    "unapproved runtime": (with_change({"runtime": "kserve-vllmserver"}), "trainyard-isvc-runtime",
                           "spec.predictor.model.runtime must name an approved ClusterServingRuntime "
                           f'({APPROVED}), not "kserve-vllmserver"'),
    "unpinned image": (with_change({"image": "registry.trainyard.internal/vllm/vllm-openai:v0.24.0"}),
                       "trainyard-isvc-images",
                       "images not pinned by digest (@sha256:...): registry.trainyard.internal/vllm/vllm-openai:v0.24.0"),
    # Pinned by digest, so only the registry rule is broken.
    "unapproved registry": (with_change({"image": "docker.io/vllm/vllm-openai" + DIGEST}), "trainyard-isvc-images",
                            f"images not from an approved registry ({REGISTRIES}): docker.io/vllm/vllm-openai{DIGEST}"),
    "custom container from a look-alike registry": (
        with_transformer("registry.trainyard.internal.example.com/tx" + DIGEST), "trainyard-isvc-images",
        f"images not from an approved registry ({REGISTRIES}): registry.trainyard.internal.example.com/tx{DIGEST}"),
    "foreign bucket": (with_change({"storageUri": "s3://team-b-models/mlflow/2/77aa/artifacts/model"}),
                       "trainyard-isvc-storage",
                       "storage URIs outside this namespace's model bucket (s3://team-a-models/...): "
                       "s3://team-b-models/mlflow/2/77aa/artifacts/model"),
    # The local stack names no serving.exposure.public_tenants: no tenant may expose a model.
    "public exposure": (without_visibility_label(), "trainyard-isvc-exposure",
                        "this tenant may not expose models outside the cluster: label the InferenceService "
                        f"{VISIBILITY_LABEL}: {CLUSTER_LOCAL}"),
}


def dry_run(cluster: Cluster, obj: dict[str, Any]) -> tuple[int, str]:
    result = cluster.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", stdin=json.dumps(obj), check=False)
    return result.returncode, (result.stdout + result.stderr).strip()


@pytest.fixture(scope="module")
def serving_admission(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    platform = rendered("local")
    crds = [c for c in platform.crds if c["spec"]["group"] == "serving.kserve.io"]
    namespaces = [o for o in platform.objects if o["kind"] == "Namespace" and TENANT_LABEL in o["metadata"]["labels"]]
    policies = list(platform.concern("serving-admission").objects)
    assert len(policies) == 10
    with bare_api_server(tmp_path_factory, "serving-admission") as cluster:
        for batch in (crds, namespaces):
            cluster.create_missing(batch)
        install_policy_params(cluster, platform)
        cluster.create_missing(policies)
        cluster.wait_established(*(c["metadata"]["name"] for c in crds))
        # A new policy takes effect once the API server's policy informer has seen it and its binding:
        # wait (bounded) until every bad case is denied; the tests then say which one is not.
        deadline = time.monotonic() + 60
        while any(dry_run(cluster, obj)[0] == 0 for obj, _, _ in CASES.values()) and time.monotonic() < deadline:
            time.sleep(1)
        yield cluster


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_inference_service_breaking_a_rule_is_denied_by_its_policy(serving_admission: Cluster, case: str) -> None:
    obj, policy, message = CASES[case]
    code, output = dry_run(serving_admission, obj)
    print(f"{case}: exit {code}: {output}")
    assert code != 0
    assert f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: {message}" in output, output


def test_a_correct_inference_service_is_accepted(serving_admission: Cluster) -> None:
    code, output = dry_run(serving_admission, GOOD)
    print(f"correct: exit {code}: {output}")
    assert code == 0, output
    assert output == "inferenceservice.serving.kserve.io/chat"


def test_a_tenant_serving_runtime_is_denied(serving_admission: Cluster) -> None:
    runtime = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
               "metadata": {"name": "vllm-openai", "namespace": TENANT_NS},
               "spec": {"supportedModelFormats": [{"name": "vLLM"}],
                        "containers": [{"name": "kserve-container",
                                        "image": "registry.trainyard.internal/x@sha256:" + "0" * 64}]}}
    code, output = dry_run(serving_admission, runtime)
    print(f"tenant ServingRuntime: exit {code}: {output}")
    assert code != 0
    assert "ValidatingAdmissionPolicy 'trainyard-serving-runtimes'" in output, output
