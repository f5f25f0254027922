"""The object store of a stack: which S3 backend, its volumes, and each tenant's buckets.

Every tenant gets three buckets of its own (datasets, checkpoints, models), with retention
set at platform level and overridable per tenant, and one access key pair that reaches only
those three buckets. Platform services (MLflow, the database backups) get identities of the
same shape, limited to the buckets they name. Keys are generated at deploy time and never
appear here (see ``trainyard.manifests.generated``).

Backends:

- ``seaweedfs`` (Apache-2.0; Kubeflow's default object store since 1.11): one all-in-one
  server from the upstream chart, on a persistent volume that Trainyard owns and retains.
- ``minio``: the MinIO Operator and one Tenant. MinIO no longer publishes community images
  (the last community release is RELEASE.2025-10-15; Docker Hub images were deleted in 2026-09),
  so the stack must name an image mirror (``images.registry_mirror``) that holds the pinned
  images; this model refuses a minio stack without one.
- ``external``: an existing S3 endpoint that Trainyard does not run. Trainyard still creates
  the buckets and the identities, through that endpoint's MinIO-compatible admin API, with an
  admin key pair from an existing Secret (put there by the site's secret manager, never by
  the stack file).

Ref: ../shared/research/data-plane.md section 1.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from trainyard import catalog
from trainyard.config.base import Model, Name, Quantity
from trainyard.config.security import Endpoint

Purpose = Literal["datasets", "checkpoints", "models"]
PURPOSES: tuple[Purpose, ...] = ("datasets", "checkpoints", "models")

# S3 bucket names: 3-63 characters, lower-case letters, digits and '-', starting and ending with
# a letter or digit (dots are legal in S3 but break virtual-host TLS, so they are refused here).
# Ref: https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_IMAGE = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?$")
_URL = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]+)?/?$")


def _bucket_prefix(value: str) -> str:
    if value and not re.match(r"^[a-z0-9][a-z0-9-]*-$", value):
        raise ValueError(f"{value!r}: a bucket prefix is lower-case letters, digits and '-', and ends with '-'")
    return value


def _image(value: str) -> str:
    if not _IMAGE.match(value) or ("@" not in value and ":" not in value.rsplit("/", 1)[-1]):
        raise ValueError(f"{value!r} is not an image reference (registry/repository:tag, or ...@sha256:<64 hex>)")
    return value


def _endpoint_url(value: str) -> str:
    if not _URL.match(value):
        raise ValueError(f"{value!r} is not an S3 endpoint URL (http(s)://host[:port], no path)")
    return value.rstrip("/")


ImageReference = Annotated[str, AfterValidator(_image)]


class Volume(Model):
    """A persistent volume of the object store (retained on delete; protected where lifecycle.protect_data)."""

    size: Quantity = Field(default="100Gi", description="Requested size of each volume.")
    storage_class: str | None = Field(default=None, description="StorageClass of the volume; unset = the cluster default.")


class SeaweedfsSettings(Model):
    """SeaweedFS as one all-in-one server (master, volume, filer and S3 gateway in one pod).

    One pod is enough for a rehearsal and a staging cluster; the data lives on one volume that
    Trainyard declares (chart value allInOne.data.type: existingClaim), so it is Trainyard's to retain.
    """

    volume: Volume = Field(default=Volume(), description="The server's data volume (objects, filer metadata, master state).")


class MinioSettings(Model):
    """MinIO: the operator and one Tenant with one pool.

    MinIO erasure-codes a pool across all its drives; it needs at least 4 of them (servers x volumes_per_server).
    Ref: https://min.io/docs/minio/kubernetes/upstream/operations/concepts/erasure-coding.html
    """

    servers: int = Field(default=4, ge=1, description="MinIO server pods in the pool.")
    volumes_per_server: int = Field(default=4, ge=1, description="Persistent volumes per server pod.")
    volume: Volume = Field(default=Volume(size="1Ti"), description="Each of the pool's volumes.")

    @model_validator(mode="after")
    def _erasure_set(self) -> MinioSettings:
        if self.servers * self.volumes_per_server < 4:
            raise ValueError("MinIO needs at least 4 drives per pool (servers x volumes_per_server >= 4)")
        return self


class ExternalSettings(Model):
    """An S3 service Trainyard does not run. Trainyard administers it only through the admin Secret named here."""

    endpoint_url: Annotated[str, AfterValidator(_endpoint_url)] = Field(
        description="S3 endpoint the tenants' pods and the provisioning Job use (http(s)://host[:port]).")
    region: str = Field(default="us-east-1", description="Region the S3 clients sign requests for.")
    admin_secret: Name = Field(
        description="Existing Secret in the object store namespace with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
        "of an admin identity (created by the site's secret manager; Trainyard never writes or reads it back).")
    identity_api: Literal["minio-admin"] = Field(
        default="minio-admin",
        description="How identities and their policies are created: the MinIO admin API (MinIO, AIStor and compatible).")


class ObjectLock(Model):
    """S3 Object Lock default retention. It can only be enabled when the bucket is created, and turns versioning on."""

    mode: Literal["GOVERNANCE", "COMPLIANCE"] = Field(
        default="GOVERNANCE", description="GOVERNANCE: admins may bypass; COMPLIANCE: nobody may delete early.")
    days: int = Field(default=30, ge=1, description="Default retention of every new object version, in days.")


class DatasetBuckets(Model):
    """The datasets bucket: versioned always, so a TrainJob can pin the exact version it read."""

    object_lock: ObjectLock | None = Field(default=None, description="Object Lock default retention; unset = off.")
    noncurrent_days: int | None = Field(
        default=None, ge=1, description="Delete replaced dataset versions after this many days; unset = keep forever.")


class CheckpointBuckets(Model):
    """The checkpoints bucket: versioned, and expiring, because checkpoints are large and short-lived."""

    expire_after_days: int = Field(default=30, ge=1, description="Current checkpoint objects expire after N days.")
    noncurrent_days: int = Field(default=7, ge=1, description="Replaced or expired versions are kept M days, then deleted.")


class ModelBuckets(Model):
    """The models bucket: versioned; registered models are kept."""

    noncurrent_days: int | None = Field(
        default=None, ge=1, description="Delete replaced model versions after this many days; unset = keep forever.")


class Buckets(Model):
    """Retention of each tenant's three buckets."""

    datasets: DatasetBuckets = Field(default=DatasetBuckets(), description="Datasets (versioned).")
    checkpoints: CheckpointBuckets = Field(default=CheckpointBuckets(), description="Checkpoints (versioned, expiring).")
    models: ModelBuckets = Field(default=ModelBuckets(), description="Models (versioned).")


