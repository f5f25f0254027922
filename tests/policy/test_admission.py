"""Admission policies: strict schema, CEL that parses, and CEL that decides like the review rules.

The CEL semantics tests run the policies' expressions with cel-python (a CEL implementation
independent of the API server's cel-go); they are skipped where it is not installed. The
cluster tier applies the same objects to a real kube-apiserver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, STACKS, needs_crds, rendered, stack
from tests.policy import json_patch
from tests.policy.cases import GOOD_IMAGE, TENANT_NS, container, pod, trainjob, with_change
from trainyard.config.model import PlatformConfig
from trainyard.manifests import admission, policy_params, serving_admission
from trainyard.manifests.meta import KUEUE_FLAVOR_ANNOTATION, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, TENANT_LABEL
from trainyard.schemas import Validator

KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def prod_policies() -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in admission.policies(stack("prod").config)}


def expressions(policy: dict[str, Any]) -> list[str]:
    spec = policy["spec"]
    return ([v["expression"] for v in spec.get("variables", [])]
            + [e for v in spec["validations"] for e in (v["expression"], v.get("messageExpression")) if e])


@needs_crds
@pytest.mark.parametrize("name", STACKS)
def test_admission_policies_validate_against_the_strict_kubernetes_schema(name: str, crds: Path) -> None:
    validator = Validator(crds)
    objects = [o for o in rendered(name).concern("admission").objects if o["kind"] in KINDS]
    assert len(objects) == 12
    assert [str(e) for o in objects for e in validator.errors(o)] == []


def test_every_policy_has_a_binding_that_denies_in_tenant_namespaces_only() -> None:
    objects = list(admission.build(stack("prod").config).objects)
    policies = {o["metadata"]["name"] for o in objects if o["kind"] == KINDS[0]}
    bindings = {o["spec"]["policyName"]: o for o in objects if o["kind"] == KINDS[1]}
    assert set(bindings) == policies
    for binding in bindings.values():
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"]["namespaceSelector"] == {
            "matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]}


def test_the_queue_policy_takes_the_namespace_local_queue_as_its_param_and_fails_closed() -> None:
    policy = admission.trainjob_queue_policy()
    binding = admission.binding_for(policy)
    assert policy["spec"]["paramKind"] == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue"}
    assert binding["spec"]["paramRef"] == {"name": "default", "parameterNotFoundAction": "Deny"}
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_admission_can_be_turned_off_per_stack() -> None:
    config = stack("prod").config
    off = config.security.model_copy(update={"admission": config.security.admission.model_copy(update={"enabled": False})})
    assert admission.build(config.model_copy(update={"security": off})).objects == ()


def test_every_cel_expression_parses() -> None:
    celpy = pytest.importorskip("celpy", reason="cel-python is not installed (dev dependency for CEL checks)")
    env = celpy.Environment()
    for policy in prod_policies().values():
        for expression in expressions(policy):
            env.compile(expression)


def tenant_params(config: PlatformConfig, namespace: str = TENANT_NS) -> dict[str, Any]:
    """The ``trainyard-policy`` TenantPolicy the stack renders in ``namespace``: what the binding's paramRef finds."""
    by_namespace = {p["metadata"]["namespace"]: p for p in admission.tenant_params(config).values()}
    return by_namespace[namespace]


def admit(policy: dict[str, Any], obj: dict[str, Any], params: dict[str, Any] | None = None,
          namespace_labels: dict[str, str] | None = None, config: PlatformConfig | None = None) -> bool:
    """Evaluate a policy's variables, then its validations, the way the API server orders them.

    A policy whose paramKind is TenantPolicy gets, unless ``params`` says otherwise, the ``trainyard-policy``
    TenantPolicy that ``config`` (default: the prod stack) renders in the tenant namespace."""
    celpy = pytest.importorskip("celpy", reason="cel-python is not installed (dev dependency for CEL checks)")
    env = celpy.Environment()
    if params is None and policy["spec"].get("paramKind") == policy_params.PARAM_KIND:
        params = tenant_params(config or stack("prod").config)
    namespace = {"metadata": {"name": TENANT_NS, "labels": namespace_labels or {TENANT_LABEL: TENANT_NS}}}
    variables: dict[str, Any] = {}

    def evaluate(expression: str) -> Any:
        activation = {"object": obj, "params": params or {}, "namespaceObject": namespace, "variables": variables}
        return env.program(env.compile(expression)).evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})

    for variable in policy["spec"].get("variables", []):
        variables[variable["name"]] = _plain(evaluate(variable["expression"]))
    return all(bool(evaluate(v["expression"])) for v in policy["spec"]["validations"])


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, str) else value


