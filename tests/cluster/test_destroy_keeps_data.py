"""`pulumi destroy` and the data plane: a protected stack refuses, an unprotected one keeps every volume and database.

The stack is the local stack's rehearsal overlay with its data plane on (``DATA_PLANE``, scenario-style
``platform`` overrides): SeaweedFS with its data claim, MLflow with its CloudNativePG ``Cluster`` and
``Database``, and ``lifecycle.protect_data: true``. It is deployed by the real engine
(``tools/pulumi-local.sh`` through ``Rehearsal.engine``) to a private control plane of its own: etcd,
kube-apiserver, kube-controller-manager (garbage collector, namespace controller, hostPath provisioner)
and kube-scheduler, no controllers: what is retained is the objects themselves, which need none.

A stack that protects data deploys only images whose digests a registry reported (``supply/gate.py``),
so the test first does what an operator does: its images are pushed to a real OCI registry on loopback
(``crane registry serve``) and ``trainyard images lock`` fills a copy of the lock from it.

In order: ``up``; the state marks exactly the data-holding objects protect + retainOnDelete; ``destroy``
refuses, naming the protected URNs, and deletes nothing; the documented unprotect
(``tools/pulumi-local.sh state local unprotect --all --yes``, docs/rehearsal.md "Tearing down a protected
stack"); ``destroy`` succeeds and leaves every PVC (bound to its volume), the CNPG Cluster and Database,
CRDs and namespaces, and nothing else; a control: deleting the Cluster, which retention prevented, takes
its instance volume with it. The retained objects are printed as a table.

Covered and not covered (the rehearsal runs no chart: SeaweedFS, CloudNativePG and MLflow are external):

- SeaweedFS's claim ``object-store/seaweedfs-data`` is Trainyard's own object, bound here to a real
  PersistentVolume by kube-controller-manager's hostPath provisioner: both survive.
- The CNPG instance PVC ``mlflow/mlflow-db-1`` is made by the operator on a real cluster; here the test
  creates it as the operator does (name ``<cluster>-<serial>``, its labels, a controller ownerReference to
  the Cluster; Ref: cloudnative-pg pkg/reconciler/persistentvolumeclaim/build.go, Cluster
  SetInheritedDataAndOwnership) and it is named a stand-in in the table. What it proves is Kubernetes'
  part: the claim lives as long as the retained Cluster does (the garbage collector is running).
- Backups are off in this variant: the barman-cloud ``ObjectStore`` has no CRD in the mirror (the plugin
  is a prerequisite this stack does not install), so neither it nor the ``ScheduledBackup`` is rendered.
- Serving is off (it holds no data; test_rehearsal.py's destroy retains its CRDs on the session's cluster).
- The MinIO backend (pool PVCs from the operator's StatefulSet) and the charts' own data-holding children
  (``retain_chart_data``) are not exercised: no chart is installed in a rehearsal.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import Cluster, Key, key_of, live_objects, private_cluster, tools_problem
from tests.conftest import ROOT
from tests.oci_registry import serve_registry
from trainyard.cli import main as trainyard
from trainyard.config import load_stack
from trainyard.manifests import render_platform
from trainyard.manifests.lifecycle import holds_data
from trainyard.manifests.meta import Manifest
from trainyard.manifests.mlflow import CLUSTER
from trainyard.manifests.object_store import SEAWEEDFS_DATA_CLAIM
from trainyard.project import open_stack
from trainyard.rehearsal.cluster import Settings
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.session import EngineRun, Rehearsal
from trainyard.rehearsal.stack import merge
from trainyard.supply.bom import build_bom, lock_references

pytestmark = pytest.mark.cluster

STACK = "local"
MIRROR_HOST = "registry.trainyard.internal"
# Pulumi's refusal, one per protected resource its destroy preview reaches.
PROTECTED_ERROR = re.compile(r'resource "(urn:pulumi:[^"]+)" cannot be deleted')
# The local stack's data plane, as staging has it (stacks/Pulumi.staging.yaml), backups off (module docstring).
# Serving off: it holds no data, and its 18 CRDs (KServe, cert-manager) would add a third of the engine's time;
# test_rehearsal.py's destroy keeps them on the session's cluster.
DATA_PLANE: dict[str, Any] = {
    "lifecycle": {"protect_data": True},
    # The loopback registry that filled the lock is gone by `up`, and no node here pulls an image: the program's
    # mirror check (on by default with protect_data) would ask the upstream hosts. tests/program and tests/registry
    # test it (docs/supply-chain.md, "In the mirror").
    "images": {"verify_in_mirror": False},
    "serving": None,
    "mlflow": {"enabled": True, "object_store": {"endpoint_url": "http://seaweedfs-all-in-one.object-store.svc:8333"},
               "backup": {"enabled": False}},
    "object_store": {"platform_buckets": [{"name": "mlflow-artifacts"}, {"name": "mlflow-backups"}],
                     "services": [{"name": "mlflow", "namespace": "mlflow",
                                   "buckets": ["mlflow-artifacts", "mlflow-backups"]}]},
}
SEAWEEDFS_CLAIM: Key = ("", "PersistentVolumeClaim", "object-store", SEAWEEDFS_DATA_CLAIM)
CNPG_CLUSTER: Key = ("postgresql.cnpg.io", "Cluster", "mlflow", CLUSTER)
CNPG_DATABASE: Key = ("postgresql.cnpg.io", "Database", "mlflow", "mlflow-auth")
# What the CloudNativePG operator would create for instance 1 of the Cluster (module docstring).
STAND_IN_CLAIM: Key = ("", "PersistentVolumeClaim", "mlflow", f"{CLUSTER}-1")


@dataclass
class Deployment:
    cluster: Cluster
    session: Rehearsal
    up: EngineRun
    rendered: dict[Key, Manifest]
    state_file: Path
    timings: list[tuple[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def retained(self) -> list[Key]:
        return [k for k, obj in self.rendered.items() if holds_data(obj)]

    @property
    def gone(self) -> list[Key]:
        return [k for k, obj in self.rendered.items() if not holds_data(obj)]

    def engine(self, step: str, command: str, *args: str) -> EngineRun:
        run = self.session.engine(command, *args)
        self.timings.append((step, run.seconds))
        return run

    def uids(self) -> dict[Key, str]:
        keys = [*self.rendered, STAND_IN_CLAIM]
        return {k: obj["metadata"]["uid"] for k, obj in live_objects(self.cluster, keys).items()}


def key_of_urn(urn: str) -> Key | None:
    """The object key of a Kubernetes resource's URN (``...$kubernetes:core/v1:PersistentVolumeClaim::ns/name``)."""
    type_, _, name = urn.rpartition("::")
    type_ = type_.rsplit("$", 1)[-1]
    if not type_.startswith("kubernetes:") or type_.count(":") != 2:
        return None
    _, group_version, kind = type_.split(":")
    group = group_version.split("/", 1)[0]
    namespace, _, object_name = name.rpartition("/")
    return ("" if group == "core" else group, kind, namespace, object_name)


