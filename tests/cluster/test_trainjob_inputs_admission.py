"""``trainyard-trainjob-inputs`` on a real kube-apiserver: a TrainJob initialises only from approved, pinned inputs.

Approved: the initializer's dataset and base model URIs are entries of the stack's ``lineage`` for the
namespace's tenant, ``spec.trainer.env`` pins them (dataset version and digest, model revision) as
literals, and what the run records of the entry (URI, name, licence, classification), where set, is the
entry's, also as a literal.

The private control plane (``bare_api_server``) gets Trainer's CRDs, the local stack's tenant namespaces with
their ``trainyard-policy`` TenantPolicies (the policy's params: the approved entries, one key per field), and
the policy with its binding, as rendered. Each TrainJob is sent with a server-side dry run (``kubectl create
--dry-run=server``): schema validation and the policy run, nothing is stored. Only this policy is applied
(the queue policy needs Kueue's LocalQueues as params; the rehearsal's tests cover it), so every refusal
here is this policy's. The approved entries are the local stack's ``lineage`` (team-a: one dataset, one
base model; team-b: none); ``tests/policy/test_lineage.py`` checks the same CEL with cel-python.

The params are data the policy reads at admission: a tenant namespace without them is refused
(``parameterNotFoundAction: Deny``), and changed params change the decision with the policy untouched, also
after every binding that reads them was removed and created again (the kube-apiserver defect a ConfigMap
param kind has: manifests/policy_params.py).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import Cluster, bare_api_server, install_policy_params, policy_params
from tests.conftest import rendered, stack
from trainyard import catalog
from trainyard.config.lineage import (
    BASE_MODEL_NAME_ENV,
    BASE_MODEL_REVISION_ENV,
    DATASET_CLASSIFICATION_ENV,
    DATASET_DIGEST_ENV,
    DATASET_LICENCE_ENV,
    DATASET_VERSION_ENV,
    RECORDED_DATASET_ENV,
    RECORDED_MODEL_ENV,
)
from trainyard.manifests.meta import TENANT_LABEL
from trainyard.rehearsal.cluster import ControlPlane, Settings
from trainyard.rehearsal.kube import wait_until

pytestmark = pytest.mark.cluster

STACK = "local"
TENANT, OTHER = "team-a", "team-b"
POLICY = "trainyard-trainjob-inputs"
LINEAGE = stack(STACK).config.lineage
DATASET, MODEL = LINEAGE.approved_for(TENANT).datasets[0], LINEAGE.approved_for(TENANT).base_models[0]
# The pins the policy requires, and only those.
PINS = [{"name": DATASET_VERSION_ENV, "value": DATASET.version}, {"name": DATASET_DIGEST_ENV, "value": DATASET.digest},
        {"name": BASE_MODEL_REVISION_ENV, "value": MODEL.revision}]
# What Lineage.pins gives (the SDK and the rehearsal send it): the pins and the rest of the entry the run records.
RECORDED = [{"name": k, "value": v} for k, v in LINEAGE.pins(TENANT, DATASET.uri, MODEL.uri).items()]
# What each validation's messageExpression says after the storage URI.
DATASET_REFUSED = (f"must be a dataset approved for this namespace, pinned with {DATASET_VERSION_ENV} and "
                   f"{DATASET_DIGEST_ENV} in spec.trainer.env, and {', '.join(RECORDED_DATASET_ENV)} where set must "
                   "equal the entry (trainyard check names the approved entries)")
MODEL_REFUSED = (f"must be a base model approved for this namespace, pinned with {BASE_MODEL_REVISION_ENV} in "
                 f"spec.trainer.env, and {', '.join(RECORDED_MODEL_ENV)} where set must equal the entry "
                 "(trainyard check names the approved entries)")


def trainjob(namespace: str = TENANT, dataset: str | None = DATASET.uri, model: str | None = MODEL.uri,
             env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    initializer = {kind: {"storageUri": uri} for kind, uri in (("dataset", dataset), ("model", model)) if uri}
    spec: dict[str, Any] = {"runtimeRef": {"name": "lora-peft"},
                            "trainer": {"env": copy.deepcopy(PINS if env is None else env)}}
    if initializer:
        spec["initializer"] = initializer
    return {"apiVersion": catalog.TRAINER_API, "kind": "TrainJob",
            "metadata": {"name": "probe", "namespace": namespace}, "spec": spec}


def with_env(name: str, value: str | None, env: list[dict[str, Any]] = PINS) -> list[dict[str, Any]]:
    """``env`` with ``name`` set to ``value`` (left out when None)."""
    return [e for e in env if e["name"] != name] + ([] if value is None else [{"name": name, "value": value}])


def from_config_map(name: str, env: list[dict[str, Any]] = PINS) -> list[dict[str, Any]]:
    """``env`` with ``name`` read from a ConfigMap: a value a reviewer cannot see (only literals count)."""
    return [*with_env(name, None, env), {"name": name, "valueFrom": {"configMapKeyRef": {"name": "pins", "key": "k"}}}]


OTHER_DATASET = f"s3://{TENANT}-datasets/alpaca/train-unreviewed.jsonl"
OTHER_MODEL = f"s3://{TENANT}-models/llama-3.2-3b/base/"
DATASET_DENIED = f"spec.initializer.dataset.storageUri {DATASET.uri} {DATASET_REFUSED}"
MODEL_DENIED = f"spec.initializer.model.storageUri {MODEL.uri} {MODEL_REFUSED}"
# Case: (TrainJob, what the refusal says after "denied request: "). Each breaks one validation only.
REFUSALS = {
    "dataset not approved": (trainjob(dataset=OTHER_DATASET),
                             f"spec.initializer.dataset.storageUri {OTHER_DATASET} {DATASET_REFUSED}"),
    # team-a's approved entry, pins and all, is not approved for team-b (team-b has no lineage entries).
    "another tenant's dataset": (trainjob(namespace=OTHER, model=None), DATASET_DENIED),
    "dataset version not pinned": (trainjob(env=with_env(DATASET_VERSION_ENV, None)), DATASET_DENIED),
    "another dataset version": (trainjob(env=with_env(DATASET_VERSION_ENV, "3f2b1c9e-rehearsal-0002")), DATASET_DENIED),
    "another dataset digest": (trainjob(env=with_env(DATASET_DIGEST_ENV, "sha256:" + "f" * 64)), DATASET_DENIED),
    "dataset version from a ConfigMap": (trainjob(env=from_config_map(DATASET_VERSION_ENV)), DATASET_DENIED),
    # What the run records may be left out, but where set it is the entry's, as a literal.
    "another dataset licence recorded": (trainjob(env=with_env(DATASET_LICENCE_ENV, "MIT", RECORDED)), DATASET_DENIED),
    "dataset classification from a ConfigMap": (trainjob(env=from_config_map(DATASET_CLASSIFICATION_ENV, RECORDED)),
                                                DATASET_DENIED),
    "base model not approved": (trainjob(model=OTHER_MODEL),
                                f"spec.initializer.model.storageUri {OTHER_MODEL} {MODEL_REFUSED}"),
    "base model revision not pinned": (trainjob(env=with_env(BASE_MODEL_REVISION_ENV, None)), MODEL_DENIED),
    "another base model revision": (trainjob(env=with_env(BASE_MODEL_REVISION_ENV, DATASET.digest)), MODEL_DENIED),
    "another base model name recorded": (trainjob(env=with_env(BASE_MODEL_NAME_ENV, "llama-3-2-3b", RECORDED)),
                                         MODEL_DENIED),
}
ALLOWED = {
    "approved dataset and base model, pinned": trainjob(),
    "approved inputs with everything Lineage.pins gives": trainjob(env=RECORDED),
    "approved dataset only, pinned": trainjob(model=None, env=with_env(BASE_MODEL_REVISION_ENV, None)),
    "no initializer": trainjob(dataset=None, model=None, env=[]),
}


def dry_run(cluster: Cluster, obj: dict[str, Any]) -> tuple[int, str]:
    result = cluster.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", stdin=json.dumps(obj), check=False)
    return result.returncode, (result.stdout + result.stderr).strip()


NOT_YET_SERVED = "There can be a delay between when CustomResourceDefinitions are created and when they are available"


@pytest.fixture(scope="module")
def inputs_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    platform = rendered(STACK)
    crds = [c for c in platform.crds if c["spec"]["group"] == catalog.TRAINER_API.split("/")[0]]
    namespaces = [o for o in platform.objects if o["kind"] == "Namespace" and TENANT_LABEL in o["metadata"]["labels"]]
    policy = [o for o in platform.concern("admission").objects if o["metadata"]["name"] == POLICY]
    assert [o["kind"] for o in policy] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    with bare_api_server(tmp_path_factory, "trainjob-inputs") as cluster:
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-",
                        stdin=yaml.safe_dump_all([*crds, *namespaces]))
        install_policy_params(cluster, platform)
        cluster.wait_established(*(c["metadata"]["name"] for c in crds))
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-", stdin=yaml.safe_dump_all(policy))
        # Established is not yet served, and a new policy takes effect once the API server's policy informer
        # has seen it and its binding: wait (bounded) until TrainJobs are served and the first refusal is made.
        first = REFUSALS["dataset not approved"][0]

        def in_effect() -> bool:
            code, output = dry_run(cluster, first)
            return code != 0 and NOT_YET_SERVED not in output and f"'{POLICY}'" in output

        wait_until(f"TrainJobs to be served and {POLICY} to take effect", in_effect, 90, interval=1)
        yield cluster


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_trainjob_whose_inputs_are_not_approved_at_their_version_is_refused(inputs_cluster: Cluster,
                                                                              case: str) -> None:
    obj, message = REFUSALS[case]
    code, output = dry_run(inputs_cluster, obj)
    print(f"{case}: exit {code}: {output}")
    assert code != 0
    assert f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: {message}" in output, output


@pytest.mark.parametrize("case", list(ALLOWED))
def test_a_trainjob_with_approved_pinned_inputs_is_admitted(inputs_cluster: Cluster, case: str) -> None:
    code, output = dry_run(inputs_cluster, ALLOWED[case])
    print(f"{case}: exit {code}: {output}")
    assert code == 0, output
    assert output == "trainjob.trainer.kubeflow.org/probe"


def params_of(namespace: str) -> dict[str, Any]:
    return next(p for p in policy_params(rendered(STACK)) if p["metadata"]["namespace"] == namespace)


def test_a_tenant_namespace_without_params_is_refused(inputs_cluster: Cluster) -> None:
    """``parameterNotFoundAction: Deny``: a namespace labelled as a tenant's but without its ``trainyard-policy``
    TenantPolicy admits no TrainJob, not even one that names no input."""
    namespace = "team-without-params"
    inputs_cluster.create_missing([{"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": namespace, "labels": {TENANT_LABEL: namespace}}}])
    code, output = dry_run(inputs_cluster, trainjob(namespace=namespace, dataset=None, model=None, env=[]))
    print(f"no params: exit {code}: {output}")
    assert code != 0
    assert f"'{POLICY}'" in output and "no params found" in output, output
    # The same TrainJob in a namespace with params is admitted (ALLOWED["no initializer"]).
    assert dry_run(inputs_cluster, trainjob(dataset=None, model=None, env=[]))[0] == 0


def granted_and_restored(cluster: Cluster) -> None:
    """team-b may not read team-a's dataset; its params granting the entry (the keys a stack change approving it
    for team-b renders) admit the same TrainJob; restoring the params refuses it again."""
    job = trainjob(namespace=OTHER, model=None, env=with_env(BASE_MODEL_REVISION_ENV, None))
    rendered_params = params_of(OTHER)
    granted = copy.deepcopy(rendered_params)
    granted["data"].update({k: v for k, v in params_of(TENANT)["data"].items()
                            if k.startswith(f"dataset.{DATASET.name}.")})

    def apply(params: dict[str, Any]) -> None:
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-", stdin=yaml.safe_dump(params))

    assert dry_run(cluster, job)[0] != 0
    try:
        apply(granted)
        wait_until("the granted params to take effect", lambda: dry_run(cluster, job)[0] == 0, 60, interval=1)
    finally:
        apply(rendered_params)
    wait_until("the restored params to take effect", lambda: dry_run(cluster, job)[0] != 0, 60, interval=1)
    output = dry_run(cluster, job)[1]
    assert f"denied request: {DATASET_DENIED}" in output, output


def test_changed_params_change_the_decision_without_touching_the_policy(inputs_cluster: Cluster) -> None:
    before = inputs_cluster.get_json("validatingadmissionpolicy", POLICY)["metadata"]
    granted_and_restored(inputs_cluster)
    after = inputs_cluster.get_json("validatingadmissionpolicy", POLICY)["metadata"]
    assert (after["resourceVersion"], after["generation"]) == (before["resourceVersion"], before["generation"])


def test_params_still_resolve_after_every_binding_was_removed_and_created_again(inputs_cluster: Cluster) -> None:
    """kube-apiserver stops watching a param kind once no binding names it (one policy refresh, ~1 s); for a built-in
    kind (ConfigMap) it may never watch again: new params "not found", changed ones stale (a withdrawn approval still
    admitted), until the next restart (kubernetes v1.36 policy_source.go; kubernetes/kubernetes#130887). Measured here
    with a ConfigMap param: an API server restarted with the policy in place, the binding removed for 5 s and
    created again, then the ConfigMap changed to refuse: still admitted 20 s later; the same with a custom kind:
    refused at once. So: restart the API server with the policy in place (as an upgrade does), remove the binding
    until the policy stops refusing, bind it again; params created and changed after that count."""
    binding = next(o for o in rendered(STACK).concern("admission").objects
                   if o["kind"] == "ValidatingAdmissionPolicyBinding" and o["metadata"]["name"] == POLICY)
    refused = REFUSALS["dataset not approved"][0]
    plane = ControlPlane(Settings.from_env(inputs_cluster.env))
    plane.down()  # its state (etcd, certificates) stays: the same cluster comes back
    plane.up()
    wait_until("the policy to refuse again after the restart", lambda: dry_run(inputs_cluster, refused)[0] != 0
               and NOT_YET_SERVED not in dry_run(inputs_cluster, refused)[1], 90, interval=1)
    inputs_cluster.kubectl("delete", "validatingadmissionpolicybinding", POLICY)
    try:
        # Admitted once the API server has refreshed its policies without the binding, i.e. dropped the param watch.
        wait_until("the policy to be unbound", lambda: dry_run(inputs_cluster, refused)[0] == 0, 60, interval=1)
    finally:
        inputs_cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-",
                               stdin=yaml.safe_dump(binding))
    wait_until("the policy to be bound again", lambda: dry_run(inputs_cluster, refused)[0] != 0, 60, interval=1)
    # New params, of a namespace that had none while the watch was down: found.
    namespace = "team-after-rebind"
    tenant_ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {TENANT_LABEL: OTHER}}}
    params = copy.deepcopy(params_of(OTHER))
    params["metadata"]["namespace"] = namespace
    inputs_cluster.create_missing([tenant_ns])
    inputs_cluster.create_missing([params])
    plain = trainjob(namespace=namespace, dataset=None, model=None, env=[])
    wait_until("the new namespace's params to be found", lambda: dry_run(inputs_cluster, plain)[0] == 0, 60, interval=1)
    # Changed params: seen, not a stale copy.
    granted_and_restored(inputs_cluster)
