"""Object storage: the S3 server, its buckets, and one key pair per tenant and per platform service.

What ``build`` declares (``docs/components/object-store.md`` for operators):

- the ``object-store`` namespace (Pod Security restricted) and its NetworkPolicies: ingress only
  on the S3 port, only from tenant namespaces, the namespaces of the named services and the
  namespace itself (the provisioning Job); MinIO's operator also reaches its Tenant;
- the backend: SeaweedFS (one all-in-one server from the upstream chart, data on a
  Trainyard-owned PersistentVolumeClaim) or the MinIO Operator and a Tenant (both charts; the
  pool's PVCs come from the Tenant's volumeClaimTemplate), or nothing (external);
- the identities: for SeaweedFS the identities file it reads (``-s3.config``, a Secret), with one
  identity per tenant allowed Read/Write/List/Tagging on its own three buckets only; for MinIO and
  external endpoints the same grants as AWS policy documents, applied by the Job;
- the provisioning Job, whose name carries a hash of everything it applies, so a changed plan is
  a new Job (Pulumi replaces it) and an unchanged one is left alone;
- in each tenant namespace the fixed-name Secret ``trainyard-object-store`` (AWS_* variables),
  and the same Secret in each named service's namespace (``service_credentials``).

Every key is a ``${generated:...}`` placeholder here; the Pulumi component generates the value
once, keeps it only as a Pulumi secret and substitutes it. Nothing in this module is random.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainyard import catalog
from trainyard.config.model import PlatformConfig, Tenant
from trainyard.config.object_store import MINIO_TENANT_NAME, PURPOSES, ObjectStore, Purpose, ServiceIdentity
from trainyard.manifests import placement
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.concern import Concern
from trainyard.manifests.generated import GeneratedValue
from trainyard.manifests.installs import COMPONENT_LABEL, component_version, upstream_image
from trainyard.manifests.meta import NON_SECRET_KEYS, OBJECT_STORE_SECRET, TENANT_LABEL, Manifest, metadata
from trainyard.manifests.network import NAMESPACE_NAME_LABEL
from trainyard.supply.lock import ImageLock
from trainyard.supply.reference import ImageRef, mirrored

COMPONENT = "object-store"
LABELS = {COMPONENT_LABEL: COMPONENT}
SEAWEEDFS_RELEASE = catalog.SEAWEEDFS_RELEASE
SEAWEEDFS_DATA_CLAIM = "seaweedfs-data"
SEAWEEDFS_IDENTITIES_SECRET = "seaweedfs-s3-identities"  # noqa: S105 - a Secret's name
# The key the SeaweedFS chart mounts the identities file from (templates/all-in-one/all-in-one-deployment.yaml:
# -s3.config=/etc/sw/s3/seaweedfs_s3_config, volume config-s3-users from existingConfigSecret).
SEAWEEDFS_IDENTITIES_KEY = "seaweedfs_s3_config"
MINIO_CONFIG_SECRET = "minio-root-config"  # noqa: S105 - a Secret's name
ADMIN_SECRET = "object-store-admin"  # noqa: S105 - a Secret's name
PROVISIONING_CONFIG = "object-store-provisioning"
PROVISIONING_IDENTITIES = "object-store-provisioning-identities"
PROVISIONER_LABEL = "trainyard.dev/object-store-provisioner"
PROVISIONING_SCRIPT = Path(__file__).resolve().parent.parent / "provisioning" / "object_store.py"

# SeaweedFS actions a read-write identity gets on each of its buckets; read-only gets Read and List.
# Ref: weed/s3api/s3_constants/s3_actions.go; Identity.CanDo in weed/s3api/auth_credentials.go
# matches "<Action>:<bucket>" against the bucket of each request.
SEAWEEDFS_READ_WRITE = ("Read", "Write", "List", "Tagging")
SEAWEEDFS_READ_ONLY = ("Read", "List")
# The same grants as AWS policy actions (MinIO and external endpoints).
S3_READ = ("s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectTagging", "s3:GetObjectVersionTagging")
S3_LIST = ("s3:ListBucket", "s3:ListBucketVersions", "s3:GetBucketLocation", "s3:GetBucketVersioning",
           "s3:ListBucketMultipartUploads")
S3_WRITE = ("s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObjectTagging",
            "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts")


@dataclass(frozen=True)
class Identity:
    """One S3 identity Trainyard manages: who, which buckets, and the names of its generated keys."""

    name: str
    buckets: tuple[str, ...]
    access: str
    generation: int

    @property
    def access_key(self) -> GeneratedValue:
        return GeneratedValue(f"object-store/{self.name}/g{self.generation}/access-key", length=20, alphabet="access-key")

    @property
    def secret_key(self) -> GeneratedValue:
        return GeneratedValue(f"object-store/{self.name}/g{self.generation}/secret-key", length=40)


# The platform's own admin identity: the provisioning Job creates buckets with it (SeaweedFS: an
# "Admin" identity in the identities file; MinIO: the Tenant's root user).
ADMIN = Identity("trainyard-admin", (), "admin", 1)


def _store(config: PlatformConfig) -> ObjectStore:
    if config.object_store is None:
        raise ValueError("the stack has no object_store section")
    return config.object_store


def bucket_name(config: PlatformConfig, tenant: Tenant | str, purpose: Purpose) -> str:
    """The bucket of ``tenant`` for ``purpose`` (datasets, checkpoints or models)."""
    if purpose not in PURPOSES:
        raise ValueError(f"purpose {purpose!r} is not one of {', '.join(PURPOSES)}")
    return _store(config).tenant_bucket(tenant if isinstance(tenant, str) else tenant.name, purpose)


def endpoint_url(config: PlatformConfig) -> str:
    """The S3 endpoint URL pods in the cluster use (the stack's object store says: config.object_store)."""
    return _store(config).endpoint_url()


def region(config: PlatformConfig) -> str:
    store = _store(config)
    return store.external.region if store.external is not None else store.region


def tenant_identity(config: PlatformConfig, tenant: Tenant) -> Identity:
    store = _store(config)
    return Identity(f"tenant-{tenant.name}", tuple(bucket_name(config, tenant, p) for p in PURPOSES), "read-write",
                    store.tenant_settings(tenant.name).credentials_generation)


def service_identity(config: PlatformConfig, service: ServiceIdentity) -> Identity:
    store = _store(config)
    platform = {b.name for b in store.platform_buckets}
    buckets = tuple(store.platform_bucket(b) if b in platform else b for b in service.buckets)
    return Identity(f"service-{service.name}", buckets, service.access, service.credentials_generation)


def serving_identity(config: PlatformConfig, tenant: Tenant) -> Identity:
    """The tenant's read-only identity for its models bucket: what KServe's storage initializer uses.

    Rotated with the tenant's credentials (same generation). manifests/serving.py writes its keys into
    the tenant's serving Secret; the S3 server learns them here, with every other identity.
    """
    store = _store(config)
    return Identity(f"serving-{tenant.name}", (bucket_name(config, tenant, "models"),), "read-only",
                    store.tenant_settings(tenant.name).credentials_generation)


def identities(config: PlatformConfig) -> list[Identity]:
    """Every managed identity except the admin: tenants, their serving identities (with serving), then services."""
    store = _store(config)
    serving = [serving_identity(config, t) for t in config.tenants] if config.serving is not None else []
    return [tenant_identity(config, t) for t in config.tenants] + serving + \
        [service_identity(config, s) for s in store.services]


# ------------------------------------------------------------------------------------------ buckets

def _lifecycle(expire_days: int | None, noncurrent_days: int | None) -> list[dict[str, Any]]:
    """S3 lifecycle rules; SeaweedFS implements expiry (not transitions), MinIO both.

    Ref: https://docs.aws.amazon.com/AmazonS3/latest/API/API_LifecycleRule.html
    """
    rules: list[dict[str, Any]] = []
    if expire_days is not None:
        rules.append({"ID": "expire-current", "Filter": {"Prefix": ""}, "Status": "Enabled",
                      "Expiration": {"Days": expire_days}})
    if noncurrent_days is not None:
        rules.append({"ID": "expire-noncurrent", "Filter": {"Prefix": ""}, "Status": "Enabled",
                      "NoncurrentVersionExpiration": {"NoncurrentDays": noncurrent_days}})
    return rules


def tenant_buckets(config: PlatformConfig, tenant: Tenant) -> list[dict[str, Any]]:
    """The three buckets of ``tenant`` with their effective settings (defaults, then the tenant's overrides)."""
    store = _store(config)
    defaults, own = store.buckets, store.tenant_settings(tenant.name)
    lock = own.datasets.object_lock or defaults.datasets.object_lock
    datasets_noncurrent = own.datasets.noncurrent_days or defaults.datasets.noncurrent_days
    checkpoints_expire = own.checkpoints.expire_after_days or defaults.checkpoints.expire_after_days
    checkpoints_noncurrent = own.checkpoints.noncurrent_days or defaults.checkpoints.noncurrent_days
    models_noncurrent = own.models.noncurrent_days or defaults.models.noncurrent_days
    return [
        {"name": bucket_name(config, tenant, "datasets"), "versioning": True,
         "objectLock": {"mode": lock.mode, "days": lock.days} if lock else None,
         "lifecycle": _lifecycle(None, datasets_noncurrent)},
        {"name": bucket_name(config, tenant, "checkpoints"), "versioning": True, "objectLock": None,
         "lifecycle": _lifecycle(checkpoints_expire, checkpoints_noncurrent)},
        {"name": bucket_name(config, tenant, "models"), "versioning": True, "objectLock": None,
         "lifecycle": _lifecycle(None, models_noncurrent)},
    ]


def buckets(config: PlatformConfig) -> list[dict[str, Any]]:
    store = _store(config)
    out = [b for t in config.tenants for b in tenant_buckets(config, t)]
    out += [{"name": store.platform_bucket(b.name), "versioning": b.versioning, "objectLock": None,
             "lifecycle": _lifecycle(b.expire_after_days, b.noncurrent_days)} for b in store.platform_buckets]
    return out


# ------------------------------------------------------------------------------------- identities

def seaweedfs_actions(identity: Identity) -> list[str]:
    actions = SEAWEEDFS_READ_ONLY if identity.access == "read-only" else SEAWEEDFS_READ_WRITE
    return [f"{action}:{bucket}" for bucket in identity.buckets for action in actions]


def seaweedfs_identities(config: PlatformConfig) -> dict[str, Any]:
    """The identities file SeaweedFS reads with ``-s3.config`` (protojson of iam_pb.S3ApiConfiguration).

    No identity is named ``anonymous``, so unauthenticated requests are refused on every bucket.
    Ref: weed/pb/iam.proto (S3ApiConfiguration, Identity, Credential); docker/compose/s3.json.
    """
    def entry(identity: Identity, actions: list[str]) -> dict[str, Any]:
        return {"name": identity.name,
                "credentials": [{"accessKey": identity.access_key.placeholder,
                                 "secretKey": identity.secret_key.placeholder}],
                "actions": actions}

    return {"identities": [entry(ADMIN, ["Admin", "Read", "Write", "List", "Tagging"]),
                           *(entry(i, seaweedfs_actions(i)) for i in identities(config))]}


def aws_policy(identity: Identity) -> dict[str, Any]:
    """The identity's grants as an AWS policy document (ListBucket needs the bare bucket ARN)."""
    object_actions = S3_READ if identity.access == "read-only" else S3_READ + S3_WRITE
    return {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": list(S3_LIST), "Resource": [f"arn:aws:s3:::{b}" for b in identity.buckets]},
        {"Effect": "Allow", "Action": list(object_actions), "Resource": [f"arn:aws:s3:::{b}/*" for b in identity.buckets]},
    ]}


