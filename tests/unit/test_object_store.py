"""The object store: buckets per tenant, identities limited to them, placeholders for every key, backends."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, rendered, stack
from trainyard.components.generated import ALPHABETS, GeneratedSecretProvider, generate
from trainyard.config import ConfigError, PlatformConfig, validate_platform
from trainyard.manifests import object_store, render_platform
from trainyard.manifests.generated import names_in
from trainyard.manifests.meta import OBJECT_STORE_SECRET, object_id


def platform_data(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{name}.yaml").read_text())["config"]["trainyard:platform"]
    return copy.deepcopy(data)


def config_of(data: dict[str, Any]) -> PlatformConfig:
    return validate_platform(data, "stacks/Pulumi.test.yaml")


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        validate_platform(data, "stacks/Pulumi.test.yaml")
    return [f"{p.path}: {p.reason}" for p in caught.value.problems]


def by_id(objects: Any) -> dict[str, Any]:
    return {object_id(o): o for o in objects}


# ------------------------------------------------------------------------------- contract

def test_each_tenant_has_its_own_three_buckets_named_by_the_contract() -> None:
    config = stack("staging").config
    assert object_store.bucket_name(config, "eval", "datasets") == "stg-eval-datasets"
    assert [object_store.bucket_name(config, "eval", p) for p in ("datasets", "checkpoints", "models")] == [
        "stg-eval-datasets", "stg-eval-checkpoints", "stg-eval-models"]
    with pytest.raises(ValueError, match="purpose"):
        object_store.bucket_name(config, "eval", "logs")  # type: ignore[arg-type]


def test_endpoint_url_is_the_in_cluster_service_of_the_backend() -> None:
    assert object_store.endpoint_url(stack("staging").config) == "http://seaweedfs-all-in-one.object-store.svc:8333"
    assert object_store.endpoint_url(stack("prod").config) == "http://minio.object-store.svc:80"


def test_every_tenant_namespace_gets_the_fixed_name_secret_with_the_aws_variables() -> None:
    config = stack("staging").config
    objects = by_id(rendered("staging").all_objects)
    for tenant in config.tenants:
        secret = objects[f"Secret/{tenant.namespace_name}/{OBJECT_STORE_SECRET}"]
        identity = object_store.tenant_identity(config, tenant)
        assert secret["stringData"] == {
            "AWS_ACCESS_KEY_ID": identity.access_key.placeholder,
            "AWS_SECRET_ACCESS_KEY": identity.secret_key.placeholder,
            "AWS_ENDPOINT_URL": "http://seaweedfs-all-in-one.object-store.svc:8333",
            "AWS_DEFAULT_REGION": "us-east-1",
        }


# ----------------------------------------------------------------------------- retention

def test_bucket_settings_are_the_platform_defaults_with_the_tenants_overrides() -> None:
    config = stack("staging").config
    tenants = {t.name: t for t in config.tenants}
    pretrain = {b["name"]: b for b in object_store.tenant_buckets(config, tenants["llm-pretrain"])}
    evals = {b["name"]: b for b in object_store.tenant_buckets(config, tenants["eval"])}
    assert pretrain["stg-llm-pretrain-checkpoints"]["lifecycle"] == [
        {"ID": "expire-current", "Filter": {"Prefix": ""}, "Status": "Enabled", "Expiration": {"Days": 30}},
        {"ID": "expire-noncurrent", "Filter": {"Prefix": ""}, "Status": "Enabled",
         "NoncurrentVersionExpiration": {"NoncurrentDays": 3}},
    ]
    assert evals["stg-eval-checkpoints"]["lifecycle"][0]["Expiration"] == {"Days": 14}
    assert all(b["versioning"] for b in [*pretrain.values(), *evals.values()])
    assert evals["stg-eval-datasets"]["lifecycle"] == [] and evals["stg-eval-models"]["lifecycle"] == []


def test_object_lock_is_set_where_the_stack_asks() -> None:
    config = stack("prod").config
    datasets = [b for t in config.tenants for b in object_store.tenant_buckets(config, t) if b["name"].endswith("-datasets")]
    assert {json.dumps(b["objectLock"]) for b in datasets} == {json.dumps({"mode": "GOVERNANCE", "days": 30})}
    local = stack("local").config
    locks = {b["name"]: b["objectLock"] for t in local.tenants for b in object_store.tenant_buckets(local, t)}
    assert locks["team-a-datasets"] == {"mode": "GOVERNANCE", "days": 1}
    assert locks["team-b-datasets"] is None


# ---------------------------------------------------------------------------- identities

def test_seaweedfs_identities_give_each_tenant_its_own_buckets_and_nothing_else() -> None:
    config = stack("staging").config
    identities = {i["name"]: i for i in object_store.seaweedfs_identities(config)["identities"]}
    assert "anonymous" not in identities
    assert identities["trainyard-admin"]["actions"][0] == "Admin"
    for tenant in config.tenants:
        actions = identities[f"tenant-{tenant.name}"]["actions"]
        buckets = {a.split(":", 1)[1] for a in actions}
        assert buckets == {f"stg-{tenant.name}-{p}" for p in ("datasets", "checkpoints", "models")}
        assert {a.split(":", 1)[0] for a in actions} == {"Read", "Write", "List", "Tagging"}


def test_minio_plan_holds_one_aws_policy_per_tenant_scoped_to_its_buckets() -> None:
    config = stack("prod").config
    plan = object_store.provisioning_plan(config)
    assert plan["identityApi"] == "minio-admin"
    policies = {i["name"]: i["policy"] for i in plan["identities"]}
    own = {"arn:aws:s3:::assistant-datasets", "arn:aws:s3:::assistant-checkpoints", "arn:aws:s3:::assistant-models"}
    bucket_statement, object_statement = policies["tenant-assistant"]["Statement"]
    assert set(bucket_statement["Resource"]) == own
    assert set(object_statement["Resource"]) == {f"{arn}/*" for arn in own}
    assert "s3:ListBucket" in bucket_statement["Action"] and "s3:PutObject" in object_statement["Action"]


def test_rendered_output_holds_placeholders_and_never_a_key() -> None:
    for name in ("local", "staging", "prod"):
        platform = rendered(name)
        referenced = {n for o in platform.all_objects for n in names_in(o)}
        declared = {v.name for c in platform.concerns for v in c.generated}
        assert referenced == declared, name
        text = yaml.safe_dump_all(list(platform.all_objects))
        assert "AKIA" not in text and "minio123" not in text


def test_rotating_a_tenants_key_is_a_new_generated_name() -> None:
    data = platform_data("staging")
    data["object_store"]["tenant_overrides"]["eval"] = {"credentials_generation": 2}
    config = config_of(data)
    identity = object_store.tenant_identity(config, next(t for t in config.tenants if t.name == "eval"))
    assert identity.access_key.name == "object-store/tenant-eval/g2/access-key"


# ---------------------------------------------------------------------------- provisioning

def job_of(config: PlatformConfig) -> dict[str, Any]:
    return next(o for o in object_store.provisioning_objects(config) if o["kind"] == "Job")


def test_the_provisioning_job_is_renamed_when_what_it_applies_changes_and_only_then() -> None:
    data = platform_data("staging")
    assert job_of(config_of(data))["metadata"]["name"] == job_of(config_of(platform_data("staging")))["metadata"]["name"]
    data["object_store"]["buckets"]["checkpoints"]["expire_after_days"] = 21
    assert job_of(config_of(data))["metadata"]["name"] != job_of(stack("staging").config)["metadata"]["name"]


def test_the_provisioning_job_runs_restricted_with_the_pinned_image_and_no_token() -> None:
    (job,) = rendered("prod").concern("object-store").after_releases
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # By tag in the stack, pinned by the image lock.
    assert container["image"].startswith("registry.trainyard.internal/trainyard/object-store-provisioner:1.0.0@sha256:")
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["envFrom"] == [{"secretRef": {"name": "object-store-admin"}}]


class RefusesLateLock:
    """A fake S3 whose every bucket exists already, created without object lock (MinIO's answer to adding it)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, operation: str) -> Any:
        def call(**kwargs: Any) -> dict[str, Any]:
            self.calls.append(f"{operation} {kwargs['Bucket']}")
            if operation == "put_object_lock_configuration":
                refused = Exception("Object Lock configuration cannot be enabled on existing buckets")
                refused.response = {"Error": {"Code": "InvalidBucketState"}}  # type: ignore[attr-defined]  # as botocore's
                raise refused
            return {}
        return call


def test_a_bucket_that_cannot_get_object_lock_fails_the_job_clearly_after_every_other_step(
        tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from trainyard.provisioning import object_store as program

    plan = {"buckets": [{"name": "a-datasets", "versioning": True, "objectLock": {"mode": "GOVERNANCE", "days": 30},
                         "lifecycle": []},
                        {"name": "a-models", "versioning": True, "objectLock": None, "lifecycle": []}]}
    s3 = RefusesLateLock()
    with pytest.raises(program.ProvisioningError) as failed:
        program.reconcile(plan, {}, s3=s3)
    assert "bucket a-datasets exists without object lock" in str(failed.value)
    assert failed.value.log == ["bucket a-datasets: FAILED", "bucket a-models: versioning enabled"]
    assert "put_bucket_versioning a-models" in s3.calls  # the next bucket is still converged
    # The Job's command: the log, then one line naming what to change, exit 1 and no traceback.
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    monkeypatch.setattr(program, "s3_client", lambda: s3)
    assert program.main(["object_store.py", str(tmp_path / "plan.json"), str(tmp_path / "absent.json")]) == 1
    out = capsys.readouterr()
    assert out.out.splitlines() == ["bucket a-datasets: FAILED", "bucket a-models: versioning enabled"]
    assert out.err.startswith("error: bucket a-datasets exists without object lock") and "Traceback" not in out.err


def test_minio_identities_without_keys_are_named_not_a_key_error() -> None:
    from trainyard.provisioning import object_store as program

    plan = {"buckets": [], "identityApi": "minio-admin",
            "identities": [{"name": "tenant-a", "policy": {}}, {"name": "tenant-b", "policy": {}}]}
    with pytest.raises(program.ProvisioningError, match="no keys for identities tenant-a, tenant-b"):
        program.reconcile(plan, {}, s3=RefusesLateLock())


def test_no_chart_hook_creates_buckets() -> None:
    for name in ("local", "staging", "prod"):
        for release in rendered(name).concern("object-store").releases:
            assert "createBuckets" not in json.dumps(release.values), release.name


# --------------------------------------------------------------------------------- backends

def test_seaweedfs_data_lives_on_a_trainyard_claim_the_chart_only_mounts() -> None:
    concern = rendered("staging").concern("object-store")
    claim = by_id(concern.objects)["PersistentVolumeClaim/object-store/seaweedfs-data"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "4Ti"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    (release,) = concern.releases
    assert release.values["allInOne"]["data"] == {"type": "existingClaim", "claimName": "seaweedfs-data"}
    assert release.values["allInOne"]["s3"]["existingConfigSecret"] == "seaweedfs-s3-identities"
    assert "-master.telemetry=false" in release.values["allInOne"]["extraArgs"]
    assert release.values["global"]["imageRegistry"] == "registry.trainyard.internal"
    assert release.values["global"]["seaweedfs"]["image"]["name"] == "mirror/chrislusf/seaweedfs"


def test_minio_comes_from_the_mirror_with_its_crds_declared_by_trainyard() -> None:
    platform = rendered("prod")
    releases = {r.name: r for r in platform.concern("object-store").releases}
    assert sorted(releases) == ["minio-operator", "minio-tenant"]
    tenant = releases["minio-tenant"].values["tenant"]
    assert tenant["image"]["repository"] == "registry.trainyard.internal/mirror/minio/minio"
    assert tenant["image"]["tag"].startswith("RELEASE.2025-04-08T15-41-24Z")
    assert tenant["configSecret"] == {"name": "minio-root-config", "existingSecret": True}
    assert tenant["pools"][0] | {} == {"name": "pool-0", "servers": 8, "volumesPerServer": 4, "size": "8Ti",
                                       "storageClassName": "local-nvme"}
    assert releases["minio-operator"].values["operator"]["image"]["repository"] == (
        "registry.trainyard.internal/mirror/minio/operator")
    crds = {c["metadata"]["name"] for c in platform.crds}
    assert {"tenants.minio.min.io", "policybindings.sts.min.io"} <= crds


def test_minio_without_a_mirror_is_refused() -> None:
    data = platform_data("prod")
    del data["images"]
    assert any("registry_mirror" in p and "no community images" in p for p in problems_of(data))


def test_external_endpoint_needs_its_networks_and_admin_secret_and_renders_no_server() -> None:
    data = platform_data("staging")
    store = data["object_store"]
    data["object_store"] = {"backend": "external", "provisioner_image": store["provisioner_image"],
                            "external": {"endpoint_url": "https://s3.storage.example.com", "admin_secret": "s3-admin"},
                            "platform_buckets": store["platform_buckets"], "services": store["services"]}
    # MLflow's artifacts and backups follow the object store to its endpoint.
    data["mlflow"]["object_store"]["endpoint_url"] = "https://s3.storage.example.com"
    assert any("security.network.object_store" in p for p in problems_of(data))
    data["security"]["network"]["object_store"] = {"cidrs": ["10.20.0.0/16"], "ports": [443]}
    config = config_of(data)
    assert object_store.endpoint_url(config) == "https://s3.storage.example.com"
    platform = render_platform(config, ROOT)
    concern = platform.concern("object-store")
    assert concern.releases == ()
    assert "NetworkPolicy/object-store/allow-s3" not in by_id(concern.objects)
    (job,) = concern.after_releases
    assert job["spec"]["template"]["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "s3-admin"}}]


# ----------------------------------------------------------------------------------- network

def test_tenants_allow_is_derived_from_the_backend_and_the_store_admits_only_tenants_and_services() -> None:
    objects = by_id(rendered("prod").all_objects)
    allow = objects["NetworkPolicy/assistant/allow-object-store"]["spec"]["egress"][0]
    assert allow["to"][0]["podSelector"] == {"matchLabels": {"v1.min.io/tenant": "trainyard"}}
    assert allow["ports"] == [{"protocol": "TCP", "port": 9000}]
    ingress = objects["NetworkPolicy/object-store/allow-s3"]["spec"]
    assert ingress["podSelector"] == {"matchLabels": {"v1.min.io/tenant": "trainyard"}}
    peers = ingress["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchExpressions": [{"key": "trainyard.dev/tenant", "operator": "Exists"}]}} in peers
    assert ingress["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 9000}]
    assert objects["NetworkPolicy/object-store/default-deny-ingress"]["spec"] == {"podSelector": {},
                                                                                  "policyTypes": ["Ingress"]}


def test_a_hand_written_object_store_allow_must_match_the_server() -> None:
    data = platform_data("staging")
    data["security"]["network"]["object_store"] = {"namespace": "object-store", "pod_labels": {
        "app.kubernetes.io/name": "minio"}, "ports": [9000]}
    assert any("does not match the seaweedfs server" in p for p in problems_of(data))


# --------------------------------------------------------------------------------- services

def test_a_platform_service_gets_the_same_secret_in_its_namespace_limited_to_its_buckets() -> None:
    data = platform_data("staging")
    data["object_store"]["platform_buckets"] = [{"name": "mlflow-artifacts"}, {"name": "mlflow-backups",
                                                                               "expire_after_days": 35}]
    data["object_store"]["services"] = [{"name": "mlflow", "namespace": "mlflow",
                                         "buckets": ["mlflow-artifacts", "mlflow-backups"]}]
    config = config_of(data)
    concern = object_store.service_credentials(config)
    (secret,) = concern.objects
    assert (secret["metadata"]["namespace"], secret["metadata"]["name"]) == ("mlflow", OBJECT_STORE_SECRET)
    identities = {i["name"]: i for i in object_store.seaweedfs_identities(config)["identities"]}
    assert {a.split(":", 1)[1] for a in identities["service-mlflow"]["actions"]} == {"stg-mlflow-artifacts",
                                                                                   "stg-mlflow-backups"}
    buckets = {b["name"]: b for b in object_store.buckets(config)}
    assert buckets["stg-mlflow-backups"]["lifecycle"][0]["Expiration"] == {"Days": 35}


def test_service_identities_are_checked() -> None:
    data = platform_data("staging")
    data["object_store"]["services"] = [{"name": "mlflow", "namespace": "mlflow", "buckets": ["nowhere"]}]
    assert any("'nowhere' is neither a platform bucket nor a tenant bucket" in p for p in problems_of(data))
    data["object_store"]["services"] = [{"name": "a", "namespace": "mlflow", "buckets": ["stg-eval-models"]},
                                        {"name": "b", "namespace": "mlflow", "buckets": ["stg-eval-models"]}]
    assert any("one identity per namespace" in p for p in problems_of(data))
    data["object_store"]["services"] = [{"name": "a", "namespace": "eval", "buckets": ["stg-eval-models"]}]
    assert any("is a tenant namespace" in p for p in problems_of(data))


def test_overrides_must_name_tenants_and_bucket_names_must_fit_s3() -> None:
    data = platform_data("local")
    data["object_store"]["tenant_overrides"]["team-z"] = {}
    assert any("'team-z' is not a tenant" in p for p in problems_of(data))
    data = platform_data("local")
    data["object_store"]["bucket_prefix"] = "a-very-long-prefix-for-every-bucket-of-this-stack-"
    assert any("not a valid S3 bucket name" in p for p in problems_of(data))


# ------------------------------------------------------------------------------ generation

def test_generated_values_have_the_requested_length_and_alphabet_and_differ() -> None:
    first, second = generate(20, "access-key"), generate(20, "access-key")
    assert len(first) == 20 and set(first) <= set(ALPHABETS["access-key"]) and first != second


def test_the_generator_replaces_a_value_only_when_its_shape_changes() -> None:
    provider = GeneratedSecretProvider()
    created = provider.create({"length": 40, "alphabet": "password", "value": None})
    assert len(created.outs["value"]) == 40
    same = provider.diff(created.id, created.outs, {"length": 40, "alphabet": "password", "value": None})
    assert not same.changes
    longer = provider.diff(created.id, created.outs, {"length": 64, "alphabet": "password", "value": None})
    assert longer.changes and longer.replaces == ["length"]


def test_data_holding_children_of_a_chart_are_retained_and_protected() -> None:
    import pulumi

    from trainyard.components.platform import retain_chart_data

    transform = retain_chart_data(protect=True)
    crd = transform(pulumi.ResourceTransformArgs(True, "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
                                                 "tenants.minio.min.io", {}, pulumi.ResourceOptions()))
    assert crd is not None and crd.opts.retain_on_delete is True and crd.opts.protect is True
    deployment = transform(pulumi.ResourceTransformArgs(True, "kubernetes:apps/v1:Deployment", "minio-operator", {},
                                                        pulumi.ResourceOptions()))
    assert deployment is None


def test_the_job_waits_for_the_server_and_the_rehearsal_does_not_wait_for_pods() -> None:
    staging = rendered("staging").concern("object-store")
    assert [o["kind"] for o in staging.after_releases] == ["Job"]
    assert "pulumi.com/skipAwait" not in staging.after_releases[0]["metadata"]["annotations"]
    local = rendered("local").concern("object-store")
    claim = by_id(local.objects)["PersistentVolumeClaim/object-store/seaweedfs-data"]
    assert claim["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    assert local.after_releases[0]["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


def test_chart_secrets_regenerated_on_every_render_are_kept_as_first_created() -> None:
    import pulumi

    from trainyard.components.platform import keep_regenerated_secrets

    (release,) = rendered("staging").concern("object-store").releases
    assert release.regenerated_secrets == ("seaweedfs-sftp-secret",)
    transform = keep_regenerated_secrets(release.regenerated_secrets)
    kept = transform(pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:Secret", "seaweedfs:object-store/x",
                                                  {"metadata": {"name": "seaweedfs-sftp-secret"}}, pulumi.ResourceOptions()))
    assert kept is not None and kept.opts.ignore_changes == ["data", "stringData"]
    other = transform(pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:Secret", "seaweedfs:object-store/y",
                                                   {"metadata": {"name": "seaweedfs-s3-identities"}}, pulumi.ResourceOptions()))
    assert other is None