class DatasetOverride(Model):
    object_lock: ObjectLock | None = Field(default=None, description="Object Lock for this tenant's datasets bucket.")
    noncurrent_days: int | None = Field(default=None, ge=1, description="Overrides buckets.datasets.noncurrent_days.")


class CheckpointOverride(Model):
    expire_after_days: int | None = Field(default=None, ge=1, description="Overrides buckets.checkpoints.expire_after_days.")
    noncurrent_days: int | None = Field(default=None, ge=1, description="Overrides buckets.checkpoints.noncurrent_days.")


class ModelOverride(Model):
    noncurrent_days: int | None = Field(default=None, ge=1, description="Overrides buckets.models.noncurrent_days.")


class TenantObjectStore(Model):
    """One tenant's deviations from the platform defaults; every field unset = the default."""

    datasets: DatasetOverride = Field(default=DatasetOverride(), description="Datasets bucket settings.")
    checkpoints: CheckpointOverride = Field(default=CheckpointOverride(), description="Checkpoints bucket settings.")
    models: ModelOverride = Field(default=ModelOverride(), description="Models bucket settings.")
    credentials_generation: int = Field(
        default=1, ge=1, description="Raise by one to rotate the tenant's key pair (a new pair is generated on the next up).")


class ServiceIdentity(Model):
    """A platform service (MLflow, database backups, serving) that reads or writes object storage.

    It gets its own key pair, limited to ``buckets``, delivered as the fixed-name Secret
    (``trainyard-object-store``) in ``namespace``.
    """

    name: Name = Field(description="Identity name (unique among services and tenants).")
    namespace: Name = Field(description="Namespace the credentials Secret is written to.")
    buckets: tuple[Name, ...] = Field(
        min_length=1, description="Buckets it may use: names from platform_buckets, or tenant buckets by their full name.")
    access: Literal["read-write", "read-only"] = Field(default="read-write", description="What it may do in those buckets.")
    credentials_generation: int = Field(default=1, ge=1, description="Raise by one to rotate this identity's key pair.")


class PlatformBucket(Model):
    """A bucket owned by the platform rather than a tenant (MLflow artifacts, database backups)."""

    name: Name = Field(description="Bucket name (the stack's bucket_prefix is prepended).")
    versioning: bool = Field(default=True, description="Keep every version of every object.")
    expire_after_days: int | None = Field(default=None, ge=1, description="Current objects expire after N days; unset = never.")
    noncurrent_days: int | None = Field(default=None, ge=1, description="Replaced versions deleted after N days; unset = kept.")


