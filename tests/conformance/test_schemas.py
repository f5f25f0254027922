"""Every rendered object of every stack against the strict schemas it will meet on a cluster.

Built-in kinds: the Kubernetes 1.36 OpenAPI schemas (kubernetes-validate, strict: unknown
fields rejected). Custom resources: the openAPIV3Schema of the exact upstream CRD versions
in the mirror (../shared/crds), made strict. Runtimes additionally round-trip through the
kubeflow-trainer-api models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from tests.conftest import ROOT, STACKS, rendered, stack
from trainyard.manifests import kueue
from trainyard.schemas import Validator, strict_crd_schema

# Kinds whose CRD the mirror does not hold, so no schema can be applied: the barman-cloud
# plugin's ObjectStore (neither plugin-barman-cloud's CRD nor its chart is in ../shared).
# Once a mirror holds the CRD, these objects are validated like every other.
NOT_IN_MIRROR = frozenset({("barmancloud.cnpg.io/v1", "ObjectStore")})


# Fixture stacks whose optional concerns the three main stacks leave off.
DATA_CACHE = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.data-cache.yaml")


@pytest.fixture(scope="module")
def validator(crds: Path) -> Validator:
    return Validator(crds)


@pytest.mark.parametrize("name", [*STACKS, DATA_CACHE], ids=[*STACKS, "data-cache"])
def test_every_rendered_object_passes_its_strict_schema(name: str, validator: Validator) -> None:
    platform = rendered(name)
    checked = [o for o in platform.all_objects
               if validator.knows(o["apiVersion"], o["kind"]) or (o["apiVersion"], o["kind"]) not in NOT_IN_MIRROR]
    unchecked = sorted({f"{o['apiVersion']} {o['kind']}" for o in platform.all_objects if o not in checked})
    if unchecked:
        print(f"{name}: no CRD in the mirror, not schema-checked: {', '.join(unchecked)}")
    errors = [str(e) for obj in checked for e in validator.errors(obj)]
    assert errors == [], "\n".join(errors)
    assert len(platform.all_objects) > 30


def test_the_gate_rejects_unknown_fields_and_wrong_types(validator: Validator) -> None:
    queue: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"},
        "spec": {"cohortName": "c", "queueingStrategy": "Sideways", "surprise": True},
    }
    messages = [e.message for e in validator.errors(queue)]
    assert any("'surprise' was unexpected" in m for m in messages)
    assert any("'Sideways' is not one of" in m for m in messages)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "lables": {}}}
    assert validator.errors(namespace), "a misspelt metadata field must fail the strict built-in schema"


def test_v1beta1_kueue_objects_would_validate_only_against_the_deprecated_schema(validator: Validator) -> None:
    # v1beta2 renamed fields; the stacks must use the new names. A v1beta2 ClusterQueue
    # with the v1beta1-only field "flavorFungibility.whenCanBorrow: Borrow" is rejected.
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"},
             "spec": {"flavorFungibility": {"whenCanBorrow": "Borrow"}}}
    assert validator.errors(queue)


def test_strict_crd_schema_keeps_preserve_unknown_fields_open() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}},
                                                        "x-kubernetes-preserve-unknown-fields": True}}}
    strict = strict_crd_schema(schema)
    assert "additionalProperties" not in strict["properties"]["spec"]


@pytest.mark.parametrize("name", [*STACKS, DATA_CACHE], ids=[*STACKS, "data-cache"])
def test_runtimes_round_trip_through_the_trainer_api_models(name: str) -> None:
    from kubeflow_trainer_api.models.trainer_v1alpha1_cluster_training_runtime import (
        TrainerV1alpha1ClusterTrainingRuntime,
    )

    for runtime in rendered(name).by_kind("ClusterTrainingRuntime"):
        model = TrainerV1alpha1ClusterTrainingRuntime.from_dict(runtime)
        assert model is not None
        assert _strip_none(model.to_dict()) == runtime, runtime["metadata"]["name"]


def _strip_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_none(v) for v in value]
    return value


# Kueue's controller Configuration is not a CRD: it is read from a ConfigMap by the manager.
# These models mirror the fields Trainyard sets, with the upstream JSON names, forbidding
# anything else. Ref: kueue apis/config/v1beta2/configuration_types.go (v0.19).
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Requeuing(_Strict):
    timestamp: Literal["Eviction", "Creation"]
    backoffLimitCount: int | None = None
    backoffBaseSeconds: int
    backoffMaxSeconds: int


class _WaitForPodsReady(_Strict):
    timeout: str
    blockAdmission: bool
    recoveryTimeout: str | None = None
    requeuingStrategy: _Requeuing


class _Selector(_Strict):
    matchExpressions: list[dict[str, str]]


class _Metrics(_Strict):
    bindAddress: str
    enableClusterQueueResources: bool | None = None


class _Transformation(_Strict):
    input: str
    strategy: Literal["Retain", "Replace"]
    outputs: dict[str, str]


class _Resources(_Strict):
    transformations: list[_Transformation]


class _Configuration(_Strict):
    apiVersion: Literal["config.kueue.x-k8s.io/v1beta2"]
    kind: Literal["Configuration"]
    health: dict[str, str]
    metrics: _Metrics
    webhook: dict[str, int]
    leaderElection: dict[str, Any]
    manageJobsWithoutQueueName: bool
    managedJobsNamespaceSelector: _Selector
    waitForPodsReady: _WaitForPodsReady
    integrations: dict[Literal["frameworks"], list[str]]
    fairSharing: dict[Literal["preemptionStrategies"], list[Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]]]
    resources: _Resources | None = None


@pytest.mark.parametrize("name", [*STACKS, str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.gpu-sharing.yaml")])
def test_kueue_controller_configuration_uses_only_v1beta2_fields(name: str) -> None:
    platform = rendered(name)
    (release,) = [r for r in platform.releases if r.name == "kueue"]
    text = release.values["managerConfig"]["controllerManagerConfigYaml"]
    _Configuration.model_validate(yaml.safe_load(text))
    assert yaml.safe_load(text) == kueue.controller_configuration(stack(name).config)