def state_options(state_file: Path) -> dict[Key, tuple[bool, bool]]:
    """(protect, retainOnDelete) of every Kubernetes object in the stack's Pulumi state (file backend)."""
    deployment = json.loads(state_file.read_text())["checkpoint"]["latest"]
    out = {}
    for resource in deployment.get("resources") or []:
        key = key_of_urn(resource["urn"])
        if key is not None and resource.get("custom"):
            out[key] = (bool(resource.get("protect")), bool(resource.get("retainOnDelete")))
    return out


def reached_by_destroy(state_file: Path) -> set[Key]:
    """The protected objects a destroy preview reaches: those no protected resource depends on, directly or not.

    ``pulumi destroy`` deletes a resource only after everything that depends on it (its ``dependencies``, its
    ``propertyDependencies``, its children), so a protected resource with a protected dependent is never reached:
    the preview stops at the dependent. Such an object is as safe as one named (its dependent's refusal guards it).
    """
    resources = json.loads(state_file.read_text())["checkpoint"]["latest"].get("resources") or []
    dependents: dict[str, set[str]] = {}
    for resource in resources:
        depends_on = {*resource.get("dependencies", []),
                      *(urn for urns in (resource.get("propertyDependencies") or {}).values() for urn in urns)}
        if resource.get("parent"):
            depends_on.add(resource["parent"])
        for urn in depends_on:
            dependents.setdefault(urn, set()).add(resource["urn"])
    protected = {r["urn"] for r in resources if r.get("protect")}

    def has_protected_dependent(urn: str) -> bool:
        seen, todo = set(), list(dependents.get(urn, ()))
        while todo:
            dependent = todo.pop()
            if dependent in protected:
                return True
            if dependent not in seen:
                seen.add(dependent)
                todo.extend(dependents.get(dependent, ()))
        return False

    return {key for urn in protected if (key := key_of_urn(urn)) is not None and not has_protected_dependent(urn)}


