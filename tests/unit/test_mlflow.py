"""The MLflow concern and the runtime wiring, as the staging stack renders them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.conftest import ROOT, rendered, stack
from trainyard.config.model import PlatformConfig
from trainyard.manifests import generated, render_platform
from trainyard.manifests import mlflow as mlflow_manifests
from trainyard.manifests.lifecycle import holds_data
from trainyard.manifests.meta import MLFLOW_SECRET, OBJECT_STORE_SECRET
from trainyard.manifests.runtimes import containers_of
from trainyard.supply.lock import load_lock

MIRROR = "registry.trainyard.internal/mirror/"
LOCK = load_lock(ROOT / "images.lock.yaml")


def _by(kind: str, name: str, objects: tuple[dict, ...]) -> dict:  # type: ignore[type-arg]
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def test_every_tenant_gets_an_mlflow_secret_whose_password_is_a_generated_placeholder() -> None:
    platform = rendered("staging")
    for tenant in stack("staging").config.tenants:
        secret = _by("Secret", MLFLOW_SECRET, platform.tenant_objects(tenant.name))
        assert secret["stringData"]["MLFLOW_TRACKING_USERNAME"] == tenant.name
        assert secret["stringData"]["MLFLOW_TRACKING_URI"] == "http://mlflow.mlflow.svc:80"
        assert list(generated.names_in(secret["stringData"]["MLFLOW_TRACKING_PASSWORD"])) == [
            f"mlflow/tenants/{tenant.name}/password"]


def test_the_reconciler_and_the_tenant_share_one_generated_password_per_tenant() -> None:
    objects = rendered("staging").concern("mlflow").objects
    users = _by("Secret", "mlflow-tenant-users", objects)["stringData"]
    assert {name: list(generated.names_in(v)) for name, v in users.items()} == {
        t.name: [f"mlflow/tenants/{t.name}/password"] for t in stack("staging").config.tenants}


def test_chart_values_turn_on_basic_auth_proxied_artifacts_and_postgres() -> None:
    release = next(r for r in rendered("staging").releases if r.component == "mlflow")
    values = release.values
    assert (release.chart_name, release.version) == ("mlflow", "1.11.5")
    assert values["auth"]["enabled"] is True and values["auth"]["defaultPermission"] == "NO_PERMISSIONS"
    assert values["auth"]["existingAdminSecret"]["name"] == "mlflow-admin"
    assert values["artifactRoot"]["proxiedArtifactStorage"] is True
    assert values["artifactRoot"]["s3"]["existingSecret"]["name"] == OBJECT_STORE_SECRET
    assert values["backendStore"]["postgres"]["host"] == "mlflow-db-rw"
    # The staging stack pulls from its mirror, at the pinned tag and the lock's digest: the server through the
    # chart's image.digest (its tag stays the MLFLOW_VERSION the chart passes), the init images through their tag.
    server = f"{MIRROR}burakince/mlflow:3.15.1"
    assert values["image"] == {"repository": f"{MIRROR}burakince/mlflow", "tag": "3.15.1",
                               "digest": LOCK.entries[server].digest, "pullPolicy": "IfNotPresent"}
    busybox = f"{MIRROR}library/busybox:1.38.0"
    assert values["initImages"]["dbchecker"]["tag"] == f"1.38.0@{LOCK.entries[busybox].digest}"
    assert values["initImages"]["mlflowDbMigration"]["tag"] == f"3.15.1@{LOCK.entries[server].digest}"
    assert values["extraContainers"][0]["image"] == f"{server}@{LOCK.entries[server].digest}"
    cnpg = rendered("staging").concern("postgres-operator").releases[0]
    assert (cnpg.chart_name, cnpg.version, cnpg.values["crds"]) == ("cloudnative-pg", "0.29.0", {"create": False})
    operator = f"{MIRROR}cloudnative-pg/cloudnative-pg:1.30.0"
    assert cnpg.values["image"]["tag"] == f"1.30.0@{LOCK.entries[operator].digest}"


def test_the_postgresql_operand_is_pinned_by_the_locks_digest_and_keeps_its_major_version_tag() -> None:
    cluster = _by("Cluster", "mlflow-db", rendered("staging").concern("mlflow").objects)
    operand = f"{MIRROR}cloudnative-pg/postgresql:18.4-system-trixie"
    assert cluster["spec"]["imageName"] == f"{operand}@{LOCK.entries[operand].digest}"
    # Without a lock entry the operand renders by tag (images verify reports it), never with another digest.
    unlocked = mlflow_manifests.postgres_cluster(stack("staging").config)
    assert unlocked["spec"]["imageName"] == operand


def test_postgres_cluster_backs_up_through_the_barman_cloud_plugin_and_is_retained() -> None:
    objects = rendered("staging").concern("mlflow").objects
    cluster = _by("Cluster", "mlflow-db", objects)
    assert cluster["spec"]["plugins"] == [{"name": "barman-cloud.cloudnative-pg.io", "isWALArchiver": True,
                                           "parameters": {"barmanObjectName": "mlflow-backups"}}]
    assert "backup" not in cluster["spec"]  # the in-tree barmanObjectStore is removed in CNPG 1.31
    assert holds_data(cluster) and holds_data(_by("Database", "mlflow-auth", objects))
    backup = _by("ScheduledBackup", "mlflow-db-base-backup", objects)
    assert backup["spec"]["method"] == "plugin" and len(backup["spec"]["schedule"].split()) == 6
    store = _by("ObjectStore", "mlflow-backups", objects)
    assert store["spec"]["configuration"]["s3Credentials"]["secretAccessKey"] == {
        "name": OBJECT_STORE_SECRET, "key": "AWS_SECRET_ACCESS_KEY"}


def test_mlflow_admits_only_tenant_namespaces_and_postgres_only_mlflow() -> None:
    objects = rendered("staging").concern("mlflow").objects
    tenants = sorted(t.namespace_name for t in stack("staging").config.tenants)
    mlflow_policy = _by("NetworkPolicy", "allow-mlflow-from-tenants", objects)
    [rule] = mlflow_policy["spec"]["ingress"]
    assert rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == tenants
    assert rule["ports"] == [{"protocol": "TCP", "port": 5000}]
    db_policy = _by("NetworkPolicy", "allow-postgres-from-mlflow", objects)
    assert db_policy["spec"]["ingress"][0]["from"] == [{"podSelector": mlflow_policy["spec"]["podSelector"]}]
    # The operator reaches the status port of every Cluster's instances (mlflow-db's and a restored one's), nothing else.
    operator = _by("NetworkPolicy", "allow-cnpg-operator", objects)
    assert operator["spec"]["podSelector"] == {"matchExpressions": [{"key": "cnpg.io/cluster", "operator": "Exists"}]}
    assert operator["spec"]["ingress"] == [{"from": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "cnpg-system"}}}], "ports": [{"protocol": "TCP", "port": 8000}]}]


def test_runtimes_read_the_tenant_secrets_and_name_their_checkpoint_location() -> None:
    for runtime in rendered("staging").by_kind("ClusterTrainingRuntime"):
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            for container in job["template"]["spec"]["template"]["spec"]["containers"]:
                refs = [next(iter(s.values()))["name"] for s in container["envFrom"]]
                assert refs[:3] == [OBJECT_STORE_SECRET, "trainyard-buckets", MLFLOW_SECRET]
                env = {e["name"]: e for e in container["env"]}
                assert env["TRAINYARD_CHECKPOINT_URI"]["value"] == "s3://$(TRAINYARD_CHECKPOINTS_BUCKET)/$(TRAIN_JOB_NAME)/"
                assert env["TRAIN_JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == (
                    "metadata.labels['jobset.sigs.k8s.io/jobset-name']")
                # MLflow's client bounded (its defaults: 120 s per request, 7 retries).
                assert env["MLFLOW_HTTP_REQUEST_TIMEOUT"] == {"name": "MLFLOW_HTTP_REQUEST_TIMEOUT", "value": "30"}
                assert env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]["value"] == "3"


def test_the_mlflow_client_bounds_come_from_the_stack_and_only_with_mlflow() -> None:
    raw = stack("staging").config.model_dump(mode="json", exclude_none=True)
    raw["mlflow"] |= {"client_timeout_seconds": 10, "client_max_retries": 0}
    config = PlatformConfig.model_validate(raw)
    runtimes = render_platform(config, ROOT, ROOT / "stacks").by_kind("ClusterTrainingRuntime")
    assert runtimes
    for runtime in runtimes:
        for _, container in containers_of(runtime):
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert (env["MLFLOW_HTTP_REQUEST_TIMEOUT"], env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]) == ("10", "0")
    # The local stack has no MLflow of its own: its runtimes carry no MLflow settings.
    assert not stack("local").config.mlflow.enabled
    for runtime in rendered("local").by_kind("ClusterTrainingRuntime"):
        for _, container in containers_of(runtime):
            assert not {e["name"] for e in container.get("env") or []} & {"MLFLOW_HTTP_REQUEST_TIMEOUT",
                                                                          "MLFLOW_HTTP_REQUEST_MAX_RETRIES"}


def test_initializer_steps_get_s3_settings_from_the_secret_and_share_the_workspace_volume() -> None:
    runtime = next(r for r in rendered("staging").by_kind("ClusterTrainingRuntime") if r["metadata"]["name"] == "lora-finetune")
    jobs = {j["name"]: j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    assert set(jobs) == {"dataset-initializer", "model-initializer", "node"}
    for step in ("dataset-initializer", "model-initializer"):
        [container] = jobs[step]["template"]["spec"]["template"]["spec"]["containers"]
        assert container["name"] == step
        env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})}
        assert env["SECRET_ACCESS_KEY"] == {"name": OBJECT_STORE_SECRET, "key": "AWS_SECRET_ACCESS_KEY"}
        assert {"name": "initializer", "mountPath": "/workspace"} in container["volumeMounts"]
    assert [d["name"] for d in jobs["node"]["dependsOn"]] == ["dataset-initializer", "model-initializer"]


def _with_mlflow_network(**changes: object) -> dict:  # type: ignore[type-arg]
    raw = stack("staging").config.model_dump(mode="json", exclude_none=True)
    raw["security"]["network"]["mlflow"].update(changes)
    return raw


@pytest.mark.parametrize(("changes", "reason"), [
    ({"namespace": "tracking"}, "MLflow runs in namespace 'mlflow'"),
    ({"ports": [80]}, "listen on 5000 only"),
    ({"pod_labels": {"app.kubernetes.io/name": "mlflow-server"}}, "do not carry"),
])
def test_the_tenant_allow_to_mlflow_must_match_the_deployed_server(changes: dict, reason: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValidationError, match=reason):
        PlatformConfig.model_validate(_with_mlflow_network(**changes))


def test_tracking_uri_and_allowed_hosts_name_the_chart_service() -> None:
    config = stack("staging").config.mlflow
    assert mlflow_manifests.tracking_uri(config).removeprefix("http://") in mlflow_manifests.allowed_hosts(config)
