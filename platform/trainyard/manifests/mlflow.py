"""MLflow: the tracking server and model registry, its PostgreSQL (CloudNativePG) and its backups.

What this concern declares, when ``mlflow.enabled``:

- the CloudNativePG operator (chart, CRDs off: Trainyard declares them) in ``cnpg-system``;
- in the MLflow namespace: a PostgreSQL ``Cluster`` with persistent volumes, a second database
  for the basic-auth store (``Database``), and, with backups on, a barman-cloud ``ObjectStore``
  plus a ``ScheduledBackup`` (WAL archived continuously through the plugin);
- the community MLflow chart: ``--serve-artifacts`` to the object store (tenants never hold the
  artifact bucket's keys), basic-auth with a generated admin password and ``NO_PERMISSIONS`` by
  default, and a sidecar that keeps one MLflow user per tenant in step with its generated password;
- NetworkPolicies: the MLflow pods admit only tenant (and listed serving) namespaces on 5000;
  the PostgreSQL pods admit only MLflow, their own instances and the CNPG operator (which reaches
  every Cluster's instances, a restored one too); with backups on, the operator reaches the
  barman-cloud plugin the site installs in its namespace (``allow-barman-cloud-plugin``);
- in every tenant namespace: the ``trainyard-mlflow`` Secret (tracking URI, user, password)
  that the approved runtimes read with ``envFrom``.

Generated values (passwords, the Flask session key) appear only as ``${generated:...}``
placeholders (``trainyard.manifests.generated``); the deploy-time component substitutes them.

Ref: ../shared/research/data-plane.md section 2; docs/components/mlflow.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainyard import catalog
from trainyard.config.mlflow import Mlflow, MlflowObjectStore
from trainyard.config.model import MLFLOW_POD_LABELS, MLFLOW_PORT, PlatformConfig
from trainyard.manifests import placement
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.concern import Concern
from trainyard.manifests.generated import GeneratedValue, names_in, placeholder
from trainyard.manifests.installs import COMPONENT_LABEL, pinned_image
from trainyard.manifests.meta import MLFLOW_SECRET, OBJECT_STORE_SECRET, TENANT_LABEL, Manifest, metadata
from trainyard.manifests.network import NAMESPACE_NAME_LABEL, controller_policies
from trainyard.manifests.tenants import PSA_LABELS
from trainyard.supply.lock import ImageLock

CLUSTER = "mlflow-db"
DATABASE = "mlflow"
AUTH_DATABASE = "mlflow_auth"
DB_OWNER = "mlflow"
DB_SECRET = "mlflow-db-app"  # noqa: S105 - a Secret name
ADMIN_SECRET = "mlflow-admin"  # noqa: S105 - a Secret name
ADMIN_USER = "admin"
TENANT_USERS_SECRET = "mlflow-tenant-users"  # noqa: S105 - a Secret name
FLASK_SECRET = "mlflow-flask-server-secret-key"  # noqa: S105 - the chart's name for it (fullname + suffix)
SYNC_SCRIPT_CONFIGMAP = "mlflow-tenant-sync"
BACKUP_OBJECT_STORE = "mlflow-backups"
POSTGRES_PORT = 5432
# The CNPG instance manager's status endpoint, which the operator polls on every instance.
# Ref: https://cloudnative-pg.io/documentation/current/security/#exposed-ports
CNPG_STATUS_PORT = 8000
# The MLflow Service the chart creates (fullname "mlflow" for release "mlflow"), on the chart's service.port.
SERVICE_PORT = 80
SYNC_SCRIPT = Path(__file__).parent / "files" / "mlflow_tenant_sync.py"

GENERATED_ADMIN_PASSWORD = "mlflow/admin-password"  # noqa: S105 - the name of a generated value
GENERATED_DB_PASSWORD = "mlflow/postgres-password"  # noqa: S105 - the name of a generated value
GENERATED_FLASK_KEY = "mlflow/flask-secret-key"


def tenant_password_name(tenant: str) -> str:
    """The generated value holding a tenant's MLflow password (same value in both Secrets that carry it)."""
    return f"mlflow/tenants/{tenant}/password"


def tracking_uri(mlflow: Mlflow) -> str:
    return f"http://mlflow.{mlflow.namespace}.svc:{SERVICE_PORT}"


