"""The MLflow section of a stack: tracking server, model registry, its PostgreSQL and backups.

MLflow runs in its own namespace with basic-auth on: one MLflow user per tenant (the credentials
every tenant namespace receives in the ``trainyard-mlflow`` Secret), ``NO_PERMISSIONS`` for
everything a user did not create, so one tenant cannot read another's runs or models
(docs/architecture.md, "MLflow tenancy"). The backend database is a CloudNativePG ``Cluster``;
artifacts are proxied by the server (``--serve-artifacts``) to the platform object store, so
tenants never hold the artifact bucket's keys.

Ref: ../shared/research/data-plane.md section 2; docs/components/mlflow.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from trainyard.config.base import Model, Name, Quantity

# The MLflow chart's container port and pod selector labels (values.yaml service.containerPort;
# templates/_helpers.tpl mlflow.selectorLabels with release name "mlflow").
MLFLOW_PORT = 5000
MLFLOW_POD_LABELS = {"app": "mlflow", "app.kubernetes.io/name": "mlflow", "app.kubernetes.io/instance": "mlflow"}


def _matching(pattern: str, what: str) -> AfterValidator:
    """A validator that accepts strings matching ``pattern`` and names ``what`` was expected otherwise."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value.rstrip("/")

    return AfterValidator(check)


# CloudNativePG's ScheduledBackup uses Go's robfig/cron with a seconds field first.
# Ref: postgresql.cnpg.io_scheduledbackups.yaml spec.schedule ("...includes the seconds specifier").
Cron6 = Annotated[str, _matching(r"^(\S+\s+){5}\S+$",
                                 "a 6-field schedule (seconds minute hour day month weekday), e.g. '0 0 2 * * *'")]
Retention = Annotated[str, _matching(r"^[1-9][0-9]*[dwm]$", "a barman retention policy (a number and d, w or m, e.g. 30d)")]
S3Prefix = Annotated[str, _matching(r"^[a-z0-9][a-z0-9._/-]*[a-z0-9]$",
                                    "a key prefix (lower-case letters, digits, '.', '_', '-', '/')")]
HttpUrl = Annotated[str, _matching(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$",
                                   "an http(s) endpoint URL without a path (e.g. http://s3.object-store.svc:8333)")]


class MlflowObjectStore(Model):
    """Where MLflow keeps artifacts and PostgreSQL keeps its backups (S3 API).

    Both buckets belong to the platform service ``mlflow``: its credentials are the object-store
    Secret ``trainyard-object-store`` in the MLflow namespace, which the object-store concern
    delivers to every platform service it lists.
    """

    endpoint_url: HttpUrl = Field(description="S3 endpoint the MLflow server and the PostgreSQL backups use.")
    artifacts_bucket: Name = Field(default="mlflow-artifacts", description="Bucket of the proxied artifact store.")
    artifacts_prefix: S3Prefix = Field(default="artifacts", description="Key prefix of artifacts inside the bucket.")
    backups_bucket: Name = Field(default="mlflow-backups", description="Bucket of PostgreSQL base backups and WAL.")


class MlflowDatabase(Model):
    """The PostgreSQL cluster (CloudNativePG) behind the tracking server and the auth store."""

    instances: int = Field(default=1, ge=1, le=9, description="PostgreSQL instances (1 primary + standbys).")
    storage_size: Quantity = Field(default="20Gi", description="PVC size of each instance.")
    storage_class: str | None = Field(default=None, description="StorageClass of the PVCs; unset = the cluster default.")
    wal_storage_size: Quantity | None = Field(
        default=None, description="Separate PVC for WAL of each instance; unset = WAL on the data volume.")
    postgresql: Literal["18", "17"] = Field(
        default="18", description="PostgreSQL major: the operand image ghcr.io/cloudnative-pg/postgresql (18: "
        "18.4-system-trixie, the operator's default; 17: 17.12-minimal-trixie, the major Debian trixie ships, which "
        "the rehearsal builds from Debian's packages). A major upgrade of an existing cluster is CloudNativePG's "
        "offline in-place upgrade (docs/components/cnpg.md).")


