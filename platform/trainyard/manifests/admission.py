"""Admission at run time: ValidatingAdmissionPolicies hold tenants to the rules reviewed in pull requests.

Pull-request review (``trainyard check``) sees what the platform team declares and what a tenant
proposes in a PR; it cannot see what a tenant submits with ``kubectl`` later. The API server
can, with no extra operator: a ValidatingAdmissionPolicy is a CEL program the API server runs
on each matching request, and its Binding says where and with what effect (Deny).

Policies (each bound to every namespace labelled ``trainyard.dev/tenant``):

- ``trainyard-trainjob-queue``: a TrainJob's ``kueue.x-k8s.io/queue-name`` names the LocalQueue
  of its namespace. The LocalQueue is the policy's *param* (paramKind LocalQueue, paramRef name
  ``default``, looked up in the TrainJob's namespace): the check compares against a real object,
  and ``parameterNotFoundAction: Deny`` fails closed where the queue is missing. A label selector
  on LocalQueues would not do: with several params, the API server requires the expression to
  pass for each of them. A namespace label naming the queue was the alternative; it would only
  repeat what the LocalQueue itself says, and could drift from it.
- ``trainyard-trainjob-runtime``: ``runtimeRef`` names an approved ClusterTrainingRuntime (or, for
  tenants the stack allows, a TrainingRuntime of their own namespace: params ``own-training-runtimes``).
- ``trainyard-trainjob-image`` and ``trainyard-pod-images``: images come from approved registries.
  The pod policy is the backstop for every way a pod reaches a tenant namespace (a runtime, a
  runtime patch, a bare pod), so TrainingRuntimes need no CEL walk over their templates.
- ``trainyard-training-runtimes``: only tenants the stack allows create TrainingRuntimes. Tenants'
  RBAC already omits them; this holds for anyone else acting in a tenant namespace too.
- ``trainyard-trainjob-inputs``: a TrainJob's ``spec.initializer.{dataset,model}.storageUri`` is an
  entry of the stack's ``lineage`` approved for the namespace's tenant, and ``spec.trainer.env`` pins
  the approved version (config/lineage.py). The approved entries are the namespace's params
  (``dataset.<entry>.<field>``, ``base-model.<entry>.<field>``), so one policy serves every tenant and a
  change of approval is a change of that tenant's keys in review.

- ``trainyard-trainjob-initializer-env`` (a MutatingAdmissionPolicy): removes an empty
  ``spec.initializer.{dataset,model}.env`` from a new TrainJob (see ``initializer_env_policy``).
- ``trainyard-trainjob-default-priority`` (a MutatingAdmissionPolicy): a new TrainJob without a
  priority class label gets its tenant's ``default_priority_class`` (see ``default_priority_policy``).
- ``trainyard-pod-kueue-flavor`` (a MutatingAdmissionPolicy): a new pod whose ``nodeSelector`` holds the node
  labels of exactly one ResourceFlavor gets the annotation ``trainyard.dev/kueue-flavor`` naming it (see
  ``kueue_flavor_policy``).

CEL is kept to plain comparisons, ``in``, ``exists``/``all`` and ``startsWith`` so that it reads
like the rule it states. What differs per tenant is the policy's *param*: the TenantPolicy
``trainyard-policy`` of the request's namespace (manifests/policy_params.py; paramRef without a namespace,
``parameterNotFoundAction: Deny``), one key per fact, which this concern declares in every tenant
namespace. What is the same for every tenant (approved registries and runtimes, the flavors' node labels)
stays a list literal rendered from the stack: a change to it is a change of the rule itself.

Ref: https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/
Ref: https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/#parameter-resources
"""

from __future__ import annotations

import json
from typing import Any

from trainyard import catalog
from trainyard.config.lineage import (
    BASE_MODEL_REVISION_ENV,
    DATASET_DIGEST_ENV,
    DATASET_VERSION_ENV,
    RECORDED_DATASET_ENV,
    RECORDED_MODEL_ENV,
)
from trainyard.config.model import PlatformConfig
from trainyard.manifests import kueue, policy_params, trainjob_resources
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import (
    DEFAULT_LOCAL_QUEUE,
    KUEUE_FLAVOR_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    TENANT_LABEL,
    Manifest,
    metadata,
)