def allowed_hosts(mlflow: Mlflow) -> list[str]:
    """Host headers the server accepts (MLflow 3 rejects others to stop DNS rebinding).

    Ref: mlflow server --allowed-hosts / MLFLOW_SERVER_ALLOWED_HOSTS (chart value serverAllowedHosts).
    """
    service = f"mlflow.{mlflow.namespace}.svc"
    return [service, f"{service}:{SERVICE_PORT}", f"{service}.cluster.local", f"{service}.cluster.local:{SERVICE_PORT}",
            f"localhost:{MLFLOW_PORT}", f"127.0.0.1:{MLFLOW_PORT}"]


def _secret(name: str, namespace: str, data: dict[str, str], *, secret_type: str = "Opaque",  # noqa: S107
            labels: dict[str, str] | None = None) -> Manifest:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata(name, namespace=namespace, labels=labels),
            "type": secret_type, "stringData": data}


def _restricted_container_security() -> dict[str, Any]:
    # Pod Security "restricted" (the MLflow namespace enforces it); the chart's default lacks seccompProfile.
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "privileged": False, "runAsUser": 1001, "runAsGroup": 1001,
            "seccompProfile": {"type": "RuntimeDefault"}}


def secrets(config: PlatformConfig) -> list[Manifest]:
    ns = config.mlflow.namespace
    return [
        _secret(ADMIN_SECRET, ns, {"username": ADMIN_USER, "password": placeholder(GENERATED_ADMIN_PASSWORD)}),
        # CloudNativePG's bootstrap secret must be of type basic-auth, with the owner as username.
        # Ref: postgresql.cnpg.io_clusters.yaml spec.bootstrap.initdb.secret
        _secret(DB_SECRET, ns, {"username": DB_OWNER, "password": placeholder(GENERATED_DB_PASSWORD)},
                secret_type="kubernetes.io/basic-auth"),  # noqa: S106 - a Secret type
        _secret(TENANT_USERS_SECRET, ns, {t.name: placeholder(tenant_password_name(t.name)) for t in config.tenants}),
        # The chart makes this Secret only as a pre-install hook (templates/flask_secret.yaml), and Pulumi's
        # helm.v4.Chart runs no hooks, so the server's envFrom would name a missing Secret. basic-auth's CSRF
        # protection refuses to start without the key (found by the dataplane tier and chart truth).
        _secret(FLASK_SECRET, ns, {"MLFLOW_FLASK_SERVER_SECRET_KEY": placeholder(GENERATED_FLASK_KEY)}),
    ]


def _bucket(config: PlatformConfig, name: str) -> str:
    """A platform bucket's full name (the object store's bucket_prefix prepended)."""
    return config.object_store.platform_bucket(name) if config.object_store is not None else name


def object_store_for_backups(config: PlatformConfig, store: MlflowObjectStore) -> Manifest:
    """The barman-cloud plugin's ObjectStore: where WAL and base backups go, with the service's object-store keys."""

    def key(name: str) -> dict[str, str]:
        return {"name": OBJECT_STORE_SECRET, "key": name}

    return {
        "apiVersion": catalog.BARMAN_CLOUD_API,
        "kind": "ObjectStore",
        "metadata": metadata(BACKUP_OBJECT_STORE, namespace=config.mlflow.namespace),
        "spec": {
            "retentionPolicy": config.mlflow.backup.retention,
            "configuration": {
                "destinationPath": f"s3://{_bucket(config, store.backups_bucket)}/",
                "endpointURL": store.endpoint_url,
                "s3Credentials": {"accessKeyId": key("AWS_ACCESS_KEY_ID"),
                                  "secretAccessKey": key("AWS_SECRET_ACCESS_KEY"),
                                  "region": key("AWS_DEFAULT_REGION")},
                "wal": {"compression": "gzip"},
                # An immediate checkpoint at a backup's start, not a spread one (barman's default waits up to
                # checkpoint_completion_target x checkpoint_timeout, ~4.5 min, before copying anything): MLflow's
                # database is small, and an on-demand backup before an upgrade should not wait minutes. Ref:
                # barmancloud.cnpg.io_objectstores.yaml configuration.data.immediateCheckpoint.
                "data": {"compression": "gzip", "immediateCheckpoint": True},
            },
        },
    }