def stand_in_instance_claim(cluster_object: Manifest) -> Manifest:
    """The PVC CloudNativePG makes for instance 1 of ``cluster_object`` (pkg/reconciler/persistentvolumeclaim)."""
    meta = cluster_object["metadata"]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": STAND_IN_CLAIM[3], "namespace": meta["namespace"],
                         "labels": {"cnpg.io/cluster": meta["name"], "cnpg.io/instanceName": STAND_IN_CLAIM[3],
                                    "cnpg.io/pvcRole": "PG_DATA", "trainyard.dev/test-stand-in": "cnpg-operator",
                                    **cluster_object["spec"].get("inheritedMetadata", {}).get("labels", {})},
                         "annotations": {"cnpg.io/nodeSerial": "1"},
                         "ownerReferences": [{"apiVersion": cluster_object["apiVersion"], "kind": "Cluster",
                                              "name": meta["name"], "uid": meta["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": cluster_object["spec"]["storage"]["size"]}}}}


def bound_volume(cluster: Cluster, key: Key, timeout: float = 60) -> str:
    """Wait until the claim is Bound; return its PersistentVolume's name."""
    def bound() -> str | None:
        claim = cluster.get_json("pvc", "-n", key[2], key[3])
        return claim["spec"].get("volumeName") if claim.get("status", {}).get("phase") == "Bound" else None
    return wait_until(f"PVC {key[2]}/{key[3]} to be bound", bound, timeout)


def locked_images(stack_file: Path, work: Path) -> None:
    """Push the stack's images to a real registry on loopback and fill the stack's lock from it (docs/supply-chain.md)."""
    refs = lock_references(build_bom(open_stack(str(stack_file), ROOT)))
    # The mirror's images, and the operands this stack (no registry_mirror) names upstream, e.g. CloudNativePG's
    # PostgreSQL image: one loopback registry answers for every host the bill of materials names.
    hosts = sorted({r.registry for r in refs})
    assert MIRROR_HOST in hosts, refs
    with serve_registry(work / "registry.log") as registry:
        for ref in refs:
            registry.push(ref, work)
        endpoints = [arg for host in hosts for arg in ("--endpoint", f"{host}=http://{registry.address}")]
        code = trainyard(["images", "lock", str(stack_file), *endpoints, "--insecure"])
    assert code == 0, "trainyard images lock failed"
    assert trainyard(["images", "verify", str(stack_file)]) == 0