class MlflowBackup(Model):
    """Continuous backup (WAL archive and base backups) through the barman-cloud CNPG-I plugin.

    The plugin itself (upstream's manifest.yaml in the operator's namespace, with cert-manager
    for its two Certificates) is a site prerequisite this stack does not install: neither its
    chart nor its ObjectStore CRD is in the mirror. With backups enabled, Trainyard declares the
    ObjectStore, the Cluster's plugin entry, a ScheduledBackup and the NetworkPolicy that lets the
    operator reach the plugin; see docs/components/cnpg.md ("Backups", "Restore").
    """

    enabled: bool = Field(default=True, description="Archive WAL and take scheduled base backups to backups_bucket.")
    schedule: Cron6 = Field(default="0 0 2 * * *",
                            description="Base backup schedule, 6 fields with seconds first (CloudNativePG).")
    retention: Retention = Field(default="30d", description="How long barman keeps backups and WAL (e.g. 30d, 8w).")


class Mlflow(Model):
    """The MLflow tracking server and model registry."""

    enabled: bool = Field(default=False, description="Install MLflow, its PostgreSQL cluster and the tenant wiring.")
    namespace: Name = Field(default="mlflow", description="Namespace of the server, its database and its secrets.")
    replicas: int = Field(default=1, ge=1, description="Tracking server replicas (stateless; state is in PostgreSQL).")
    workers: int = Field(
        default=4, ge=1, le=64,
        description="Server worker processes per replica (MLflow's --workers; its default is 4). Each one holds "
        "its own copy of MLflow (about 250 MB resident, measured with 3.15.1); the rehearsal runs one.")
    server_jobs: bool = Field(
        default=False,
        description="MLflow's server-side job runner (MLFLOW_SERVER_ENABLE_JOB_EXECUTION: GenAI scorer and "
        "evaluation jobs: eight huey consumer processes beside the server, about 1.8 GB resident measured with "
        "3.15.1). Off: tracking and the model registry do not use it.")
    client_timeout_seconds: int = Field(
        default=30, ge=1, le=600,
        description="Per-request timeout of the MLflow client in approved runtimes' containers "
        "(MLFLOW_HTTP_REQUEST_TIMEOUT; MLflow's default is 120).")
    client_max_retries: int = Field(
        default=3, ge=0, le=10,
        description="Retries of a failed MLflow request in approved runtimes' containers (MLFLOW_HTTP_REQUEST_MAX_RETRIES, "
        "backoff 2, 4, 8 s ...; MLflow's default is 7, about four minutes). A training program should not wait "
        "longer on tracking than this: lora-peft keeps metrics MLflow did not take for its next flush.")
    auth: bool = Field(default=True, description="basic-auth on. Policy rule mlflow-auth-on refuses a stack without it.")
    default_permission: Literal["NO_PERMISSIONS", "READ"] = Field(
        default="NO_PERMISSIONS",
        description="What a user may do with resources it did not create. NO_PERMISSIONS isolates tenants; "
        "READ lets every tenant read every run and model.")
    tenant_sync_interval_seconds: int = Field(
        default=300, ge=30, le=86400,
        description="How often the tenant-user reconciler (a sidecar of the server) creates missing tenant users "
        "and sets their passwords to the generated ones; a rotated password takes effect within one period.")
    serving_namespaces: tuple[Name, ...] = Field(
        default=(), description="Namespaces besides tenants' that may call MLflow (e.g. KServe's, to resolve models).")
    object_store: MlflowObjectStore | None = Field(
        default=None, description="Artifact and backup buckets; required when enabled.")
    database: MlflowDatabase = Field(default=MlflowDatabase(), description="The PostgreSQL cluster.")
    backup: MlflowBackup = Field(default=MlflowBackup(), description="PostgreSQL backups to the object store.")

    @model_validator(mode="after")
    def _needs_object_store(self) -> Mlflow:
        if self.enabled and self.object_store is None:
            raise ValueError("object_store is required when MLflow is enabled (artifacts and backups live there)")
        return self
