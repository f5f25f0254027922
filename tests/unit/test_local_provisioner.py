"""The rehearsal's local volume provisioner, offline: which claims it takes, the volume it makes for one (local, on the
node, pre-bound by uid, the class's reclaim policy), that it deletes only its own released Delete volumes and only
their directories, that a second pass does nothing, and the default StorageClass per kind of rehearsal."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from trainyard.rehearsal import local_provisioner as lp
from trainyard.rehearsal.cluster import REHEARSAL_STORAGE_CLASS

NODE = "node-0"


def _claim(name: str = "initializer-lab", namespace: str = "team-b", uid: str = "0c5f", size: str = "200Gi",
           provisioner: str | None = lp.PROVISIONER, **extra: Any) -> dict[str, Any]:
    annotations = {lp.STORAGE_PROVISIONER: provisioner} if provisioner else {}
    annotations.update(extra.pop("annotations", {}))
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}},
                     "storageClassName": REHEARSAL_STORAGE_CLASS, "volumeMode": "Filesystem", **extra},
            "status": {"phase": "Pending"}}


class FakeApi:
    """Claims, volumes and classes by path; POST and DELETE of volumes recorded."""

    def __init__(self, claims: list[dict[str, Any]], volumes: list[dict[str, Any]] | None = None,
                 reclaim: str = "Delete") -> None:
        self.claims = claims
        self.volumes = {v["metadata"]["name"]: v for v in volumes or []}
        self.classes = [lp.storage_class(REHEARSAL_STORAGE_CLASS, real_nodes=True) | {"reclaimPolicy": reclaim}]
        self.calls: list[tuple[str, str]] = []

    def items(self, path: str) -> list[dict[str, Any]]:
        found = {lp.CLAIMS: self.claims, lp.VOLUMES: list(self.volumes.values()), lp.STORAGE_CLASSES: self.classes}[path]
        return copy.deepcopy(found)

    def get(self, path: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.volumes.get(path.rsplit("/", 1)[-1])) if path.startswith(lp.VOLUMES + "/") else None

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        self.calls.append((method, path))
        if method == "POST":
            assert body is not None
            self.volumes[body["metadata"]["name"]] = copy.deepcopy(body)
        elif method == "DELETE":
            del self.volumes[path.rsplit("/", 1)[-1]]
        return {}


def _provisioner(api: FakeApi, root: Path) -> lp.LocalProvisioner:
    return lp.LocalProvisioner(api, root, NODE, log=lambda line: None)  # type: ignore[arg-type]


def test_a_claim_handed_to_it_gets_a_local_volume_on_the_node_pre_bound_by_uid(tmp_path: Path) -> None:
    api = FakeApi([_claim()])
    done = _provisioner(api, tmp_path).pass_once()
    assert done == [f"claim team-b/initializer-lab: volume pvc-0c5f (200Gi, Delete) at {tmp_path / 'pvc-0c5f'} on node-0"]
    volume = api.volumes["pvc-0c5f"]
    assert volume["metadata"]["annotations"] == {lp.PROVISIONED_BY: lp.PROVISIONER}
    spec = volume["spec"]
    assert spec["local"] == {"path": str(tmp_path / "pvc-0c5f")} and (tmp_path / "pvc-0c5f").is_dir()
    assert spec["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]
    assert spec["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "team-b",
                                "name": "initializer-lab", "uid": "0c5f"}
    assert (spec["capacity"], spec["accessModes"], spec["volumeMode"], spec["storageClassName"],
            spec["persistentVolumeReclaimPolicy"]) == ({"storage": "200Gi"}, ["ReadWriteOnce"], "Filesystem",
                                                       REHEARSAL_STORAGE_CLASS, "Delete")
    # The next pass finds the volume made: nothing more.
    assert _provisioner(api, tmp_path).pass_once() == []
    assert [c for c in api.calls if c[0] == "POST"] == [("POST", lp.VOLUMES)]


def test_the_class_reclaim_policy_is_the_volumes(tmp_path: Path) -> None:
    api = FakeApi([_claim()], reclaim="Retain")
    _provisioner(api, tmp_path).pass_once()
    assert api.volumes["pvc-0c5f"]["spec"]["persistentVolumeReclaimPolicy"] == "Retain"


@pytest.mark.parametrize("claim", [
    _claim(provisioner=None),  # not handed to any external provisioner (a pre-bound one, an in-tree class)
    _claim(provisioner="rancher.io/local-path"),  # another provisioner's
    _claim(volumeName="rehearsal-object-store-seaweedfs-data"),  # bound, or being bound, to a volume already
    _claim(annotations={lp.SELECTED_NODE: "node-1"}),  # the scheduler chose another node
])
def test_claims_that_are_not_its_own_or_not_for_its_node_are_left_alone(tmp_path: Path, claim: dict[str, Any]) -> None:
    api = FakeApi([claim])
    assert _provisioner(api, tmp_path).pass_once() == [] and api.volumes == {}


def test_a_bound_claim_is_left_alone() -> None:
    claim = _claim()
    claim["status"]["phase"] = "Bound"
    assert not lp.wants_us(claim, NODE)
    assert lp.wants_us(_claim(annotations={lp.SELECTED_NODE: NODE}), NODE)


def test_a_claim_without_a_size_is_named_and_not_provisioned(tmp_path: Path) -> None:
    claim = _claim()
    del claim["spec"]["resources"]
    api = FakeApi([claim])
    assert _provisioner(api, tmp_path).pass_once() == [
        "claim team-b/initializer-lab: not provisioned (claim team-b/initializer-lab requests no storage)"]


def _released(name: str, path: Path, policy: str = "Delete", provisioner: str = lp.PROVISIONER) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {lp.PROVISIONED_BY: provisioner}},
            "spec": {"persistentVolumeReclaimPolicy": policy, "local": {"path": str(path)},
                     "claimRef": {"namespace": "team-b", "name": "initializer-lab"}},
            "status": {"phase": "Released"}}


def test_a_released_delete_volume_of_its_own_is_deleted_with_its_directory(tmp_path: Path) -> None:
    directory = tmp_path / "pvc-0c5f"
    (directory / "dataset").mkdir(parents=True)
    (directory / "dataset" / "train.jsonl").write_text("{}\n")
    api = FakeApi([], [_released("pvc-0c5f", directory)])
    assert _provisioner(api, tmp_path).pass_once() == [
        f"volume pvc-0c5f: released by team-b/initializer-lab, deleted with {directory}"]
    assert api.volumes == {} and not directory.exists()


@pytest.mark.parametrize("volume", [
    _released("pvc-1", Path("/data/pvc-1"), policy="Retain"),  # Retain: the data stays, whatever released it
    _released("pvc-1", Path("/data/pvc-1"), provisioner="kubernetes.io/host-path"),  # not made by it
])
def test_volumes_it_must_not_delete_are_left_alone(tmp_path: Path, volume: dict[str, Any]) -> None:
    api = FakeApi([], [volume])
    assert _provisioner(api, tmp_path).pass_once() == [] and list(api.volumes) == ["pvc-1"]


def test_a_volume_whose_path_is_not_its_own_directory_is_not_deleted(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    root = tmp_path / "dynamic"
    api = FakeApi([], [_released("pvc-0c5f", outside)])
    assert _provisioner(api, root).pass_once() == [
        f"volume pvc-0c5f: not deleted (its path {outside} is not {root / 'pvc-0c5f'})"]
    assert outside.is_dir() and list(api.volumes) == ["pvc-0c5f"]


def test_the_default_class_is_kube_controller_managers_without_real_nodes_and_this_provisioner_with_them() -> None:
    without, with_nodes = (lp.storage_class(REHEARSAL_STORAGE_CLASS, real_nodes=r) for r in (False, True))
    assert without["provisioner"] == "kubernetes.io/host-path" and with_nodes["provisioner"] == lp.PROVISIONER
    for sc in (without, with_nodes):
        assert sc["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
        assert (sc["reclaimPolicy"], sc["volumeBindingMode"]) == ("Delete", "Immediate")


def test_it_refuses_to_start_without_the_rehearsals_pki(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = lp.main(["--server", "https://127.0.0.1:6443", "--pki", str(tmp_path), "--root", str(tmp_path / "v"),
                    "--node", NODE, "--once"])
    assert code == 2
    assert "not a rehearsal cluster's pki directory" in capsys.readouterr().err


def test_no_product_module_imports_the_provisioner() -> None:
    """A rehearsal piece: nothing that `pulumi up` of a stack runs can reach it."""
    from tests.conftest import ROOT

    importing = [str(path.relative_to(ROOT)) for path in (ROOT / "platform").rglob("*.py")
                 if "rehearsal" not in path.relative_to(ROOT / "platform").parts and "local_provisioner" in path.read_text()]
    assert importing == []
