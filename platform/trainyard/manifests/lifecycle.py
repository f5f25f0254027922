"""Which objects hold data and must survive a ``pulumi destroy``.

Deleting a CRD deletes every object of that kind cluster-wide; deleting a namespace deletes
its PersistentVolumeClaims (datasets, checkpoints). These are therefore retained on delete
always, and Pulumi-protected where the stack asks for it (``lifecycle.protect_data``).
"""

from __future__ import annotations

from trainyard.manifests.meta import Manifest, api_group

DATA_HOLDING_KINDS = frozenset(
    {"CustomResourceDefinition", "Namespace", "PersistentVolumeClaim", "PersistentVolume", "StatefulSet"}
)
# Custom resources that own data: deleting a CloudNativePG Cluster deletes its PVCs (MLflow's
# runs, models and users); a Database object is the database inside it.
DATA_HOLDING_RESOURCES = frozenset({("postgresql.cnpg.io", "Cluster"), ("postgresql.cnpg.io", "Database")})


def holds_data(obj: Manifest) -> bool:
    kind = obj.get("kind")
    return kind in DATA_HOLDING_KINDS or (kind is not None and (api_group(obj), kind) in DATA_HOLDING_RESOURCES)
