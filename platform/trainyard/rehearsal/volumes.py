"""The volumes of what runs on the real node: local PersistentVolumes under the rehearsal's state directory.

Two claims get one: the object store's and each instance of the MLflow database (``database_volumes``), the same way.

The stack declares the claim ``object-store/seaweedfs-data`` (``manifests/object_store.py``) and leaves the volume to the
site (a storage class, a CSI driver). The rehearsal is the site here, so it provides one, before ``pulumi up``:

- a **``local`` PersistentVolume** (``spec.local.path``, with the required ``nodeAffinity`` on
  ``kubernetes.io/hostname: node-0``), not a ``hostPath`` one: the kubelet's local volume plugin applies the pod's
  ``fsGroup`` to the directory at the first mount (kubernetes v1.36.3 pkg/volume/local/local.go ``SetUpAt``:
  ``volume.NewVolumeOwnership(... FsGroup ...)``), so SeaweedFS, which runs as uid/gid 1000 (restricted), can write
  it; the hostPath plugin changes no ownership;
- **pre-bound to the claim** (``claimRef`` with namespace and name, no uid) and of the claim's class (the stack's
  ``storage_class``, else the rehearsal's default class, which the claim gets at admission): the PV controller
  binds exactly this claim to it before it would ask the default class's provisioner for a new volume
  (k8s.io/component-helpers@v0.36.3 storage/volume/pv_helpers.go ``FindMatchingVolume``: a volume pre-bound to the
  claim is returned first);
- **``Retain``**, its directory at ``$TRAINYARD_CLUSTER_DIR/volumes/<namespace>/<claim>``.

The MLflow database's claims are the operator's, not the stack's: CloudNativePG names an instance's claim
``<cluster>-<serial>`` (and ``<cluster>-<serial>-wal`` with ``walStorage``), serials from 1 for a new Cluster
(cloudnative-pg@v1.30.0 pkg/reconciler/persistentvolumeclaim/calculator.go, ``GetName``), of ``storage.size`` and
``storageClass``; one volume each for instances 1..``instances`` (an instance the operator replaces later gets a new
serial, and no volume here). PostgreSQL runs as uid/gid 26 with ``fsGroup: 26``, which the local volume gets as
SeaweedFS's gets 1000.

Lifecycle (docs/architecture.md "Data survives destroy"): ``pulumi destroy`` (``make down``) keeps the claim
(``retainOnDelete``) and so the binding; ``trainyard cluster down`` stops the node and keeps the state directory,
etcd with it; the next ``up`` finds the volume and keeps it. If the claim itself was deleted (by hand), the volume is
``Released`` with the old claim's uid; the next ``up`` clears that uid, so that the claim ``pulumi up`` makes again
binds to the same data: the rehearsal's stand-in for an operator re-attaching a retained volume. Only
``trainyard cluster down --purge`` deletes the data, with the rest of the state directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests.object_store import SEAWEEDFS_DATA_CLAIM
from trainyard.rehearsal.cluster import REHEARSAL_STORAGE_CLASS
from trainyard.rehearsal.kube import Kube, Manifest
from trainyard.rehearsal.settings import ClusterError

REHEARSAL_LABEL = "trainyard.dev/rehearsal"
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True)
class NodeVolume:
    """One claim's volume on one real node, in a directory of the rehearsal's state."""

    namespace: str
    claim: str
    size: str
    storage_class: str
    node: str
    path: Path

    @property
    def name(self) -> str:
        return f"rehearsal-{self.namespace}-{self.claim}"

    def manifest(self) -> Manifest:
        return {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": self.name, "labels": {REHEARSAL_LABEL: "volume"}},
            "spec": {
                "capacity": {"storage": self.size}, "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": self.storage_class,
                "local": {"path": str(self.path)},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": HOSTNAME_LABEL, "operator": "In", "values": [self.node]}]}]}},
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": self.namespace,
                             "name": self.claim},
            },
        }


def object_store_volume(config: PlatformConfig, state_dir: Path, node: str) -> NodeVolume | None:
    """The SeaweedFS claim's volume, when the stack's SeaweedFS runs in the cluster (its chart is not external)."""
    store = config.object_store
    if store is None or store.backend != "seaweedfs" or "seaweedfs" in config.rehearsal.external_controllers:
        return None
    return NodeVolume(store.namespace, SEAWEEDFS_DATA_CLAIM, str(store.seaweedfs.volume.size),
                      store.seaweedfs.volume.storage_class or REHEARSAL_STORAGE_CLASS, node,
                      state_dir / "volumes" / store.namespace / SEAWEEDFS_DATA_CLAIM)


def database_volumes(config: PlatformConfig, state_dir: Path, node: str) -> list[NodeVolume]:
    """The MLflow database's instance volumes, when its Cluster runs here (CloudNativePG's chart installed)."""
    from trainyard.manifests.mlflow import CLUSTER

    if not config.mlflow.enabled or "cnpg" in config.rehearsal.external_controllers:
        return []
    db, namespace = config.mlflow.database, config.mlflow.namespace
    storage_class = db.storage_class or REHEARSAL_STORAGE_CLASS
    claims = [(f"{CLUSTER}-{serial}", str(db.storage_size)) for serial in range(1, db.instances + 1)]
    if db.wal_storage_size is not None:
        claims += [(f"{CLUSTER}-{serial}-wal", str(db.wal_storage_size)) for serial in range(1, db.instances + 1)]
    return [NodeVolume(namespace, claim, size, storage_class, node, state_dir / "volumes" / namespace / claim)
            for claim, size in claims]


def provide(kube: Kube, volume: NodeVolume) -> str:
    """Make the directory and the PersistentVolume (or keep the existing one); says what it did."""
    volume.path.mkdir(parents=True, exist_ok=True)
    if not kube.exists("persistentvolume", volume.name):
        kube.create(volume.manifest())
        return f"volume {volume.name}: created at {volume.path} on {volume.node} for {volume.namespace}/{volume.claim}"
    live = kube.get("persistentvolume", volume.name)
    spec = live.get("spec", {})
    if (spec.get("local") or {}).get("path") != str(volume.path) or spec.get("nodeAffinity") != \
            volume.manifest()["spec"]["nodeAffinity"]:
        raise ClusterError(f"PersistentVolume {volume.name} exists with another path or node ({spec.get('local')}, "
                           f"{spec.get('nodeAffinity')}), not {volume.path} on {volume.node}: delete it "
                           "(its data stays in its directory) or `trainyard cluster down --purge`")
    phase = (live.get("status") or {}).get("phase")
    claim_ref = spec.get("claimRef") or {}
    if phase == "Released" and claim_ref.get("uid"):
        # The claim it was bound to is gone (deleted by hand): free it for the claim of the same name, with its data.
        kube.patch("persistentvolume", volume.name, {"spec": {"claimRef": {"uid": None, "resourceVersion": None}}})
        return f"volume {volume.name}: released by a deleted claim, made available to {volume.namespace}/" \
               f"{volume.claim} again (data kept in {volume.path})"
    return f"volume {volume.name}: kept ({phase}, {volume.path})"
