"""Rule on what a TrainJob initialises from: an approved dataset and base model, at the approved version.

The same rule as the admission policy ``trainyard-trainjob-inputs`` (manifests/lineage.py); the stack's
``lineage`` section says what is approved (config/lineage.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainyard.config.lineage import BASE_MODEL_REVISION_ENV, DATASET_DIGEST_ENV, DATASET_VERSION_ENV
from trainyard.manifests.meta import Manifest
from trainyard.policy.model import Context, object_rule
from trainyard.policy.pods import as_dict, as_list, dig


def trainer_env(obj: Manifest) -> dict[str, str]:
    """spec.trainer.env as name -> literal value (valueFrom entries pin nothing a reviewer can see)."""
    out = {}
    for item in as_list(dig(obj, "spec", "trainer", "env")):
        var = as_dict(item)
        if isinstance(var.get("value"), str):
            out[str(var.get("name"))] = str(var["value"])
    return out


@object_rule("trainjob-approved-inputs",
             "A TrainJob initialises only from an approved dataset and base model, pinned at the approved version.",
             f"Set spec.initializer.dataset/model storageUri to an entry of lineage (platform-wide or the tenant's) and "
             f"pin it in spec.trainer.env: {DATASET_VERSION_ENV} and {DATASET_DIGEST_ENV} for a dataset, "
             f"{BASE_MODEL_REVISION_ENV} for a base model; ask the platform team to approve a new entry.",
             admission="trainyard-trainjob-inputs")
def trainjob_approved_inputs(obj: Manifest, ctx: Context) -> Iterator[str]:
    tenant = ctx.tenant_of(obj)
    if obj.get("kind") != "TrainJob" or tenant is None:
        return
    approved = ctx.config.lineage.approved_for(tenant.name)
    env = trainer_env(obj)
    dataset = dig(obj, "spec", "initializer", "dataset", "storageUri")
    if dataset is not None:
        entry = next((d for d in approved.datasets if d.uri == dataset), None)
        if entry is None:
            names = ", ".join(f"{d.name} ({d.uri})" for d in approved.datasets) or "none"
            yield f"spec.initializer.dataset.storageUri {dataset!r} is not an approved dataset of tenant {tenant.name} " \
                  f"(approved: {names})"
        else:
            for var, want in ((DATASET_VERSION_ENV, entry.version), (DATASET_DIGEST_ENV, entry.digest)):
                if env.get(var) != want:
                    yield f"spec.trainer.env {var} is {env.get(var)!r}; dataset {entry.name} is approved at {want!r}"
    model = dig(obj, "spec", "initializer", "model", "storageUri")
    if model is not None:
        found = next((m for m in approved.base_models if m.uri == model), None)
        if found is None:
            names = ", ".join(f"{m.name} ({m.uri})" for m in approved.base_models) or "none"
            yield f"spec.initializer.model.storageUri {model!r} is not an approved base model of tenant {tenant.name} " \
                  f"(approved: {names})"
        elif env.get(BASE_MODEL_REVISION_ENV) != found.revision:
            yield f"spec.trainer.env {BASE_MODEL_REVISION_ENV} is {env.get(BASE_MODEL_REVISION_ENV)!r}; base model " \
                  f"{found.name} is approved at {found.revision!r}"


RULES = (trainjob_approved_inputs,)