API = "admissionregistration.k8s.io/v1"
TRAINER_GROUP, TRAINER_VERSION = catalog.TRAINER_API.split("/")
CREATE_UPDATE = ["CREATE", "UPDATE"]


def cel_list(values: tuple[str, ...] | list[str]) -> str:
    """A CEL list literal of strings; JSON string escaping is valid CEL string escaping."""
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def _rule(group: str, version: str, resource: str) -> dict[str, Any]:
    return {"apiGroups": [group], "apiVersions": [version], "resources": [resource], "operations": CREATE_UPDATE}


def _policy(name: str, rules: list[dict[str, Any]], validations: list[dict[str, str]],
            variables: list[dict[str, str]] | None = None, param_kind: dict[str, str] | None = None) -> Manifest:
    spec: dict[str, Any] = {"failurePolicy": "Fail"}
    if param_kind is not None:
        spec["paramKind"] = dict(param_kind)
    spec["matchConstraints"] = {"resourceRules": rules}
    if param_kind == policy_params.PARAM_KIND:
        variables = [policy_params.VARIABLE, *(variables or [])]
    if variables:
        spec["variables"] = variables
    spec["validations"] = [{**v, "reason": "Forbidden"} for v in validations]
    return {"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": metadata(name), "spec": spec}


def param_ref_for(policy: Manifest) -> dict[str, str]:
    """The binding's paramRef for a policy's paramKind: the namespace's LocalQueue ``default``, or its
    ``trainyard-policy`` TenantPolicy. No namespace: params are looked up in the namespace of the object
    under admission; none there is a refusal (``Deny``, under the policy's failurePolicy Fail)."""
    if policy["spec"]["paramKind"] == policy_params.PARAM_KIND:
        return dict(policy_params.PARAM_REF)
    return {"name": DEFAULT_LOCAL_QUEUE, "parameterNotFoundAction": "Deny"}


