"""TrainJob resources (manifests/trainjob_resources.py): completion, refusals, and the CEL that does the same.

The completion is checked against both readings of resourcesPerNode that it must reconcile: Trainer
v2.3.0's key-by-key merge over the runtime's node container, and Kueue v0.19.2's replacement of it. The
CEL of both policies is run with cel-python over the whole shapes matrix (tests/job_shapes.py) and must
give what the Python rules give; the API server runs the same objects in
tests/cluster/test_trainjob_resources_admission.py.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any

import pytest
import yaml

from tests import job_shapes
from tests.conftest import ROOT, rendered, stack
from tests.policy import json_patch
from trainyard.manifests import admission
from trainyard.manifests import trainjob_resources as tr
from trainyard.manifests.trainjob_resources import NodeResources
from trainyard.quantity import parse_quantity
from trainyard.rehearsal.stack import write_rehearsal_stack

BASE = NodeResources({"cpu": "4", "memory": "32Gi"}, {"cpu": "4", "memory": "32Gi"})
GPU = "nvidia.com/gpu"


def trainer_merge(base: NodeResources, override: NodeResources) -> NodeResources:
    """Trainer v2.3.0's MergeResourceRequirements: a strategic merge patch of two ResourceLists (maps) is a
    key-by-key override."""
    return NodeResources({**base.requests, **override.requests}, {**base.limits, **override.limits})


@pytest.mark.parametrize(("given", "expected"), [
    # The case tenants hit: a limit only (Kubeflow Trainer's own examples write it so).
    (NodeResources({}, {GPU: "4"}), NodeResources({"cpu": "4", "memory": "32Gi", GPU: "4"},
                                                  {"cpu": "4", "memory": "32Gi", GPU: "4"})),
    # A request only: an extended resource's is also its limit.
    (NodeResources({GPU: "2"}, {}), NodeResources({"cpu": "4", "memory": "32Gi", GPU: "2"},
                                                  {"cpu": "4", "memory": "32Gi", GPU: "2"})),
    # A CPU request above the runtime's limit: the limit follows (the runtime limits CPU).
    (NodeResources({"cpu": "8"}, {}), NodeResources({"cpu": "8", "memory": "32Gi"}, {"cpu": "8", "memory": "32Gi"})),
    # A CPU limit only: also the request, as Kubernetes defaults a container.
    (NodeResources({}, {"cpu": "2"}), NodeResources({"cpu": "2", "memory": "32Gi"}, {"cpu": "2", "memory": "32Gi"})),
    # Both given: taken as given.
    (NodeResources({"cpu": "2"}, {"cpu": "6"}), NodeResources({"cpu": "2", "memory": "32Gi"},
                                                              {"cpu": "6", "memory": "32Gi"})),
])
def test_completion_gives_each_named_resource_one_figure_and_keeps_the_runtimes_others(
        given: NodeResources, expected: NodeResources) -> None:
    assert tr.complete(BASE, given) == expected


@pytest.mark.parametrize("case", list(job_shapes.cases(runtimes=("torch-distributed",))), ids=lambda c: c.id)
def test_trainer_and_kueue_read_the_completed_resources_the_same_way(case: job_shapes.Case) -> None:
    given = case.resources_per_node()
    if given is None:
        return
    completed = tr.complete(BASE, NodeResources(given.get("requests", {}), given.get("limits", {})))
    # Kueue replaces the container's resources with resourcesPerNode; Trainer merges it over the runtime's.
    assert trainer_merge(BASE, completed) == completed
    # And every resource the pod limits it also requests (nothing left for the API server to default).
    assert set(completed.limits) <= set(completed.requests)


def test_no_approved_runtime_names_an_accelerator() -> None:
    """A runtime default GPU would stay beside a MIG slice the TrainJob asks for (a merge cannot remove a key)."""
    for name, shape in tr.runtime_shapes(rendered("prod").concern("runtimes").objects).items():
        named = {*shape.resources.requests, *shape.resources.limits}
        assert not {k for k in named if tr.is_extended(k)}, name
        assert {"cpu", "memory"} <= set(shape.resources.requests), name


def test_the_mpi_runtime_takes_the_node_jobs_figures_not_the_launchers() -> None:
    runtime = next(r for r in rendered("prod").concern("runtimes").objects if r["metadata"]["name"] == "deepspeed-mpi")
    assert tr.runtime_shape(runtime).resources == BASE
    assert not tr.runtime_shape(runtime).torch


# ---- the matrix: the CEL of both policies equals the Python rules ----

OVERRIDES = ROOT / "tests" / "fixtures" / "job-shapes-overrides.yaml"


@pytest.fixture(scope="module")
def shapes_config(tmp_path_factory: pytest.TempPathFactory) -> Any:
    overrides = yaml.safe_load(OVERRIDES.read_text(encoding="utf-8"))
    return write_rehearsal_stack(ROOT / "stacks" / "Pulumi.local.yaml",
                                 tmp_path_factory.mktemp("shapes") / "Pulumi.local.yaml", overrides)


@pytest.fixture(scope="module")
def shapes_policies(shapes_config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    shapes = tr.runtime_shapes(rendered("local").concern("runtimes").objects)
    return tr.mutating_policy(shapes), tr.validating_policy(shapes, tr.tenant_flavors(shapes_config))


def shapes_params(config: Any) -> dict[str, Any]:
    """The params the stack renders in the shapes tenant's namespace (its queue's flavors among them)."""
    return next(p for p in admission.tenant_params(config).values()
                if p["metadata"]["namespace"] == job_shapes.TENANT_NAMESPACE)


class _Quantity:
    def __init__(self, value: Fraction) -> None:
        self.value = value


def _cel_functions() -> dict[str, Any]:
    """The Kubernetes CEL additions the policies use, for cel-python: the quantity library (quantity, compareTo;
    Ref: k8s.io/apiserver v0.36.3 pkg/cel/library/quantity.go), jsonpatch.escapeKey (RFC 6901) and join."""
    from celpy import celtypes

    def cmp(a: Fraction, b: Fraction) -> Any:
        return celtypes.IntType((a > b) - (a < b))

    return {"quantity": lambda s: _Quantity(parse_quantity(str(s))),
            "compareTo": lambda a, b: cmp(a.value, b.value),
            "escapeKey": lambda s: celtypes.StringType(str(s).replace("~", "~0").replace("/", "~1")),
            # The strings extension's list join. Ref: cel-go ext/strings.go
            "join": lambda values, separator: celtypes.StringType(str(separator).join(str(v) for v in values))}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or type(value).__name__ == "BoolType":
        return bool(value)
    if isinstance(value, int):
        return int(value)
    return str(value) if isinstance(value, str) else value


@functools.cache
def _program(expression: str) -> Any:
    celpy = pytest.importorskip("celpy", reason="cel-python is not installed (dev dependency for CEL checks)")
    env = celpy.Environment()
    return env.program(env.compile(expression.replace("jsonpatch.escapeKey(", "escapeKey(")), functions=_cel_functions())


def _evaluator(obj: dict[str, Any], params: dict[str, Any] | None = None) -> Any:
    celpy = pytest.importorskip("celpy", reason="cel-python is not installed (dev dependency for CEL checks)")
    variables: dict[str, Any] = {}
    namespace = {"metadata": {"name": obj["metadata"]["namespace"]}}

    def evaluate(expression: str) -> Any:
        activation = {"object": obj, "namespaceObject": namespace, "variables": variables, "params": params or {}}
        return _plain(_program(expression).evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()}))

    return evaluate, variables


def mutate(policy: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    evaluate, variables = _evaluator(obj)
    for variable in policy["spec"]["variables"]:
        variables[variable["name"]] = evaluate(variable["expression"])
    return json_patch.applied(obj, evaluate(json_patch.as_maps(policy["spec"]["mutations"][0]["jsonPatch"]["expression"])),
                              adds_only=True)


def denials(policy: dict[str, Any], obj: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """The messages of the validations that fail, with ``params`` the namespace's ``trainyard-policy`` TenantPolicy."""
    evaluate, variables = _evaluator(obj, params)
    for variable in policy["spec"]["variables"]:
        variables[variable["name"]] = evaluate(variable["expression"])
    return [evaluate(v["messageExpression"]) for v in policy["spec"]["validations"] if not evaluate(v["expression"])]


