"""``trainyard promote --apply`` on a real kube-apiserver, with a tenant's own credentials.

The private control plane (``bare_api_server``) gets KServe's CRDs, the local stack's tenant namespaces,
each tenant's RBAC (its Roles and RoleBindings, as rendered) and the serving admission policies. A member
of each tenant reaches it with its own kubeconfig (a client certificate in the tenant's groups, made with
the cluster CA the way ``Rehearsal.tenant_kubeconfig`` makes one): no admin rights, no impersonation, so
RBAC and the policies alone decide. No KServe controller runs: what is checked is that the object is
stored as promote wrote it, and refused where it must be.

The registry is MLflow's own client on a local file store (MLflow from the project venv; the file backend
is in maintenance mode, hence ``MLFLOW_ALLOW_FILE_STORE``): ``trainyard promote`` resolves versions through
the same client calls as against a server (``tests/serving`` runs it against a real MLflow server).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from tests.cluster.conftest import BIN_DIR, TRAINYARD, Cluster, bare_api_server, install_policy_params
from tests.conftest import ROOT, rendered, stack
from trainyard.manifests.meta import TENANT_LABEL
from trainyard.manifests.serving import CLUSTER_LOCAL, VISIBILITY_LABEL
from trainyard.rehearsal.cluster import CONTEXT, ControlPlane, Settings
from trainyard.rehearsal.kube import wait_until
from trainyard.serving.promote import BASE_MODEL_NAME_TAG, BASE_MODEL_REVISION_TAG, BASE_MODEL_URI_TAG, PromoteError, apply

pytestmark = pytest.mark.cluster

STACK = "local"
TENANT, OTHER = "team-a", "team-b"
ISVC = "inferenceservices.serving.kserve.io"
FILE_STORE = {"MLFLOW_ALLOW_FILE_STORE": "true"}
BASE = stack(STACK).config.lineage.approved_for(TENANT).base_models[0]
# Registered versions, as the lab's program registers them (docs/lab.md): a model, and an adapter naming its base.
MODELS = {
    "chat": ("s3://team-a-models/mlflow/team-a/1/0f3c/artifacts/model", {}),
    "chat-lora": ("s3://team-a-models/mlflow/team-a/2/77aa/artifacts/adapter",
                  {BASE_MODEL_URI_TAG: BASE.uri, BASE_MODEL_NAME_TAG: BASE.name, BASE_MODEL_REVISION_TAG: BASE.revision}),
}


@dataclass(frozen=True)
class Promotion:
    cluster: Cluster
    tracking_uri: str
    kubeconfigs: dict[str, Path]  # tenant -> a member's kubeconfig


def register(tracking_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    with mock.patch.dict(os.environ, FILE_STORE):
        client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
        for name, (source, tags) in MODELS.items():
            client.create_registered_model(name)
            client.create_model_version(name, source=source, tags=tags)


def dry_run(cluster: Cluster, obj: dict[str, Any]) -> str:
    result = cluster.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", stdin=yaml.safe_dump(obj), check=False)
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def promotion(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Promotion]:
    platform = rendered(STACK)
    config = stack(STACK).config
    crds = [c for c in platform.crds if c["spec"]["group"] == "serving.kserve.io"]
    tenants = [t.name for t in config.tenants]
    namespaces = [o for o in platform.objects if o["kind"] == "Namespace" and TENANT_LABEL in o["metadata"]["labels"]]
    rbac = [o for t in tenants for o in platform.tenant_objects(t) if o["kind"] in ("Role", "RoleBinding")]
    policies = list(platform.concern("serving-admission").objects)
    registry = tmp_path_factory.mktemp("mlflow")
    tracking_uri = (registry / "store").as_uri()
    register(tracking_uri)
    with bare_api_server(tmp_path_factory, "promote-apply") as cluster:
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-",
                        stdin=yaml.safe_dump_all([*crds, *namespaces]))
        cluster.wait_established(*(c["metadata"]["name"] for c in crds))
        install_policy_params(cluster, platform)  # the storage and exposure policies read each namespace's params
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-",
                        stdin=yaml.safe_dump_all([*rbac, *policies]))
        plane = ControlPlane(Settings.from_env(cluster.env))
        kubeconfigs = {t.name: plane.user_kubeconfig(f"{t.name}-member", t.groups, registry / f"{t.name}.kubeconfig")
                       for t in config.tenants}
        # InferenceServices must be served and the policies in effect (the API server loads them asynchronously):
        # wait (bounded) until one in team-b that reads team-a's bucket is denied, the denial a test relies on.
        probe = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                 "metadata": {"name": "probe", "namespace": OTHER, "labels": {VISIBILITY_LABEL: CLUSTER_LOCAL}},
                 "spec": {"predictor": {"model": {"modelFormat": {"name": "vLLM"}, "runtime": "vllm-openai",
                                                  "storageUri": MODELS["chat"][0]}}}}
        wait_until("the serving admission policies to take effect",
                   lambda: "'trainyard-isvc-storage'" in dry_run(cluster, probe), 90, interval=1)
        yield Promotion(cluster=cluster, tracking_uri=tracking_uri, kubeconfigs=kubeconfigs)


def promote(promotion: Promotion, out: Path, model: str, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``trainyard promote local --tenant team-a --model MODEL --version 1 --apply`` with ``kubeconfig``."""
    result = subprocess.run(
        [str(TRAINYARD), "promote", STACK, "--tenant", TENANT, "--model", model, "--version", "1",
         "--tracking-uri", promotion.tracking_uri, "--gpus", "0", "--cpu", "2", "--memory", "8Gi", "--out", str(out),
         "--apply", "--kubeconfig", str(kubeconfig), "--context", CONTEXT, "--kubectl", str(BIN_DIR / "kubectl"), *args],
        capture_output=True, text=True, cwd=ROOT, check=False, timeout=300, env={**os.environ, **FILE_STORE})
    print(f"$ trainyard promote ... --model {model} --apply --kubeconfig {kubeconfig.name}\n"
          f"exit {result.returncode}\n{result.stdout}{result.stderr}")
    return result