# ----------------------------------------------------------------------------- the deployment


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    problem = tools_problem("etcd", "kube-apiserver", "pulumi", "pulumi-kubernetes", "crane")  # no controllers
    if problem is not None:
        pytest.skip(problem)
    base = tmp_path_factory.mktemp("keep-data")
    lock = base / "images.lock.yaml"
    shutil.copy(ROOT / "images.lock.yaml", lock)
    start = time.monotonic()
    with private_cluster(base / "cluster", with_fake_nodes=False) as cluster:
        timings = [("private control plane up", time.monotonic() - start)]
        env = {**cluster.env, "TRAINYARD_STATE_DIR": str(base / "state"), "TRAINYARD_RUN_DIR": str(base / "run"),
               "TRAINYARD_PULUMI_HOME": str(base / "pulumi-home")}
        overrides = merge(DATA_PLANE, {"images": {"lock_file": str(lock)}})
        session = Rehearsal(open_stack(STACK, ROOT), Settings.from_env(env), overrides, env=env)
        start = time.monotonic()
        locked_images(session.stack_file, base)
        timings.append(("images pushed to a loopback registry, lock filled", time.monotonic() - start))
        session.control_plane.apply_storage_class()  # the hostPath provisioner binds the claims
        rendered = {key_of(o): o for o in render_platform(load_stack(session.stack_file), ROOT,
                                                          ROOT / "stacks").all_objects}
        up = session.deploy()
        timings.append(("pulumi up (protect_data: true)", up.seconds))
        deployed = Deployment(cluster, session, up, rendered,
                              base / "state" / ".pulumi" / "stacks" / "trainyard" / f"{STACK}.json", timings)
        if up.returncode == 0:
            live = live_objects(cluster, [CNPG_CLUSTER])
            if CNPG_CLUSTER in live:
                cluster.create_missing([stand_in_instance_claim(live[CNPG_CLUSTER])])
        yield deployed
        # The retained claims' volumes are directories under /tmp/hostpath_pv (the StorageClass reclaims with
        # Delete): delete the claims before the control plane stops, so that the provisioner removes them.
        cluster.kubectl("delete", "pvc", "--all", "--all-namespaces", "--wait=false", check=False)
        with contextlib.suppress(TimeoutError):
            wait_until("the rehearsal volumes to be reclaimed", lambda: not cluster.get_json("pv")["items"], 60)


@pytest.fixture
def deployed(deployment: Deployment) -> Deployment:
    if deployment.up.returncode != 0:
        pytest.fail(f"pulumi up of the data-plane stack failed:\n{deployment.up.output[-6000:]}")
    return deployment


# ----------------------------------------------------------------------------- tests, in order


def test_the_variant_renders_the_data_plane(deployment: Deployment) -> None:
    kept = set(deployment.retained)
    assert {SEAWEEDFS_CLAIM, CNPG_CLUSTER, CNPG_DATABASE} <= kept
    assert {k[3] for k in kept if k[1] == "Namespace"} == {"team-a", "team-b", "object-store", "mlflow"}
    # Nothing else renders as data-holding: no StatefulSet or PersistentVolume of Trainyard's own.
    assert {k[1] for k in kept} == {"CustomResourceDefinition", "Namespace", "PersistentVolumeClaim", "Cluster",
                                    "Database"}


def test_up_protects_and_retains_exactly_the_data_holding_objects(deployed: Deployment) -> None:
    assert "local control plane built from Go modules" in deployed.up.output
    live = live_objects(deployed.cluster, list(deployed.rendered))
    assert sorted(set(deployed.rendered) - set(live)) == []
    options = state_options(deployed.state_file)
    assert sorted(set(deployed.rendered) - set(options)) == []
    wrong = {k: options[k] for k, obj in deployed.rendered.items() if options[k] != (holds_data(obj), holds_data(obj))}
    assert wrong == {}, "(protect, retainOnDelete) in the Pulumi state, expected both = holds_data"
    bound_volume(deployed.cluster, SEAWEEDFS_CLAIM)
    bound_volume(deployed.cluster, STAND_IN_CLAIM)



GENERATED = re.compile(r"\$\{generated:([^}]+)\}")


def generated_secret_values(deployed: Deployment) -> dict[str, str]:
    """The values the deployment generated, read back from the live Secrets: for each rendered Secret value that
    is a ``${generated:...}`` placeholder (or embeds one), the live value, keyed by the placeholder's name."""
    values: dict[str, str] = {}
    for key, obj in deployed.rendered.items():
        if key[1] != "Secret":
            continue
        live = deployed.cluster.get_json("secret", "-n", key[2], key[3])
        for field_name, rendered in (obj.get("stringData") or {}).items():
            names = GENERATED.findall(str(rendered))
            if not names:
                continue
            value = base64.b64decode(live["data"][field_name]).decode()
            label = names[0] if GENERATED.fullmatch(str(rendered)) else f"{key[2]}/{key[3]}:{field_name}"
            values[label] = value
    return values


