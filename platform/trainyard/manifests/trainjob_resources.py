"""TrainJob resources: what a tenant asks for per node is what Kueue counts and what the pods get.

Two controllers read a TrainJob's ``spec.trainer.resourcesPerNode``, and they read it two ways:

- Trainer v2.3.0 merges it into the runtime's ``node`` container *key by key* (a strategic merge
  patch: a resource the TrainJob names replaces the runtime's figure for it, every other figure
  stays). Ref: kubeflow/trainer v2.3.0 pkg/runtime/core/trainingruntime.go (RuntimeInfo),
  pkg/util/trainingruntime/trainingruntime.go (MergeResourceRequirements).
- Kueue v0.19.2 builds the Workload, and so the quota it reserves, with the JobSet builder of
  Trainer v2.2.1 (its go.mod), which *replaces* the container's resources with resourcesPerNode.
  Ref: kueue v0.19.2 pkg/controller/jobs/trainjob/trainjob_controller.go; kubeflow/trainer v2.2.1
  pkg/runtime/framework/plugins/jobset/builder.go (Builder.Trainer).

A TrainJob that gave only ``limits: {nvidia.com/gpu: 4}`` on a runtime whose node container requested
one GPU was admitted for 4 GPUs a node, while Trainer's pod template requested 1 and limited 4, which
the Job API refuses ("must be equal to nvidia.com/gpu limit of 4"): quota held, nothing ever ran.
A partial resourcesPerNode also left CPU and memory out of Kueue's count while the pods requested the
runtime's, and Trainer's ``numProcPerNode: auto`` reads resourcesPerNode alone.

The fix has three parts, one rule each:

1. The approved runtimes name no accelerator (``runtimes/``): a GPU, a MIG slice or a time-sliced
   replica is the TrainJob's choice, so a runtime default can never add a second kind of GPU to a
   MIG job (a strategic merge cannot remove a key). They keep CPU and memory, which the tenant
   ResourceQuota needs.
2. ``trainyard-trainjob-resources`` (a MutatingAdmissionPolicy) *completes* resourcesPerNode at
   submission: every figure the pod will have, so Kueue's replacement and Trainer's merge give the
   same container. For each resource the TrainJob names, its figures replace the runtime's, with the
   container defaulting of Kubernetes: a limit without a request requests the limit; a request
   without a limit is also the limit for an extended resource (which must have equal ones) and for a
   resource the runtime limits (or that the policy cannot know: a tenant's own TrainingRuntime). Every
   other figure is the runtime's. A torch TrainJob on MIG slices
   without ``numProcPerNode`` gets one process per slice (Trainer counts only resources named
   ``*gpu*`` and would start one per CPU).
3. ``trainyard-trainjob-resources`` (a ValidatingAdmissionPolicy, run after mutation) refuses, naming
   the field, what no pod could run: a request above its limit; an extended resource whose request is
   not its limit; a resource no flavor of the namespace's queue offers; more per node than one node of
   any of those flavors holds; more torch processes per node than GPUs.

``complete`` and ``refusals`` are the same rules in Python, for ``trainyard check`` (rule
``trainjob-resources``) and the tests. The runtimes' figures and the flavors' nodes are CEL map
literals rendered from the same runtime objects and pools, so they cannot drift from what is installed
(the same for every tenant: the rule). Which flavors a namespace's queue offers is per tenant: the
validating policy reads it from the namespace's params (``queue-flavor.<flavor>`` keys of the
``trainyard-policy`` TenantPolicy, manifests/policy_params.py), so a quota on a new flavor reads in review
as one key added for that tenant.
TrainJobs on a tenant's own TrainingRuntime (where a stack allows them) are completed against no
runtime figures (the policy cannot read that runtime), so a default the tenant's runtime sets and the
TrainJob does not name stays in Trainer's merge beside what Kueue counted: such a job, if it cannot run,
is evicted by Kueue's waitForPodsReady and its quota released (tests/cluster/test_job_shapes.py).
Ref: https://kubernetes.io/docs/reference/access-authn-authz/mutating-admission-policy/
Ref: https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/ (requests default to limits)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainyard import catalog
from trainyard.config.gpu_operator import MIG_PREFIX
from trainyard.config.gpu_pools import advertised_per_node
from trainyard.config.model import PlatformConfig
from trainyard.manifests import policy_params
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import TENANT_LABEL, Manifest, metadata
from trainyard.quantity import canonical_quantity, parse_quantity

API = "admissionregistration.k8s.io/v1"
POLICY = "trainyard-trainjob-resources"
TRAINER_GROUP, TRAINER_VERSION = catalog.TRAINER_API.split("/")
# Trainer's trainer step: the replicated job with this label, its container named "node".
# Ref: kubeflow/trainer v2.3.0 pkg/constants (LabelTrainJobAncestor, AncestorTrainer, Node)
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE_CONTAINER = "node"
PATH = "/spec/trainer/resourcesPerNode"
FIELD = "spec.trainer.resourcesPerNode"

Resources = dict[str, str]


@dataclass(frozen=True)
class NodeResources:
    """A container's resources: requests and limits by resource name, quantities as written."""

    requests: Resources
    limits: Resources

    def as_manifest(self) -> dict[str, Resources]:
        out: dict[str, Resources] = {"requests": dict(self.requests)}
        if self.limits:
            out["limits"] = dict(self.limits)
        return out