class ObjectStore(Model):
    """Object storage for tenants and platform services (S3 API)."""

    backend: Literal["seaweedfs", "minio", "external"] = Field(
        description="seaweedfs (Apache-2.0, maintained); minio (MinIO Operator; images only from the platform mirror, "
        "MinIO publishes no community images any more); external (an existing S3 endpoint).")
    namespace: Name = Field(default="object-store", description="Namespace of the server (and of the provisioning Job).")
    region: str = Field(default="us-east-1", description="Region S3 clients sign for (in-cluster backends ignore it).")
    bucket_prefix: Annotated[str, AfterValidator(_bucket_prefix)] = Field(
        default="", description="Prepended to every bucket name (e.g. 'stg-'), so several stacks can share one endpoint.")
    seaweedfs: SeaweedfsSettings = Field(default=SeaweedfsSettings(), description="Settings of the seaweedfs backend.")
    minio: MinioSettings = Field(default=MinioSettings(), description="Settings of the minio backend.")
    external: ExternalSettings | None = Field(default=None, description="The endpoint, for backend external.")
    provisioner_image: ImageReference = Field(
        description="Image of the Job that creates buckets (and, for minio/external, identities): Python 3 with "
        "boto3 and the minio SDK (both Apache-2.0), from an approved registry, by tag; the image lock pins its "
        "digest (see docs/components/object-store.md).")
    buckets: Buckets = Field(default=Buckets(), description="Defaults for every tenant's buckets.")
    tenant_overrides: dict[Name, TenantObjectStore] = Field(
        default_factory=dict, description="Per tenant (by name): deviations from the bucket defaults, key rotation.")
    platform_buckets: tuple[PlatformBucket, ...] = Field(
        default=(), description="Buckets of platform services (e.g. mlflow-artifacts, postgres-backups).")
    services: tuple[ServiceIdentity, ...] = Field(default=(), description="Identities of platform services.")

    @model_validator(mode="after")
    def _backend_settings(self) -> ObjectStore:
        if self.backend == "external" and self.external is None:
            raise ValueError("backend 'external' needs external.endpoint_url and external.admin_secret")
        if self.backend != "external" and self.external is not None:
            raise ValueError(f"external is only read with backend 'external' (backend is {self.backend!r})")
        names = [b.name for b in self.platform_buckets]
        if len(set(names)) != len(names):
            raise ValueError("platform_buckets: names must be unique")
        services = [s.name for s in self.services]
        if len(set(services)) != len(services):
            raise ValueError("services: names must be unique")
        namespaces = [s.namespace for s in self.services]
        if len(set(namespaces)) != len(namespaces):
            # Each service's Secret has the one fixed name: one identity per namespace.
            raise ValueError("services: one identity per namespace (the credentials Secret has a fixed name); "
                             "list all the buckets of a namespace's services under one identity")
        return self

    def tenant_bucket(self, tenant: str, purpose: Purpose) -> str:
        """Buckets per tenant, not prefixes in shared buckets (docs/architecture.md says why)."""
        return f"{self.bucket_prefix}{tenant}-{purpose}"

    def platform_bucket(self, name: str) -> str:
        return f"{self.bucket_prefix}{name}"

    def tenant_settings(self, tenant: str) -> TenantObjectStore:
        return self.tenant_overrides.get(tenant, TenantObjectStore())

    def endpoint_url(self) -> str:
        """The S3 endpoint URL pods in the cluster use."""
        if self.backend == "seaweedfs":
            return f"http://{catalog.SEAWEEDFS_RELEASE}-all-in-one.{self.namespace}.svc:{catalog.SEAWEEDFS_S3_PORT}"
        if self.backend == "minio":
            # The operator's Service "minio" serves the S3 API on port 80 when the Tenant has no TLS
            # (minio/operator pkg/resources/services/service.go NewClusterIPForMinIO: MinIOPortLoadBalancerSVC
            # 80, target MinIOPort 9000; pkg/apis/minio.min.io/v2/constants.go).
            return f"http://minio.{self.namespace}.svc:80"
        assert self.external is not None
        return self.external.endpoint_url

    def server_endpoint(self) -> Endpoint | None:
        """Where the in-cluster S3 server's pods listen (None for external: the stack names its networks)."""
        if self.backend == "seaweedfs":
            return Endpoint(namespace=self.namespace, pod_labels=dict(catalog.SEAWEEDFS_POD_LABELS),
                            ports=(catalog.SEAWEEDFS_S3_PORT,))
        if self.backend == "minio":
            return Endpoint(namespace=self.namespace, pod_labels={catalog.MINIO_TENANT_LABEL: MINIO_TENANT_NAME},
                            ports=(catalog.MINIO_S3_PORT,))
        return None


# The name of the one MinIO Tenant (and of the tenant chart's release).
MINIO_TENANT_NAME = "trainyard"


__all__ = ["BUCKET_NAME", "PURPOSES", "ObjectStore", "Purpose", "ServiceIdentity", "TenantObjectStore"]