LOCAL_QUEUE = {"metadata": {"name": "default", "namespace": TENANT_NS}}


def test_cel_admits_a_sound_trainjob_and_pod() -> None:
    policies = prod_policies()
    job = trainjob()
    assert admit(policies["trainyard-trainjob-queue"], job, params=LOCAL_QUEUE)
    for name in ("trainyard-trainjob-runtime", "trainyard-trainjob-image", "trainyard-trainjob-inputs"):
        assert admit(policies[name], job), name
    assert admit(policies["trainyard-pod-images"], pod())


@pytest.mark.parametrize(("policy", "obj"), [
    ("trainyard-trainjob-queue", trainjob({})),
    ("trainyard-trainjob-queue", trainjob({QUEUE_NAME_LABEL: "fast-lane"})),
    ("trainyard-trainjob-runtime", with_change(trainjob(), "spec.runtimeRef.name", "unreviewed")),
    ("trainyard-trainjob-runtime", with_change(trainjob(), "spec.runtimeRef.kind", "TrainingRuntime")),
    ("trainyard-trainjob-image", with_change(trainjob(), "spec.trainer.image", "docker.io/x/y:1")),
    ("trainyard-pod-images", pod(container(), container(name="sidecar", image="ghcr.io/x/y@sha256:" + "c" * 64))),
    ("trainyard-pod-images", pod(container(), initContainers=[container(name="init", image="quay.io/x:1")])),
    ("trainyard-training-runtimes", {"kind": "TrainingRuntime", "metadata": {"name": "mine", "namespace": TENANT_NS}}),
], ids=lambda v: v if isinstance(v, str) else "")
def test_cel_denies_what_the_review_rules_flag(policy: str, obj: dict[str, Any]) -> None:
    params = LOCAL_QUEUE if policy == "trainyard-trainjob-queue" else None
    assert not admit(prod_policies()[policy], obj, params=params)


def test_cel_lets_an_allowed_tenant_define_and_use_its_own_runtimes() -> None:
    config = stack("prod").config
    allowed = config.security.admission.model_copy(update={"training_runtime_tenants": (TENANT_NS,)})
    config = config.model_copy(update={"security": config.security.model_copy(update={"admission": allowed})})
    job = with_change(trainjob(), "spec.runtimeRef", {"kind": "TrainingRuntime", "name": "mine"})
    assert admit(admission.trainjob_runtime_policy(config), job, config=config)
    assert admit(admission.training_runtimes_policy(), {"kind": "TrainingRuntime", "metadata": {}}, config=config)
    # The same objects with the prod stack's params (the tenant is not allowed): refused.
    assert not admit(admission.trainjob_runtime_policy(config), job)
    assert not admit(admission.training_runtimes_policy(), {"kind": "TrainingRuntime", "metadata": {}})


def test_the_tenant_policies_take_the_namespace_params_and_fail_closed() -> None:
    """Every policy that reads tenant data reads it from the ``trainyard-policy`` TenantPolicy of the request's
    namespace (no namespace in the paramRef) and refuses where there is none."""
    config = stack("staging").config  # serving on, tenants with a default priority class
    objects = [o for concern in ("admission", "serving-admission", "trainjob-resources")
               for o in rendered("staging").concern(concern).objects]
    policies = {(o["kind"], o["metadata"]["name"]): o for o in objects if not o["kind"].endswith("Binding")
                and o["spec"].get("paramKind") == policy_params.PARAM_KIND}
    assert {name for _, name in policies} == {
        "trainyard-isvc-exposure", "trainyard-isvc-storage", "trainyard-trainjob-default-priority",
        "trainyard-trainjob-inputs", "trainyard-trainjob-resources", "trainyard-trainjob-runtime",
        "trainyard-training-runtimes"}
    bindings = {(o["kind"].removesuffix("Binding"), o["spec"]["policyName"]): o for o in objects
                if o["kind"].endswith("Binding")}
    for key, policy in policies.items():
        assert bindings[key]["spec"]["paramRef"] == {"name": "trainyard-policy", "parameterNotFoundAction": "Deny"}
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert policy["spec"]["variables"][0] == policy_params.VARIABLE
    tenants = rendered("staging").concern("admission").tenant_objects
    assert {t: [o["metadata"]["name"] for o in objs] for t, objs in tenants.items()} == {
        t.name: ["trainyard-policy"] for t in config.tenants}