def provisioning_plan(config: PlatformConfig) -> dict[str, Any]:
    """What the provisioning Job applies: buckets always; identities where the server has an admin API for them."""
    store = _store(config)
    plan: dict[str, Any] = {"backend": store.backend, "buckets": buckets(config)}
    if store.backend in ("minio", "external"):
        plan["identityApi"] = "minio-admin"
        plan["identities"] = [{"name": i.name, "policy": aws_policy(i)} for i in identities(config)]
    return plan


def _identity_keys(config: PlatformConfig) -> list[dict[str, str]]:
    return [{"name": i.name, "accessKey": i.access_key.placeholder, "secretKey": i.secret_key.placeholder}
            for i in identities(config)]


# -------------------------------------------------------------------------------------- objects

def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def _hash(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _secret(name: str, namespace: str, data: dict[str, str], labels: dict[str, str],
            non_secret: tuple[str, ...] = ()) -> Manifest:
    annotations = {NON_SECRET_KEYS: ",".join(non_secret)} if non_secret else None
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": metadata(name, namespace=namespace, labels=labels, annotations=annotations),
            "type": "Opaque", "stringData": dict(data)}


def credentials_secret(config: PlatformConfig, identity: Identity, namespace: str, labels: dict[str, str]) -> Manifest:
    """The fixed-name Secret runtimes ``envFrom``: the AWS SDK environment (boto3, s3fs, the Trainer initializers)."""
    return _secret(OBJECT_STORE_SECRET, namespace, {
        "AWS_ACCESS_KEY_ID": identity.access_key.placeholder,
        "AWS_SECRET_ACCESS_KEY": identity.secret_key.placeholder,
        "AWS_ENDPOINT_URL": endpoint_url(config),
        "AWS_DEFAULT_REGION": region(config),
    }, labels, non_secret=("AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"))


