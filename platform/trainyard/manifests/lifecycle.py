"""Which objects hold data and must survive a ``pulumi destroy``.

Deleting a CRD deletes every object of that kind cluster-wide; deleting a namespace deletes
its PersistentVolumeClaims (datasets, checkpoints). These are therefore retained on delete
always, and Pulumi-protected where the stack asks for it (``lifecycle.protect_data``).
"""

from __future__ import annotations

from trainyard.manifests.meta import Manifest

DATA_HOLDING_KINDS = frozenset(
    {"CustomResourceDefinition", "Namespace", "PersistentVolumeClaim", "PersistentVolume", "StatefulSet"}
)


def holds_data(obj: Manifest) -> bool:
    return obj.get("kind") in DATA_HOLDING_KINDS
