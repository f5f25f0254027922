"""Serving builders: what KServe, cert-manager and each tenant's serving access render to."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, rendered, stack
from trainyard.config.serving import CertManager
from trainyard.manifests import cert_manager, crd_components, network, object_store, serving
from trainyard.manifests.meta import INFERENCE_SERVICE_POD_LABEL
from trainyard.manifests.runtimes import RuntimeFileError


def test_kserve_chart_runs_standard_mode_with_ingress_off_and_mirror_images() -> None:
    values = serving.chart_values(stack("prod").config)["kserve"]
    assert values["controller"]["deploymentMode"] == "Standard"
    assert values["controller"]["gateway"]["disableIngressCreation"] is True
    assert values["controller"]["image"] == "registry.trainyard.internal/mirror/kserve/kserve-controller"
    assert values["storage"]["image"] == "registry.trainyard.internal/mirror/kserve/storage-initializer"
    assert values["storage"]["s3"] == {"accessKeyIdName": "AWS_ACCESS_KEY_ID", "secretAccessKeyName": "AWS_SECRET_ACCESS_KEY"}


def test_without_a_mirror_images_come_from_upstream() -> None:
    config = stack("prod").config
    config = config.model_copy(update={"images": config.images.model_copy(update={"registry_mirror": None})})
    assert serving.chart_values(config)["kserve"]["controller"]["image"] == "docker.io/kserve/kserve-controller"
    assert cert_manager.values(config)["imageRegistry"] == "quay.io"


def test_an_existing_cert_manager_means_no_chart_and_no_crds() -> None:
    config = stack("prod").config
    assert serving.enabled(config).cert_manager.install
    assert "cert_manager" in [component for component, _ in crd_components(config)]
    existing = config.model_copy(update={"serving": serving.enabled(config).model_copy(
        update={"cert_manager": CertManager(install=False)})})
    assert cert_manager.build(existing).releases == ()
    components = [component for component, _ in crd_components(existing)]
    assert "cert_manager" not in components and "kserve" in components


def test_only_the_approved_serving_runtimes_are_installed() -> None:
    runtimes = [o for o in rendered("prod").concern("serving").objects if o["kind"] == "ClusterServingRuntime"]
    assert [r["metadata"]["name"] for r in runtimes] == ["vllm-openai", "huggingface-server"]
    assert all(r["metadata"]["labels"]["trainyard.dev/approved-runtime"] == "true" for r in runtimes)
    vllm = runtimes[0]["spec"]["containers"][0]
    assert "--enable-lora" in vllm["args"]
    assert "@sha256:" in vllm["image"]


def test_a_serving_runtime_with_a_moving_tag_is_refused(tmp_path: Path) -> None:
    source = (ROOT / "serving-runtimes" / "vllm-openai.yaml").read_text()
    bad = tmp_path / "vllm-openai.yaml"
    image = next(line.split("image: ")[1] for line in source.splitlines() if "image: " in line)
    bad.write_text(source.replace(image, "registry.trainyard.internal/vllm/vllm-openai:latest"))
    with pytest.raises(RuntimeFileError, match=r"spec.containers\[0\].image.*not pinned by digest: no @sha256: in the "
                                               r"file and no entry in the image lock"):
        serving.load_serving_runtime(bad, stack("prod").config)


def test_a_serving_runtime_named_by_tag_takes_the_locks_digest_as_a_training_runtime_does(tmp_path: Path) -> None:
    from trainyard.supply.lock import ImageLock, LockEntry

    source = (ROOT / "serving-runtimes" / "vllm-openai.yaml").read_text()
    image = next(line.split("image: ")[1] for line in source.splitlines() if "image: " in line)
    tagged = tmp_path / "vllm-openai.yaml"
    tagged.write_text(source.replace(image, "registry.trainyard.internal/vllm/vllm-openai:v0.24.0"))
    digest = "sha256:" + "ab" * 32
    lock = ImageLock({"registry.trainyard.internal/vllm/vllm-openai:v0.24.0": LockEntry(digest, "registry")})
    runtime = serving.load_serving_runtime(tagged, stack("prod").config, lock)
    assert runtime["spec"]["containers"][0]["image"] == f"registry.trainyard.internal/vllm/vllm-openai:v0.24.0@{digest}"


def test_each_tenant_gets_a_predictor_account_whose_secret_kserve_reads_as_s3_credentials() -> None:
    config = stack("prod").config
    tenant = config.tenants[0]
    secret = serving.s3_secret(config, tenant)
    account = serving.service_account(tenant)
    assert account["secrets"] == [{"name": serving.S3_SECRET}]
    assert set(secret["stringData"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert secret["stringData"]["AWS_SECRET_ACCESS_KEY"] == f"${{generated:object-store/serving-{tenant.name}/g1/secret-key}}"
    assert secret["metadata"]["annotations"] == {
        "serving.kserve.io/s3-endpoint": "minio.object-store.svc:80",  # the MinIO operator's Service for the Tenant
        "serving.kserve.io/s3-usehttps": "0",
        "serving.kserve.io/s3-region": object_store.region(config),
        "serving.kserve.io/s3-verifyssl": "1",
    }


def test_each_tenants_serving_identity_reads_only_its_model_bucket_and_the_object_store_provisions_it() -> None:
    config = stack("prod").config
    provisioned = {i.name: i for i in object_store.identities(config)}
    for tenant in config.tenants:
        identity = serving.read_only_identity(config, tenant)
        assert provisioned[identity.name] == identity
        assert identity.buckets == (object_store.bucket_name(config, tenant, "models"),)
        assert object_store.seaweedfs_actions(identity) == [f"Read:{identity.buckets[0]}", f"List:{identity.buckets[0]}"]


def test_predictor_pods_reach_the_object_store_and_are_reached_by_named_callers_only() -> None:
    config = stack("prod").config
    tenant = config.tenants[0]
    policies = {p["metadata"]["name"]: p for p in serving.predictor_policies(config, tenant)}
    egress = policies["allow-predictors-object-store"]["spec"]
    assert egress["podSelector"] == serving.PREDICTOR_PODS
    assert egress["egress"][0]["to"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "object-store"}}
    ingress = policies["allow-predictors-callers"]["spec"]["ingress"][0]
    assert ingress["from"] == [{"podSelector": {}},
                               {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "api-gateway"}}}]
    assert ingress["ports"] == [{"protocol": "TCP", "port": 8080}]
    # The general allows (same namespace, MLflow, egress) no longer select predictor pods.
    general = {p["metadata"]["name"]: p for p in network.tenant_policies(config, tenant)}
    for name in ("allow-same-namespace", "allow-mlflow"):
        assert general[name]["spec"]["podSelector"] == {
            "matchExpressions": [{"key": INFERENCE_SERVICE_POD_LABEL, "operator": "DoesNotExist"}]}
    assert general["default-deny"]["spec"]["podSelector"] == {}
