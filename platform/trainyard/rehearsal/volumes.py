"""Persistent volumes on a real node: statically provisioned ``local`` volumes, as a site without a CSI driver has them.

A claim on the rehearsal's default StorageClass is bound by kube-controller-manager's hostPath provisioner
(``cluster.py``): a root-owned directory (0750) on this machine, and a hostPath volume gets no ``fsGroup``, so a pod
that runs as a user, as every PostgreSQL instance does (uid 26, ``fsGroup: 26``), cannot write in it. A ``local``
PersistentVolume can: the kubelet applies the pod's ``fsGroup`` to it when it mounts it (group-owned, setgid,
group-writable), and its ``nodeAffinity`` pins its pod to the node whose disk it is.
Ref: https://kubernetes.io/docs/concepts/storage/volumes/#local, kubernetes pkg/volume/local/local.go (SetUpAt calls
SetVolumeOwnership); https://kubernetes.io/docs/concepts/storage/storage-classes/#local (no-provisioner,
WaitForFirstConsumer).

``node_local_volumes`` gives the StorageClass and ``count`` volumes of ``size`` backed by directories of the node,
made here. A claim asks for them with ``storageClassName: trainyard-node-local`` (the rehearsal sets it where a real
pod needs a volume: the MLflow database's ``mlflow.database.storage_class``). Shared by whatever the rehearsal
runs for real with a claim (the object store's volume too); one function so that the two do not diverge.
"""

from __future__ import annotations

from pathlib import Path

from trainyard.rehearsal.kube import Manifest

NODE_LOCAL_CLASS = "trainyard-node-local"
FIELD_MANAGER = "trainyard-rehearsal-volumes"


def node_local_volumes(node: str, directory: Path, count: int = 4, size: str = "64Gi") -> list[Manifest]:
    """The node-local StorageClass and ``count`` PersistentVolumes on ``node`` under ``directory`` (made here, 0755)."""
    storage_class: Manifest = {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": NODE_LOCAL_CLASS},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Retain"}
    volumes: list[Manifest] = [storage_class]
    for index in range(count):
        path = directory / f"pv-{index}"
        path.mkdir(parents=True, exist_ok=True)
        volumes.append({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"{node}-local-{index}", "labels": {"trainyard.dev/node-local": node}},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                     # Retain: no deleter exists for a local volume; a released one keeps its data until the node's
                     # directory goes with the rehearsal cluster (`trainyard cluster down --purge`).
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": NODE_LOCAL_CLASS,
                     "local": {"path": str(path)},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
        })
    return volumes
