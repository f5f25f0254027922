"""The rehearsal's pure parts: configuration overlays, webhook registration, kwok stages, scenarios, TrainJobs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from trainyard import catalog
from trainyard.config import ConfigError, validate_platform
from trainyard.manifests import kueue
from trainyard.manifests.rehearsal import KWOK_NODE_ANNOTATION, fake_nodes
from trainyard.project import open_stack
from trainyard.rehearsal.cluster import ClusterError, Ports, Settings
from trainyard.rehearsal.controllers import (
    WebhookSource,
    conversion_patches,
    kueue_configuration,
    kueue_rehearsal_overlay,
    kueue_webhooks_to_keep,
    local_webhooks,
)
from trainyard.rehearsal.kwok import NEVER_READY_ANNOTATION, RUN_FOR_ANNOTATION, rehearsal_stages
from trainyard.rehearsal.scenario import Job, ScenarioError, load_scenario, seconds
from trainyard.rehearsal.stack import EXTERNAL, merge, read_platform, rehearsal_platform
from trainyard.rehearsal.trainjobs import trainjob_for

SETTINGS = Settings(tools_dir=Path("/tools"), state_dir=Path("/state"), ports=Ports())


def test_kueue_runs_with_the_rendered_configuration_and_only_the_documented_keys_replaced() -> None:
    config = open_stack("prod").config
    rendered = kueue.controller_configuration(config)
    local = kueue_configuration(config, SETTINGS)
    overlay = kueue_rehearsal_overlay(config, SETTINGS)
    assert {k: v for k, v in local.items() if k not in overlay} == {k: v for k, v in rendered.items() if k not in overlay}
    assert local["waitForPodsReady"] == rendered["waitForPodsReady"]
    assert local["webhook"] == {"host": "127.0.0.1", "port": 29443, "certDir": "/state/webhook-certs"}
    assert local["leaderElection"] == {"leaderElect": False}
    assert local["internalCertManagement"] == {"enable": False}
    assert local["featureGates"] == {"VisibilityOnDemand": False}
    assert local["namespace"] == "kueue-system"  # where the chart installs Kueue; MultiKueue reads its Secrets there


def test_webhooks_point_at_loopback_with_the_ca_and_services_are_dropped() -> None:
    rendered = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook-service"}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": "mutating-webhook-configuration"},
         "webhooks": [
             {"name": "mtrainjob.kb.io", "clientConfig": {"service": {"name": "s", "namespace": "n", "path": "/mutate-tj"}}},
             {"name": "mdeployment.kb.io", "clientConfig": {"service": {"name": "s", "namespace": "n", "path": "/m-d"}}},
         ]},
    ]
    (hooks,) = local_webhooks(rendered, WebhookSource("d", "kueue-", ("trainjob",)), 29443, "Q0E=")
    assert hooks["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    assert hooks["metadata"]["labels"] == {"trainyard.dev/rehearsal": "webhooks"}
    assert hooks["webhooks"] == [{"name": "mtrainjob.kb.io",
                                  "clientConfig": {"url": "https://127.0.0.1:29443/mutate-tj", "caBundle": "Q0E="}}]


def test_conversion_webhooks_point_at_convert_on_loopback() -> None:
    crd = {"kind": "CustomResourceDefinition", "metadata": {"name": "workloads.kueue.x-k8s.io"},
           "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {}},
                                                                      "conversionReviewVersions": ["v1"]}}}}
    plain = {"kind": "CustomResourceDefinition", "metadata": {"name": "topologies.kueue.x-k8s.io"}, "spec": {}}
    assert conversion_patches([crd, plain], 29443, "Q0E=") == {"workloads.kueue.x-k8s.io": {
        "strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://127.0.0.1:29443/convert", "caBundle": "Q0E="},
                                           "conversionReviewVersions": ["v1"]}}}


def test_only_the_enabled_integrations_webhooks_are_registered() -> None:
    kept = kueue_webhooks_to_keep(open_stack("local").config)
    assert set(kept) == {"clusterqueue", "cohort", "resourceflavor", "workload", "mjob.", "vjob.", "jobset", "trainjob"}


def test_kwok_stages_delay_completion_by_annotation_and_skip_never_ready_pods() -> None:
    stages = [{"metadata": {"name": n}, "spec": {"selector": {"matchExpressions": []}}}
              for n in ("node-initialize", "pod-ready", "pod-complete", "pod-delete")]
    by_name = {s["metadata"]["name"]: s for s in rehearsal_stages(stages)}
    assert by_name["pod-complete"]["spec"]["delay"]["durationFrom"] == {
        "jq": {"expression": f'.metadata.annotations["{RUN_FOR_ANNOTATION}"]'}}
    assert {"key": f'.metadata.annotations["{NEVER_READY_ANNOTATION}"]', "operator": "DoesNotExist"} in \
        by_name["pod-ready"]["spec"]["selector"]["matchExpressions"]
    with pytest.raises(ValueError, match="pod-complete"):
        rehearsal_stages([s for s in stages if s["metadata"]["name"] != "pod-complete"])


def test_the_rehearsal_overlay_makes_prod_deployable_here_without_touching_its_file() -> None:
    path = ROOT / "stacks" / "Pulumi.prod.yaml"
    before = path.read_text()
    platform = rehearsal_platform(read_platform(path))
    config = validate_platform(platform, "prod (rehearsal)")
    assert path.read_text() == before
    assert config.cluster.context == "trainyard-local"
    assert set(config.rehearsal.external_controllers) == set(EXTERNAL)  # no chart runs without a container runtime
    assert {"kueue", "jobset", "trainer", "seaweedfs", "kserve", "cert-manager"} <= set(EXTERNAL)
    assert all(pool.fake for pool in config.gpu_pools)
    assert config.tenants == open_stack("prod").config.tenants


def test_prod_is_rehearsed_on_56_fake_gpu_nodes_in_its_blocks_and_racks() -> None:
    nodes = fake_nodes(open_stack("prod").config, every_pool=True)
    assert len(nodes) == 56
    assert fake_nodes(open_stack("prod").config) == []  # real pools get no fake nodes unless rehearsing
    h100 = [n for n in nodes if n["metadata"]["labels"]["trainyard.dev/pool"] == "h100"]
    assert len({n["metadata"]["labels"]["network.trainyard.dev/rack"] for n in h100}) == 16
    assert len({n["metadata"]["labels"]["network.trainyard.dev/block"] for n in h100}) == 8
    assert all(n["metadata"]["annotations"] == {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1]} for n in nodes)


def test_scenario_overrides_merge_named_list_items_by_name() -> None:
    base = {"tenants": [{"name": "a", "quotas": [{"flavor": "x", "gpus": 1}]}, {"name": "b"}], "kueue": {"x": 1, "y": 2}}
    merged = merge(base, {"tenants": [{"name": "b", "cohort": "c"}], "kueue": {"y": 3}})
    assert merged == {"tenants": [{"name": "a", "quotas": [{"flavor": "x", "gpus": 1}]}, {"name": "b", "cohort": "c"}],
                      "kueue": {"x": 1, "y": 3}}


def test_a_bad_scenario_override_is_a_stack_error_naming_the_field() -> None:
    platform = rehearsal_platform(read_platform(ROOT / "stacks" / "Pulumi.local.yaml"),
                                  {"kueue": {"wait_for_pods_ready": {"timeout": "soon"}}})
    with pytest.raises(ConfigError) as caught:
        validate_platform(platform, "scenario")
    assert any("kueue.wait_for_pods_ready.timeout" in p.path for p in caught.value.problems)


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_scenario_loads_and_names_real_tenants_pools_and_runtimes(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    for stack_name in scenario.stacks:
        config = validate_platform(rehearsal_platform(read_platform(ROOT / "stacks" / f"Pulumi.{stack_name}.yaml"),
                                                      scenario.platform), stack_name)
        for job in scenario.jobs:
            assert job.tenant in {t.name for t in config.tenants}
            assert job.runtime in config.runtimes.approved
            assert job.flavor is None or job.flavor in {p.name for p in config.gpu_pools}


def test_a_broken_scenario_names_the_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "bad", "description": "d", "stacks": ["local"],
                                   "jobs": [{"name": "j", "tenant": "team-a", "gpus_per_node": -1, "colour": "red"}],
                                   "expect": [{"job": "nope", "admitted": True}]}))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(bad)
    problems = caught.value.problems
    assert caught.value.file == str(bad)
    assert any(p.startswith("jobs[0].gpus_per_node: ") for p in problems), problems
    assert any(p.startswith("jobs[0].colour: unknown field") for p in problems), problems


def test_durations_in_seconds() -> None:
    assert seconds("1m30s") == 90 and seconds("500ms") == 0.5 and seconds("2h") == 7200


def test_a_scenario_trainjob_goes_through_the_tenants_local_queue_with_its_pod_settings_as_a_runtime_patch() -> None:
    config = open_stack("local").config
    job = Job(name="j", tenant="team-a", nodes=2, gpus_per_node=4, flavor="fake-a100", priority="high",
              run_for="30s", never_ready=True)
    trainjob: dict[str, Any] = trainjob_for(config, job)
    assert trainjob["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "default", "trainyard.dev/tenant": "team-a",
                                              "kueue.x-k8s.io/priority-class": "high"}
    assert trainjob["spec"]["trainer"]["numNodes"] == 2
    assert trainjob["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "4"
    (patch,) = trainjob["spec"]["runtimePatches"]
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["metadata"]["annotations"] == {RUN_FOR_ANNOTATION: "30s", NEVER_READY_ANNOTATION: "true"}
    assert pod["spec"]["nodeSelector"] == {"trainyard.dev/pool": "fake-a100"}


def test_a_scenario_trainjob_pins_its_inputs_as_the_stacks_lineage_approves_them() -> None:
    config = open_stack("local").config
    approved = config.lineage.approved_for("team-a")
    dataset, model = approved.datasets[0], approved.base_models[0]
    trainjob = trainjob_for(config, Job(name="j", tenant="team-a", runtime="lora-peft", dataset=dataset.uri, model=model.uri))
    assert trainjob["spec"]["initializer"] == {"dataset": {"storageUri": dataset.uri}, "model": {"storageUri": model.uri}}
    assert trainjob["spec"]["trainer"]["env"] == [
        {"name": "TRAINYARD_DATASET_URI", "value": dataset.uri},
        {"name": "TRAINYARD_DATASET_NAME", "value": dataset.name},
        {"name": "TRAINYARD_DATASET_VERSION", "value": dataset.version},
        {"name": "TRAINYARD_DATASET_DIGEST", "value": dataset.digest},
        {"name": "TRAINYARD_DATASET_LICENCE", "value": dataset.licence},
        {"name": "TRAINYARD_DATASET_CLASSIFICATION", "value": dataset.classification},
        {"name": "TRAINYARD_BASE_MODEL_URI", "value": model.uri},
        {"name": "TRAINYARD_BASE_MODEL_NAME", "value": model.name},
        {"name": "TRAINYARD_BASE_MODEL_REVISION", "value": model.revision}]
    with pytest.raises(ClusterError, match=r"job j: dataset s3://team-b-datasets/x.jsonl is not approved for tenant team-a"):
        trainjob_for(config, Job(name="j", tenant="team-a", dataset="s3://team-b-datasets/x.jsonl"))
    assert "env" not in trainjob_for(config, Job(name="j", tenant="team-b"))["spec"]["trainer"]


def test_a_version_set_not_proven_together_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    platform = {**read_platform(ROOT / "stacks" / "Pulumi.local.yaml"), "versions": {"trainer": "2.3.0"}}
    validate_platform(platform, "local")
    monkeypatch.setattr(catalog, "PROVEN_TOGETHER", frozenset({("0.19.2", "0.12.0", "9.9.9")}))
    with pytest.raises(ConfigError) as caught:
        validate_platform(platform, "local")
    assert any("not proven to work together" in p.reason for p in caught.value.problems)


def test_tools_build_pins_the_versions_the_catalog_proves() -> None:
    script = (ROOT / "tools" / "build.sh").read_text()
    pins = dict(re.findall(r"^(KUEUE|JOBSET|TRAINER)_VERSION=v(\S+)$", script, re.MULTILINE))
    assert (pins["KUEUE"], pins["JOBSET"], pins["TRAINER"]) in catalog.PROVEN_TOGETHER
    assert (pins["KUEUE"], pins["JOBSET"], pins["TRAINER"]) == tuple(catalog.DEFAULT_VERSIONS[c]
                                                                     for c in ("kueue", "jobset", "trainer"))


def test_immutable_fields_are_read_from_the_crds_cel_rules() -> None:
    from tests.conftest import CRDS_DIR
    from trainyard.manifests.lifecycle import immutable_fields

    if CRDS_DIR is None:
        pytest.skip("upstream CRD mirror not found: set TRAINYARD_CRDS_DIR (default ../shared/crds)")
    crd = yaml.safe_load((CRDS_DIR / "kubeflow-trainer" / "v2.3.0" /
                          "trainer.kubeflow.org_clustertrainingruntimes.yaml").read_text())
    assert immutable_fields(crd, "v1alpha1") == (
        "spec.template.spec.failurePolicy", "spec.template.spec.network", "spec.template.spec.replicatedJobs[*].dependsOn",
        "spec.template.spec.startupPolicy", "spec.template.spec.successPolicy", "spec.template.spec.volumeClaimPolicies")
    assert immutable_fields(crd, "v9") == ()


def test_the_tools_build_installs_every_pulumi_plugin_the_program_starts() -> None:
    """The real engine starts the Python language host's executor and, for the generated secrets
    (components/generated.py, a Python dynamic provider), ``pulumi-resource-pulumi-python``: both must be
    in the tools' bin. A merge once dropped the latter; warm tool caches hid it until a cold build."""
    import subprocess

    listed = subprocess.run([str(ROOT / "tools" / "build.sh"), "--list"], capture_output=True, text=True, check=True,
                            timeout=60).stdout
    pulumi = next(line for line in listed.splitlines() if line.startswith("pulumi:")).split()[1:]
    assert {"pulumi", "pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python"} <= set(pulumi)
    generated = (ROOT / "platform" / "trainyard" / "components" / "generated.py").read_text()
    assert "import pulumi.dynamic" in generated


