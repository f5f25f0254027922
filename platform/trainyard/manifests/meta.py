"""Shared metadata conventions and the identity of a manifest."""

from __future__ import annotations

from typing import Any

Manifest = dict[str, Any]

MANAGED_BY = {"app.kubernetes.io/managed-by": "trainyard", "app.kubernetes.io/part-of": "trainyard"}
TENANT_LABEL = "trainyard.dev/tenant"
APPROVED_RUNTIME_LABEL = "trainyard.dev/approved-runtime"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
# The ResourceFlavor a pod was admitted to, written by the flavor annotation policy (admission.py) and read by
# the runtimes' TRAINYARD_KUEUE_FLAVOR. Kueue itself names the flavor on no pod field.
KUEUE_FLAVOR_ANNOTATION = "trainyard.dev/kueue-flavor"

# KServe labels every pod of an InferenceService with its name (constants.InferenceServicePodLabelKey;
# pkg/controller/v1beta1/inferenceservice/components/predictor.go at v0.20.0): the way to select predictor pods.
INFERENCE_SERVICE_POD_LABEL = "serving.kserve.io/inferenceservice"

# The LocalQueue every tenant namespace gets. Kueue's LocalQueueDefaulting assigns jobs that
# name no queue to a LocalQueue called "default" in their namespace.
# Ref: https://kueue.sigs.k8s.io/docs/concepts/local_queue/#default-localqueue
DEFAULT_LOCAL_QUEUE = "default"

# The admission policies' params: Trainyard's own kind, one object per tenant namespace (manifests/policy_params.py
# defines its CRD and fills it; the tenant Role, manifests/tenants.py, lets the tenant read it).
POLICY_PARAMS_GROUP = "trainyard.dev"
POLICY_PARAMS_PLURAL = "tenantpolicies"


def metadata(name: str, *, namespace: str | None = None, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {**MANAGED_BY, **(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def api_group(obj: Manifest) -> str:
    api_version: str = obj["apiVersion"]
    return api_version.split("/", maxsplit=1)[0] if "/" in api_version else "core"


def object_key(obj: Manifest) -> tuple[str, str, str, str]:
    """Identity of an object on a cluster: (group, kind, namespace, name). Versions do not matter."""
    meta = obj.get("metadata") or {}
    return (api_group(obj), obj["kind"], meta.get("namespace") or "", meta.get("name") or "")


def object_id(obj: Manifest) -> str:
    """A readable, stable id: ``Kind/name`` or ``Kind/namespace/name``."""
    _, kind, namespace, name = object_key(obj)
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"

# The fixed-name Secrets every tenant namespace gets from the data plane. Runtimes read them with
# envFrom, so no key is ever written into a TrainJob. Keys of the object-store Secret follow the
# AWS SDK environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_DEFAULT_REGION);
# the MLflow Secret carries MLFLOW_TRACKING_URI, MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD.
OBJECT_STORE_SECRET = "trainyard-object-store"  # noqa: S105 - a Secret name, not a secret
MLFLOW_SECRET = "trainyard-mlflow"  # noqa: S105 - a Secret name, not a secret
# Keys of a Secret that are configuration, not secrets (an endpoint URL, a region), listed comma-separated
# in this annotation so that review and policy tell them from values that must never be literal.
NON_SECRET_KEYS = "trainyard.dev/non-secret-keys"  # noqa: S105 - an annotation key