NONE = NodeResources({}, {})


@dataclass(frozen=True)
class RuntimeShape:
    """What the policies know of one approved runtime: its node container's resources, and whether it is torch."""

    resources: NodeResources
    torch: bool


def is_extended(resource: str) -> bool:
    """An extended resource (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``): a domain-qualified name outside
    ``kubernetes.io``. Its request must equal its limit. Ref: Kubernetes API, ResourceRequirements validation."""
    return "/" in resource and not resource.startswith("kubernetes.io/")


def _strings(values: Any) -> Resources:
    return {str(k): str(v) for k, v in (values or {}).items()} if isinstance(values, Mapping) else {}


def runtime_shape(runtime: Manifest) -> RuntimeShape:
    """The node container's resources of the runtime's training nodes (Trainer merges resourcesPerNode there)."""
    spec = runtime.get("spec") or {}
    torch = "torch" in (spec.get("mlPolicy") or {})
    jobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []

    def trainer_step(job: Manifest) -> bool:
        labels = ((job.get("template") or {}).get("metadata") or {}).get("labels") or {}
        return labels.get(ANCESTOR_LABEL) == "trainer"

    # The job named "node" first: with MPI's runLauncherAsNode, Trainer merges resourcesPerNode into the
    # launcher (the trainer step) *and* the node job, and the training node's figures are the node job's.
    for job in sorted((j for j in jobs if trainer_step(j) or j.get("name") == NODE_CONTAINER),
                      key=lambda j: j.get("name") != NODE_CONTAINER):
        pod = (((job.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod.get("containers") or []:
            if container.get("name") == NODE_CONTAINER:
                resources = container.get("resources") or {}
                return RuntimeShape(NodeResources(_strings(resources.get("requests")),
                                                  _strings(resources.get("limits"))), torch)
    return RuntimeShape(NONE, torch)


def complete(base: NodeResources, given: NodeResources, runtime_known: bool = True) -> NodeResources:
    """The node container's resources for a TrainJob that gives ``given`` on a runtime with ``base``.

    The value the mutating policy writes into resourcesPerNode: Trainer's key-by-key merge of it over
    ``base`` is itself, and so is Kueue's replacement. Where the runtime cannot be read (a tenant's own
    TrainingRuntime: ``runtime_known`` False, ``base`` empty), a request given alone is also the limit,
    since that runtime may limit the resource below it.
    """
    named = set(given.requests) | set(given.limits)
    requests = {k: v for k, v in base.requests.items() if k not in named}
    limits = {k: v for k, v in base.limits.items() if k not in named}
    for name in sorted(named):
        if name in given.requests:
            requests[name] = given.requests[name]
        else:
            requests[name] = given.limits[name]  # a limit alone is also the request
        if name in given.limits:
            limits[name] = given.limits[name]
        elif is_extended(name) or name in base.limits or not runtime_known:
            limits[name] = given.requests[name]
    return NodeResources(dict(sorted(requests.items())), dict(sorted(limits.items())))


def _quantity(value: str) -> Fraction | None:
    try:
        return parse_quantity(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class Flavor:
    """One ResourceFlavor a tenant's queue offers, as one node of it: resource -> what a node holds."""

    name: str
    node: Resources

    def describe(self) -> str:
        return f"{self.name}: " + ", ".join(f"{v} {k}" for k, v in self.node.items())


def tenant_flavors(config: PlatformConfig) -> dict[str, list[Flavor]]:
    """By tenant namespace, the flavors its ClusterQueue has quota on, each as one of its nodes, by flavor name
    (the order the policy lists them in: it reads them from the params, a map)."""
    out: dict[str, list[Flavor]] = {}
    for tenant in config.tenants:
        flavors = []
        for quota in sorted(tenant.quotas, key=lambda q: q.flavor):
            pool = config.pool(quota.flavor)
            node = {name: str(count) for name, count in advertised_per_node(pool).items() if count}
            node["cpu"] = canonical_quantity(pool.cpu_per_node)
            node["memory"] = canonical_quantity(pool.memory_per_node)
            flavors.append(Flavor(pool.name, node))
        out[tenant.namespace_name] = flavors
    return out


def _fits(resources: Resources, flavor: Flavor) -> bool:
    for name, value in resources.items():
        amount = _quantity(value)
        if amount == 0:
            continue
        held = _quantity(flavor.node[name]) if name in flavor.node else None
        if amount is None or held is None or amount > held:
            return False
    return True


def gpu_processes(resources: Resources) -> tuple[str, int] | None:
    """The accelerator a torch process each needs one of (whole GPUs or MIG slices), and how many a node has."""
    for name, value in sorted(resources.items()):
        if name == catalog.GPU_RESOURCE or name.startswith(MIG_PREFIX):
            amount = _quantity(value)
            if amount is not None and amount > 0 and amount.denominator == 1:
                return name, int(amount)
    return None


def refusals(resources: NodeResources, flavors: Iterable[Flavor], torch: bool,
             num_proc_per_node: int | None) -> Iterator[str]:
    """Why no pod of a TrainJob with these (completed) node resources could run: the admission policy's messages."""
    flavors = list(flavors)
    above: list[str] = []
    unequal: list[str] = []
    for name, value in resources.requests.items():
        limit = resources.limits.get(name)
        if limit is None:
            continue
        request_q, limit_q = _quantity(value), _quantity(limit)
        if request_q is not None and limit_q is not None and request_q > limit_q:
            above.append(f"requests.{name} {value} above limits.{name} {limit}")
        elif is_extended(name) and request_q != limit_q:
            unequal.append(f"requests.{name} {value} is not limits.{name} {limit}")
    if above:
        yield f"{FIELD}: {', '.join(above)}; give one figure (a limit alone is also the request)"
    if unequal:
        yield (f"{FIELD}: {', '.join(unequal)}; an extended resource's request must equal its limit: "
               "give one figure (a limit alone is also the request)")
    offered = {name for flavor in flavors for name in flavor.node}
    unknown = sorted(name for name in {*resources.requests, *resources.limits}
                     if name not in offered and _quantity((resources.requests | resources.limits)[name]) != 0)
    if unknown:
        yield (f"{FIELD} names {', '.join(unknown)}, which no flavor of this namespace's queue offers "
               f"(offered: {', '.join(sorted(offered))})")
    elif not any(_fits(resources.requests, flavor) for flavor in flavors):
        yield (f"{FIELD} asks more per node than one node of any flavor of this namespace's queue holds ("
               + "; ".join(f.describe() for f in flavors) + "): lower it and raise numNodes")
    gpus = gpu_processes(resources.requests)
    if torch and num_proc_per_node is not None and gpus is not None and num_proc_per_node > gpus[1]:
        yield (f"spec.trainer.numProcPerNode {num_proc_per_node} starts more processes per node than its "
               f"{gpus[1]} {gpus[0]}: one process per GPU (leave numProcPerNode out and torchrun counts them)")


# ---- the policies ----

def _rule() -> dict[str, Any]:
    return {"apiGroups": [TRAINER_GROUP], "apiVersions": [TRAINER_VERSION], "resources": ["trainjobs"],
            "operations": ["CREATE", "UPDATE"]}


def _binding(kind: str, name: str, validating: bool) -> Manifest:
    spec: dict[str, Any] = {"policyName": name}
    if validating:
        spec["validationActions"] = ["Deny"]
        spec["paramRef"] = dict(policy_params.PARAM_REF)
    spec["matchResources"] = {"namespaceSelector": {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]}}
    return {"apiVersion": API, "kind": kind, "metadata": metadata(name), "spec": spec}


def _given(kind: str) -> str:
    rpn = "object.spec.trainer.resourcesPerNode"
    return (f"has(object.spec.trainer) && has({rpn}) && has({rpn}.{kind}) ? {rpn}.{kind} : {{}}")


def _runtime_variables(shapes: Mapping[str, RuntimeShape]) -> list[dict[str, str]]:
    """The runtime the TrainJob names, as its node container's figures (none for a tenant's own TrainingRuntime)."""
    def literal(values: Mapping[str, Any]) -> str:
        return json.dumps(dict(values), sort_keys=True)

    cluster_runtime = ("(!has(object.spec.runtimeRef.kind) || object.spec.runtimeRef.kind == 'ClusterTrainingRuntime')"
                       " && object.spec.runtimeRef.name in variables.runtimeRequests")
    return [
        {"name": "runtimeRequests", "expression": literal({n: s.resources.requests for n, s in shapes.items()})},
        {"name": "runtimeLimits", "expression": literal({n: s.resources.limits for n, s in shapes.items()})},
        {"name": "torchRuntimes", "expression": json.dumps(sorted(n for n, s in shapes.items() if s.torch))},
        {"name": "clusterRuntime", "expression": cluster_runtime},
        {"name": "baseRequests", "expression": "variables.clusterRuntime ? "
                                               "variables.runtimeRequests[object.spec.runtimeRef.name] : {}"},
        {"name": "baseLimits", "expression": "variables.clusterRuntime ? "
                                             "variables.runtimeLimits[object.spec.runtimeRef.name] : {}"},
        {"name": "torch", "expression": "variables.clusterRuntime"
                                        " && object.spec.runtimeRef.name in variables.torchRuntimes"},
        {"name": "given", "expression": "has(object.spec.trainer) && has(object.spec.trainer.resourcesPerNode)"},
        {"name": "requests", "expression": _given("requests")},
        {"name": "limits", "expression": _given("limits")},
    ]


EXTENDED = "(k.contains('/') && !k.startsWith('kubernetes.io/'))"


def mutating_policy(shapes: Mapping[str, RuntimeShape]) -> Manifest:
    """Completes resourcesPerNode (``complete``) with JSONPatch ``add`` operations, one per missing figure."""
    def add(kind: str, source: str) -> str:
        return (f'JSONPatch{{op: "add", path: "{PATH}/{kind}/" + jsonpatch.escapeKey(k), value: {source}}}')

    def ensure(kind: str, adds: str) -> str:
        rpn = "object.spec.trainer.resourcesPerNode"
        return (f"(has({rpn}.{kind}) || size({adds}) == 0 ? [] : "
                f'[JSONPatch{{op: "add", path: "{PATH}/{kind}", value: {{}}}}])')

    variables = [*_runtime_variables(shapes),
        {"name": "named", "expression": "variables.requests.map(k, k)"
                                        " + variables.limits.filter(k, !(k in variables.requests))"},
        # Figures the TrainJob gives as a limit only: also the request.
        {"name": "requestsFromLimits", "expression": "variables.limits.filter(k, !(k in variables.requests))"},
        # Figures it gives as a request only: also the limit, for an extended resource, one the runtime limits,
        # and any where the runtime cannot be read (a tenant's own TrainingRuntime).
        {"name": "limitsFromRequests", "expression": "variables.requests.filter(k, !(k in variables.limits)"
                                                     f" && ({EXTENDED} || k in variables.baseLimits"
                                                     " || !variables.clusterRuntime))"},
        {"name": "runtimeRequestsKept", "expression": "variables.baseRequests.filter(k, !(k in variables.named))"},
        {"name": "runtimeLimitsKept", "expression": "variables.baseLimits.filter(k, !(k in variables.named))"},
        {"name": "requestAdds", "expression": "variables.requestsFromLimits + variables.runtimeRequestsKept"},
        {"name": "limitAdds", "expression": "variables.limitsFromRequests + variables.runtimeLimitsKept"},
        {"name": "migSlices", "expression": f"variables.named.filter(k, k.startsWith({json.dumps(MIG_PREFIX)}))"},
    ]
    mig_amount = ("(variables.migSlices[0] in variables.requests ? variables.requests[variables.migSlices[0]]"
                  " : variables.limits[variables.migSlices[0]])")
    expression = (
        "!variables.given ? [] : "
        + ensure("requests", "variables.requestAdds")
        + " + variables.requestsFromLimits.map(k, " + add("requests", "variables.limits[k]") + ")"
        + " + variables.runtimeRequestsKept.map(k, " + add("requests", "variables.baseRequests[k]") + ")"
        + " + " + ensure("limits", "variables.limitAdds")
        + " + variables.limitsFromRequests.map(k, " + add("limits", "variables.requests[k]") + ")"
        + " + variables.runtimeLimitsKept.map(k, " + add("limits", "variables.baseLimits[k]") + ")"
        + " + (variables.torch && size(variables.migSlices) == 1 && !has(object.spec.trainer.numProcPerNode) ? "
        + '[JSONPatch{op: "add", path: "/spec/trainer/numProcPerNode", value: int(string(' + mig_amount + "))}] : [])"
    )
    return {"apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": metadata(POLICY),
            "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never",
                     "matchConstraints": {"resourceRules": [_rule()]},
                     "variables": variables,
                     "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]}}


def _figures(variable: str, relation: str) -> str:
    """CEL: each resource of ``variables.<variable>`` as ``requests.K R <relation> limits.K L``, joined."""
    return (f"variables.{variable}.map(k, 'requests.' + k + ' ' + string(variables.requests[k]) + ' {relation} limits.'"
            " + k + ' ' + string(variables.limits[k])).join(', ')")


def _q(expression: str) -> str:
    return f"quantity(string({expression}))"


def validating_policy(shapes: Mapping[str, RuntimeShape], flavors: Mapping[str, list[Flavor]]) -> Manifest:
    """Refuses what no pod could run (``refusals``), on the resourcesPerNode the mutating policy completed.

    ``flavors`` (by namespace, ``tenant_flavors``) gives the flavors' nodes, a literal; which of them the
    namespace's queue offers is its params' ``queue-flavor.<flavor>`` keys."""
    every = {f.name: f for fs in flavors.values() for f in fs}
    names = sorted(every)
    resources = sorted({name for f in every.values() for name in f.node})
    gpu_keys = f"(k == {json.dumps(catalog.GPU_RESOURCE)} || k.startsWith({json.dumps(MIG_PREFIX)}))"
    variables = [policy_params.VARIABLE, *_runtime_variables(shapes),
        {"name": "flavorNodes", "expression": json.dumps({n: every[n].node for n in names}, sort_keys=True)},
        {"name": "flavorDescriptions", "expression": json.dumps({n: every[n].describe() for n in names}, sort_keys=True)},
        {"name": "queueFlavors", "expression": f"{json.dumps(names)}.filter(f, "
                                               f"'{policy_params.QUEUE_FLAVOR}.' + f in {policy_params.DATA})"},
        {"name": "mine", "expression": "variables.queueFlavors.map(f, variables.flavorNodes[f])"},
        {"name": "offered", "expression": f"{json.dumps(resources)}.filter(r, variables.mine.exists(n, r in n))"},
        # What the pod requests: the completed resourcesPerNode, or the runtime's own figures without one.
        {"name": "podRequests", "expression": "variables.given ? variables.requests : variables.baseRequests"},
        {"name": "aboveLimit", "expression": "variables.requests.filter(k, k in variables.limits && "
                                             f"{_q('variables.requests[k]')}.compareTo({_q('variables.limits[k]')}) > 0)"},
        {"name": "unequalExtended", "expression": f"variables.requests.filter(k, {EXTENDED} && k in variables.limits"
                                                  f" && {_q('variables.requests[k]')}.compareTo("
                                                  f"{_q('variables.limits[k]')}) < 0)"},
        {"name": "unknown", "expression": "(variables.requests.map(k, k) + variables.limits.filter(k,"
                                          " !(k in variables.requests))).filter(k, !(k in variables.offered) &&"
                                          f" {_q('k in variables.requests ? variables.requests[k] : variables.limits[k]')}"
                                          ".compareTo(quantity('0')) != 0)"},
        {"name": "fits", "expression": "variables.mine.exists(n, variables.podRequests.all(k, "
                                       f"{_q('variables.podRequests[k]')}.compareTo(quantity('0')) == 0 || (k in n && "
                                       f"{_q('variables.podRequests[k]')}.compareTo(quantity(n[k])) <= 0)))"},
        {"name": "gpus", "expression": f"variables.podRequests.filter(k, {gpu_keys})"},
    ]
    num_proc = "object.spec.trainer.numProcPerNode"
    validations = [
        {"expression": "size(variables.aboveLimit) == 0",
         "messageExpression": f"'{FIELD}: ' + {_figures('aboveLimit', 'above')}"
                              " + '; give one figure (a limit alone is also the request)'"},
        {"expression": "size(variables.unequalExtended) == 0",
         "messageExpression": f"'{FIELD}: ' + {_figures('unequalExtended', 'is not')}"
                              " + '; an extended resource\\'s request must equal its limit:"
                              " give one figure (a limit alone is also the request)'"},
        {"expression": "size(variables.unknown) == 0",
         "messageExpression": f"'{FIELD} names ' + variables.unknown.join(', ') + ', which no flavor of this"
                              " namespace\\'s queue offers (offered: ' + variables.offered.join(', ') + ')'"},
        {"expression": "size(variables.unknown) > 0 || variables.fits",
         "messageExpression": f"'{FIELD} asks more per node than one node of any flavor of this namespace\\'s queue"
                              " holds (' + variables.queueFlavors.map(f, variables.flavorDescriptions[f]).join('; ')"
                              " + '): lower it and raise numNodes'"},
        {"expression": f"!variables.torch || !has(object.spec.trainer) || !has({num_proc}) || size(variables.gpus) == 0"
                       f" || {_q('variables.podRequests[variables.gpus[0]]')}.compareTo(quantity('0')) == 0"
                       f" || {_q('variables.podRequests[variables.gpus[0]]')}.compareTo(quantity(string({num_proc}))) >= 0",
         "messageExpression": f"'spec.trainer.numProcPerNode ' + string({num_proc}) + ' starts more processes per node"
                              " than its ' + string(variables.podRequests[variables.gpus[0]]) + ' ' + variables.gpus[0]"
                              " + ': one process per GPU (leave numProcPerNode out and torchrun counts them)'"},
    ]
    spec: dict[str, Any] = {"failurePolicy": "Fail", "paramKind": dict(policy_params.PARAM_KIND),
                            "matchConstraints": {"resourceRules": [_rule()]},
                            "variables": variables,
                            "validations": [{**v, "reason": "Invalid"} for v in validations]}
    return {"apiVersion": API, "kind": "ValidatingAdmissionPolicy", "metadata": metadata(POLICY), "spec": spec}


def runtime_shapes(runtimes: Iterable[Manifest]) -> dict[str, RuntimeShape]:
    return {r["metadata"]["name"]: runtime_shape(r) for r in runtimes if r.get("kind") == "ClusterTrainingRuntime"}


def build(config: PlatformConfig, runtimes: Iterable[Manifest]) -> Concern:
    """The TrainJob resource policies (mutating, then validating) and their bindings, for the runtimes rendered."""
    if not config.security.admission.enabled:
        return Concern("trainjob-resources")
    shapes = runtime_shapes(runtimes)
    mutating = mutating_policy(shapes)
    validating = validating_policy(shapes, tenant_flavors(config))
    return Concern("trainjob-resources", objects=(
        mutating, _binding("MutatingAdmissionPolicyBinding", POLICY, validating=False),
        validating, _binding("ValidatingAdmissionPolicyBinding", POLICY, validating=True)))
