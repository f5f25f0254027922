"""The local stack's MLflow, as the tests that need it declare it (the local stack has none of its own).

Rehearsal overrides (``Rehearsal(..., overrides)``, ``rehearsal_platform``): MLflow on, its artifacts and PostgreSQL
backups in the in-cluster SeaweedFS's buckets, the database at the PostgreSQL major the rehearsal builds (17), 1Gi,
backups through the barman-cloud plugin on (the node tier installs the plugin: docs/components/cnpg.md), one server
worker (the node has two cores, shared with every other tier in CI).
"""

from __future__ import annotations

from typing import Any

MLFLOW_WITH_BACKUPS: dict[str, Any] = {
    "mlflow": {"enabled": True, "workers": 1, "object_store": {"endpoint_url": "http://seaweedfs-all-in-one.object-store.svc:8333"},
               "backup": {"enabled": True}, "database": {"postgresql": "17", "storage_size": "1Gi"}},
    "object_store": {"platform_buckets": [{"name": "mlflow-artifacts"}, {"name": "mlflow-backups"}],
                     "services": [{"name": "mlflow", "namespace": "mlflow",
                                   "buckets": ["mlflow-artifacts", "mlflow-backups"]}]},
}