def postgres_cluster(config: PlatformConfig, lock: ImageLock | None = None) -> Manifest:
    mlflow, db = config.mlflow, config.mlflow.database
    # "<name>:<tag>@<digest>": the operator pulls the digest and still reads the PostgreSQL major version
    # from the tag (Ref: CloudNativePG docs container_images.md "Image Tag Requirements"; cloudnative-pg/machinery
    # pkg/image/reference NewReference strips the digest before it takes the tag).
    operand = pinned_image(config, catalog.POSTGRESQL_OPERANDS[db.postgresql], lock if lock is not None else ImageLock())
    storage: dict[str, Any] = {"size": str(db.storage_size)}
    if db.storage_class:
        storage["storageClass"] = db.storage_class
    spec: dict[str, Any] = {
        "instances": db.instances,
        "imageName": str(operand),
        "enableSuperuserAccess": False,
        "storage": storage,
        "bootstrap": {"initdb": {"database": DATABASE, "owner": DB_OWNER, "secret": {"name": DB_SECRET}}},
        # The instances' PVCs carry the same labels, so the policies and the review can find them.
        "inheritedMetadata": {"labels": {COMPONENT_LABEL: "mlflow"}},
    }
    # The instances are platform system pods: placed with the controllers (system_pods), through the Cluster's own
    # affinity (Ref: postgresql.cnpg.io_clusters.yaml spec.affinity.nodeSelector, spec.affinity.tolerations).
    affinity = placement.pod_placement(config)
    if affinity:
        spec["affinity"] = affinity
    if db.wal_storage_size is not None:
        spec["walStorage"] = {**storage, "size": str(db.wal_storage_size)}
    if mlflow.backup.enabled:
        # WAL archiving and base backups go through the barman-cloud CNPG-I plugin; the in-tree
        # spec.backup.barmanObjectStore is deprecated since 1.26 and removed in 1.31.
        # Ref: https://cloudnative-pg.io/plugin-barman-cloud/docs/usage/
        spec["plugins"] = [{"name": catalog.BARMAN_CLOUD_PLUGIN, "isWALArchiver": True,
                            "parameters": {"barmanObjectName": BACKUP_OBJECT_STORE}}]
    return {"apiVersion": catalog.CNPG_API, "kind": "Cluster",
            "metadata": metadata(CLUSTER, namespace=mlflow.namespace), "spec": spec}


def auth_database(config: PlatformConfig) -> Manifest:
    """The basic-auth store's own database in the same cluster, owned by the application user."""
    return {"apiVersion": catalog.CNPG_API, "kind": "Database",
            "metadata": metadata("mlflow-auth", namespace=config.mlflow.namespace),
            "spec": {"name": AUTH_DATABASE, "owner": DB_OWNER, "cluster": {"name": CLUSTER}, "ensure": "present",
                     # Deleting the Database object must never drop the users and permissions it holds.
                     "databaseReclaimPolicy": "retain"}}


def scheduled_backup(config: PlatformConfig) -> Manifest:
    return {"apiVersion": catalog.CNPG_API, "kind": "ScheduledBackup",
            "metadata": metadata(f"{CLUSTER}-base-backup", namespace=config.mlflow.namespace),
            "spec": {"schedule": config.mlflow.backup.schedule, "immediate": True, "backupOwnerReference": "self",
                     "cluster": {"name": CLUSTER}, "method": "plugin",
                     "pluginConfiguration": {"name": catalog.BARMAN_CLOUD_PLUGIN}}}


def sync_script_configmap(config: PlatformConfig) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(SYNC_SCRIPT_CONFIGMAP, namespace=config.mlflow.namespace),
            "data": {"sync.py": SYNC_SCRIPT.read_text(encoding="utf-8")}}


def _tenant_sync_sidecar(config: PlatformConfig, image: str) -> dict[str, Any]:
    def admin(key: str) -> dict[str, Any]:
        return {"valueFrom": {"secretKeyRef": {"name": ADMIN_SECRET, "key": key}}}

    return {
        "name": "tenant-user-sync",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "/opt/trainyard/sync.py"],
        "env": [{"name": "MLFLOW_URL", "value": f"http://127.0.0.1:{MLFLOW_PORT}"},
                {"name": "ADMIN_USERNAME", **admin("username")},
                {"name": "ADMIN_PASSWORD", **admin("password")},
                {"name": "TENANT_DIR", "value": "/etc/mlflow/tenants"},
                {"name": "INTERVAL", "value": str(config.mlflow.tenant_sync_interval_seconds)}],
        "securityContext": _restricted_container_security(),
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [{"name": "tenant-sync-script", "mountPath": "/opt/trainyard", "readOnly": True},
                         {"name": "tenant-users", "mountPath": "/etc/mlflow/tenants", "readOnly": True}],
    }


