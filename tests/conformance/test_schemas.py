"""Every rendered object of every stack against the strict schemas it will meet on a cluster.

Built-in kinds: the Kubernetes 1.36 OpenAPI schemas (kubernetes-validate, strict: unknown
fields rejected). Custom resources: the openAPIV3Schema of the exact upstream CRD versions
in the mirror (../shared/crds), made strict; the barman-cloud plugin's ObjectStore against its
CRD from the tools cache (`tools/build.sh barman-cloud-crd`, blob-verified). Runtimes additionally
round-trip through the kubeflow-trainer-api models.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from tests.conftest import BARMAN_CLOUD_CRD, ROOT, STACKS, rendered, stack
from trainyard import catalog
from trainyard.manifests import kueue
from trainyard.manifests.crds import CrdUnavailable
from trainyard.manifests.meta import Manifest
from trainyard.schemas import Validator, barman_cloud_crd, barman_cloud_crd_path, strict_crd_schema

# Kinds whose CRD the mirror does not hold: the barman-cloud plugin's ObjectStore (neither
# plugin-barman-cloud's CRD nor its chart is in ../shared). Its CRD comes from the tools cache
# instead; where that is absent the stack test leaves these objects out (saying so) and
# test_the_backup_object_store_passes_the_plugins_crd skips, saying why.
FROM_TOOLS_CACHE = frozenset({(catalog.BARMAN_CLOUD_API, "ObjectStore")})


# Fixture stacks whose optional concerns the three main stacks leave off.
DATA_CACHE = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.data-cache.yaml")


@pytest.fixture(scope="module")
def validator(crds: Path) -> Validator:
    validator = Validator(crds)
    if BARMAN_CLOUD_CRD.is_file():
        validator.add_crd(barman_cloud_crd(BARMAN_CLOUD_CRD))  # verified first: a drifted file fails every test here
    return validator


@pytest.mark.parametrize("name", [*STACKS, DATA_CACHE], ids=[*STACKS, "data-cache"])
def test_every_rendered_object_passes_its_strict_schema(name: str, validator: Validator) -> None:
    platform = rendered(name)
    checked = [o for o in platform.all_objects
               if validator.knows(o["apiVersion"], o["kind"]) or (o["apiVersion"], o["kind"]) not in FROM_TOOLS_CACHE]
    unchecked = sorted({f"{o['apiVersion']} {o['kind']}" for o in platform.all_objects if o not in checked})
    if unchecked:
        print(f"{name}: CRD not in the tools cache ({BARMAN_CLOUD_CRD}), not schema-checked: {', '.join(unchecked)}")
    errors = [str(e) for obj in checked for e in validator.errors(obj)]
    assert errors == [], "\n".join(errors)
    assert len(platform.all_objects) > 30


@pytest.mark.parametrize("name", [*STACKS, DATA_CACHE], ids=[*STACKS, "data-cache"])
def test_the_backup_object_store_passes_the_plugins_crd(name: str, validator: Validator,
                                                        request: pytest.FixtureRequest) -> None:
    """Every stack with MLflow backups on renders one ObjectStore, and it passes the plugin's strict CRD schema."""
    mlflow = stack(name).config.mlflow
    stores = rendered(name).by_kind("ObjectStore")
    assert len(stores) == (1 if mlflow.enabled and mlflow.backup.enabled else 0)
    if not stores:
        return
    request.getfixturevalue("barman_cloud_crd")  # skips, saying why, where the tools cache lacks it
    assert validator.knows(stores[0]["apiVersion"], stores[0]["kind"])
    errors = [str(e) for e in validator.errors(stores[0])]
    assert errors == [], "\n".join(errors)


def test_the_object_store_gate_rejects_misspelt_fields_and_bad_values(validator: Validator,
                                                                       barman_cloud_crd: Manifest) -> None:
    (store,) = copy.deepcopy(rendered("staging").by_kind("ObjectStore"))
    configuration = store["spec"]["configuration"]
    configuration["endpointUrl"] = configuration.pop("endpointURL")
    configuration["wal"]["compression"] = "zip"
    store["spec"]["retentionPolicy"] = "30 days"
    messages = [e.message for e in validator.errors(store)]
    assert any("'endpointUrl' was unexpected" in m for m in messages), messages
    assert any("'zip' is not one of" in m for m in messages), messages
    assert any("'30 days' does not match" in m for m in messages), messages


def test_a_barman_cloud_crd_that_differs_from_the_pin_is_refused(tmp_path: Path) -> None:
    drifted = tmp_path / "objectstores.yaml"
    drifted.write_text("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n")
    pin = catalog.BARMAN_CLOUD_CRD
    with pytest.raises(CrdUnavailable, match=rf"does not match upstream .*plugin-barman-cloud@"
                                             rf"{catalog.BARMAN_CLOUD_PLUGIN_VERSION}:.*pinned {pin.blob_sha}"):
        barman_cloud_crd(drifted)


def test_tools_build_fetches_the_barman_cloud_crd_the_catalog_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    script = (ROOT / "tools" / "build.sh").read_text()
    pins = dict(re.findall(r'^BARMAN_CLOUD_([A-Z_]+)="?([^"\s]+)"?$', script, re.MULTILINE))
    assert (pins["MODULE"], pins["VERSION"], pins["CRD"], pins["CRD_BLOB"]) == (
        catalog.BARMAN_CLOUD_PLUGIN_MODULE, catalog.BARMAN_CLOUD_PLUGIN_VERSION, catalog.BARMAN_CLOUD_CRD.repo_path,
        catalog.BARMAN_CLOUD_CRD.blob_sha)
    assert re.search(r"^ALL_TOOLS=\(.*\bbarman-cloud-crd\b", script, re.MULTILINE)
    monkeypatch.delenv("TRAINYARD_BARMAN_CLOUD_CRD", raising=False)
    monkeypatch.setenv("TRAINYARD_TOOLS_DIR", "/t")
    assert barman_cloud_crd_path() == Path("/t/share/barman-cloud-crd") / catalog.BARMAN_CLOUD_CRD.repo_path


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
