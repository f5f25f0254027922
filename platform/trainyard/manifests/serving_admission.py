"""Admission for serving: ValidatingAdmissionPolicies that hold tenants' InferenceServices to the reviewed rules.

The same rules as ``policy/serving.py`` (pull-request review), enforced by the API server on what a
tenant applies later. Each policy is bound to every namespace labelled ``trainyard.dev/tenant``:

- ``trainyard-isvc-runtime``: ``spec.predictor.model.runtime`` names an approved ClusterServingRuntime.
  Naming it is required: KServe's automatic runtime selection would choose among whatever is installed.
- ``trainyard-isvc-images``: every image the InferenceService sets (the model container's override,
  predictor/transformer/explainer containers and init containers, the multi-node worker's) comes from an
  approved registry and is pinned by digest.
- ``trainyard-isvc-storage``: every storage URI (``model.storageUri``, ``storageUris[].uri`` of each
  component) lies in the namespace's own model bucket, ``s3://<bucket>/...``; at least one is given.
  The bucket is the namespace's params (``serving.model-bucket`` of its ``trainyard-policy`` TenantPolicy,
  manifests/policy_params.py), so the check is a reviewed value per tenant, not a naming convention.
- ``trainyard-isvc-exposure``: an InferenceService carries ``networking.kserve.io/visibility:
  cluster-local`` unless its tenant is in ``serving.exposure.public_tenants`` (params ``serving.public``).

The params (TenantPolicies) are declared by the admission concern (``admission.tenant_params``); the bindings of
the two parameterised policies name them with ``parameterNotFoundAction: Deny``.
- ``trainyard-serving-runtimes``: no ServingRuntime, LLMInferenceService or LLMInferenceServiceConfig in
  tenant namespaces. KServe resolves a runtime name in the namespace first, so a tenant runtime named
  like an approved one would shadow it; the LLMInferenceService path (llm-d) is not part of this platform.

Ref: https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/
"""

from __future__ import annotations

import json

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests import policy_params
from trainyard.manifests.admission import binding_for, cel_list, resource_rule, validating_policy
from trainyard.manifests.concern import Concern
from trainyard.manifests.meta import Manifest
from trainyard.manifests.serving import CLUSTER_LOCAL, VISIBILITY_LABEL, enabled

GROUP, VERSION = catalog.KSERVE_API.split("/")
# The components of an InferenceService that carry a pod spec (v1beta1 InferenceServiceSpec).
COMPONENTS = ("predictor", "transformer", "explainer")
DIGEST_CEL = "@sha256:[0-9a-f]{64}$"


def _isvc_rule() -> list[dict[str, object]]:
    return [resource_rule(GROUP, VERSION, "inferenceservices")]


def _present(path: str) -> str:
    """CEL: every field on ``path`` (object.spec.x.y) is set; ``&&`` stops at the first missing one."""
    parts = path.split(".")
    return " && ".join(f"has({'.'.join(parts[:i])})" for i in range(3, len(parts) + 1))


def _list_of(path: str, item: str) -> str:
    """CEL: ``path`` (a list of objects) mapped to their ``item`` field, skipping items without it; [] if absent."""
    return f"({_present(path)} ? {path}.filter(x, has(x.{item})).map(x, x.{item}) : [])"


def _one(path: str) -> str:
    return f"({_present(path)} ? [{path}] : [])"


def images_expression() -> str:
    parts = [_one("object.spec.predictor.model.image")]
    for component in COMPONENTS:
        for field in ("containers", "initContainers"):
            parts.append(_list_of(f"object.spec.{component}.{field}", "image"))
    parts.append(_list_of("object.spec.predictor.workerSpec.containers", "image"))
    return " + ".join(parts)


def storage_uris_expression() -> str:
    parts = [_one("object.spec.predictor.model.storageUri")]
    parts += [_list_of(f"object.spec.{component}.storageUris", "uri") for component in COMPONENTS]
    return " + ".join(parts)


