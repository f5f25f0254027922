"""The data cache: off unless asked for, refused where it cannot work, and what it declares when on."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, rendered, stack
from tests.unit.test_config_errors import problems_of
from trainyard.cli import main
from trainyard.config import validate_platform
from trainyard.config.data_cache import CACHE_RUNTIME
from trainyard.manifests import data_cache
from trainyard.manifests.meta import OBJECT_STORE_SECRET
from trainyard.manifests.tenants import PSA_LABELS

FIXTURE = ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.data-cache.yaml"


def fixture_platform() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(FIXTURE.read_text())["config"]["trainyard:platform"]
    return copy.deepcopy(data)


def test_the_main_stacks_leave_the_cache_off_and_declare_none_of_it() -> None:
    for name in ("local", "staging", "prod"):
        assert stack(name).config.data_cache.enabled is False
        platform = rendered(name)
        assert platform.concern("data-cache").all_objects == ()
        assert not [c for c in platform.crds if c["spec"]["group"] == "leaderworkerset.x-k8s.io"]
        trainer = next(r for r in platform.releases if r.name == "trainer")
        assert "dataCache" not in trainer.values and "lws" not in trainer.values


@pytest.mark.parametrize(("edit", "path", "reason"), [
    (lambda d: d["data_cache"].pop("credentials"), "data_cache.credentials",
     "the cache pods need object-store credentials"),
    (lambda d: d["data_cache"].pop("api_server"), "data_cache.api_server", "calls the kube-apiserver"),
    (lambda d: d["data_cache"]["credentials"].update(mode="web-identity"), "data_cache.credentials.tenant_roles",
     "needs a role ARN for every tenant; missing: llm-pretrain, assistant, eval"),
    (lambda d: d["data_cache"]["credentials"].update(
        mode="web-identity", tenant_roles={"nobody": "arn:aws:iam::123456789012:role/x"}),
     "data_cache.credentials.tenant_roles.nobody", "is not a tenant of this stack"),
    (lambda d: d["data_cache"]["credentials"].update(
        mode="web-identity", tenant_roles={"eval": "role/eval"}),
     "data_cache.credentials.tenant_roles.eval", "is not an IAM role ARN"),
    (lambda d: (d.pop("object_store"), d["security"]["network"].pop("object_store", None), d.pop("serving"),
                d["mlflow"].update(enabled=False)), "data_cache.credentials.mode",
     "only a stack with an object store delivers"),
    (lambda d: d["runtimes"]["approved"].remove(CACHE_RUNTIME), "runtimes.approved", "list it here"),
    (lambda d: d["data_cache"].update(enabled=False), "runtimes.approved[3]", "needs the data cache"),
])
def test_a_cache_that_cannot_work_is_refused_with_the_field_and_the_reason(edit: Any, path: str, reason: str) -> None:
    data = fixture_platform()
    edit(data)
    problems = problems_of(data)
    assert any(p.startswith(f"trainyard:platform.{path}: ") and reason in p for p in problems), problems


def test_validate_prints_the_field_error_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = FIXTURE.read_text().replace("      credentials:\n        mode: tenant-secret\n", "", 1)
    broken = tmp_path / "Pulumi.no-credentials.yaml"
    broken.write_text(text)
    assert main(["validate", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "data_cache.credentials: the cache pods need object-store credentials" in err


def test_web_identity_gives_each_tenant_its_own_role_and_no_secret_to_the_cache_pods() -> None:
    data = fixture_platform()
    roles = {t["name"]: f"arn:aws:iam::123456789012:role/cache-{t['name']}" for t in data["tenants"]}
    data["data_cache"]["credentials"] = {"mode": "web-identity", "tenant_roles": roles}
    config = validate_platform(data, "x.yaml")
    for tenant in config.tenants:
        (configmap,) = [o for o in data_cache.tenant_objects(config, tenant) if o["kind"] == "ConfigMap"]
        assert configmap["data"] == {"IAM_ROLE": roles[tenant.name]}
    policy, _ = data_cache.pod_policy(config, "registry.example.com/data-cache:v2.3.0")
    assert OBJECT_STORE_SECRET not in policy["spec"]["mutations"][0]["jsonPatch"]["expression"]


def test_every_tenant_gets_the_initializer_account_its_rbac_settings_and_api_path() -> None:
    platform, config = rendered(str(FIXTURE)), stack(str(FIXTURE)).config
    for tenant in config.tenants:
        objects = {(o["kind"], o["metadata"]["name"]): o for o in platform.concern("data-cache").tenant_objects[tenant.name]}
        account = objects[("ServiceAccount", data_cache.INITIALIZER_ACCOUNT)]
        assert account["automountServiceAccountToken"] is True
        binding = objects[("RoleBinding", data_cache.INITIALIZER_ACCOUNT)]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                      "name": data_cache.CHART_CLUSTER_ROLE}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": data_cache.INITIALIZER_ACCOUNT,
                                        "namespace": tenant.namespace_name}]
        assert objects[("Role", data_cache.TRAINJOB_READER)]["rules"] == [
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get"]}]
        assert objects[("ConfigMap", data_cache.CONFIGMAP)]["data"] == {"IAM_ROLE": ""}
        path = objects[("NetworkPolicy", data_cache.API_SERVER_POLICY)]["spec"]
        assert path["podSelector"] == {"matchLabels": {data_cache.INITIALIZER_LABEL: "true"}}
        assert path["egress"] == [{"to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}], "ports": [{"protocol": "TCP", "port": 443}]}]


def test_the_cache_runtime_is_wired_with_the_pinned_cache_image_and_the_stacks_cluster_size() -> None:
    runtime = next(o for o in rendered(str(FIXTURE)).by_kind("ClusterTrainingRuntime")
                   if o["metadata"]["name"] == CACHE_RUNTIME)
    (initializer,) = [j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == "dataset-initializer"]
    pod = initializer["template"]["spec"]["template"]
    assert pod["metadata"]["labels"] == {data_cache.INITIALIZER_LABEL: "true"}
    assert pod["spec"]["serviceAccountName"] == data_cache.INITIALIZER_ACCOUNT
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CACHE_IMAGE"].startswith("registry.trainyard.internal/kubeflow/trainer/data-cache:v2.3.0@sha256:")
    assert {k: env[k] for k in ("CLUSTER_SIZE", "HEAD_CPU", "HEAD_MEM", "WORKER_CPU", "WORKER_MEM")} == {
        "CLUSTER_SIZE": "3", "HEAD_CPU": "1", "HEAD_MEM": "1Gi", "WORKER_CPU": "2", "WORKER_MEM": "16Gi"}
    assert container["envFrom"][-1] == {"configMapRef": {"name": data_cache.CONFIGMAP}}


def test_the_pod_policy_matches_only_the_cache_image_the_runtime_passes_in_tenant_namespaces() -> None:
    platform = rendered(str(FIXTURE))
    policy, binding = platform.concern("data-cache").objects
    runtime = next(o for o in platform.by_kind("ClusterTrainingRuntime") if o["metadata"]["name"] == CACHE_RUNTIME)
    (image,) = data_cache.runtime_image_env(runtime)
    conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
    assert f"object.spec.containers[0].image == '{image}'" in conditions["one-data-cache-container"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "trainyard.dev/tenant", "operator": "Exists"}]}
    # Tenant namespaces stay restricted: the policy makes the cache pods fit, it grants no exception.
    for tenant in stack(str(FIXTURE)).config.tenants:
        namespace = next(o for o in platform.tenant_objects(tenant.name) if o["kind"] == "Namespace")
        assert PSA_LABELS.items() <= namespace["metadata"]["labels"].items()


def test_trainer_values_enable_the_cache_and_pin_the_lws_subchart_image() -> None:
    trainer = next(r for r in rendered(str(FIXTURE)).releases if r.name == "trainer")
    assert trainer.values["dataCache"] == {"enabled": True}
    manager = trainer.values["lws"]["image"]["manager"]
    assert manager["repository"] == "registry.trainyard.internal/mirror/lws/lws"
    assert manager["tag"].startswith("v0.8.0@sha256:") and manager["pullPolicy"] == "IfNotPresent"


def test_the_lws_crd_comes_from_the_chart_mirror_verified_by_its_blob_sha(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from trainyard.manifests.crds import CrdUnavailable, load_crds

    config = stack(str(FIXTURE)).config
    (crd,) = load_crds(config, [("lws", "0.8.0")])
    assert crd["metadata"]["name"] == "leaderworkersets.leaderworkerset.x-k8s.io"
    edited = tmp_path / "lws" / "v0.8.0" / "crds"
    edited.mkdir(parents=True)
    source = ROOT.parent / "shared" / "charts" / "lws" / "v0.8.0" / "crds" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
    if not source.is_file():
        pytest.skip("chart mirror not found at ../shared/charts")
    (edited / source.name).write_bytes(source.read_bytes() + b"\n# edited\n")
    monkeypatch.setenv("TRAINYARD_CHARTS_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAINYARD_CRDS_DIR", raising=False)
    with pytest.raises(CrdUnavailable, match=r"does not match upstream v0\.8\.0:charts/lws/crds/"):
        # The chart mirror is consulted before the network; the edited copy is refused, never fetched around.
        load_crds(config, [("lws", "0.8.0")])