def binding_for(policy: Manifest) -> Manifest:
    name = policy["metadata"]["name"]
    spec: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
    if "paramKind" in policy["spec"]:
        spec["paramRef"] = param_ref_for(policy)
    spec["matchResources"] = {"namespaceSelector": {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]}}
    return {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding", "metadata": metadata(name), "spec": spec}


def trainjob_queue_policy() -> Manifest:
    kueue_group, kueue_version = catalog.KUEUE_API.split("/")
    label = json.dumps(QUEUE_NAME_LABEL)
    return _policy(
        "trainyard-trainjob-queue",
        [_rule(TRAINER_GROUP, TRAINER_VERSION, "trainjobs")],
        variables=[{"name": "queue", "expression": f"has(object.metadata.labels) && {label} in object.metadata.labels"
                                                   f" ? object.metadata.labels[{label}] : ''"}],
        validations=[{
            "expression": "variables.queue == params.metadata.name",
            "messageExpression": f"'label ' + {label} + ' must name the LocalQueue ' + params.metadata.name"
                                 " + ' of this namespace, not \"' + variables.queue + '\"'",
        }],
        param_kind={"apiVersion": f"{kueue_group}/{kueue_version}", "kind": "LocalQueue"},
    )


def _own_runtimes() -> dict[str, str]:
    """Whether the namespace's tenant may define and use TrainingRuntimes (params ``own-training-runtimes``)."""
    return {"name": "ownRuntimes", "expression": f"{policy_params.value_cel(policy_params.OWN_TRAINING_RUNTIMES)} == 'true'"}


def trainjob_runtime_policy(config: PlatformConfig) -> Manifest:
    return _policy(
        "trainyard-trainjob-runtime",
        [_rule(TRAINER_GROUP, TRAINER_VERSION, "trainjobs")],
        variables=[
            {"name": "approved", "expression": cel_list(config.runtimes.approved)},
            _own_runtimes(),
            # The CRD defaults kind to ClusterTrainingRuntime; defaulting runs before validation.
            {"name": "kind", "expression": "has(object.spec.runtimeRef.kind) ? object.spec.runtimeRef.kind"
                                           " : 'ClusterTrainingRuntime'"},
        ],
        validations=[{
            "expression": "variables.kind == 'ClusterTrainingRuntime' ? object.spec.runtimeRef.name in variables.approved"
                          " : variables.kind == 'TrainingRuntime' && variables.ownRuntimes",
            "messageExpression": "'runtimeRef must name an approved ClusterTrainingRuntime (' + "
                                 "variables.approved.join(', ') + '), not ' + variables.kind + ' '"
                                 " + object.spec.runtimeRef.name",
        }],
        param_kind=policy_params.PARAM_KIND,
    )


def _registries(config: PlatformConfig) -> dict[str, str]:
    return {"name": "registries", "expression": cel_list(config.runtimes.approved_registries)}


def trainjob_image_policy(config: PlatformConfig) -> Manifest:
    return _policy(
        "trainyard-trainjob-image",
        [_rule(TRAINER_GROUP, TRAINER_VERSION, "trainjobs")],
        variables=[_registries(config)],
        validations=[{
            "expression": "!has(object.spec.trainer) || !has(object.spec.trainer.image)"
                          " || variables.registries.exists(r, object.spec.trainer.image.startsWith(r))",
            "messageExpression": "'spec.trainer.image ' + object.spec.trainer.image"
                                 " + ' is not from an approved registry (' + variables.registries.join(', ') + ')'",
        }],
    )


def pod_image_policy(config: PlatformConfig) -> Manifest:
    def images(field: str) -> str:
        return f"(has(object.spec.{field}) ? object.spec.{field}.map(c, c.image) : [])"

    return _policy(
        "trainyard-pod-images",
        [_rule("", "v1", "pods")],
        variables=[
            _registries(config),
            {"name": "images", "expression": "object.spec.containers.map(c, c.image) + "
                                             + images("initContainers") + " + " + images("ephemeralContainers")},
            {"name": "unapproved", "expression": "variables.images.filter(i,"
                                                 " !variables.registries.exists(r, i.startsWith(r)))"},
        ],
        validations=[{
            "expression": "size(variables.unapproved) == 0",
            "messageExpression": "'images not from an approved registry (' + variables.registries.join(', ')"
                                 " + '): ' + variables.unapproved.join(', ')",
        }],
    )


def training_runtimes_policy() -> Manifest:
    label = json.dumps(TENANT_LABEL)
    return _policy(
        "trainyard-training-runtimes",
        [_rule(TRAINER_GROUP, TRAINER_VERSION, "trainingruntimes")],
        variables=[_own_runtimes()],
        validations=[{
            "expression": "variables.ownRuntimes",
            "messageExpression": f"'tenant ' + namespaceObject.metadata.labels[{label}] + ' may not define"
                                 " TrainingRuntimes; use an approved ClusterTrainingRuntime'",
        }],
        param_kind=policy_params.PARAM_KIND,
    )


def _pinned(env: str, field: str) -> str:
    return f"variables.env.exists(e, e.name == {json.dumps(env)} && e.value == {field})"


def _recorded(env: str, field: str) -> str:
    """A variable the run records: absent, or a literal equal to the entry's ``field`` (not valueFrom)."""
    return (f"(!variables.allEnv.exists(e, e.name == {json.dumps(env)})"
            f" || variables.env.exists(e, e.name == {json.dumps(env)} && e.value == {field}))")


def _entry_field(entry: str, field: str) -> str:
    """CEL: field ``field`` of the approved entry whose params keys start with ``entry`` (``dataset.<name>.``)."""
    return f"{policy_params.DATA}[{entry} + '{field}']"


def trainjob_inputs_policy() -> Manifest:
    """Initializer URIs are approved entries for the namespace's tenant, pinned in spec.trainer.env; the parts of
    the entry the run records (name, licence, classification, URI), where set, equal the entry. The entries are
    the namespace's params (``policy_params``): one key per field, found by their ``.name`` key."""
    dataset_recorded = " && ".join(_recorded(env, _entry_field("d", field)) for env, field in RECORDED_DATASET_ENV.items())
    model_recorded = " && ".join(_recorded(env, _entry_field("m", field)) for env, field in RECORDED_MODEL_ENV.items())

    def uri(kind: str) -> str:
        return (f"has(object.spec.initializer) && has(object.spec.initializer.{kind})"
                f" && has(object.spec.initializer.{kind}.storageUri) ? object.spec.initializer.{kind}.storageUri : ''")

    return _policy(
        "trainyard-trainjob-inputs",
        [_rule(TRAINER_GROUP, TRAINER_VERSION, "trainjobs")],
        variables=[
            # The key prefixes (dataset.<entry>.) of the approved entries in the namespace's params.
            {"name": "datasets", "expression": policy_params.entries_cel(policy_params.DATASET,
                                                                         policy_params.DATASET_FIELDS)},
            {"name": "models", "expression": policy_params.entries_cel(policy_params.BASE_MODEL,
                                                                       policy_params.BASE_MODEL_FIELDS)},
            {"name": "allEnv", "expression": "has(object.spec.trainer) && has(object.spec.trainer.env)"
                                             " ? object.spec.trainer.env : []"},
            {"name": "env", "expression": "variables.allEnv.filter(e, has(e.value))"},
            {"name": "datasetUri", "expression": uri("dataset")},
            {"name": "modelUri", "expression": uri("model")},
        ],
        validations=[{
            "expression": "variables.datasetUri == '' || variables.datasets.exists(d, "
                          f"{_entry_field('d', 'uri')} == variables.datasetUri"
                          f" && {_pinned(DATASET_VERSION_ENV, _entry_field('d', 'version'))}"
                          f" && {_pinned(DATASET_DIGEST_ENV, _entry_field('d', 'digest'))}"
                          f" && {dataset_recorded})",
            "messageExpression": "'spec.initializer.dataset.storageUri ' + variables.datasetUri + ' must be a dataset "
                                 f"approved for this namespace, pinned with {DATASET_VERSION_ENV} and {DATASET_DIGEST_ENV} "
                                 f"in spec.trainer.env, and {', '.join(RECORDED_DATASET_ENV)} where set must equal the entry "
                                 "(trainyard check names the approved entries)'",
        }, {
            "expression": "variables.modelUri == '' || variables.models.exists(m, "
                          f"{_entry_field('m', 'uri')} == variables.modelUri"
                          f" && {_pinned(BASE_MODEL_REVISION_ENV, _entry_field('m', 'revision'))} && {model_recorded})",
            "messageExpression": "'spec.initializer.model.storageUri ' + variables.modelUri + ' must be a base model "
                                 f"approved for this namespace, pinned with {BASE_MODEL_REVISION_ENV} in spec.trainer.env,"
                                 f" and {', '.join(RECORDED_MODEL_ENV)} where set must equal the entry"
                                 " (trainyard check names the approved entries)'",
        }],
        param_kind=policy_params.PARAM_KIND,
    )


def policies(config: PlatformConfig) -> list[Manifest]:
    return [trainjob_queue_policy(), trainjob_runtime_policy(config), trainjob_image_policy(config),
            pod_image_policy(config), training_runtimes_policy(), trainjob_inputs_policy()]


def mutating_binding_for(policy: Manifest) -> Manifest:
    """The binding of a MutatingAdmissionPolicy to the tenant namespaces (with the params of its paramKind)."""
    name = policy["metadata"]["name"]
    spec: dict[str, Any] = {"policyName": name}
    if "paramKind" in policy["spec"]:
        spec["paramRef"] = param_ref_for(policy)
    spec["matchResources"] = {"namespaceSelector": {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]}}
    return {"apiVersion": API, "kind": "MutatingAdmissionPolicyBinding", "metadata": metadata(name), "spec": spec}