def runtime_policy(config: PlatformConfig) -> Manifest:
    runtime = "object.spec.predictor.model.runtime"
    return validating_policy(
        "trainyard-isvc-runtime", _isvc_rule(),
        variables=[
            {"name": "approved", "expression": cel_list(enabled(config).approved_runtimes)},
            {"name": "runtime", "expression": f"{_present(runtime)} ? {runtime} : ''"},
        ],
        validations=[{
            "expression": "variables.runtime in variables.approved",
            "messageExpression": "'spec.predictor.model.runtime must name an approved ClusterServingRuntime ('"
                                 " + variables.approved.join(', ') + '), not \"' + variables.runtime + '\"'",
        }],
    )


def images_policy(config: PlatformConfig) -> Manifest:
    return validating_policy(
        "trainyard-isvc-images", _isvc_rule(),
        variables=[
            {"name": "registries", "expression": cel_list(config.runtimes.approved_registries)},
            {"name": "images", "expression": images_expression()},
            {"name": "unapproved",
             "expression": "variables.images.filter(i, !variables.registries.exists(r, i.startsWith(r)))"},
            {"name": "unpinned", "expression": f"variables.images.filter(i, !i.matches({json.dumps(DIGEST_CEL)}))"},
        ],
        validations=[
            {"expression": "size(variables.unapproved) == 0",
             "messageExpression": "'images not from an approved registry (' + variables.registries.join(', ')"
                                  " + '): ' + variables.unapproved.join(', ')"},
            {"expression": "size(variables.unpinned) == 0",
             "messageExpression": "'images not pinned by digest (@sha256:...): ' + variables.unpinned.join(', ')"},
        ],
    )


def storage_policy() -> Manifest:
    return validating_policy(
        "trainyard-isvc-storage", _isvc_rule(),
        param_kind=policy_params.PARAM_KIND,
        variables=[
            {"name": "bucket", "expression": policy_params.value_cel(policy_params.MODEL_BUCKET)},
            {"name": "prefix", "expression": "'s3://' + variables.bucket + '/'"},
            {"name": "uris", "expression": storage_uris_expression()},
            {"name": "foreign",
             "expression": "variables.uris.filter(u, variables.bucket == '' || !u.startsWith(variables.prefix))"},
        ],
        validations=[
            {"expression": "size(variables.uris) > 0",
             "messageExpression": "'the model must come from the tenant model bucket: set spec.predictor.model.storageUri"
                                  " to ' + variables.prefix + '<path>'"},
            {"expression": "size(variables.foreign) == 0",
             "messageExpression": "'storage URIs outside this namespace\\'s model bucket (' + variables.prefix + '...): '"
                                  " + variables.foreign.join(', ')"},
        ],
    )


def exposure_policy() -> Manifest:
    label = json.dumps(VISIBILITY_LABEL)
    return validating_policy(
        "trainyard-isvc-exposure", _isvc_rule(),
        param_kind=policy_params.PARAM_KIND,
        variables=[{"name": "public", "expression": f"{policy_params.value_cel(policy_params.PUBLIC_SERVING)} == 'true'"}],
        validations=[{
            "expression": f"variables.public || (has(object.metadata.labels)"
                          f" && {label} in object.metadata.labels && object.metadata.labels[{label}] == '{CLUSTER_LOCAL}')",
            "messageExpression": f"'this tenant may not expose models outside the cluster: label the InferenceService '"
                                 f" + {label} + ': {CLUSTER_LOCAL}'",
        }],
    )


def tenant_runtimes_policy() -> Manifest:
    return validating_policy(
        "trainyard-serving-runtimes",
        # Every served version ("*"): LLMInferenceService(Config) serves v1alpha1 and v1alpha2.
        [resource_rule(GROUP, "*", resource)
         for resource in ("servingruntimes", "llminferenceservices", "llminferenceserviceconfigs")],
        validations=[{
            "expression": "false",
            "messageExpression": "'tenants may not define ' + request.kind.kind + 's; use an approved ClusterServingRuntime"
                                 " in an InferenceService (spec.predictor.model.runtime)'",
        }],
    )


def policies(config: PlatformConfig) -> list[Manifest]:
    return [runtime_policy(config), images_policy(config), storage_policy(), exposure_policy(), tenant_runtimes_policy()]


def build(config: PlatformConfig) -> Concern:
    """Serving admission: the InferenceService policies and their bindings (with serving and admission on)."""
    out: list[Manifest] = []
    if config.serving is not None and config.security.admission.enabled:
        for policy in policies(config):
            out += [policy, binding_for(policy)]
    return Concern("serving-admission", objects=tuple(out))
