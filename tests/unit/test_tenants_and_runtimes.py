"""Tenant namespaces and approved runtimes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, rendered, stack
from trainyard.manifests import runtimes, tenants
from trainyard.manifests.runtimes import RuntimeFileError
from trainyard.supply.lock import ImageLock, LockEntry
from trainyard.supply.reference import ImageRef


def test_tenant_namespace_enforces_psa_restricted_and_is_labelled() -> None:
    ns = tenants.namespace_for(stack("prod").config.tenants[0])
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["trainyard.dev/tenant"] == "llm-pretrain"


def test_tenant_role_creates_and_watches_trainjobs_but_never_touches_runtimes_queues_or_quotas() -> None:
    role = tenants.role_for(stack("prod").config.tenants[0])
    granted = {(g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert {"create", "watch"} <= granted[("trainer.kubeflow.org", "trainjobs")]
    assert granted[("kueue.x-k8s.io", "workloads")] == {"get", "list", "watch"}
    # It may read its runtimes and LocalQueue (the Kubeflow SDK lists runtimes), never change them.
    platform_owned = {"clustertrainingruntimes", "trainingruntimes", "localqueues", "clusterqueues", "resourcequotas"}
    assert all(verbs <= {"get", "list", "watch"} for (_, r), verbs in granted.items() if r in platform_owned)
    assert not {"clusterqueues", "resourcequotas"} & {r for (_, r) in granted}


def test_tenant_role_reads_the_pending_workloads_of_its_own_local_queues_through_the_visibility_api_only() -> None:
    """`trainyard status --tenant` asks Kueue's visibility API for its LocalQueue's pending Workloads: get on the
    namespaced subresource, in a Role (its namespace only); a ClusterQueue's list would show every namespace's jobs."""
    role = tenants.role_for(stack("prod").config.tenants[0])
    visibility = [r for r in role["rules"] if "visibility.kueue.x-k8s.io" in r["apiGroups"]]
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "llm-pretrain"
    assert visibility == [{"apiGroups": ["visibility.kueue.x-k8s.io"], "resources": ["localqueues/pendingworkloads"],
                           "verbs": ["get"]}]


def test_every_tenant_group_reads_the_approved_cluster_runtimes_and_nothing_else() -> None:
    config = stack("prod").config
    role, binding = tenants.runtime_reader(config)
    assert role["kind"] == "ClusterRole"
    assert role["rules"] == [{"apiGroups": ["trainer.kubeflow.org"], "resources": ["clustertrainingruntimes"],
                              "verbs": ["get", "list", "watch"]}]
    assert {s["name"] for s in binding["subjects"]} == {g for t in config.tenants for g in t.groups}
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_role_binding_binds_the_tenant_groups() -> None:
    binding = tenants.role_binding_for(stack("prod").config.tenants[0])
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ml-pretrain"}]


def test_resource_quota_caps_gpus_at_nominal_plus_borrowing() -> None:
    config = stack("prod").config
    assistant = next(t for t in config.tenants if t.name == "assistant")
    hard = tenants.resource_quota_for(config, assistant)["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == str((32 + 32) + (32 + 16) + (8 + 8))
    assert hard["count/trainjobs.trainer.kubeflow.org"] == "50"


def test_resource_quota_limits_no_pvcs_so_a_runtimes_shared_claim_never_stalls_its_jobset() -> None:
    """JobSet v0.12.0 re-creates volumeClaimPolicies PVCs every reconcile and the quota admission charges each
    refused create (tenants.resource_quota_for): a PVC quota would stall lora-finetune/lora-peft jobs."""
    config = stack("prod").config
    for tenant in config.tenants:
        hard = tenants.resource_quota_for(config, tenant)["spec"]["hard"]
        assert not {k for k in hard if "storage" in k or "persistentvolumeclaims" in k}, hard
        assert hard["count/trainjobs.trainer.kubeflow.org"] == str(tenant.max_trainjobs)
    # ... and tenants cannot create PVCs of their own, so an approved runtime's claims bound their storage.
    role = tenants.role_for(config.tenants[0])
    assert not [r for r in role["rules"] if "persistentvolumeclaims" in r["resources"] and "create" in r["verbs"]]


def test_runtimes_are_approved_labelled_and_get_the_topology_annotation() -> None:
    objects = {o["metadata"]["name"]: o for o in rendered("prod").by_kind("ClusterTrainingRuntime")}
    assert sorted(objects) == ["deepspeed-mpi", "lora-finetune", "lora-peft", "torch-distributed"]
    torch = objects["torch-distributed"]
    assert torch["metadata"]["labels"]["trainyard.dev/approved-runtime"] == "true"
    pod_meta = torch["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    assert pod_meta["annotations"] == {"kueue.x-k8s.io/podset-preferred-topology": "network.trainyard.dev/rack"}


def test_runtime_pods_are_restricted() -> None:
    for runtime in rendered("prod").by_kind("ClusterTrainingRuntime"):
        for field, container in runtimes.containers_of(runtime):
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False, field
            assert ctx["capabilities"] == {"drop": ["ALL"]}, field
            assert ctx["runAsNonRoot"] is True, field
            assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}, field


def test_runtime_from_unapproved_registry_is_refused(tmp_path: Path) -> None:
    config = stack("local").config
    source = (ROOT / "runtimes" / "torch-distributed.yaml").read_text()
    bad = tmp_path / "torch-distributed.yaml"
    bad.write_text(source.replace("registry.trainyard.internal/pytorch", "docker.io/pytorch"))
    with pytest.raises(RuntimeFileError, match=r"containers\[0\]\.image: 'docker.io/pytorch.*not from an approved registry"):
        runtimes.load_runtime(bad, config)


def test_runtime_image_without_digest_or_lock_entry_is_refused(tmp_path: Path) -> None:
    config = stack("local").config
    source = (ROOT / "runtimes" / "torch-distributed.yaml").read_text()
    bad = tmp_path / "torch-distributed.yaml"
    bad.write_text(source.replace(":2.10.0-cuda12.8-cudnn9-runtime", ":latest"))
    with pytest.raises(RuntimeFileError, match="not pinned by digest: no @sha256: in the file and no entry in the image lock"):
        runtimes.load_runtime(bad, config, ImageLock())


def test_runtime_images_are_named_by_tag_and_pinned_by_the_lock() -> None:
    config = stack("prod").config
    lock = ImageLock().with_entry(ImageRef.parse("registry.trainyard.internal/pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime"),
                                  LockEntry("sha256:" + "ab" * 32, "registry"))
    runtime = runtimes.load_runtime(ROOT / "runtimes" / "torch-distributed.yaml", config, lock)
    image = runtimes.containers_of(runtime)[0][1]["image"]
    assert image == f"registry.trainyard.internal/pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime@sha256:{'ab' * 32}"


def test_runtime_name_must_match_its_file(tmp_path: Path) -> None:
    config = stack("local").config
    bad = tmp_path / "other.yaml"
    bad.write_text((ROOT / "runtimes" / "torch-distributed.yaml").read_text())
    with pytest.raises(RuntimeFileError, match="must equal the file name 'other'"):
        runtimes.load_runtime(bad, config)


@pytest.mark.parametrize("name", ["local", "prod"])
def test_every_runtime_container_reads_its_kueue_flavor_from_the_annotation_the_admission_policy_writes(name: str) -> None:
    from trainyard.manifests import admission
    from trainyard.manifests.meta import KUEUE_FLAVOR_ANNOTATION

    field = {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{KUEUE_FLAVOR_ANNOTATION}']"}
    for runtime in rendered(name).concern("runtimes").objects:
        for path, container in runtimes.containers_of(runtime):
            flavor = [e for e in container["env"] if e["name"] == "TRAINYARD_KUEUE_FLAVOR"]
            assert flavor == [{"name": "TRAINYARD_KUEUE_FLAVOR", "valueFrom": {"fieldRef": field}}], (
                runtime["metadata"]["name"], path)
    policy, _ = admission.kueue_flavor_policy(stack(name).config)
    escaped = KUEUE_FLAVOR_ANNOTATION.replace("/", "~1")
    assert f'"/metadata/annotations/{escaped}"' in policy["spec"]["mutations"][0]["jsonPatch"]["expression"]