# How long a server that never answers /health lives before its liveness probe restarts it.
LIVENESS_GRACE_SECONDS = 330


def chart_values(config: PlatformConfig, lock: ImageLock | None = None) -> dict[str, Any]:
    """Values of the community MLflow chart (1.11.5). Ref: charts/mlflow values.yaml, templates/deployment.yaml.

    Images are pinned by the lock's digest where it has one. The server takes the chart's own ``image.digest``
    (templates/_helpers.tpl "mlflow.containerImage": ``<repository>:<tag>@<digest>``), so ``image.tag`` stays
    the bare version the chart also passes as ``MLFLOW_VERSION`` (templates/deployment.yaml:425). The init
    images have no digest value (values.schema.json: repository, pullPolicy, tag only) and compose
    ``<repository>:<tag>`` (deployment.yaml:99, :183, :283): their tag is ``<tag>@<digest>``.
    """
    mlflow = config.mlflow
    store = mlflow.object_store
    assert store is not None  # checked by the config model when enabled
    pins = lock if lock is not None else ImageLock()
    release = catalog.release("mlflow", config.versions.mlflow)
    server = pinned_image(config, release.installed()[2], pins)
    busybox = pinned_image(config, release.image_for("busybox"), pins)
    busybox_image = {"repository": busybox.name, "tag": busybox.tag_with_digest, "pullPolicy": "IfNotPresent"}
    db_host = f"{CLUSTER}-rw"  # CloudNativePG's read-write Service of the primary
    return placement.placed(config, "mlflow", {
        "replicaCount": mlflow.replicas,
        "image": {"repository": server.name, "tag": server.tag, "pullPolicy": "IfNotPresent",
                  **({"digest": server.digest} if server.digest else {})},
        "initImages": {
            "dbchecker": busybox_image,
            "iniFileInitializer": busybox_image,
            "mlflowDbMigration": {"repository": server.name, "tag": server.tag_with_digest, "pullPolicy": "IfNotPresent"},
        },
        # MLflow never calls the Kubernetes API.
        "serviceAccount": {"create": True, "automount": False},
        "podSecurityContext": {"fsGroup": 1001, "fsGroupChangePolicy": "OnRootMismatch", "runAsNonRoot": True,
                               "seccompProfile": {"type": "RuntimeDefault"}},
        "securityContext": _restricted_container_security(),
        "backendStore": {
            "databaseMigration": True,
            "databaseConnectionCheck": True,
            "postgres": {"enabled": True, "host": db_host, "port": POSTGRES_PORT, "database": DATABASE},
            "existingDatabaseSecret": {"name": DB_SECRET, "usernameKey": "username", "passwordKey": "password"},
        },
        # --artifacts-destination=s3://bucket/prefix --serve-artifacts: clients upload and download
        # through the server (mlflow-artifacts:/ URIs), so only the server holds the bucket's keys.
        "artifactRoot": {
            "proxiedArtifactStorage": True,
            "s3": {"enabled": True, "bucket": _bucket(config, store.artifacts_bucket), "path": store.artifacts_prefix,
                   "existingSecret": {"name": OBJECT_STORE_SECRET, "keyOfAccessKeyId": "AWS_ACCESS_KEY_ID",
                                      "keyOfSecretAccessKey": "AWS_SECRET_ACCESS_KEY"}},
        },
        # `mlflow server --workers=N` (templates/deployment.yaml:386-398 turns extraArgs keys into flags).
        "extraArgs": {"workers": str(mlflow.workers)},
        # The chart has no endpoint value for S3 (research/data-plane.md section 2).
        "extraEnvVars": {"MLFLOW_S3_ENDPOINT_URL": store.endpoint_url,
                         "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "true" if mlflow.server_jobs else "false"},
        # The chart has no startupProbe (deployment.yaml:407-420), so liveness alone must outlast a slow start:
        # the chart's 10 s + 5 x 30 s killed a server still starting on a loaded two-core node (exit 137, CI
        # 2026-12-07). Readiness checks often, so a started server takes traffic within seconds.
        "livenessProbe": {"initialDelaySeconds": 30, "periodSeconds": 30, "timeoutSeconds": 10,
                          "failureThreshold": (LIVENESS_GRACE_SECONDS - 30) // 30},
        "readinessProbe": {"initialDelaySeconds": 5, "periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 3},
        "auth": {
            "enabled": mlflow.auth,
            "appName": "basic-auth",
            "defaultPermission": mlflow.default_permission,
            "existingAdminSecret": {"name": ADMIN_SECRET, "usernameKey": "username", "passwordKey": "password"},
            "postgres": {"enabled": True, "host": db_host, "port": POSTGRES_PORT, "database": AUTH_DATABASE,
                         "existingSecret": {"name": DB_SECRET, "usernameKey": "username", "passwordKey": "password"}},
        },
        "serverAllowedHosts": allowed_hosts(mlflow),
        "extraContainers": [_tenant_sync_sidecar(config, str(server))],
        "extraVolumes": [
            {"name": "tenant-sync-script", "configMap": {"name": SYNC_SCRIPT_CONFIGMAP}},
            {"name": "tenant-users", "secret": {"secretName": TENANT_USERS_SECRET}},
        ],
    })


def cnpg_values(config: PlatformConfig, lock: ImageLock | None = None) -> dict[str, Any]:
    """Values of the cloudnative-pg chart (0.29.0). Ref: charts/cloudnative-pg values.yaml.

    The chart composes ``<image.repository>:<image.tag>`` for the operator's container and its
    ``OPERATOR_IMAGE_NAME`` (templates/deployment.yaml:85, :99; the image the operator copies its instance
    manager from into every PostgreSQL pod), so a tag of ``<tag>@<digest>`` pins both.
    """
    _, _, operator_image = catalog.release("cnpg", config.versions.cnpg).installed()
    operator = pinned_image(config, operator_image, lock if lock is not None else ImageLock())
    return placement.placed(config, "cnpg", {
        "image": {"repository": operator.name, "tag": operator.tag_with_digest, "pullPolicy": "IfNotPresent"},
        # Trainyard declares the CRDs itself (manifests/crds.py).
        "crds": {"create": False},
    })


def releases(config: PlatformConfig, lock: ImageLock | None = None) -> list[ChartRelease]:
    external = config.rehearsal.external_controllers
    out = []
    for component, values in (("cnpg", cnpg_values(config, lock)), ("mlflow", chart_values(config, lock))):
        pinned = catalog.release(component, getattr(config.versions, component))
        chart, _, _ = pinned.installed()
        out.append(ChartRelease(
            name=component, component=component, chart=chart.chart, repo=chart.repo,
            version=chart.version or pinned.version,
            namespace=config.mlflow.namespace if component == "mlflow" else pinned.namespace,
            values=values, external=component in external))
    return out


def _namespace(name: str, component: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": metadata(name, labels={COMPONENT_LABEL: component, **PSA_LABELS})}


def network_policies(config: PlatformConfig) -> list[Manifest]:
    """Ingress to the MLflow namespace: MLflow from tenants (and serving), PostgreSQL from MLflow only."""
    ns = config.mlflow.namespace
    labels = {COMPONENT_LABEL: "mlflow"}
    callers = sorted({t.namespace_name for t in config.tenants} | set(config.mlflow.serving_namespaces))
    db_pods = {"matchLabels": {"cnpg.io/cluster": CLUSTER}}
    mlflow_pods = {"matchLabels": dict(sorted(MLFLOW_POD_LABELS.items()))}
    cnpg_namespace = catalog.release("cnpg", config.versions.cnpg).namespace

    def policy(name: str, spec: dict[str, Any]) -> Manifest:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": metadata(name, namespace=ns, labels=labels), "spec": spec}

    return [
        policy("default-deny-ingress", {"podSelector": {}, "policyTypes": ["Ingress"]}),
        policy("allow-mlflow-from-tenants", {
            "podSelector": mlflow_pods, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [
                {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": callers}]}}],
                "ports": [{"protocol": "TCP", "port": MLFLOW_PORT}]}],
        }),
        policy("allow-postgres-from-mlflow", {
            "podSelector": db_pods, "policyTypes": ["Ingress"],
            "ingress": [
                # The tracking server, its migration init container and the auth store.
                {"from": [{"podSelector": mlflow_pods}], "ports": [{"protocol": "TCP", "port": POSTGRES_PORT}]},
                # Streaming replication and the instance manager between the cluster's own instances.
                {"from": [{"podSelector": db_pods}],
                 "ports": [{"protocol": "TCP", "port": POSTGRES_PORT}, {"protocol": "TCP", "port": CNPG_STATUS_PORT}]},
            ],
        }),
        # The operator polls every instance's status endpoint and asks it for backups: every Cluster's instances,
        # so that one restored beside mlflow-db (docs/components/cnpg.md, "Restore") is reachable too.
        policy("allow-cnpg-operator", {
            "podSelector": {"matchExpressions": [{"key": "cnpg.io/cluster", "operator": "Exists"}]},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: cnpg_namespace}}}],
                         "ports": [{"protocol": "TCP", "port": CNPG_STATUS_PORT}]}],
        }),
    ]


