"""Rule on what a TrainJob initialises from: an approved dataset and base model, at the approved version.

The same rule as the admission policy ``trainyard-trainjob-inputs`` (manifests/lineage.py); the stack's
``lineage`` section says what is approved (config/lineage.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainyard.config.lineage import (
    BASE_MODEL_REVISION_ENV,
    DATASET_DIGEST_ENV,
    DATASET_VERSION_ENV,
    RECORDED_DATASET_ENV,
    RECORDED_MODEL_ENV,
)
from trainyard.manifests.meta import Manifest
from trainyard.policy.model import Context, object_rule
from trainyard.policy.pods import as_dict, as_list, dig


def trainer_env_names(obj: Manifest) -> set[str]:
    """Every variable spec.trainer.env names, literal or ``valueFrom``."""
    return {str(as_dict(item).get("name")) for item in as_list(dig(obj, "spec", "trainer", "env"))}


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
    env, named = trainer_env(obj), trainer_env_names(obj)
    for kind, entries, pins, recorded in (
            ("dataset", approved.datasets, lambda e: ((DATASET_VERSION_ENV, e.version), (DATASET_DIGEST_ENV, e.digest)),
             RECORDED_DATASET_ENV),
            ("model", approved.base_models, lambda e: ((BASE_MODEL_REVISION_ENV, e.revision),), RECORDED_MODEL_ENV)):
        uri = dig(obj, "spec", "initializer", kind, "storageUri")
        if uri is None:
            continue
        entry = next((e for e in entries if e.uri == uri), None)
        what = "dataset" if kind == "dataset" else "base model"
        if entry is None:
            names = ", ".join(f"{e.name} ({e.uri})" for e in entries) or "none"
            yield f"spec.initializer.{kind}.storageUri {uri!r} is not an approved {what} of tenant {tenant.name} " \
                  f"(approved: {names})"
            continue
        for var, want in pins(entry):
            if env.get(var) != want:
                yield f"spec.trainer.env {var} is {env.get(var)!r}; {what} {entry.name} is approved at {want!r}"
        for var, attribute in recorded.items():
            want = str(getattr(entry, attribute))
            if var in named and env.get(var) != want:
                shown = repr(env[var]) if var in env else "not a literal value (valueFrom)"
                yield (f"spec.trainer.env {var} is {shown}; the run records it, and {what} {entry.name} is approved "
                       f"with {attribute} {want!r} (set it to that, or leave it out)")


RULES = (trainjob_approved_inputs,)