INITIALIZER_ENV_POLICY = "trainyard-trainjob-initializer-env"


def _drop_empty_env(initializer: str) -> str:
    spec = f"object.spec.initializer.{initializer}"
    return (f"(has(object.spec.initializer) && has({spec}) && has({spec}.env) && size({spec}.env) == 0 ? "
            f'[JSONPatch{{op: "remove", path: "/spec/initializer/{initializer}/env"}}] : [])')


def initializer_env_policy() -> list[Manifest]:
    """A MutatingAdmissionPolicy that removes an empty ``env: []`` from a new TrainJob's initializers.

    Why: the Kubeflow SDK 0.5.0 writes ``spec.initializer.dataset.env: []`` for an S3 or Hugging Face
    dataset initializer given only a URI (Ref: kubeflow sdk kubeflow/trainer/backends/kubernetes/utils.py,
    ``get_dataset_initializer``). Kueue v0.19.2 unsuspends an admitted TrainJob with a full Update in
    Trainer v2.2.1's Go types, where ``env`` is ``omitempty``: the empty list is dropped, Trainer v2.3.0's
    CEL rule on ``spec.initializer`` (``self == oldSelf``) refuses the Update ("spec.initializer: Invalid
    value: field is immutable"), and the job holds its quota without ever starting. Seen on the
    rehearsal (docs/rehearsal.md). Removing the empty list at creation changes nothing the job means.
    Ref: https://kubernetes.io/docs/reference/access-authn-authz/mutating-admission-policy/
    """
    rule = {**_rule(TRAINER_GROUP, TRAINER_VERSION, "trainjobs"), "operations": ["CREATE"]}
    policy = {"apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": metadata(INITIALIZER_ENV_POLICY),
              "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never",
                       "matchConstraints": {"resourceRules": [rule]},
                       "mutations": [{"patchType": "JSONPatch", "jsonPatch": {
                           "expression": f"{_drop_empty_env('dataset')} + {_drop_empty_env('model')}"}}]}}
    return [policy, mutating_binding_for(policy)]


