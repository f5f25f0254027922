"""What each registered object waits for: exactly what it needs, not whole components.

The program runs under the SDK's mocks (as in test_program.py) and every Kubernetes object's
``depends_on`` is recorded. A custom resource waits for the CRD of its kind and no other, a
built-in object for no CRD, a namespaced object for its Namespace, a tenant's Namespace for the
admission objects and the queueing objects except other tenants' ClusterQueues, and charts for
every CRD (a chart may render any kind). docs/architecture.md, "Engine speed", says why.
"""

from __future__ import annotations

import json
import runpy
import tempfile
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from tests.conftest import ROOT, rendered
from tests.program.test_program import Mocks, Registered, manifest_key, registry_filled_lock
from trainyard.components import Platform
from trainyard.components import platform as platform_component
from trainyard.components.kubernetes_object import KubernetesObject
from trainyard.project import open_stack

Edges = dict[str, set[str]]
# key -> (replace_on_changes, delete_before_replace) of the objects registered with replace_on_changes
REPLACED: dict[str, tuple[list[str], bool]] = {}


def recorded_edges(stack: str | Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, str] | None = None) -> Edges:
    """Every Kubernetes object's key -> the keys of what it was declared to depend on (charts as chart:NAME)."""
    edges: Edges = {}
    original_object = KubernetesObject.__init__
    original_chart = platform_component.ConcernGroup._chart
    original_group = platform_component.ConcernGroup.__init__

    def key_of(resource: pulumi.Resource) -> str:
        return str(getattr(resource, "trainyard_key", f"other:{type(resource).__name__}"))

    def recording_object(self: KubernetesObject, manifest: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        self.trainyard_key = manifest_key(manifest)  # type: ignore[attr-defined]
        depends_on = list(opts.depends_on or []) if opts is not None else []  # type: ignore[arg-type]
        edges[self.trainyard_key] = {key_of(d) for d in depends_on}  # type: ignore[attr-defined]
        if opts is not None and opts.replace_on_changes:
            REPLACED[self.trainyard_key] = (list(opts.replace_on_changes), bool(opts.delete_before_replace))  # type: ignore[attr-defined]
        original_object(self, manifest, opts)

    def recording_chart(self: platform_component.ConcernGroup, release: Any, depends_on: list[pulumi.Resource]) -> Any:
        chart = original_chart(self, release, depends_on)
        chart.trainyard_key = f"chart:{release.name}"
        edges[chart.trainyard_key] = {key_of(d) for d in depends_on}
        return chart

    def recording_group(self: platform_component.ConcernGroup, config: Any, concern: Any, *args: Any) -> None:
        self.trainyard_key = f"group:{concern.name}"  # type: ignore[attr-defined]
        original_group(self, config, concern, *args)

    monkeypatch.setattr(KubernetesObject, "__init__", recording_object)
    monkeypatch.setattr(platform_component.ConcernGroup, "__init__", recording_group)
    monkeypatch.setattr(platform_component.ConcernGroup, "_chart", recording_chart)
    path = stack if isinstance(stack, Path) else ROOT / "stacks" / f"Pulumi.{stack}.yaml"
    platform_config = yaml.safe_load(path.read_text())["config"]["trainyard:platform"]
    platform_config.setdefault("images", {})
    if stack in ("prod", "staging"):  # the program refuses placeholder digests on a stack that protects data
        platform_config["images"]["lock_file"] = str(registry_filled_lock(Path(tempfile.mkdtemp(prefix="trainyard-lock-"))))
        platform_config["images"]["verify_in_mirror"] = False  # no registry to ask under the mocks
    name = stack if isinstance(stack, str) else path.stem.removeprefix("Pulumi.")
    pulumi.runtime.set_mocks(Mocks(Registered()), project="trainyard", stack=name, preview=False)
    pulumi.runtime.set_all_config({"trainyard:platform": json.dumps(platform_config), **(config or {})},
                                  list(config or {}))

    @pulumi.runtime.test
    def program() -> None:
        if isinstance(stack, Path):  # a stack file outside stacks/: its relative paths resolve from its directory
            Platform("trainyard", open_stack(str(stack), ROOT).config, root=ROOT, stack_dir=stack.parent)
        else:
            runpy.run_path(str(ROOT / "platform" / "__main__.py"), run_name="__main__")

    program()
    return edges


@pytest.fixture(scope="module")
def local_edges() -> Edges:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return recorded_edges("local", monkeypatch)


def crd_keys(edges: Edges) -> set[str]:
    return {k for k in edges if k.startswith("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition:")}


def test_a_custom_resource_waits_for_the_crd_of_its_kind_and_no_other(local_edges: Edges) -> None:
    platform = rendered("local")
    served = {(c["spec"]["group"], c["spec"]["names"]["kind"]): manifest_key(c) for c in platform.crds}
    checked = parameterised = 0
    for obj in platform.objects:
        group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
        waits_for = local_edges[manifest_key(obj)] & crd_keys(local_edges)
        param_kind = (obj.get("spec") or {}).get("paramKind") if obj["kind"].endswith("AdmissionPolicy") else None
        if (group, obj["kind"]) in served:
            assert waits_for == {served[(group, obj["kind"])]}, manifest_key(obj)
            checked += 1
        elif param_kind is not None:
            # A parameterised policy is loaded against its paramKind: it waits for that CRD (TenantPolicy, LocalQueue).
            param_group = param_kind["apiVersion"].split("/")[0]
            assert waits_for == {served[(param_group, param_kind["kind"])]}, manifest_key(obj)
            parameterised += 1
        else:
            assert waits_for == set(), f"{manifest_key(obj)} is a built-in object and waits for CRDs {waits_for}"
    assert checked >= 10  # flavors, queues, cohorts, priority classes, runtimes, local queues, tenant policies
    assert parameterised >= 6


def test_a_namespaced_object_waits_for_its_namespace(local_edges: Edges) -> None:
    for obj in rendered("local").objects:
        namespace = obj["metadata"].get("namespace")
        if namespace in ("team-a", "team-b"):
            assert f"kubernetes:core/v1:Namespace:/{namespace}" in local_edges[manifest_key(obj)], manifest_key(obj)


def test_a_tenant_namespace_waits_for_the_guards_but_not_for_other_tenants_queues(local_edges: Edges) -> None:
    platform = rendered("local")
    admission = {manifest_key(o) for o in platform.concern("admission").objects}
    queueing = {manifest_key(o) for o in platform.concern("queueing").objects}
    team_a = local_edges["kubernetes:core/v1:Namespace:/team-a"]
    own_queue = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue:/team-a"
    other_queue = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue:/team-b"
    assert admission <= team_a
    assert queueing - {other_queue} <= team_a
    assert own_queue in team_a
    assert other_queue not in team_a


def test_charts_wait_for_every_crd_and_webhook_guarded_objects_for_the_controllers(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered("prod")
    edges = recorded_edges("prod", monkeypatch)
    crds = crd_keys(edges)
    charts = {k for k in edges if k.startswith("chart:")}
    assert {"chart:jobset", "chart:kueue", "chart:trainer"} <= charts
    for chart in charts:
        assert crds <= edges[chart], chart
    # Kueue's webhooks admit the queueing objects: they wait for the controllers' group and its charts (AFTER).
    queue = next(k for k in edges if ":kueue.x-k8s.io/v1beta2:ClusterQueue:" in k)
    assert "group:controllers" in edges[queue]
    assert crds & edges[queue] == {"kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition:/clusterqueues.kueue.x-k8s.io"}


def test_mlflows_database_and_its_first_backup_wait_for_the_object_stores_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    # The object store's group ends with its provisioning Job (the buckets); a fresh Cluster's immediate backup and
    # WAL archiving fail while the backups bucket is missing (the node tier saw `exit status 1` when it raced).
    edges = recorded_edges("staging", monkeypatch)
    for kind in (":postgresql.cnpg.io/v1:Cluster:", ":postgresql.cnpg.io/v1:ScheduledBackup:"):
        found = next(k for k in edges if kind in k)
        assert {"group:object-store", "group:postgres-operator"} <= edges[found], (found, edges[found])
    assert "group:object-store" in edges["chart:mlflow"]


def test_a_multikueue_cluster_waits_for_its_kubeconfig_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    manager = ROOT / "tests" / "fixtures" / "multikueue" / "Pulumi.manager.yaml"
    edges = recorded_edges(manager, monkeypatch, {"trainyard:worker1Kubeconfig": "apiVersion: v1\nkind: Config\n"})
    clusters = [k for k in edges if ":MultiKueueCluster:" in k]
    assert clusters, sorted(edges)
    for cluster in clusters:
        worker = cluster.rsplit("/", 1)[1]
        secrets = [d for d in edges[cluster] if d.startswith("kubernetes:core/v1:Secret:")]
        assert secrets == [f"kubernetes:core/v1:Secret:kueue-system/{kubeconfig_secret_name_of(worker)}"], edges[cluster]


def kubeconfig_secret_name_of(worker: str) -> str:
    from trainyard.manifests.multikueue import kubeconfig_secret_name

    config = open_stack(str(ROOT / "tests" / "fixtures" / "multikueue" / "Pulumi.manager.yaml"), ROOT).config
    return kubeconfig_secret_name(next(w for w in config.multikueue.workers if w.name == worker))


def test_a_training_runtime_is_replaced_when_a_field_its_crd_makes_immutable_changes(local_edges: Edges) -> None:
    runtimes = {k: v for k, v in REPLACED.items() if ":ClusterTrainingRuntime:" in k}
    assert runtimes and set(runtimes) == {k for k in local_edges if ":ClusterTrainingRuntime:" in k}
    for paths, delete_first in runtimes.values():
        assert "spec.template.spec.volumeClaimPolicies" in paths and delete_first
    # Nothing else is: a Kueue ResourceFlavor's immutable nodeLabels stay refused, and data never is.
    assert {k.split(":")[2] for k in REPLACED} == {"ClusterTrainingRuntime"}


def test_the_pod_flavor_policy_waits_for_every_resource_flavor(local_edges: Edges) -> None:
    """It maps the flavors' nodeLabels to their names: a flavor change the API server refuses must leave it as it was
    (tests/cluster/test_rehearsal.py, test_crd_cel_rule_rejects_an_immutable_change)."""
    platform = rendered("local")
    flavors = {manifest_key(o) for o in platform.objects if o["kind"] == "ResourceFlavor"}
    policy = [manifest_key(o) for o in platform.concern("admission").objects
              if o["kind"] == "MutatingAdmissionPolicy" and o["metadata"]["name"] == "trainyard-pod-kueue-flavor"]
    assert flavors and len(policy) == 1
    assert flavors <= local_edges[policy[0]]
    others = [manifest_key(o) for o in platform.concern("admission").objects
              if o["metadata"]["name"] != "trainyard-pod-kueue-flavor"]  # the policy and its binding wait; nothing else
    assert others and all(not flavors & local_edges[k] for k in others)