def test_the_cluster_tool_group_holds_every_binary_the_rehearsal_and_the_cluster_tier_start(tmp_path: Path) -> None:
    """CI builds ``tools/build.sh cluster`` first and starts the cluster tier on it (the rest builds beside the
    tier), and the tier checks only that group: a binary the rehearsal starts outside it would be missing there."""
    import subprocess

    from trainyard.rehearsal.cluster import CONTROL_PLANE
    from trainyard.rehearsal.controllers import controllers

    script = (ROOT / "tools" / "build.sh").read_text()
    group = re.search(r"^CLUSTER_TOOLS=\(([^)]*)\)", script, re.M)
    assert group is not None
    listed = subprocess.run([str(ROOT / "tools" / "build.sh"), "--list"], capture_output=True, text=True, check=True,
                            timeout=60).stdout
    binaries = {line.split(":")[0]: set(line.split()[1:]) for line in listed.splitlines()}
    cluster = set().union(*(binaries[t] for t in group.group(1).split()))
    settings = Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path)})
    started = {*CONTROL_PLANE, "kubectl", "kwok", *(c.binary for c in controllers(open_stack("local", ROOT).config, settings)),
               "pulumi", "pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python",
               "pulumi-resource-kubernetes", "crane"}  # crane: the destroy test's registry
    assert started <= cluster, sorted(started - cluster)
    assert not cluster & (binaries["seaweedfs"] | binaries["promtool"] | binaries["kind"])  # built beside the tier
