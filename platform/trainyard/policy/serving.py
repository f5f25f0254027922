"""Rules on what tenants serve: an InferenceService uses an approved runtime, its own model bucket, no exposure.

The pull-request side of the admission policies in ``manifests/serving_admission.py``: the same
rules, checked by ``trainyard check`` on a tenant's InferenceService (``trainyard promote`` writes
one) before it is applied. Images set on an InferenceService are held to ``image-approved-registry``
and ``image-pinned-digest`` like every pod (``policy/pods.py`` knows where they sit).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainyard.manifests.meta import Manifest
from trainyard.manifests.serving import CLUSTER_LOCAL, VISIBILITY_LABEL, model_bucket
from trainyard.manifests.serving_admission import COMPONENTS
from trainyard.policy.model import Context, object_rule
from trainyard.policy.pods import as_dict, as_list, dig

TENANT_SERVING_KINDS = ("ServingRuntime", "LLMInferenceService", "LLMInferenceServiceConfig")


def storage_uris(obj: Manifest) -> list[tuple[str, str]]:
    """(field path, URI) of every storage URI an InferenceService downloads."""
    out: list[tuple[str, str]] = []
    uri = dig(obj, "spec", "predictor", "model", "storageUri")
    if isinstance(uri, str):
        out.append(("spec.predictor.model.storageUri", uri))
    for component in COMPONENTS:
        for i, item in enumerate(as_list(dig(obj, "spec", component, "storageUris"))):
            value = as_dict(item).get("uri")
            if isinstance(value, str):
                out.append((f"spec.{component}.storageUris[{i}].uri", value))
    return out


@object_rule("isvc-approved-runtime", "An InferenceService names an approved ClusterServingRuntime.",
             "Set spec.predictor.model.runtime to one of serving.approved_runtimes; ask the platform team to review "
             "a new runtime into serving-runtimes/.",
             admission="trainyard-isvc-runtime")
def isvc_approved_runtime(obj: Manifest, ctx: Context) -> Iterator[str]:
    if obj.get("kind") != "InferenceService" or ctx.config.serving is None:
        return
    approved = ctx.config.serving.approved_runtimes
    runtime = dig(obj, "spec", "predictor", "model", "runtime")
    if runtime is None:
        yield f"spec.predictor.model.runtime is not set (approved: {', '.join(approved)})"
    elif runtime not in approved:
        yield f"spec.predictor.model.runtime {runtime!r} is not an approved runtime ({', '.join(approved)})"


@object_rule("isvc-own-model-bucket", "An InferenceService reads its model only from its tenant's model bucket.",
             "Point storageUri at s3://<tenant model bucket>/...: `trainyard promote` resolves a registered model "
             "version to that path.",
             admission="trainyard-isvc-storage")
def isvc_own_model_bucket(obj: Manifest, ctx: Context) -> Iterator[str]:
    if obj.get("kind") != "InferenceService" or ctx.config.serving is None:
        return
    tenant = ctx.tenant_of(obj)
    if tenant is None:
        yield "is not in a tenant namespace"
        return
    prefix = f"s3://{model_bucket(ctx.config, tenant)}/"
    uris = storage_uris(obj)
    if not uris:
        yield f"sets no storage URI; the model must come from {prefix}..."
    for path, uri in uris:
        if not uri.startswith(prefix):
            yield f"{path} {uri!r} is outside tenant {tenant.name}'s model bucket ({prefix}...)"


@object_rule("isvc-no-public-exposure", "An InferenceService stays cluster-local unless its tenant may expose models.",
             f"Label the InferenceService {VISIBILITY_LABEL}: {CLUSTER_LOCAL}, or have the platform team add the "
             "tenant to serving.exposure.public_tenants.",
             admission="trainyard-isvc-exposure")
def isvc_no_public_exposure(obj: Manifest, ctx: Context) -> Iterator[str]:
    if obj.get("kind") != "InferenceService" or ctx.config.serving is None:
        return
    tenant = ctx.tenant_of(obj)
    if tenant is not None and tenant.name in ctx.config.serving.exposure.public_tenants:
        return
    labels = as_dict(dig(obj, "metadata", "labels"))
    if labels.get(VISIBILITY_LABEL) != CLUSTER_LOCAL:
        yield f"has no label {VISIBILITY_LABEL}: {CLUSTER_LOCAL}, and its tenant may not expose models"


@object_rule("serving-runtime-allowed", "Tenants define no ServingRuntimes or LLMInferenceServices.",
             "Use an approved ClusterServingRuntime in an InferenceService; a new runtime is reviewed into "
             "serving-runtimes/ by the platform team.",
             admission="trainyard-serving-runtimes")
def serving_runtime_allowed(obj: Manifest, ctx: Context) -> Iterator[str]:
    tenant = ctx.tenant_of(obj)
    if obj.get("kind") in TENANT_SERVING_KINDS and tenant is not None:
        yield f"tenant {tenant.name} may not define {obj.get('kind')}s"


RULES = (isvc_approved_runtime, isvc_own_model_bucket, isvc_no_public_exposure, serving_runtime_allowed)
