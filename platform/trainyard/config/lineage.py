"""The lineage section of a stack: the approved datasets and base models TrainJobs may initialise from.

An entry names one input at one pinned version, with what a reviewer needs to approve it (licence,
source, data classification). Platform-wide entries are approved for every tenant; a tenant's own
entries for that tenant only. A TrainJob that initialises from a dataset or a base model must name an
approved entry's URI in ``spec.initializer.{dataset,model}.storageUri`` and pin its version in the
trainer's environment (``TRAINYARD_DATASET_VERSION`` + ``TRAINYARD_DATASET_DIGEST``,
``TRAINYARD_BASE_MODEL_REVISION``): rule ``trainjob-approved-inputs`` in ``trainyard check`` and the
admission policy ``trainyard-trainjob-inputs`` (manifests/lineage.py). The reference program records
the entry (name, URI, version, digest, licence, classification) in the TrainJob's MLflow run from the same
environment (``Lineage.pins`` gives all of it; docs/lab.md).

Why the version pin rides in the environment: Trainer v2.3's initializers take a URI only (no S3
version id), so the program, which reads these variables, verifies the digest and reads the pinned
version itself; the rules make sure the values it reads are the approved ones.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from trainyard.config.base import Model, Name

Classification = Literal["public", "internal", "confidential", "restricted"]
_S3_OBJECT = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\s]*[^\s/]$")
_MODEL_URI = re.compile(r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\s]+/|hf://[A-Za-z0-9][\w.-]*/[\w.-]+)$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# An S3 version id is opaque (AWS: up to 1024 bytes; SeaweedFS and MinIO: UUID-like); "null" is what S3
# reports for objects written before versioning was on, which pins nothing.
_VERSION_ID = re.compile(r"^[A-Za-z0-9._+=-]{1,1024}$")
_HF_REVISION = re.compile(r"^[0-9a-f]{40}$")


def _check(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


S3Object = Annotated[str, _check(_S3_OBJECT, "an s3://bucket/key URI of one object (no trailing '/')")]
ModelUri = Annotated[str, _check(_MODEL_URI, "s3://bucket/prefix/ (a directory, ending in '/') or hf://org/name")]
Digest = Annotated[str, _check(_DIGEST, "a content digest sha256:<64 hex digits>")]
VersionId = Annotated[str, _check(_VERSION_ID, "an S3 version id")]


class ApprovedDataset(Model):
    """One dataset object at one S3 version."""

    name: Name = Field(description="Entry name; recorded in the MLflow run (tag trainyard.dataset.name).")
    uri: S3Object = Field(description="s3://<bucket>/<key> of the JSON Lines object, in the tenant's datasets bucket.")
    version: VersionId = Field(description="The approved S3 version id of that object (the datasets bucket is versioned).")
    digest: Digest = Field(description="sha256 of that version's bytes; the program refuses other content.")
    licence: str = Field(min_length=1, description="Licence the data is used under (SPDX id or the contract's name); "
                                                   "recorded in the MLflow run (tag trainyard.dataset.licence).")
    source: str = Field(min_length=1, description="Where the data came from (URL, system, team).")
    classification: Classification = Field(
        description="Data classification of the content; recorded in the MLflow run (tag trainyard.dataset.classification).")

    @model_validator(mode="after")
    def _pins_a_version(self) -> ApprovedDataset:
        if self.version == "null":
            raise ValueError("version: 'null' is the version id of an object written before versioning was on; "
                                           "re-upload it to the versioned datasets bucket and pin the new version id")
        return self


class ApprovedModel(Model):
    """One base model at one revision."""

    name: Name = Field(description="Entry name; recorded in the MLflow run (tag trainyard.base_model.name).")
    uri: ModelUri = Field(description="Where the model initializer fetches it: s3://<bucket>/<prefix>/ or hf://<org>/<name>.")
    revision: str = Field(
        description="For s3://: sha256:<hex> over the directory's files (the program's directory_digest); for hf://: "
                    "the 40-hex commit.")
    licence: str = Field(min_length=1, description="Licence of the weights (SPDX id or the model licence's name).")
    source: str = Field(min_length=1, description="Where the weights came from (URL, vendor).")
    classification: Classification = Field(description="Classification of the weights and what they were trained on.")

    @model_validator(mode="after")
    def _revision_fits_the_uri(self) -> ApprovedModel:
        if self.uri.startswith("s3://") and not _DIGEST.match(self.revision):
            raise ValueError(f"revision {self.revision!r}: an s3:// model is pinned by its content digest "
                                            "sha256:<64 hex> (S3 has no version id for a directory)")
        if self.uri.startswith("hf://") and not _HF_REVISION.match(self.revision):
            raise ValueError(f"revision {self.revision!r}: an hf:// model is pinned by a 40-hex commit, not a "
                                            "branch or tag (they move)")
        return self


class ApprovedInputs(Model):
    """Datasets and base models approved for one scope (the platform, or one tenant)."""

    datasets: tuple[ApprovedDataset, ...] = Field(default=(), description="Approved datasets.")
    base_models: tuple[ApprovedModel, ...] = Field(default=(), description="Approved base models.")


class Lineage(ApprovedInputs):
    """Approved datasets and base models: platform-wide (``datasets``, ``base_models``) and per tenant."""

    tenants: dict[Name, ApprovedInputs] = Field(
        default_factory=dict, description="Per tenant (by name): entries approved for that tenant only.")

    def approved_for(self, tenant: str) -> ApprovedInputs:
        own = self.tenants.get(tenant, ApprovedInputs())
        return ApprovedInputs(datasets=(*self.datasets, *own.datasets), base_models=(*self.base_models, *own.base_models))

    def pins(self, tenant: str, dataset: str | None = None, model: str | None = None) -> dict[str, str]:
        """The trainer environment that pins ``dataset`` and ``model`` (initializer URIs) to the entries approved
        for ``tenant``: the pins a TrainJob must carry to pass ``trainyard-trainjob-inputs``, and the rest of the
        entry the reference program records in the MLflow run (URI, name; a dataset's licence and
        classification). ValueError names the URI that is not approved, and the approved ones."""
        approved = self.approved_for(tenant)
        env: dict[str, str] = {}
        if dataset is not None:
            entry = next((d for d in approved.datasets if d.uri == dataset), None)
            if entry is None:
                raise ValueError(f"dataset {dataset} is not approved for tenant {tenant} (lineage: "
                                 f"{', '.join(d.uri for d in approved.datasets) or 'none approved'})")
            env |= {DATASET_URI_ENV: entry.uri, DATASET_NAME_ENV: entry.name, DATASET_VERSION_ENV: entry.version,
                    DATASET_DIGEST_ENV: entry.digest, DATASET_LICENCE_ENV: entry.licence,
                    DATASET_CLASSIFICATION_ENV: entry.classification}
        if model is not None:
            found = next((m for m in approved.base_models if m.uri == model), None)
            if found is None:
                raise ValueError(f"base model {model} is not approved for tenant {tenant} (lineage: "
                                 f"{', '.join(m.uri for m in approved.base_models) or 'none approved'})")
            env |= {BASE_MODEL_URI_ENV: found.uri, BASE_MODEL_NAME_ENV: found.name, BASE_MODEL_REVISION_ENV: found.revision}
        return env

    @model_validator(mode="after")
    def _unique_names(self) -> Lineage:
        for scope, inputs in [("(platform)", ApprovedInputs(datasets=self.datasets, base_models=self.base_models)),
                              *((t, self.approved_for(t)) for t in self.tenants)]:
            for kind, entries in (("datasets", inputs.datasets), ("base_models", inputs.base_models)):
                names = [e.name for e in entries]
                repeated = sorted({n for n in names if names.count(n) > 1})
                if repeated:
                    where = kind if scope == "(platform)" else f"tenants.{scope}.{kind}"
                    raise ValueError(f"{where}: entry names must be unique (platform-wide and the tenant's together); "
                                     f"repeated: {', '.join(repeated)}")
        return self


# What the trainer reads the pins from (spec.trainer.env of the TrainJob; runtimes/programs/lora_peft.py).
DATASET_VERSION_ENV = "TRAINYARD_DATASET_VERSION"
DATASET_DIGEST_ENV = "TRAINYARD_DATASET_DIGEST"
BASE_MODEL_REVISION_ENV = "TRAINYARD_BASE_MODEL_REVISION"
# The rest of the entry, from the same environment, that the program records in the run (tags trainyard.dataset.*,
# trainyard.base_model.*). Not required (a TrainJob without them records "unrecorded"), but where a TrainJob
# sets one, review and admission hold it to the approved entry: a run cannot record another licence or
# classification than the one approved (RECORDED_DATASET_ENV, RECORDED_MODEL_ENV: variable -> entry field).
DATASET_URI_ENV = "TRAINYARD_DATASET_URI"
DATASET_NAME_ENV = "TRAINYARD_DATASET_NAME"
DATASET_LICENCE_ENV = "TRAINYARD_DATASET_LICENCE"
DATASET_CLASSIFICATION_ENV = "TRAINYARD_DATASET_CLASSIFICATION"
BASE_MODEL_URI_ENV = "TRAINYARD_BASE_MODEL_URI"
BASE_MODEL_NAME_ENV = "TRAINYARD_BASE_MODEL_NAME"
RECORDED_DATASET_ENV = {DATASET_URI_ENV: "uri", DATASET_NAME_ENV: "name", DATASET_LICENCE_ENV: "licence",
                        DATASET_CLASSIFICATION_ENV: "classification"}
RECORDED_MODEL_ENV = {BASE_MODEL_URI_ENV: "uri", BASE_MODEL_NAME_ENV: "name"}