def live(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    result = cluster.kubectl("get", ISVC, name, "-n", namespace, "-o", "yaml", "--show-managed-fields", "--ignore-not-found")
    return yaml.safe_load(result.stdout) if result.stdout.strip() else None


@pytest.mark.parametrize("model", list(MODELS))
def test_promote_apply_as_the_tenant_stores_the_inference_service_as_written(promotion: Promotion, tmp_path: Path,
                                                                             model: str) -> None:
    out = tmp_path / f"{model}.yaml"
    result = promote(promotion, out, model, promotion.kubeconfigs[TENANT])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(f"inferenceservice.serving.kserve.io/{model} serverside-applied")
    written = yaml.safe_load(out.read_text())
    stored = live(promotion.cluster, TENANT, model)
    assert stored is not None
    assert stored["spec"] == written["spec"]
    assert {k: stored["metadata"].get(k) for k in ("name", "namespace", "labels", "annotations")} == \
           {k: written["metadata"][k] for k in ("name", "namespace", "labels", "annotations")}
    assert [(m["manager"], m["operation"]) for m in stored["metadata"]["managedFields"]] == [("trainyard-promote", "Apply")]
    # Applying the same file again changes nothing (server-side apply of the same fields by the same manager).
    assert apply(out, str(BIN_DIR / "kubectl"), str(promotion.kubeconfigs[TENANT]), CONTEXT) == \
           f"inferenceservice.serving.kserve.io/{model} serverside-applied"
    again = live(promotion.cluster, TENANT, model)
    assert again is not None and again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


def test_promote_apply_with_another_tenants_credentials_is_refused(promotion: Promotion, tmp_path: Path) -> None:
    out = tmp_path / "chat-b.yaml"
    result = promote(promotion, out, "chat", promotion.kubeconfigs[OTHER], "--name", "chat-by-b")
    assert result.returncode == 2
    assert result.stderr.startswith("error: kubectl apply failed (exit 1): "), result.stderr
    assert (f'User "{OTHER}-member" cannot patch resource "inferenceservices" in API group "serving.kserve.io" '
            f'in the namespace "{TENANT}"') in result.stderr
    assert "Traceback" not in result.stderr
    assert out.exists(), "the file is written (and reviewed) before it is applied"
    assert live(promotion.cluster, TENANT, "chat-by-b") is None


def moved(path: Path, namespace: str, tmp_path: Path) -> Path:
    """The promoted file with its namespace (and tenant label) changed, as someone might edit it."""
    isvc = yaml.safe_load(path.read_text())
    isvc["metadata"]["name"] = "moved"
    isvc["metadata"]["namespace"] = namespace
    isvc["metadata"]["labels"][TENANT_LABEL] = namespace
    target = tmp_path / f"moved-{namespace}.yaml"
    target.write_text(yaml.safe_dump(isvc), encoding="utf-8")
    return target


@pytest.fixture
def promoted_file(promotion: Promotion, tmp_path: Path) -> Path:
    """A file ``trainyard promote`` wrote for team-a (and applied: the tenant's own namespace accepts it)."""
    out = tmp_path / "chat.yaml"
    assert promote(promotion, out, "chat", promotion.kubeconfigs[TENANT]).returncode == 0
    return out


def test_the_tenant_cannot_apply_a_promoted_file_into_another_namespace(promotion: Promotion, promoted_file: Path,
                                                                         tmp_path: Path) -> None:
    target = moved(promoted_file, OTHER, tmp_path)
    with pytest.raises(PromoteError) as refused:
        apply(target, str(BIN_DIR / "kubectl"), str(promotion.kubeconfigs[TENANT]), CONTEXT)
    print(refused.value)
    assert (f'User "{TENANT}-member" cannot patch resource "inferenceservices" in API group "serving.kserve.io" '
            f'in the namespace "{OTHER}"') in str(refused.value)
    assert live(promotion.cluster, OTHER, "moved") is None


def test_a_promoted_file_moved_into_another_tenants_namespace_is_denied_by_its_bucket(
        promotion: Promotion, promoted_file: Path, tmp_path: Path) -> None:
    """team-b's member may write InferenceServices in team-b, but not one that reads team-a's model bucket."""
    target = moved(promoted_file, OTHER, tmp_path)
    uri = yaml.safe_load(target.read_text())["spec"]["predictor"]["model"]["storageUri"]
    with pytest.raises(PromoteError) as refused:
        apply(target, str(BIN_DIR / "kubectl"), str(promotion.kubeconfigs[OTHER]), CONTEXT)
    print(refused.value)
    assert ("ValidatingAdmissionPolicy 'trainyard-isvc-storage' with binding 'trainyard-isvc-storage' denied request: "
            f"storage URIs outside this namespace's model bucket (s3://{OTHER}-models/...): {uri}") in str(refused.value)
    assert live(promotion.cluster, OTHER, "moved") is None
