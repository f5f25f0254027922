"""The rehearsal's volume provisioner for real nodes: a claim of the default class gets a ``local`` volume on node-0.

Without real nodes the rehearsal's default StorageClass is kube-controller-manager's own hostPath provisioner
(``cluster.py``, ``--enable-hostpath-provisioner``): no pod reads the volume. With a real node a pod does, and that
provisioner is not fit for it: it makes each directory as root with mode 0750 (kubernetes v1.36.3
``pkg/volume/hostpath/host_path.go``, ``Provision``: ``os.MkdirAll(..., 0750)``) and the hostPath plugin applies no
``fsGroup`` (its mounter's ``GetAttributes``: ``Managed: false``), so the restricted pods of a TrainJob (uid 1000) could
not write their claim: the ``initializer`` claim Trainer's ``lora-*`` runtimes share between the dataset and model
initializers and the trainer (``volumeClaimPolicies``) is the first that needs it.

So with real nodes the default class names this provisioner (``PROVISIONER``) and this process does what an external
provisioner does (the protocol kubernetes-csi/external-provisioner and sig-storage-lib-external-provisioner follow):

- **provisioning**: the PV controller marks a claim of a class whose provisioner is not in-tree with
  ``volume.kubernetes.io/storage-provisioner: <provisioner>`` (and the beta annotation) and waits (kubernetes v1.36.3
  ``pkg/controller/volume/persistentvolume/pv_controller.go``, ``provisionClaimOperationExternal`` ->
  ``pv_controller_base.go`` ``setClaimProvisioner``; event ``ExternalProvisioning``). For each such claim of ours,
  still Pending and unbound, this makes a directory under ``$TRAINYARD_STATE_DIR/volumes/dynamic/`` and a
  PersistentVolume ``pvc-<claim uid>`` (the name external provisioners give) of the claim's class, size, access modes
  and volume mode, the class's reclaim policy, pre-bound to the claim
  (``claimRef`` with its uid), annotated ``pv.kubernetes.io/provisioned-by: <provisioner>``; the PV controller then
  binds the two. The volume is ``local`` with the required ``nodeAffinity`` on the node, as ``volumes.py`` makes the
  object store's, so the kubelet applies the pod's ``fsGroup`` at the first mount (``pkg/volume/local/local.go``
  ``SetUpAt``) and uid 1000 writes it. A claim with ``volume.kubernetes.io/selected-node`` (a class with
  ``WaitForFirstConsumer``) is provisioned only for this node.
- **deleting**: a volume of ours that is ``Released`` with reclaim policy ``Delete`` is left to its provisioner by the
  PV controller (``deleteVolumeOperation``: ``findDeletablePlugin`` returns none for a provisioned-by name outside
  ``kubernetes.io/``, "External deleter for volume requested, ignoring"); this removes its directory and then the
  PersistentVolume. A ``Retain`` volume is never touched.

What it does not do: enforce the size (a local directory has no quota; the capacity is what the claim asked for, as
the hostPath provisioner also wrote it), resize, snapshot or clone. The object store's and the MLflow database's
claims keep their pre-bound ``Retain`` volumes (``volumes.py``): a volume pre-bound to a claim is bound before anything
is provisioned for it.

Its identity is a client certificate ``trainyard:local-provisioner``. Like the cert-manager stand-in it is a rehearsal
piece: it lives in ``trainyard.rehearsal``, connects only to a loopback API server with the rehearsal cluster's own
CA, and runs only with real nodes. Run as ``python -m trainyard.rehearsal.local_provisioner --server URL --pki DIR
--root DIR --node NAME`` (pid file and log like every rehearsal process); it looks every ``--interval`` seconds (1),
and SIGTERM stops it.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainyard.rehearsal import api_loop
from trainyard.rehearsal.api_client import ApiClient, ApiError, Obj
from trainyard.rehearsal.api_loop import missing_pki, run_passes, stop_on_signals

PROVISIONER = "trainyard.dev/rehearsal-local"
PROCESS = "local-provisioner"  # its pid file and log, beside the control plane's
USER = "trainyard:local-provisioner"
CLIENT_CERT = "local-provisioner"  # pki/<name>.crt, .key
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"  # the PV controller's mark on a claim
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
HOSTNAME_LABEL = "kubernetes.io/hostname"
CLAIMS = "/api/v1/persistentvolumeclaims"
VOLUMES = "/api/v1/persistentvolumes"
STORAGE_CLASSES = "/apis/storage.k8s.io/v1/storageclasses"


def volume_name(claim: Obj) -> str:
    return f"pvc-{claim['metadata']['uid']}"


def wants_us(claim: Obj, node: str) -> bool:
    """A claim the PV controller handed to this provisioner, not bound yet, and (where a scheduler chose) for ``node``."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    annotations = meta.get("annotations") or {}
    if annotations.get(STORAGE_PROVISIONER) != PROVISIONER or spec.get("volumeName") or meta.get("deletionTimestamp"):
        return False
    if (claim.get("status") or {}).get("phase", "Pending") != "Pending":
        return False
    return bool(annotations.get(SELECTED_NODE, node) == node)


