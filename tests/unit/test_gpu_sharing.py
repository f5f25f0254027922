"""GPU sharing counted by Kueue: slices and replicas in the units the device plugin advertises."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, rendered, stack
from tests.unit.test_config_errors import problems_of
from trainyard.cli import main
from trainyard.config.gpu_pools import advertised_resources

SHARING_FILE = ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.gpu-sharing.yaml"
SHARING = str(SHARING_FILE)


def sharing_platform() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SHARING_FILE.read_text())["config"]["trainyard:platform"]
    return copy.deepcopy(data)


def test_capacity_follows_the_layout_eight_h200_times_seven_slices_is_56() -> None:
    pools = {p.name: p for p in stack(SHARING).config.gpu_pools}
    assert advertised_resources(pools["h200-mig"]) == {"nvidia.com/mig-1g.18gb": 56}
    assert advertised_resources(pools["h100-mixed"]) == {
        "nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8}
    assert advertised_resources(pools["l40s-shared"]) == {"nvidia.com/gpu.shared": 64}
    assert advertised_resources(pools["h100"]) == {"nvidia.com/gpu": 32}


def test_cluster_queue_covers_slices_and_replicas_with_zero_where_a_flavor_has_none() -> None:
    queue = next(o for o in rendered(SHARING).by_kind("ClusterQueue") if o["metadata"]["name"] == "notebooks")
    group, budget = queue["spec"]["resourceGroups"]
    assert budget == {"coveredResources": ["trainyard.dev/mig-slices"], "flavors": [
        {"name": "mig-slices", "resources": [{"name": "trainyard.dev/mig-slices", "nominalQuota": "40"}]}]}
    assert group["coveredResources"] == ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.18gb",
                                         "cpu", "memory"]
    flavors = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}
    assert flavors["h200-mig"]["nvidia.com/mig-1g.18gb"] == {"name": "nvidia.com/mig-1g.18gb", "nominalQuota": "40",
                                                             "borrowingLimit": "16"}
    assert flavors["h200-mig"]["nvidia.com/gpu.shared"]["nominalQuota"] == "0"
    assert flavors["l40s-shared"]["nvidia.com/gpu.shared"] == {"name": "nvidia.com/gpu.shared", "nominalQuota": "48",
                                                               "lendingLimit": "16"}
    # CPU and memory follow the GPU equivalent: 48 replicas of 4 = 12 L40S = 3 nodes of 64 CPUs.
    assert flavors["l40s-shared"]["cpu"]["nominalQuota"] == "192"
    # 40 slices of 1/7 GPU on an 8-GPU node of 192 CPUs: 137.142..., rounded down to the milli-CPU.
    assert flavors["h200-mig"]["cpu"]["nominalQuota"] == "137142m"
    for flavor in group["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]


def test_whole_gpu_stacks_render_their_queues_as_before() -> None:
    queue = next(o for o in rendered("prod").by_kind("ClusterQueue") if o["metadata"]["name"] == "assistant")
    assert queue["spec"]["resourceGroups"][0]["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]


def test_a_slice_quota_over_the_layout_is_refused_by_field_path() -> None:
    data = sharing_platform()
    data["tenants"][2]["quotas"][1]["shared"][0]["nominal"] = 17  # 40 + 17 > 56
    (problem,) = problems_of(data)
    assert problem.startswith("trainyard:platform.tenants[2].quotas[1].shared[0].nominal: ")
    assert "nvidia.com/mig-1g.18gb on flavor 'h200-mig' add up to 57" in problem
    assert "the pool advertises 56 (1 nodes x 56)" in problem


def test_a_resource_the_pool_does_not_advertise_is_refused() -> None:
    data = sharing_platform()
    data["tenants"][1]["quotas"][0]["shared"][0]["resource"] = "nvidia.com/mig-1g.10gb"
    (problem,) = problems_of(data)
    assert problem.startswith("trainyard:platform.tenants[1].quotas[0].shared[0].resource: ")
    assert "it offers: nvidia.com/mig-1g.18gb" in problem


def test_whole_gpus_on_a_fully_partitioned_pool_are_refused() -> None:
    data = sharing_platform()
    data["tenants"][1]["quotas"][0]["gpus"] = 1
    (problem,) = problems_of(data)
    assert "gpu_pools[1]" in problem and "add up to 1, but the pool has 0 GPUs" in problem


@pytest.mark.parametrize(("layout", "reason"), [
    ([{"devices": "all", "slices": {"1g.10gb": 7}}], "1g.10gb is not a MIG profile of H200"),
    ([{"devices": "all", "slices": {"3g.71gb": 2, "1g.18gb": 2}}], "needs 8/7 compute"),
    ([{"devices": [0, 1, 2, 3], "slices": {"1g.18gb": 7}}], "GPUs [4, 5, 6, 7] have no layout"),
    ([{"devices": "all", "slices": {"1g.18gb": 7}}, {"devices": [3], "slices": {}}], "GPUs [3] are in two layout groups"),
])
def test_mig_layouts_that_do_not_fit_the_gpu_are_refused(layout: list[dict[str, Any]], reason: str) -> None:
    data = sharing_platform()
    data["gpu_pools"][1]["mig"]["layout"] = layout
    problems = problems_of(data)
    assert any(p.startswith("trainyard:platform.gpu_pools[1]") and reason in p for p in problems), problems


def test_sharing_without_the_operator_is_refused() -> None:
    data = sharing_platform()
    del data["gpu_operator"]
    problems = problems_of(data)
    assert any(p.startswith("trainyard:platform.gpu_pools[1].mig: ") for p in problems), problems


def test_a_tenant_cannot_live_in_the_privileged_operator_namespace() -> None:
    data = sharing_platform()
    data["tenants"][0]["namespace"] = "gpu-operator"
    (problem,) = problems_of(data)
    assert problem.startswith("trainyard:platform.tenants[0].namespace: ")


def test_capacity_shows_slices_next_to_whole_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity", SHARING]) == 0
    out = capsys.readouterr().out
    assert "| h200-mig | NVIDIA-H200 | 1 x 8 | 8 (0 whole) | 0 | 0 | - | mig-mixed |" in out
    assert "| h200-mig | mig-mixed | nvidia.com/mig-1g.18gb | 8 | 56 | 1/7 | 56 | 0 | 100% |" in out
    assert "| l40s-shared | time-sliced x4 | nvidia.com/gpu.shared | 16 | 64 | 1/4 | 64 | 0 | 100% |" in out
    assert "| h200-mig | nvidia.com/mig-1g.18gb | notebooks | org | 40 | 16 | unlimited | 56 |" in out
    assert "## MIG slice budget (trainyard.dev/mig-slices): 92 of 112 compute slices committed (16 MIG GPUs x 7)" in out


def test_slice_budget_counts_each_mig_instance_as_its_compute_slices() -> None:
    from trainyard.manifests.kueue import controller_configuration

    transformations = controller_configuration(stack(SHARING).config)["resources"]["transformations"]
    assert {t["input"]: t["outputs"]["trainyard.dev/mig-slices"] for t in transformations} == {
        "nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-1g.18gb": "1", "nvidia.com/mig-2g.20gb": "2",
        "nvidia.com/mig-3g.40gb": "3"}
    assert {t["strategy"] for t in transformations} == {"Retain"}  # the per-profile quotas still apply
    flavor = next(o for o in rendered(SHARING).by_kind("ResourceFlavor") if o["metadata"]["name"] == "mig-slices")
    assert flavor["spec"] == {}
    assert "resources" not in controller_configuration(stack("prod").config)


def test_slice_budgets_over_the_mig_gpus_are_refused_by_field_path() -> None:
    data = sharing_platform()
    data["tenants"][2]["mig_slices"] = 49  # 24 + 40 + 49 > 112 = (8 + 8) MIG GPUs x 7
    (problem,) = problems_of(data)
    assert problem.startswith("trainyard:platform.tenants[2].mig_slices: ")
    assert "add up to 113 with this one, but the MIG pools have 112 compute slices (16 MIG GPUs x 7)" in problem


def test_a_tenant_with_mig_quota_needs_a_budget_when_the_budget_is_on() -> None:
    data = sharing_platform()
    del data["tenants"][1]["mig_slices"]
    (problem,) = problems_of(data)
    assert problem.startswith("trainyard:platform.tenants[1].mig_slices: ")


def test_monitoring_needs_its_prometheus_namespace_admitted_to_the_metrics_port() -> None:
    data = sharing_platform()
    data["security"]["network"]["metrics_from"] = []
    (problem,) = problems_of(data)
    assert problem.startswith("trainyard:platform.monitoring.prometheus.namespace: ")
    assert "security.network.metrics_from" in problem