def namespace(store: ObjectStore, name: str | None = None) -> Manifest:
    from trainyard.manifests.tenants import PSA_LABELS

    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": metadata(name or store.namespace, labels={**LABELS, **PSA_LABELS})}


# The uid/gid the object store's pods run as: SeaweedFS's own user (its image's `seaweed`, 1000) and the provisioner's
# (its image's USER 1000:1000, provisioning/image/Containerfile).
RESTRICTED_USER = 1000


def _restricted_pod() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": RESTRICTED_USER, "runAsGroup": RESTRICTED_USER, "fsGroup": RESTRICTED_USER,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _restricted_container() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def provisioner_image(config: PlatformConfig, lock: ImageLock) -> str:
    """The provisioning Job's image as the cluster pulls it: the stack's reference, pinned by the image lock."""
    return str(lock.pin(ImageRef.parse(_store(config).provisioner_image)))


def provisioning_objects(config: PlatformConfig, lock: ImageLock | None = None) -> list[Manifest]:
    """ConfigMap (script and plan), the identities' keys (a Secret, MinIO/external only), the Job named by their hash."""
    store = _store(config)
    image = provisioner_image(config, lock if lock is not None else ImageLock())
    script = PROVISIONING_SCRIPT.read_text(encoding="utf-8")
    plan = _json(provisioning_plan(config))
    # SeaweedFS reads its identities from its own file; only an admin API needs the keys handed over.
    keys = _json(_identity_keys(config)) if "identities" in provisioning_plan(config) else None
    admin_secret = store.external.admin_secret if store.external is not None else ADMIN_SECRET
    # Where the Job runs is part of its (immutable) template: a new placement is a new Job, like any new input. A
    # stack without system_pods hashes exactly what it did before.
    where = placement.pod_placement(config)
    digest = _hash(script, plan, keys or "", image, admin_secret, endpoint_url(config), *([_json(where)] if where else []))
    labels = {**LABELS, PROVISIONER_LABEL: "true"}
    ns = store.namespace
    out: list[Manifest] = [{"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": metadata(PROVISIONING_CONFIG, namespace=ns, labels=LABELS),
                            "data": {"object_store.py": script, "plan.json": plan}}]
    mounts = [{"name": "provision", "mountPath": "/provision", "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "provision", "configMap": {"name": PROVISIONING_CONFIG}}]
    if keys is not None:
        out.append(_secret(PROVISIONING_IDENTITIES, ns, {"identities.json": keys}, LABELS))
        mounts.append({"name": "identities", "mountPath": "/identities", "readOnly": True})
        volumes.append({"name": "identities", "secret": {"secretName": PROVISIONING_IDENTITIES}})
    out.append({
        "apiVersion": "batch/v1",
        "kind": "Job",
        # A new name for new inputs: Pulumi replaces the Job, which runs the reconciliation again.
        "metadata": metadata(f"object-store-provision-{digest[:10]}", namespace=ns, labels=labels,
                             annotations={"trainyard.dev/inputs-sha256": digest}),
        "spec": {
            "backoffLimit": 10,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "automountServiceAccountToken": False,
                    **where,
                    "securityContext": _restricted_pod(),
                    "containers": [{
                        "name": "provision",
                        "image": image,
                        "command": ["python3", "/provision/object_store.py", "/provision/plan.json",
                                    "/identities/identities.json"],
                        "env": [{"name": "AWS_ENDPOINT_URL", "value": endpoint_url(config)},
                                {"name": "AWS_DEFAULT_REGION", "value": region(config)}],
                        "envFrom": [{"secretRef": {"name": admin_secret}}],
                        "securityContext": _restricted_container(),
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                      "limits": {"cpu": "500m", "memory": "256Mi"}},
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    })
    return out


def _admin_secret(store: ObjectStore) -> Manifest:
    return _secret(ADMIN_SECRET, store.namespace, {"AWS_ACCESS_KEY_ID": ADMIN.access_key.placeholder,
                                                   "AWS_SECRET_ACCESS_KEY": ADMIN.secret_key.placeholder}, LABELS)


def _image(config: PlatformConfig, component: str, lock: ImageLock) -> ImageRef:
    """The image the cluster pulls: upstream or under the stack's mirror, pinned by the stack's image lock."""
    return lock.pin(mirrored(upstream_image(config, component), config.images.registry_mirror))


def _tag(image: ImageRef) -> str:
    # As installs._tag: "<tag>@<digest>" makes the charts' "<repository>:<tag>" pull by digest.
    return image.tag_with_digest


def _chart(config: PlatformConfig, component: str, name: str, namespace_name: str, values: dict[str, Any]) -> ChartRelease:
    pinned = catalog.release(component, component_version(config, component))
    chart, _, _ = pinned.installed()
    backend = "minio" if component.startswith("minio") else component
    return ChartRelease(name=name, component=component, chart=chart.chart, repo=chart.repo,
                        version=pinned.version, namespace=namespace_name, values=values,
                        external=backend in config.rehearsal.external_controllers)


# One volume per growth, not seven. Every bucket is its own SeaweedFS collection, and a collection's first write
# grows ``master.volume_growth.copy_1`` volumes (default 7, weed/server/master_server.go) out of the server's slots
# (``-volume.max`` 0 in the chart's values: free disk / ``volumeSizeLimitMB``). With a bucket per tenant and kind,
# the slots run out on a modest disk and a PUT fails with InternalError ("no free volumes"); upstream's own
# single-process ``weed mini`` grows one at a time for this reason (weed/command/mini.go
# ensureMiniVolumeGrowthDefaults). Read from master.toml by viper, so the chart's ``master.config`` carries it.
SEAWEEDFS_VOLUME_GROWTH = {"copy_1": 1, "copy_2": 1, "copy_3": 1, "copy_other": 1}
SEAWEEDFS_MASTER_TOML = "[master.volume_growth]\n" + "".join(f"{k} = {v}\n" for k, v in SEAWEEDFS_VOLUME_GROWTH.items())


def seaweedfs_objects(config: PlatformConfig, lock: ImageLock) -> tuple[list[Manifest], list[ChartRelease]]:
    store = _store(config)
    volume = store.seaweedfs.volume
    claim: Manifest = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": metadata(SEAWEEDFS_DATA_CLAIM, namespace=store.namespace, labels=LABELS),
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": str(volume.size)}}},
    }
    if volume.storage_class:
        claim["spec"]["storageClassName"] = volume.storage_class
    identities_json = _json(seaweedfs_identities(config))
    identities_secret = _secret(SEAWEEDFS_IDENTITIES_SECRET, store.namespace,
                                {SEAWEEDFS_IDENTITIES_KEY: identities_json}, LABELS)
    image = _image(config, "seaweedfs", lock)
    values: dict[str, Any] = {
        "global": {"seaweedfs": {
            # The ClusterRole lets pods delete master pods after a migration; all-in-one has no masters to move.
            "createClusterRole": False,
            "image": {"name": image.repository},
        }, "imageRegistry": image.registry},
        "image": {"tag": _tag(image)},
        # One server process holds master, volume, filer and S3 (weed server); the split components are off.
        "volume": {"enabled": False},
        "filer": {"enabled": False},
        # master.toml (mounted into the all-in-one pod from the chart's master-config ConfigMap): SEAWEEDFS_VOLUME_GROWTH.
        "master": {"enabled": False, "config": SEAWEEDFS_MASTER_TOML},
        "allInOne": {
            "enabled": True,
            "s3": {"enabled": True, "enableAuth": True, "existingConfigSecret": SEAWEEDFS_IDENTITIES_SECRET},
            "data": {"type": "existingClaim", "claimName": SEAWEEDFS_DATA_CLAIM},
            # The identities file is read at start: a changed file (a new tenant, a rotated key name) rolls the pod.
            "podAnnotations": {"trainyard.dev/s3-identities-sha256": _hash(identities_json)},
            # weed server reports usage statistics to telemetry.seaweedfs.com unless told not to
            # (weed/command/server.go -master.telemetry, default true); a sovereign platform does not.
            "extraArgs": ["-master.telemetry=false"],
            "podSecurityContext": {"enabled": True, **_restricted_pod()},
            "containerSecurityContext": {"enabled": True, "allowPrivilegeEscalation": False,
                                         "capabilities": {"drop": ["ALL"]}},
        },
    }
    # The chart renders seaweedfs-sftp-secret whenever allInOne is on (templates/sftp/sftp-secret.yaml),
    # with passwords and an SSH host key generated at render time; SFTP stays off and the Secret unused.
    release = dataclasses.replace(_chart(config, "seaweedfs", SEAWEEDFS_RELEASE, store.namespace,
                                         placement.placed(config, "seaweedfs", values)),
                                  regenerated_secrets=(f"{SEAWEEDFS_RELEASE}-sftp-secret",))
    return [claim, identities_secret, _admin_secret(store)], [release]


def minio_objects(config: PlatformConfig, lock: ImageLock) -> tuple[list[Manifest], list[ChartRelease]]:
    store = _store(config)
    settings = store.minio
    # The Tenant's root user is the platform admin: config.env as the operator expects it
    # (helm/tenant/templates/tenant-configuration.yaml), with generated values.
    root = _secret(MINIO_CONFIG_SECRET, store.namespace, {
        "config.env": f"export MINIO_ROOT_USER={ADMIN.access_key.placeholder}\n"
                      f"export MINIO_ROOT_PASSWORD={ADMIN.secret_key.placeholder}\n"}, LABELS)
    operator_image, server_image = _image(config, "minio", lock), _image(config, "minio-tenant", lock)
    pinned_operator = catalog.release("minio", config.versions.minio)
    operator_ns = pinned_operator.namespace
    sidecar = pinned_operator.image_for("sidecar")
    sidecar_image = lock.pin(mirrored(ImageRef(sidecar.registry, sidecar.repository, sidecar.tag),
                                      config.images.registry_mirror))
    operator = _chart(config, "minio", "minio-operator", operator_ns, {
        "operator": {"image": {"repository": operator_image.name, "tag": _tag(operator_image),
                               "pullPolicy": "IfNotPresent"},
                     # The sidecar and init container of every Tenant pod (OPERATOR_SIDECAR_IMAGE): unset, the
                     # operator uses its built-in quay.io default (helm/operator/values.yaml operator.sidecarImage).
                     # (The chart reads only repository, tag and digest of sidecarImage: no pullPolicy.)
                     "sidecarImage": {"repository": sidecar_image.name, "tag": _tag(sidecar_image)}},
    })
    pool: dict[str, Any] = {"name": "pool-0", "servers": settings.servers, "volumesPerServer": settings.volumes_per_server,
                            "size": str(settings.volume.size)}
    if settings.volume.storage_class:
        pool["storageClassName"] = settings.volume.storage_class
    tenant = _chart(config, "minio-tenant", "minio-tenant", store.namespace, {"tenant": {
        "name": MINIO_TENANT_NAME,
        "image": {"repository": server_image.name, "tag": _tag(server_image), "pullPolicy": "IfNotPresent"},
        # Trainyard writes the root credentials Secret itself (the chart then renders none of its own).
        "configSecret": {"name": MINIO_CONFIG_SECRET, "existingSecret": True},
        "pools": [pool],
        # Tenant.spec.users/buckets are deprecated and grant consoleAdmin; the Job manages both instead.
        "buckets": [],
        "users": [],
        "certificate": {"requestAutoCert": False},
    }})
    operator_namespace = namespace(store, operator_ns)
    return [operator_namespace, root, _admin_secret(store)], [operator, tenant]


def _tenant_namespaces_peer() -> dict[str, Any]:
    return {"namespaceSelector": {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]}}


def network_policies(config: PlatformConfig) -> list[Manifest]:
    """Default-deny ingress in the object store namespace, then the S3 port for exactly who needs it."""
    store = _store(config)
    server = store.server_endpoint()
    if server is None:
        return []
    ns = store.namespace
    peers: list[dict[str, Any]] = [_tenant_namespaces_peer(), {"podSelector": {"matchLabels": {PROVISIONER_LABEL: "true"}}}]
    for service_ns in sorted({s.namespace for s in store.services}):
        peers.append({"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: service_ns}}})
    if store.backend == "minio":
        operator_ns = catalog.release("minio", config.versions.minio).namespace
        peers.append({"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator_ns}}})
    selector = {"matchLabels": dict(sorted(server.pod_labels.items()))}
    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": metadata("default-deny-ingress", namespace=ns, labels=LABELS),
         "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": metadata("allow-s3", namespace=ns, labels=LABELS),
         "spec": {"podSelector": selector, "policyTypes": ["Ingress"],
                  "ingress": [{"from": peers, "ports": [{"protocol": "TCP", "port": p} for p in server.ports]}]}},
    ]


def build(config: PlatformConfig, lock: ImageLock | None = None) -> Concern:
    """The object store: server, identities, provisioning, network policies, and each tenant's Secret."""
    store = config.object_store
    if store is None:
        return Concern("object-store")
    objects: list[Manifest] = [namespace(store)]
    releases: list[ChartRelease] = []
    pins = lock if lock is not None else ImageLock()
    if store.backend == "seaweedfs":
        backend_objects, releases = seaweedfs_objects(config, pins)
        objects += backend_objects
    elif store.backend == "minio":
        backend_objects, releases = minio_objects(config, pins)
        objects += backend_objects
    objects += network_policies(config)
    *provisioning, job = provisioning_objects(config, pins)
    objects += provisioning
    if any(r.external for r in releases):
        # Rehearsal: the server is not running (its chart is external) and no volume is provisioned, so
        # the provider must not wait for the claim to bind or the Job to complete.
        # Ref: pulumi-kubernetes provider/pkg/await (v1/PersistentVolumeClaim waits for Bound, batch/v1/Job for Complete).
        objects = [_skip_await(o) if o["kind"] == "PersistentVolumeClaim" else o for o in objects]
        job = _skip_await(job)
    tenant_objects = {t.name: (credentials_secret(config, tenant_identity(config, t), t.namespace_name,
                                                  {TENANT_LABEL: t.name, **LABELS}),)
                      for t in config.tenants}
    return Concern("object-store", objects=tuple(objects), releases=tuple(releases), tenant_objects=tenant_objects,
                   after_releases=(job,), generated=generated_values(config))


SKIP_AWAIT = "pulumi.com/skipAwait"


def _skip_await(obj: Manifest) -> Manifest:
    out = dict(obj)
    out["metadata"] = {**obj["metadata"], "annotations": {**obj["metadata"].get("annotations", {}), SKIP_AWAIT: "true"}}
    return out


def generated_values(config: PlatformConfig) -> tuple[GeneratedValue, ...]:
    """Every key pair this concern references: the admin's, each tenant's and each service's."""
    return tuple(value for i in (ADMIN, *identities(config)) for value in (i.access_key, i.secret_key))


def service_credentials(config: PlatformConfig) -> Concern:
    """Each platform service's credentials Secret, in its own namespace.

    A concern of its own, rendered after every other one, so that the services' namespaces (declared
    by their own concerns, e.g. MLflow's) already exist when these Secrets are applied.
    """
    store = config.object_store
    if store is None or not store.services:
        return Concern("object-store-services")
    return Concern("object-store-services", objects=tuple(
        credentials_secret(config, service_identity(config, s), s.namespace, LABELS) for s in store.services),
        generated=tuple(v for s in store.services for i in (service_identity(config, s),)
                        for v in (i.access_key, i.secret_key)))


def crd_components(config: PlatformConfig) -> list[tuple[str, str]]:
    """(component, version) of the CRDs the backend needs (MinIO Operator: Tenant and PolicyBinding)."""
    if config.object_store is not None and config.object_store.backend == "minio":
        return [("minio", config.versions.minio)]
    return []