def plugin_policy(config: PlatformConfig, namespace: str) -> Manifest:
    """In the operator's namespace, where the site installs the barman-cloud plugin (upstream's manifest.yaml): the
    operator's calls to it (mTLS gRPC). ``default-deny-ingress`` there would refuse them, and every backup with them."""
    operator_pods = {"app.kubernetes.io/name": "cloudnative-pg"}  # the chart's selectorLabels (cloudnative-pg.name)
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": metadata("allow-barman-cloud-plugin", namespace=namespace, labels={COMPONENT_LABEL: "cnpg"}),
            "spec": {"podSelector": {"matchLabels": dict(catalog.BARMAN_CLOUD_PLUGIN_POD_LABELS)},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": operator_pods}}],
                                  "ports": [{"protocol": "TCP", "port": catalog.BARMAN_CLOUD_PLUGIN_PORT}]}]}}


def tenant_secret(config: PlatformConfig, tenant_name: str, namespace: str) -> Manifest:
    """What a tenant's pods read (envFrom) to talk to MLflow as their tenant."""
    return _secret(MLFLOW_SECRET, namespace, {
        "MLFLOW_TRACKING_URI": tracking_uri(config.mlflow),
        "MLFLOW_TRACKING_USERNAME": tenant_name,
        "MLFLOW_TRACKING_PASSWORD": placeholder(tenant_password_name(tenant_name)),
    }, labels={TENANT_LABEL: tenant_name})