DEFAULT_PRIORITY_POLICY = "trainyard-trainjob-default-priority"


def default_priority_classes(config: PlatformConfig) -> dict[str, str]:
    """By tenant namespace, the priority class ``trainyard-trainjob-default-priority`` gives an unlabelled TrainJob
    (the tenant's ``default_priority_class``); the policy params and ``trainyard check`` read this one source."""
    return {t.namespace_name: t.default_priority_class for t in config.tenants if t.default_priority_class}


def default_priority_policy(config: PlatformConfig) -> list[Manifest]:
    """A MutatingAdmissionPolicy that labels a new TrainJob without a priority class with its tenant's
    ``default_priority_class`` (``kueue.x-k8s.io/priority-class``).

    Why: Kueue gives a Workload whose job names no WorkloadPriorityClass priority 0 (or its pods'
    PriorityClass), below every class a stack declares, so an unlabelled job (the SDK writes no label
    unless asked) would be the first preempted and the last admitted, whatever the tenant's default says.
    ``trainyard check`` assumes the label this policy adds (``trainjob_defaults``) and holds a label the job
    sets to the tenant's classes (rule ``trainjob-priority-class``). A label the job sets is never changed.
    The default is the namespace's params (``default-priority-class``; none there, no label), so a changed
    default is a change of that tenant's key.
    Ref: https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/
    """
    if not default_priority_classes(config):
        return []
    key = PRIORITY_CLASS_LABEL.replace("~", "~0").replace("/", "~1")  # RFC 6901 escaping
    missing = (f"variables.defaultPriorityClass != '' && !(has(object.metadata.labels) && "
               f"{json.dumps(PRIORITY_CLASS_LABEL)} in object.metadata.labels)")
    # Two operations when the job has no labels at all (add the map, then the key), never a map value
    # with the key in it: the same shape the data cache's policy found kube-apiserver 1.36.3 to accept.
    expression = (f"!({missing}) ? [] : (has(object.metadata.labels) ? [] : "
                  '[JSONPatch{op: "add", path: "/metadata/labels", value: {}}]) + '
                  f'[JSONPatch{{op: "add", path: "/metadata/labels/{key}", '
                  "value: variables.defaultPriorityClass}]")
    rule = {**_rule(TRAINER_GROUP, TRAINER_VERSION, "trainjobs"), "operations": ["CREATE"]}
    policy = {"apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": metadata(DEFAULT_PRIORITY_POLICY),
              "spec": {"failurePolicy": "Fail", "paramKind": dict(policy_params.PARAM_KIND),
                       "reinvocationPolicy": "Never",
                       "matchConstraints": {"resourceRules": [rule]},
                       "variables": [policy_params.VARIABLE, {"name": "defaultPriorityClass",
                                      "expression": policy_params.value_cel(policy_params.DEFAULT_PRIORITY_CLASS)}],
                       "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]}}
    return [policy, mutating_binding_for(policy)]


KUEUE_FLAVOR_POLICY = "trainyard-pod-kueue-flavor"


def flavor_node_labels(config: PlatformConfig) -> dict[str, dict[str, str]]:
    """By flavor name, the ``nodeLabels`` of each ResourceFlavor the stack renders that has any (the slice
    budget's has none: it is not a place, and an empty label set would match every pod)."""
    out: dict[str, dict[str, str]] = {}
    for flavor in kueue.resource_flavors(config):
        labels = flavor["spec"].get("nodeLabels") or {}
        if labels:
            out[flavor["metadata"]["name"]] = dict(labels)
    return out


def kueue_flavor_policy(config: PlatformConfig) -> list[Manifest]:
    """A MutatingAdmissionPolicy that names a new pod's ResourceFlavor in the annotation ``trainyard.dev/kueue-flavor``.

    Why: Kueue v0.19.2 tells a pod its flavor only by merging the flavor's ``nodeLabels`` (and tolerations)
    into the pod template's ``nodeSelector`` when it admits the workload; no label, annotation or variable
    names the flavor, and the downward API cannot read ``spec.nodeSelector``. The runtimes read this
    annotation as ``TRAINYARD_KUEUE_FLAVOR`` (runtimes.py), so the MLflow run records where it ran.
    The annotation is set where the pod's ``nodeSelector`` holds every node label of exactly one flavor;
    with no such flavor, or more than one, the pod has none (one it was created with is removed, so the
    annotation only ever states what this policy derived). The flavors are a CEL map literal rendered from
    the same ResourceFlavors the queueing concern renders (``kueue.resource_flavors``).
    Ref: https://kueue.sigs.k8s.io/docs/concepts/resource_flavor/ (nodeLabels)
    """
    flavors = flavor_node_labels(config)
    if not flavors:
        return []
    key = json.dumps(KUEUE_FLAVOR_ANNOTATION)
    path = "/metadata/annotations/" + KUEUE_FLAVOR_ANNOTATION.replace("~", "~0").replace("/", "~1")  # RFC 6901
    has_key = f"has(object.metadata.annotations) && {key} in object.metadata.annotations"
    # As for the default priority: add the map first where the pod has no annotations, never a map with the key in it.
    expression = ("size(variables.matches) == 1 ? (has(object.metadata.annotations) ? [] : "
                  '[JSONPatch{op: "add", path: "/metadata/annotations", value: {}}]) + '
                  f'[JSONPatch{{op: "add", path: "{path}", value: variables.matches[0]}}] : '
                  f'({has_key} ? [JSONPatch{{op: "remove", path: "{path}"}}] : [])')
    rule = {**_rule("", "v1", "pods"), "operations": ["CREATE"]}
    policy = {"apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": metadata(KUEUE_FLAVOR_POLICY),
              "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded",
                       "matchConstraints": {"resourceRules": [rule]},
                       "variables": [
                           # JSON objects of strings are CEL map literals.
                           {"name": "flavors", "expression": json.dumps(flavors, sort_keys=True)},
                           {"name": "nodeSelector", "expression": "has(object.spec.nodeSelector)"
                                                                  " ? object.spec.nodeSelector : {}"},
                           {"name": "matches", "expression": "variables.flavors.filter(f, variables.flavors[f].all(k,"
                                                             " k in variables.nodeSelector"
                                                             " && variables.nodeSelector[k] == variables.flavors[f][k]))"},
                       ],
                       "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]}}
    return [policy, mutating_binding_for(policy)]


def tenant_params(config: PlatformConfig) -> dict[str, Manifest]:
    """By tenant name, the ``trainyard-policy`` TenantPolicy every parameterised policy reads in its namespace
    (this concern's, serving admission's and the TrainJob resources policy's)."""
    flavors = trainjob_resources.tenant_flavors(config)
    return {t.name: policy_params.params_for(config, t, {f.name: f.describe() for f in flavors[t.namespace_name]})
            for t in config.tenants}


def crds(config: PlatformConfig) -> tuple[Manifest, ...]:
    """The CRD of the policies' params (``TenantPolicy``, manifests/policy_params.py), where admission is on."""
    return (policy_params.crd(),) if config.security.admission.enabled else ()


def build(config: PlatformConfig) -> Concern:
    """Admission: the ValidatingAdmissionPolicies that guard tenant namespaces, and their bindings;
    the MutatingAdmissionPolicies that keep SDK-written TrainJobs startable under Kueue, give
    unlabelled TrainJobs their tenant's default priority class, and name a pod's Kueue flavor;
    in each tenant namespace, the policies' params."""
    out: list[Manifest] = []
    if not config.security.admission.enabled:
        return Concern("admission")
    for policy in policies(config):
        out += [policy, binding_for(policy)]
    out += initializer_env_policy()
    out += default_priority_policy(config)
    out += kueue_flavor_policy(config)
    return Concern("admission", objects=tuple(out),
                   tenant_objects={name: (params,) for name, params in tenant_params(config).items()})


# What other concerns' builders (serving) use to write their own policies the same way.
validating_policy, resource_rule = _policy, _rule
