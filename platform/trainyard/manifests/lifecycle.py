"""Which objects hold data and must survive a ``pulumi destroy``.

Deleting a CRD deletes every object of that kind cluster-wide; deleting a namespace deletes
its PersistentVolumeClaims (datasets, checkpoints). These are therefore retained on delete
always, and Pulumi-protected where the stack asks for it (``lifecycle.protect_data``).
"""

from __future__ import annotations

from typing import Any

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


# Kinds replaced (deleted, then created under the same name) when a field their CRD makes immutable changes,
# instead of failing the update. Only templates that hold nothing: a training runtime is read when a TrainJob
# starts. Trainer v2.3.0 puts the finalizer trainer.kubeflow.org/resource-in-use on a runtime TrainJobs use,
# so the delete waits until they are gone (Ref: trainer v2.3.0 pkg/controller/clustertrainingruntime_controller.go;
# docs/upgrades.md). Everything else stays refused: a Kueue
# ResourceFlavor or ClusterQueue in use would block on Kueue's finalizer, and data-holding objects never are.
REPLACED_ON_IMMUTABLE_CHANGE = frozenset({("trainer.kubeflow.org", "ClusterTrainingRuntime"),
                                          ("trainer.kubeflow.org", "TrainingRuntime")})


def immutable_fields(crd: Manifest, version: str) -> tuple[str, ...]:
    """The fields of ``version`` of a CRD that may not change once set: every property whose schema carries the
    CEL rule ``self == oldSelf`` (how upstream CRDs say "immutable"), as Pulumi property paths (``[*]`` for
    list items). An update that changes one is refused by the API server ("Value is immutable"), so the object
    must be replaced instead (components/platform.py). E.g. Trainer v2.3.0's ClusterTrainingRuntime:
    ``spec.template.spec.volumeClaimPolicies``, ``spec.template.spec.replicatedJobs[*].dependsOn``."""
    schema: dict[str, Any] = next((v.get("schema", {}).get("openAPIV3Schema", {}) for v in crd["spec"].get("versions", [])
                                   if v.get("name") == version), {})
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        if any(str(v.get("rule", "")).replace(" ", "") == "self==oldSelf"
               for v in node.get("x-kubernetes-validations") or [] if isinstance(v, dict)) and path:
            found.append(path)
            return  # the whole field is replaced: nothing below it needs naming
        for name, sub in sorted((node.get("properties") or {}).items()):
            walk(sub, f"{path}.{name}" if path else name)
        walk(node.get("items"), f"{path}[*]")

    walk(schema, "")
    return tuple(found)