def volume_for(claim: Obj, storage_class: Obj | None, root: Path, node: str) -> Obj:
    """The PersistentVolume for ``claim``: local, on ``node``, pre-bound to the claim by uid."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    name = volume_name(claim)
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if not size:
        raise ValueError(f"claim {meta['namespace']}/{meta['name']} requests no storage")
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "persistentVolumeReclaimPolicy": (storage_class or {}).get("reclaimPolicy") or "Delete",
            "storageClassName": spec.get("storageClassName") or "",
            "mountOptions": list((storage_class or {}).get("mountOptions") or []),
            "local": {"path": str(root / name)},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}]}},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                         "name": meta["name"], "uid": meta["uid"]},
        },
    }


def deletable(volume: Obj) -> bool:
    """A volume of ours that its claim released and whose policy is Delete."""
    annotations = volume["metadata"].get("annotations") or {}
    return (annotations.get(PROVISIONED_BY) == PROVISIONER
            and (volume.get("spec") or {}).get("persistentVolumeReclaimPolicy") == "Delete"
            and (volume.get("status") or {}).get("phase") == "Released")


class LocalProvisioner:
    """One pass at a time over the claims handed to it and the volumes it made (``run`` repeats it)."""

    def __init__(self, api: ApiClient, root: Path, node: str, log: Callable[[str], None] = print) -> None:
        self.api = api
        self.root = root
        self.node = node
        self.log = log

    def pass_once(self) -> list[str]:
        done: list[str] = []
        classes = {c["metadata"]["name"]: c for c in self.api.items(STORAGE_CLASSES)}
        for claim in self.api.items(CLAIMS):
            if wants_us(claim, self.node):
                done += self.provision(claim, classes.get((claim.get("spec") or {}).get("storageClassName") or ""))
        for volume in self.api.items(VOLUMES):
            if deletable(volume):
                done += self.delete(volume)
        return done

    def provision(self, claim: Obj, storage_class: Obj | None) -> list[str]:
        meta = claim["metadata"]
        shown = f"claim {meta['namespace']}/{meta['name']}"
        try:
            volume = volume_for(claim, storage_class, self.root, self.node)
        except ValueError as error:
            return [f"{shown}: not provisioned ({error})"]
        name = volume["metadata"]["name"]
        if self.api.get(f"{VOLUMES}/{name}") is not None:
            return []  # made in an earlier pass; the PV controller binds it
        path = Path(volume["spec"]["local"]["path"])
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)  # the kubelet gives the pod's fsGroup group ownership and write at the first mount
        self.api.request("POST", VOLUMES, volume)
        return [f"{shown}: volume {name} ({volume['spec']['capacity']['storage']}, "
                f"{volume['spec']['persistentVolumeReclaimPolicy']}) at {path} on {self.node}"]

    def delete(self, volume: Obj) -> list[str]:
        name = volume["metadata"]["name"]
        path = Path(((volume.get("spec") or {}).get("local") or {}).get("path") or "")
        # Only a directory this provisioner made: directly under its root, named after the volume.
        if path.parent != self.root or path.name != name:
            return [f"volume {name}: not deleted (its path {path} is not {self.root / name})"]
        shutil.rmtree(path, ignore_errors=True)
        self.api.request("DELETE", f"{VOLUMES}/{name}")
        claim = (volume.get("spec") or {}).get("claimRef") or {}
        return [f"volume {name}: released by {claim.get('namespace')}/{claim.get('name')}, deleted with {path}"]

    def run(self, interval: float, stop: Callable[[], bool]) -> None:
        run_passes(self.pass_once, interval, stop, self.log, (ApiError, OSError, KeyError))

def storage_class(name: str, real_nodes: bool) -> dict[str, Any]:
    """The rehearsal's default StorageClass: this provisioner with real nodes, kube-controller-manager's hostPath
    provisioner without (no pod reads a volume there)."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": PROVISIONER if real_nodes else "kubernetes.io/host-path", "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate"}


# ---------------------------------------------------------------- the process


def command(python: str, server: str, pki: Path, root: Path, node: str, interval: float = 1) -> list[str]:
    return [python, "-m", "trainyard.rehearsal.local_provisioner", "--server", server, "--pki", str(pki),
            "--root", str(root), "--node", node, "--interval", f"{interval:g}"]


def client(server: str, pki: Path) -> ApiClient:
    """The provisioner's client: its own certificate, the cluster's CA, a loopback server only."""
    return api_loop.client(server, pki, CLIENT_CERT, PROCESS)


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    del env
    parser = api_loop.arguments("local_provisioner", "The rehearsal's local volume provisioner (rehearsal clusters "
                                "only).", interval=1.0)
    parser.add_argument("--root", required=True, type=Path, help="the directory the volumes are made in")
    parser.add_argument("--node", required=True, help="the real node the volumes are on")
    args = parser.parse_args(argv)
    missing = missing_pki(args.pki, CLIENT_CERT)
    if missing:
        print(f"local-provisioner: not a rehearsal cluster's pki directory (missing {', '.join(missing)}): it runs only "
              "with the cluster `trainyard cluster up --real-nodes` starts", file=sys.stderr)
        return 2
    try:
        provisioner = LocalProvisioner(client(args.server, args.pki), args.root.resolve(), args.node,
                                       lambda line: print(line, flush=True))
    except ValueError as error:
        print(f"local-provisioner: {error}", file=sys.stderr)
        return 2
    stopped = stop_on_signals()
    print(f"local-provisioner: {args.server}, provisioner {PROVISIONER}, volumes in {provisioner.root} on {args.node}",
          flush=True)
    if args.once:
        for line in provisioner.pass_once():
            print(line, flush=True)
        return 0
    provisioner.run(args.interval, stopped)
    return 0

if __name__ == "__main__":
    sys.exit(main())