def test_the_params_hold_the_tenant_data_one_key_per_fact() -> None:
    data = tenant_params(stack("staging").config, "assistant")["data"]
    assert data["dataset.support-chat.uri"] == "s3://stg-assistant-datasets/support-chat/train.jsonl"
    assert data["dataset.support-chat.name"] == "support-chat"
    assert data["serving.model-bucket"] == "stg-assistant-models"
    assert data["own-training-runtimes"] == "false"
    assert data["tenant"] == "assistant"


def test_cel_reads_the_approved_entries_from_the_params_only() -> None:
    """The same TrainJob is admitted or refused by what the namespace's params say, the policy unchanged."""
    config = stack("staging").config
    params = tenant_params(config, "assistant")
    entry = config.lineage.approved_for("assistant").datasets[0]
    job = with_change(trainjob(), "spec.initializer", {"dataset": {"storageUri": entry.uri}})
    job = with_change(job, "spec.trainer.env", [{"name": "TRAINYARD_DATASET_VERSION", "value": entry.version},
                                                {"name": "TRAINYARD_DATASET_DIGEST", "value": entry.digest}])
    policy = admission.trainjob_inputs_policy()
    assert admit(policy, job, params=params)
    assert not admit(policy, job, params={"metadata": {"name": "trainyard-policy"}})  # no data: nothing approved
    moved = {**params, "data": {**params["data"], "dataset.support-chat.version": "another-version"}}
    assert not admit(policy, job, params=moved)


def test_cel_list_literals_escape_quotes() -> None:
    assert admission.cel_list(("a", 'b"c')) == '["a", "b\\"c"]'
    assert GOOD_IMAGE.startswith(stack("prod").config.runtimes.approved_registries[0])


# ---- trainyard-pod-kueue-flavor (a MutatingAdmissionPolicy) ----

SHARING = ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.gpu-sharing.yaml"


