"""CPU pools: a flavor without GPUs, for CPU-only jobs; tenants' quotas on it name CPU and memory.

The local stack has one (``cpu``: the rehearsal's real node serves it with ``make up``). What is held here: the
flavor and the tenants' ClusterQueues as Kueue reads them (the CPU flavor first, zero GPUs on it), the stack
errors a platform team meets writing one (file, field path, reason), the fake node and the real node's labels, the
ResourceQuota ceiling, the capacity report, and the flavors the TrainJob resources policy checks against.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import ROOT, stack
from tests.unit.test_config_errors import local_platform, problems_of
from trainyard.config import validate_platform
from trainyard.manifests import kueue
from trainyard.manifests.rehearsal import fake_nodes, pool_node_labels
from trainyard.manifests.tenants import resource_quota_for
from trainyard.manifests.trainjob_resources import tenant_flavors
from trainyard.rehearsal.stack import InCluster, read_platform, real_node_pool, rehearsal_platform
from trainyard.review.capacity import capacity_json, format_capacity


def _objects(config: Any, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in kueue.build(config).all_objects if o["kind"] == kind}


def test_a_cpu_pool_is_a_flavor_of_its_labels_and_the_topology_without_a_gpu_product() -> None:
    flavor = _objects(stack("local").config, "ResourceFlavor")["cpu"]
    assert flavor["spec"] == {"nodeLabels": {"trainyard.dev/pool": "cpu"}, "topologyName": "default"}
    assert flavor["metadata"]["labels"]["trainyard.dev/pool-kind"] == "cpu"
    assert "trainyard.dev/gpu-product" not in flavor["metadata"]["labels"]


def test_the_cluster_queue_offers_the_cpu_flavor_first_with_no_gpus_and_the_tenants_cpu_and_memory() -> None:
    queue = _objects(stack("local").config, "ClusterQueue")["team-a"]
    (group,) = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
    # Kueue tries the flavors in this order: a CPU-only job fits the CPU flavor first; a GPU job cannot (zero GPUs).
    assert [f["name"] for f in group["flavors"]] == ["cpu", "fake-a100", "fake-l4"]
    assert group["flavors"][0]["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": "0"},
                                                {"name": "cpu", "nominalQuota": "1"},
                                                {"name": "memory", "nominalQuota": "6Gi"}]
    # The GPU flavors are what they were: CPU and memory follow the GPU share of a node.
    a100 = {r["name"]: r for r in group["flavors"][1]["resources"]}
    assert a100["nvidia.com/gpu"]["nominalQuota"] == "8" and a100["cpu"]["nominalQuota"] == "64"


def test_the_quota_is_written_as_kueue_writes_it_back() -> None:
    platform = local_platform()
    platform["tenants"][0]["quotas"][2].update(cpu="500m", memory="6144Mi")
    queue = _objects(validate_platform(platform, "x.yaml"), "ClusterQueue")["team-a"]
    cpu = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert [r["nominalQuota"] for r in cpu] == ["0", "500m", "6Gi"]


@pytest.mark.parametrize(("change", "path", "reason"), [
    (lambda p: p["tenants"][0]["quotas"][2].update(gpus=1), "tenants[0].quotas[2].gpus", "is a CPU pool"),
    (lambda p: p["tenants"][0]["quotas"][2].pop("cpu"), "tenants[0].quotas[2].cpu", "give the nominal cpu"),
    (lambda p: p["tenants"][1]["quotas"][2].pop("memory"), "tenants[1].quotas[2].memory", "give the nominal memory"),
    (lambda p: p["tenants"][0]["quotas"][2].update(borrowing_limit=1), "tenants[0].quotas[2].borrowing_limit",
     "count GPUs"),
    (lambda p: p["tenants"][0]["quotas"][2].update(shared=[{"resource": "nvidia.com/mig-1g.10gb", "nominal": 1}]),
     "tenants[0].quotas[2].shared", "is a CPU pool"),
    (lambda p: p["tenants"][1]["quotas"][1].pop("gpus"), "tenants[1].quotas[1].gpus", "is a GPU pool"),
    (lambda p: p["cpu_pools"][0].update(name="fake-l4"), "cpu_pools[0].name", "also a GPU pool"),
    (lambda p: p["tenants"][1]["quotas"][2].update(cpu="2"), "cpu_pools[0]",
     "nominal cpu quotas on flavor 'cpu' add up to 3, but the pool has 2 (1 nodes x 2)"),
    (lambda p: p["tenants"][1]["quotas"][2].update(memory="11Gi"), "cpu_pools[0]",
     "nominal memory quotas on flavor 'cpu' add up to 17Gi, but the pool has 16Gi"),
    (lambda p: p["cpu_pools"][0].update(topology_labels=["topology.trainyard.dev/block"]), "topology.levels[1].node_label",
     "not carried by CPU pool 'cpu'"),
    (lambda p: p["cpu_pools"][0].update(node_labels={}), "cpu_pools[0]", "node_labels must select"),
    (lambda p: p["cpu_pools"][0].update(gpus_per_node=1), "cpu_pools[0].gpus_per_node", "unknown field"),
])
def test_a_wrong_cpu_pool_or_quota_names_its_field(change: Any, path: str, reason: str) -> None:
    platform = local_platform()
    change(platform)
    problems = problems_of(platform)
    assert any(p.startswith(f"trainyard:platform.{path}:") and reason in p for p in problems), problems


def test_allow_overcommit_lets_cpu_quotas_exceed_the_pool() -> None:
    platform = local_platform()
    platform["tenants"][1]["quotas"][2].update(cpu="8")
    platform["allow_overcommit"] = True
    validate_platform(platform, "x.yaml")


def test_a_stack_without_cpu_pools_is_unchanged() -> None:
    platform = local_platform()
    platform.pop("cpu_pools")
    for tenant in platform["tenants"]:
        tenant["quotas"] = [q for q in tenant["quotas"] if q["flavor"] != "cpu"]
    config = validate_platform(platform, "x.yaml")
    assert config.cpu_pools == () and [p.name for p in config.pools] == ["fake-a100", "fake-l4"]
    assert "cpu" not in _objects(config, "ResourceFlavor")
    assert "CPU pools" not in format_capacity(config) and capacity_json("x", config)["cpu_flavors"] == []


def test_the_fake_cpu_node_has_the_pools_cpu_memory_and_topology_and_no_gpu() -> None:
    config = stack("local").config
    nodes = {n["metadata"]["name"]: n for n in fake_nodes(config)}
    node = nodes["cpu-0"]
    labels = node["metadata"]["labels"]
    assert labels["trainyard.dev/pool"] == "cpu" and labels["kubernetes.io/hostname"] == "cpu-0"
    assert labels["topology.trainyard.dev/block"] == "cpu-block-0" and labels["topology.trainyard.dev/rack"] == "cpu-rack-0"
    assert not any(key.startswith("nvidia.com/") for key in labels)
    assert node["status"]["capacity"] == {"cpu": "2", "memory": "16Gi", "pods": "110"}
    assert node["spec"]["taints"] == []
    # With real nodes, node-0 is the pool's first node: no fake node for it, and the real node gets these labels.
    assert "cpu-0" not in {n["metadata"]["name"] for n in fake_nodes(config, every_pool=True, real={"cpu": 1})}
    assert pool_node_labels(config.pool("cpu"), 0) == {k: v for k, v in labels.items()
                                                       if k not in {"kubernetes.io/hostname", "app.kubernetes.io/managed-by",
                                                                    "app.kubernetes.io/part-of"}}


def test_the_real_node_serves_the_first_cpu_pool_only_with_real_nodes() -> None:
    platform = read_platform(ROOT / "stacks" / "Pulumi.local.yaml")
    kwok_only = validate_platform(rehearsal_platform(platform), "x.yaml")
    assert kwok_only.cpu_pools[0].fake and real_node_pool(kwok_only) is None
    in_cluster = InCluster(("kueue",), ROOT / "images.lock.yaml", "127.0.0.1:5000")
    real = validate_platform(rehearsal_platform(copy.deepcopy(platform), in_cluster=in_cluster), "x.yaml")
    assert not real.cpu_pools[0].fake and real_node_pool(real) == "cpu"
    assert all(pool.fake for pool in real.gpu_pools)


def test_the_resource_quota_ceiling_counts_the_cpu_pool() -> None:
    platform = local_platform()
    config = validate_platform(platform, "x.yaml")
    with_cpu = resource_quota_for(config, config.tenants[1])["spec"]["hard"]
    platform["tenants"][1]["quotas"] = platform["tenants"][1]["quotas"][:2]
    smaller = validate_platform(platform, "x.yaml")
    without = resource_quota_for(smaller, smaller.tenants[1])["spec"]["hard"]
    # team-b borrows without limit in its cohort: its ceiling grows by the whole CPU pool.
    assert int(with_cpu["requests.cpu"]) == int(without["requests.cpu"]) + 2
    assert with_cpu["requests.nvidia.com/gpu"] == without["requests.nvidia.com/gpu"]


def test_capacity_reports_the_cpu_pool_in_its_own_table_and_json() -> None:
    config = stack("local").config
    text = format_capacity(config)
    assert "## CPU pools: CPU and memory for CPU-only jobs" in text
    assert "| cpu | 1 x 2, 16Gi | 2 | 16Gi | 2 | 12Gi |" in text
    assert "| cpu | team-a | rehearsal | 1 | 6Gi |" in text
    (flavor,) = capacity_json("local", config)["cpu_flavors"]
    assert flavor["committed_cpu"] == "2" and flavor["tenants"][0] == {"tenant": "team-a", "cohort": "rehearsal",
                                                                        "cpu": "1", "memory": "6Gi"}
    assert [f["flavor"] for f in capacity_json("local", config)["flavors"]] == ["fake-a100", "fake-l4"]


def test_the_trainjob_resources_policy_knows_a_node_of_the_cpu_flavor() -> None:
    flavors = {f.name: f.node for f in tenant_flavors(stack("local").config)["team-a"]}
    assert flavors["cpu"] == {"cpu": "2", "memory": "16Gi"}