def expected(case: job_shapes.Case, config: Any) -> tuple[NodeResources | None, int | None, list[str]]:
    flavors = tr.tenant_flavors(config)[job_shapes.TENANT_NAMESPACE]
    return job_shapes.expected(case, list(rendered("local").concern("runtimes").objects), flavors)


@pytest.mark.parametrize("case", list(job_shapes.cases()), ids=lambda c: c.id)
def test_the_policies_cel_completes_and_refuses_as_the_python_rules(
        case: job_shapes.Case, shapes_config: Any, shapes_policies: tuple[dict[str, Any], dict[str, Any]]) -> None:
    mutating, validating = shapes_policies
    completed, num_proc, refused = expected(case, shapes_config)
    job = mutate(mutating, case.trainjob("shape"))
    trainer = job["spec"]["trainer"]
    if completed is None:
        assert "resourcesPerNode" not in trainer
    else:
        assert trainer["resourcesPerNode"] == completed.as_manifest()
    assert trainer.get("numProcPerNode") == num_proc
    # Each Python refusal has its CEL twin, with the same message (what `trainyard check` says is what kubectl shows).
    assert denials(validating, job, shapes_params(shapes_config)) == refused


def test_a_mig_torch_job_gets_one_process_per_slice(shapes_policies: tuple[dict[str, Any], dict[str, Any]]) -> None:
    case = next(c for c in job_shapes.cases(runtimes=("torch-distributed",), pools=("mig",))
                if c.shape.name == "limits only")
    assert mutate(shapes_policies[0], case.trainjob("mig"))["spec"]["trainer"]["numProcPerNode"] == 7


def test_the_limits_only_gpu_job_of_the_report_is_completed_not_refused(
        shapes_config: Any, shapes_policies: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """The TrainJob a new user wrote: two nodes, torch-distributed, ``limits: {nvidia.com/gpu: 4}``."""
    job = job_shapes.Case("whole", job_shapes.Shape("report", limits={GPU: 4}, num_nodes=2), "torch-distributed",
                          GPU, 4).trainjob("report")
    completed = mutate(shapes_policies[0], job)
    assert completed["spec"]["trainer"]["resourcesPerNode"] == {
        "requests": {"cpu": "4", "memory": "32Gi", GPU: 4}, "limits": {"cpu": "4", "memory": "32Gi", GPU: 4}}
    assert denials(shapes_policies[1], completed, shapes_params(shapes_config)) == []


def test_every_stack_renders_the_policies_with_its_runtimes_and_flavors() -> None:
    for name in ("local", "staging", "prod"):
        objects = rendered(name).concern("trainjob-resources").objects
        assert [o["kind"] for o in objects] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
                                                "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
        approved = stack(name).config.runtimes.approved
        assert set(yaml.safe_load(objects[0]["spec"]["variables"][0]["expression"])) == set(approved)