def mutate(policy: dict[str, Any], obj: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
    """``obj`` after a JSONPatch mutation: variables, then the patch expression, then the patches applied.

    cel-python has no ``JSONPatch`` type (a Kubernetes addition to CEL): each ``JSONPatch{op: ..}`` is read as
    the map ``{"op": ..}`` (tests/policy/json_patch.py). The cluster tier runs the policy itself."""
    celpy = pytest.importorskip("celpy", reason="cel-python is not installed (dev dependency for CEL checks)")
    env = celpy.Environment()
    variables: dict[str, Any] = {}

    def evaluate(expression: str) -> Any:
        activation = {"object": obj, "variables": variables, "params": params or {}}
        return _plain(env.program(env.compile(expression)).evaluate(
            {k: celpy.json_to_cel(v) for k, v in activation.items()}))

    for variable in policy["spec"].get("variables", []):
        variables[variable["name"]] = evaluate(variable["expression"])
    return json_patch.applied(obj, evaluate(json_patch.as_maps(policy["spec"]["mutations"][0]["jsonPatch"]["expression"])))


def test_cel_labels_an_unlabelled_trainjob_with_the_default_priority_class_its_params_name() -> None:
    config = stack("staging").config
    (policy, binding) = admission.default_priority_policy(config)
    assert binding["spec"]["paramRef"] == policy_params.PARAM_REF
    job = trainjob({QUEUE_NAME_LABEL: "default"})
    params = tenant_params(config, "assistant")
    assert params["data"]["default-priority-class"] == "standard"
    labelled = mutate(policy, job, params)["metadata"]["labels"]
    assert labelled[PRIORITY_CLASS_LABEL] == "standard"
    # Another class in the params is another label, with the policy unchanged; none there: no label.
    moved = {**params, "data": {**params["data"], "default-priority-class": "critical"}}
    assert mutate(policy, job, moved)["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "critical"
    without = {**params, "data": {k: v for k, v in params["data"].items() if k != "default-priority-class"}}
    assert PRIORITY_CLASS_LABEL not in mutate(policy, job, without)["metadata"]["labels"]
    # A label the job sets is kept.
    assert mutate(policy, trainjob(), params)["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "standard"
    assert mutate(policy, trainjob({QUEUE_NAME_LABEL: "default", PRIORITY_CLASS_LABEL: "preemptible"}),
                  params)["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "preemptible"


def flavor_policy(config: Any = None) -> dict[str, Any]:
    policy, binding = admission.kueue_flavor_policy(config if config is not None else stack(str(SHARING)).config)
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == admission.KUEUE_FLAVOR_POLICY
    return policy


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def test_the_flavor_policy_knows_every_flavor_with_node_labels_from_the_rendered_resource_flavors() -> None:
    config = stack(str(SHARING)).config
    flavors = {o["metadata"]["name"]: o["spec"].get("nodeLabels") for o in rendered(str(SHARING)).by_kind("ResourceFlavor")}
    # Whole-GPU, MIG, mixed MIG and time-sliced pools; the slice budget's flavor has no labels (it would match any pod).
    assert set(flavors) == {"h100", "h200-mig", "h100-mixed", "l40s-shared", "mig-slices"}
    assert admission.flavor_node_labels(config) == {k: v for k, v in flavors.items() if v}
    policy = flavor_policy(config)
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]
    assert admission.mutating_binding_for(policy) in admission.build(config).objects


@pytest.mark.parametrize("flavor", ["h100", "h200-mig", "h100-mixed", "l40s-shared"])
def test_cel_names_the_one_flavor_whose_node_labels_the_pods_node_selector_holds(flavor: str) -> None:
    labels = admission.flavor_node_labels(stack(str(SHARING)).config)[flavor]
    mutated = mutate(flavor_policy(), pod(nodeSelector={**labels, "kubernetes.io/arch": "amd64"}))
    assert annotations(mutated) == {KUEUE_FLAVOR_ANNOTATION: flavor}
    # Annotations the pod has are kept; one it set to another flavor is corrected.
    given = with_change(pod(nodeSelector=labels), "metadata.annotations", {"team": "x", KUEUE_FLAVOR_ANNOTATION: "h100"
                                                                          if flavor != "h100" else "l40s-shared"})
    assert annotations(mutate(flavor_policy(), given)) == {"team": "x", KUEUE_FLAVOR_ANNOTATION: flavor}


def test_cel_names_no_flavor_for_a_pod_no_flavor_selects() -> None:
    policy = flavor_policy()
    for unmatched in (pod(), pod(nodeSelector={"kubernetes.io/arch": "amd64"}),
                      pod(nodeSelector={"trainyard.dev/pool": "h100-other"})):
        assert annotations(mutate(policy, unmatched)) == {}
    # One the pod was created with says nothing the platform derived: it is removed.
    spoofed = with_change(pod(), "metadata.annotations", {"team": "x", KUEUE_FLAVOR_ANNOTATION: "h100"})
    assert annotations(mutate(policy, spoofed)) == {"team": "x"}


def test_cel_names_no_flavor_where_the_node_selector_holds_two_flavors_labels() -> None:
    config = stack(str(SHARING)).config
    # h100-mixed's labels are a superset of h100's: a pod on h100-mixed nodes satisfies both flavors' labels.
    pools = [p.model_copy(update={"node_labels": {"trainyard.dev/pool": "h100", "trainyard.dev/mig": "mixed"}})
             if p.name == "h100-mixed" else p for p in config.gpu_pools]
    policy = flavor_policy(config.model_copy(update={"gpu_pools": tuple(pools)}))
    both = pod(nodeSelector={"trainyard.dev/pool": "h100", "trainyard.dev/mig": "mixed"})
    assert annotations(mutate(policy, both)) == {}
    assert annotations(mutate(policy, pod(nodeSelector={"trainyard.dev/pool": "h100"}))) == {KUEUE_FLAVOR_ANNOTATION: "h100"}


def test_no_flavor_policy_without_a_flavor_that_has_node_labels() -> None:
    config = stack("prod").config
    assert admission.kueue_flavor_policy(config.model_copy(update={"gpu_pools": ()})) == []


def test_cel_holds_an_inference_service_to_the_model_bucket_and_exposure_its_params_name() -> None:
    config = stack("staging").config
    params = tenant_params(config, "assistant")
    storage, exposure = serving_admission.storage_policy(), serving_admission.exposure_policy()

    def isvc(uri: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        return {"kind": "InferenceService", "metadata": {"name": "chat", "namespace": "assistant", "labels": labels or {}},
                "spec": {"predictor": {"model": {"runtime": "vllm-openai", "storageUri": uri}}}}

    own, other = "s3://stg-assistant-models/chat/1/", "s3://stg-eval-models/chat/1/"
    assert admit(storage, isvc(own), params=params)
    assert not admit(storage, isvc(other), params=params)
    # Granting eval's bucket is a change of the key, not of the policy.
    granted = {**params, "data": {**params["data"], "serving.model-bucket": "stg-eval-models"}}
    assert admit(storage, isvc(other), params=granted)
    assert not admit(storage, isvc(own), params={"metadata": {"name": "trainyard-policy"}})
    assert not admit(exposure, isvc(own), params=params)
    assert admit(exposure, isvc(own, {"networking.kserve.io/visibility": "cluster-local"}), params=params)
    public = {**params, "data": {**params["data"], "serving.public": "true"}}
    assert admit(exposure, isvc(own), params=public)