def test_mlflow_and_object_store_secrets_are_ciphertext_in_the_state_and_absent_from_every_log(
        deployed: Deployment) -> None:
    """The data-plane stack (MLflow, PostgreSQL, the object store) deployed by the real engine: every generated
    value (MLflow's admin, database, Flask and per-tenant passwords; every object-store key) is found neither raw
    nor base64 in the Pulumi state, the run directory, the control plane's logs or the engine's output, and the
    state holds each Secret's data as a Pulumi secret."""
    values = generated_secret_values(deployed)
    assert {"mlflow/admin-password", "mlflow/postgres-password", "mlflow/flask-secret-key"} <= set(values), sorted(values)
    assert any(name.startswith("mlflow/tenants/") for name in values), sorted(values)
    assert any(name.startswith("object-store/") for name in values), sorted(values)
    state_dir = deployed.state_file.parents[3]
    roots = [state_dir, Path(deployed.session.env["TRAINYARD_RUN_DIR"]), deployed.session.settings.logs]
    searched = sorted(p for root in roots if root.exists() for p in root.rglob("*") if p.is_file())
    assert deployed.state_file in searched
    texts = [(str(path), path.read_bytes().decode(errors="replace")) for path in searched]
    texts.append(("pulumi up output", deployed.up.output))
    found = [f"{name} in {where}" for where, text in texts for name, value in values.items()
             if len(value) >= 8 and (value in text or base64.b64encode(value.encode()).decode() in text)]
    assert found == [], found
    state = json.loads(deployed.state_file.read_text())
    resources = state.get("checkpoint", state).get("latest", {}).get("resources", [])
    with_generated = {(k[2], k[3]) for k, obj in deployed.rendered.items()
                      if k[1] == "Secret" and GENERATED.search(json.dumps(obj.get("stringData") or {}))}
    secrets = [r for r in resources if r.get("type") == "kubernetes:core/v1:Secret"
               and (r.get("outputs", {}).get("metadata", {}).get("namespace"),
                    r.get("outputs", {}).get("metadata", {}).get("name")) in with_generated]
    assert len(secrets) == len(with_generated), sorted(with_generated)
    for resource in secrets:
        data = resource["outputs"].get("data") or resource["outputs"].get("stringData")
        assert isinstance(data, dict) and "ciphertext" in data, resource["urn"]
    print(f"\n## No plaintext secrets (data plane)\n\n{len(values)} generated values in {len(with_generated)} Secrets "
          f"(MLflow, PostgreSQL, object store; read back from the cluster) searched raw and base64 in {len(searched)} "
          f"files and the engine output: 0 found; the state holds all {len(secrets)} Secrets as ciphertext.")

def test_destroy_of_the_protected_stack_refuses_and_deletes_nothing(deployed: Deployment) -> None:
    before = deployed.uids()
    run = deployed.engine("pulumi destroy (refused: protected)", "destroy", "--yes")
    assert run.returncode != 0, run.output[-6000:]
    named = {key for urn in set(PROTECTED_ERROR.findall(run.output)) if (key := key_of_urn(urn)) is not None}
    # The preview names each protected resource it reaches: every one without a protected dependent (a namespace
    # whose contents could not go is not reached; SeaweedFS's claim is reached only if nothing protected depends
    # on the object store, and MLflow's concern does, for its buckets); nothing it names is unprotected.
    reached = reached_by_destroy(deployed.state_file)
    assert {CNPG_CLUSTER, CNPG_DATABASE} <= reached
    assert reached <= named, (sorted(reached - named), run.output[-6000:])
    assert sorted(named - set(deployed.retained)) == []
    assert "because it is protected" in run.output
    deployed.notes.append(f"refused destroy: exit {run.returncode}, {len(named)} of the {len(deployed.retained)} "
                          "protected URNs named, 0 objects deleted")
    # Nothing was deleted (or replaced): every object has the uid it had.
    assert deployed.uids() == before


