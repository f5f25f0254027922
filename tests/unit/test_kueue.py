"""Kueue builders: one flavor per pool, one ClusterQueue per tenant, v1beta2 everywhere."""

from __future__ import annotations

from tests.conftest import rendered, stack
from trainyard.manifests import kueue
from trainyard.quantity import canonical_quantity, parse_quantity


def by_name(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_every_kueue_object_is_v1beta2() -> None:
    for name in ("local", "staging", "prod"):
        for obj in rendered(name).objects:
            if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
                assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2", obj["metadata"]["name"]


def test_one_resource_flavor_per_pool_selects_and_tolerates_its_nodes() -> None:
    config = stack("prod").config
    flavors = by_name(kueue.build(config).all_objects, "ResourceFlavor")
    assert sorted(flavors) == ["h100", "h200", "l40s"]
    h100 = flavors["h100"]["spec"]
    assert h100["nodeLabels"] == {"trainyard.dev/pool": "h100"}
    assert h100["nodeTaints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "present"}]
    assert h100["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
    assert h100["topologyName"] == "datacenter"
    assert "nodeTaints" not in flavors["l40s"]["spec"]


def test_topology_levels_are_widest_first_with_hostname_last() -> None:
    (topology,) = [o for o in kueue.build(stack("prod").config).all_objects if o["kind"] == "Topology"]
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == [
        "network.trainyard.dev/block", "network.trainyard.dev/rack", "kubernetes.io/hostname"]


def test_cluster_queue_quotas_gpu_cpu_memory_per_flavor() -> None:
    config = stack("prod").config
    queue = by_name(kueue.build(config).all_objects, "ClusterQueue")["assistant"]
    spec = queue["spec"]
    assert spec["cohortName"] == "product"
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "assistant"}}
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
    h100 = next(f for f in group["flavors"] if f["name"] == "h100")["resources"]
    gpu, cpu, memory = h100
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "32", "borrowingLimit": "32", "lendingLimit": "8"}
    # 32 of 8-GPU nodes with 192 CPUs and 1800Gi: CPU and memory follow the GPU share.
    assert cpu["nominalQuota"] == str(32 * 192 // 8)
    assert parse_quantity(memory["nominalQuota"]) == parse_quantity("1800Gi") * 4
    assert cpu["lendingLimit"] == str(8 * 192 // 8)


def test_every_flavor_lists_every_covered_resource_in_order() -> None:
    # Mirrors the ClusterQueue CRD rule: flavors must have as many resources as coveredResources.
    for obj in rendered("prod").by_kind("ClusterQueue"):
        for group in obj["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]


def test_quotas_are_written_as_kueue_writes_them_back() -> None:
    # Kueue's ClusterQueue webhook decodes quotas into resource.Quantity and writes back its String():
    # a number 8 comes back as "8", so rendering the number made every later `pulumi up` propose an update.
    queue = by_name(kueue.build(stack("local").config).all_objects, "ClusterQueue")["team-a"]
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if key in resource:
                        value = resource[key]
                        assert isinstance(value, str), (flavor["name"], resource["name"], key, value)
                        assert canonical_quantity(value) == value


def test_cohorts_form_a_tree_with_fair_share_weights() -> None:
    cohorts = by_name(kueue.build(stack("prod").config).all_objects, "Cohort")
    assert cohorts["org"]["spec"] == {}
    assert cohorts["research"]["spec"] == {"parentName": "org", "fairSharing": {"weight": "2"}}


def test_workload_priority_classes_carry_value_at_top_level() -> None:
    classes = by_name(kueue.build(stack("prod").config).all_objects, "WorkloadPriorityClass")
    assert {n: c["value"] for n, c in classes.items()} == {"critical": 10000, "standard": 1000, "preemptible": 100}


def test_local_queue_is_named_default_and_points_at_the_tenant_queue() -> None:
    queues = [o for o in rendered("local").objects if o["kind"] == "LocalQueue"]
    assert {(q["metadata"]["namespace"], q["metadata"]["name"], q["spec"]["clusterQueue"]) for q in queues} == {
        ("team-a", "default", "team-a"), ("team-b", "default", "team-b")}


def test_controller_configuration_enables_trainjob_jobset_waitforpodsready_and_fair_sharing() -> None:
    conf = kueue.controller_configuration(stack("prod").config)
    assert conf["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert {"trainer.kubeflow.org/trainjob", "jobset.x-k8s.io/jobset"} <= set(conf["integrations"]["frameworks"])
    assert conf["waitForPodsReady"]["timeout"] == "15m"
    assert conf["waitForPodsReady"]["recoveryTimeout"] == "5m"
    assert conf["waitForPodsReady"]["requeuingStrategy"]["backoffLimitCount"] == 8
    assert conf["fairSharing"]["preemptionStrategies"] == ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]


def test_a_tenant_without_cohort_gets_no_borrowing_preemption() -> None:
    config = stack("local").config
    tenant = config.tenants[0].model_copy(update={"cohort": None, "quotas": (
        config.tenants[0].quotas[0].model_copy(update={"borrowing_limit": None}),)})
    spec = kueue.cluster_queue_for(config, tenant)["spec"]
    assert "cohortName" not in spec
    assert "borrowWithinCohort" not in spec["preemption"]


def test_controller_images_come_from_the_mirror_pinned_by_the_lock() -> None:
    from trainyard.manifests import image_lock, installs
    from trainyard.supply.lock import ImageLock

    prod = stack("prod")
    lock = image_lock(prod.config, prod.root)
    digest = lock.entries["registry.trainyard.internal/mirror/jobset/jobset:v0.12.0"].digest
    releases = {r.name: r for r in installs.releases(prod.config, lock)}
    # The JobSet chart composes "<repository>:<tag>" and has no registry value.
    assert releases["jobset"].values["image"] == {
        "repository": "registry.trainyard.internal/mirror/jobset/jobset", "tag": f"v0.12.0@{digest}",
        "pullPolicy": "IfNotPresent"}
    assert releases["kueue"].values["controllerManager"]["manager"]["image"]["repository"] == (
        "registry.trainyard.internal/mirror/kueue/kueue")
    assert releases["trainer"].values["image"]["tag"].startswith("v2.3.0@sha256:")
    upstream = {r.name: r for r in installs.releases(stack("local").config, ImageLock())}
    assert upstream["kueue"].values["controllerManager"]["manager"]["image"] == {
        "repository": "registry.k8s.io/kueue/kueue", "tag": "v0.19.2", "pullPolicy": "IfNotPresent"}


def test_fake_nodes_carry_pool_labels_topology_gpu_capacity_and_are_ready() -> None:
    from trainyard.manifests.rehearsal import fake_nodes

    nodes = {n["metadata"]["name"]: n for n in fake_nodes(stack("local").config)}
    assert sorted(nodes) == ["cpu-0", "fake-a100-0", "fake-a100-1", "fake-a100-2", "fake-a100-3", "fake-l4-0", "fake-l4-1"]
    node = nodes["fake-a100-1"]
    labels = node["metadata"]["labels"]
    assert labels["trainyard.dev/pool"] == "fake-a100"
    assert labels["kubernetes.io/hostname"] == "fake-a100-1"
    assert {"topology.trainyard.dev/block", "topology.trainyard.dev/rack"} <= set(labels)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert node["status"]["conditions"][0] == {"type": "Ready", "status": "True", "reason": "KubeletReady",
                                               "message": "fake node of the Trainyard rehearsal"}
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_kueue_crds_carry_the_conversion_webhook_only_where_kueue_is_installed() -> None:
    from trainyard import catalog

    converted = {f"{plural}.kueue.x-k8s.io" for plural in catalog.KUEUE_CONVERTED_CRDS}
    prod = {c["metadata"]["name"]: c for c in rendered("prod").crds if c["spec"]["group"] == "kueue.x-k8s.io"}
    assert {n for n, c in prod.items() if "conversion" in c["spec"]} == converted
    assert prod["workloads.kueue.x-k8s.io"]["spec"]["conversion"]["webhook"]["clientConfig"]["service"] == {
        "name": "kueue-webhook-service", "namespace": "kueue-system", "path": "/convert"}
    # The rehearsal marks Kueue external: nothing serves the webhook, so the CRDs stay as upstream's files.
    assert not any("conversion" in c["spec"] for c in rendered("local").crds)