def build_operator(config: PlatformConfig, lock: ImageLock | None = None) -> Concern:
    """The CloudNativePG operator: its namespace, policies and chart, applied before the Cluster it serves.

    A concern of its own so that the PostgreSQL objects wait for the operator's webhooks
    (``AFTER`` in components/platform.py), as queueing objects wait for Kueue's.
    """
    if not config.mlflow.enabled:
        return Concern("postgres-operator")
    cnpg = next(r for r in releases(config, lock) if r.component == "cnpg")
    objects: list[Manifest] = []
    if not cnpg.external:
        objects.append(_namespace(cnpg.namespace, "cnpg"))
        objects += controller_policies(config, cnpg.namespace, "cnpg")
        if config.mlflow.backup.enabled:
            objects.append(plugin_policy(config, cnpg.namespace))
    return Concern("postgres-operator", objects=tuple(objects), releases=(cnpg,))


def build(config: PlatformConfig, lock: ImageLock | None = None) -> Concern:
    """MLflow: PostgreSQL, backups, the server chart, its network policies and the tenant Secrets."""
    mlflow = config.mlflow
    if not mlflow.enabled:
        return Concern("mlflow")
    store = mlflow.object_store
    assert store is not None  # checked by the config model when enabled
    objects: list[Manifest] = [_namespace(mlflow.namespace, "mlflow"), *secrets(config),
                               postgres_cluster(config, lock), auth_database(config)]
    if mlflow.backup.enabled:
        objects.append(object_store_for_backups(config, store))
        objects.append(scheduled_backup(config))
    objects.append(sync_script_configmap(config))
    objects += network_policies(config)
    tenant_objects = {t.name: (tenant_secret(config, t.name, t.namespace_name),) for t in config.tenants}
    # Every generated value the objects name: passwords and the Flask key, 40 letters and digits each.
    referenced = set(names_in(objects)) | set(names_in([o for group in tenant_objects.values() for o in group]))
    return Concern(
        "mlflow",
        objects=tuple(objects),
        releases=tuple(r for r in releases(config, lock) if r.component == "mlflow"),
        tenant_objects=tenant_objects,
        generated=tuple(GeneratedValue(name) for name in sorted(referenced)),
    )