def test_unprotected_destroy_keeps_every_volume_the_database_crds_and_namespaces(
        deployed: Deployment, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = deployed.cluster
    volumes_before = {k: bound_volume(cluster, k) for k in (SEAWEEDFS_CLAIM, STAND_IN_CLAIM)}
    uids_before = deployed.uids()
    unprotect = deployed.engine("pulumi state unprotect --all", "state", "unprotect", "--all", "--yes")
    assert unprotect.returncode == 0, unprotect.output[-4000:]
    assert not any(protect for protect, _ in state_options(deployed.state_file).values())
    run = deployed.engine("pulumi destroy", "destroy", "--yes")
    assert run.returncode == 0, run.output[-6000:]

    live = live_objects(cluster, [*deployed.rendered, STAND_IN_CLAIM])
    # The stand-in goes too if its Cluster does: the garbage collector follows the ownerReference.
    assert sorted({*deployed.retained, STAND_IN_CLAIM} - set(live)) == []
    assert sorted(set(deployed.gone) & set(live)) == []
    # Retained means untouched: the same objects (uids), not recreated ones.
    assert {k: live[k]["metadata"]["uid"] for k in [*deployed.retained, STAND_IN_CLAIM]} == \
        {k: uids_before[k] for k in [*deployed.retained, STAND_IN_CLAIM]}
    for key in deployed.retained:
        if key[1] == "Namespace":
            assert live[key]["status"]["phase"] == "Active", key
    volumes = {v["metadata"]["name"]: v for v in cluster.get_json("pv")["items"]}
    for key, volume in volumes_before.items():
        assert live[key]["status"]["phase"] == "Bound" and live[key]["spec"]["volumeName"] == volume, key
        assert volumes[volume]["status"]["phase"] == "Bound", volume
    # The provisioning Job went with its pods (the provider deletes with foreground propagation by default;
    # Ref: pulumi-kubernetes annotation pulumi.com/deletionPropagationPolicy, pulumi/pulumi-kubernetes#3011).
    assert cluster.get_json("pods", "-n", "object-store")["items"] == []

    rows = [("kind", "namespace/name", "in the state", "after destroy")]
    for key in sorted(live, key=lambda k: (k[1] == "CustomResourceDefinition", k[1], k[2], k[3])):
        if key[1] == "CustomResourceDefinition":
            continue
        status = live[key].get("status", {})
        after = (f"Bound to PV {live[key]['spec']['volumeName']} ({volumes[live[key]['spec']['volumeName']]['status']['phase']})"
                 if key[1] == "PersistentVolumeClaim" else status.get("phase", "live"))
        origin = "stand-in for the CNPG operator" if key == STAND_IN_CLAIM else "protect + retainOnDelete"
        rows.append((key[1], f"{key[2]}/{key[3]}" if key[2] else key[3], origin, after))
    crds = [k for k in deployed.retained if k[1] == "CustomResourceDefinition"]
    rows.append(("CustomResourceDefinition", f"all {len(crds)} rendered", "protect + retainOnDelete", "live"))
    rows.append(("(everything else rendered)", f"{len(deployed.gone)} objects", "-", "deleted (0 live)"))
    table = "\n".join(f"| {' | '.join(r)} |" for r in [rows[0], ("---",) * 4, *rows[1:]])
    timings = "\n".join([*(f"  {step}: {seconds:.1f}s" for step, seconds in deployed.timings), *deployed.notes])
    with capsys.disabled():
        print(f"\n\nretained by `pulumi destroy` (data-plane stack, protect_data: true, then unprotected):\n{table}\n"
              f"{timings}")


def test_deleting_the_retained_cluster_would_take_its_volume(deployed: Deployment) -> None:
    """The control: what retention prevents does happen when the Cluster is deleted (the garbage collector runs)."""
    cluster = deployed.cluster
    if STAND_IN_CLAIM not in live_objects(cluster, [STAND_IN_CLAIM]):
        pytest.fail("the stand-in instance claim is not there to begin with")
    start = time.monotonic()
    cluster.kubectl("delete", "clusters.postgresql.cnpg.io", "-n", CNPG_CLUSTER[2], CNPG_CLUSTER[3])
    wait_until("the garbage collector to delete the Cluster's instance claim",
               lambda: STAND_IN_CLAIM not in live_objects(cluster, [STAND_IN_CLAIM]), 120)
    deployed.timings.append(("delete Cluster -> its PVC collected", time.monotonic() - start))
