"""Node tier, tests/node/platform after test_lab (conftest.ORDER): CloudNativePG installed by `pulumi up` from its
real chart, the MLflow database running for real on the real node, backed up through the barman-cloud plugin to the
in-cluster object store and restored from it, from images built here and pulled from the rehearsal's loopback mirror
by digest (issue #22, item 4's CloudNativePG, item 6).

The package's deployment (conftest.live) declares the local stack's MLflow database, backups on (MLflow's own
chart stays external), PostgreSQL 17 (the major Debian trixie ships, which the operand image is made of:
docs/architecture.md). The rehearsal installs the barman-cloud plugin as a site would (`barman_cloud_install.py`:
upstream's manifest.yaml, v0.14.0 standing in for v0.15.0, its images built here, its Certificates from the
cert-manager stand-in). What is proven, each by the live cluster:

- the operator's pod runs on the real node by the digest the factory built and the rehearsal's lock holds;
- its webhook answers: the API server sends a dry-run create of an invalid Cluster to the operator's pod, which
  refuses it with its own message (a fixed PostgreSQL parameter);
- the stack's `Cluster/mlflow-db` reaches Ready, its instance pod Running on the real node (its volume a node-local
  PersistentVolume), from the operand image built from Debian's packages, by digest; its init container copied the
  instance manager out of the operator's image;
- `psql` in the instance (`kubectl exec`, as `kubectl cnpg psql` does) answers `select version()` with PostgreSQL
  17, and the database the stack declared exists, owned by its application user;
- the plugin runs on the real node from the mirror, the operator reaches it through the stack's NetworkPolicy
  (kube-router enforcing), and it injected its sidecar into the instance pod; WAL is archived (the Cluster's
  ContinuousArchiving condition) and the stack's ScheduledBackup took its immediate backup;
- MLflow's runs (three, with params and loss histories) and a registered model version written to the `mlflow`
  database by MLflow's own SQL store (the MLflow tool venv, through `kubectl port-forward`), an on-demand `Backup`
  (method plugin) completed to the object store, the database dropped, and a second Cluster bootstrapped from the
  ObjectStore (recovery to the end of that backup): MLflow reads every run and the model version back from it.

Needs root, the package's tools (``shared.TOOLS``), the MLflow tool venv (`tools/mlflow/install.sh`), Debian's
containerd, runc, CNI plugins and nftables, and deb.debian.org and PyPI for the operand's and the sidecar's packages on
a cold cache; skips saying which is missing elsewhere (`make test-node`).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.dataplane.test_mlflow_server import VENV_PYTHON as MLFLOW_PYTHON
from tests.node.platform.shared import TIMINGS, forwarded
from trainyard.rehearsal.cluster import REHEARSAL_STORAGE_CLASS
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.session import REAL_NODE, Rehearsal
from trainyard.rehearsal.volumes import NodeVolume, provide
from trainyard.supply.lock import load_lock

pytestmark = pytest.mark.node
NAMESPACE, CLUSTER = "mlflow", "mlflow-db"


def _locked(live: Rehearsal, image: str, status: dict[str, Any]) -> str:
    """``image`` is the mirror's name pinned by the digest the rehearsal's lock holds, and what containerd ran."""
    assert live.in_cluster is not None
    assert image.startswith("trainyard.local/mirror/") and "@sha256:" in image, image
    tagged, digest = image.split("@")
    entry = load_lock(live.in_cluster.lock_file).entries[tagged]
    assert entry.source == "registry" and entry.digest == digest, (tagged, entry)
    assert status["imageID"].endswith(digest), status["imageID"]
    return f"{tagged}@{digest}"


def test_the_operator_runs_on_the_real_node_by_the_built_digest(live: Rehearsal) -> None:
    (pod,) = live.kube.items("pods", "cnpg-system", selector="app.kubernetes.io/name=cloudnative-pg")
    assert pod["spec"]["nodeName"] == REAL_NODE
    (container,), (status,) = pod["spec"]["containers"], pod["status"]["containerStatuses"]
    assert status["ready"], pod["status"]
    print(f"cnpg-system/{pod['metadata']['name']} on {REAL_NODE}: {_locked(live, container['image'], status)}")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["OPERATOR_IMAGE_NAME"] == container["image"]  # what it copies its instance manager from


def test_the_operator_webhook_refuses_an_invalid_cluster(live: Rehearsal) -> None:
    invalid = {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
               "metadata": {"name": "invalid", "namespace": NAMESPACE},
               "spec": {"instances": 1, "storage": {"size": "1Gi"},
                        "postgresql": {"parameters": {"port": "6543"}}}}  # fixed by the operator: refused
    start = time.monotonic()
    result = live.kube.run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(invalid), check=False)
    TIMINGS["dry-run create refused by the webhook"] = time.monotonic() - start
    print(result.stderr.strip())
    assert result.returncode != 0
    # The operator's validating webhook's own words (cloudnative-pg@v1.30.0 internal/webhook/v1/cluster_webhook.go:
    # 1101); the CRD's schema has no such rule, so only the webhook in the operator's pod can have said it.
    assert "spec.postgresql.parameters.port" in result.stderr and "Can't set fixed configuration parameter" in result.stderr
    # And its mutating webhook defaults what the CRD does not: a Cluster without an image gets the operator's default.
    valid = {**invalid, "spec": {"instances": 1, "storage": {"size": "1Gi"}}}
    created = json.loads(live.kube.run("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(valid)).stdout)
    print(f"defaulted by the mutating webhook: imageName {created['spec'].get('imageName')}")
    assert created["spec"]["imageName"] == "ghcr.io/cloudnative-pg/postgresql:18.4-system-trixie"


def test_the_mlflow_database_is_ready_on_the_real_node_from_the_built_operand(live: Rehearsal) -> None:
    cluster = live.kube.get("clusters.postgresql.cnpg.io", CLUSTER, NAMESPACE)
    print(f"Cluster {NAMESPACE}/{CLUSTER}: {cluster['status'].get('phase')}, "
          f"{cluster['status'].get('readyInstances')}/{cluster['spec']['instances']} ready, "
          f"image {cluster['status'].get('image')}")
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in cluster["status"]["conditions"])
    (pod,) = live.kube.items("pods", NAMESPACE, selector=f"cnpg.io/cluster={CLUSTER}")
    assert pod["spec"]["nodeName"] == REAL_NODE and pod["status"]["phase"] == "Running"
    postgres = next(c for c in pod["spec"]["containers"] if c["name"] == "postgres")
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "postgres")
    assert "postgresql:17.12-minimal-trixie@" in postgres["image"]
    print(f"{NAMESPACE}/{pod['metadata']['name']} postgres: {_locked(live, postgres['image'], status)}")
    # The operator's bootstrap init container (and, with backups on, the plugin's sidecar: a native sidecar, so an
    # init container too; checked below).
    init = next(c for c in pod["spec"]["initContainers"] if c["name"] == "bootstrap-controller")
    init_status = next(s for s in pod["status"]["initContainerStatuses"] if s["name"] == "bootstrap-controller")
    assert init["command"][:3] == ["/manager", "bootstrap", "/controller/manager"]
    assert init_status["state"]["terminated"]["exitCode"] == 0
    print(f"  bootstrap-controller: {_locked(live, init['image'], init_status)}")
    # The operator's claim, bound to the volume the rehearsal provided for it (volumes.database_volumes): a local
    # volume in the cluster's state directory, group-owned by 26 once the kubelet applied the pod's fsGroup.
    claim = live.kube.get("pvc", CLUSTER + "-1", NAMESPACE)
    volume = live.kube.get("pv", claim["spec"]["volumeName"])
    assert claim["status"]["phase"] == "Bound" and volume["metadata"]["name"] == f"rehearsal-{NAMESPACE}-{CLUSTER}-1"
    path = volume["spec"]["local"]["path"]
    assert path.startswith(str(live.settings.state_dir)) and os.stat(path).st_gid == 26
    print(f"  volume {volume['metadata']['name']}: local {path} (gid {os.stat(path).st_gid})")


def _psql(live: Rehearsal, sql: str, database: str = "postgres", cluster: str = CLUSTER) -> str:
    pod = f"{cluster}-1"
    result = live.kube.run("exec", "-n", NAMESPACE, pod, "-c", "postgres", "--", "psql", "-v", "ON_ERROR_STOP=1",
                           "-d", database, "-tA", "-c", sql)
    return str(result.stdout).strip()


def test_psql_in_the_instance_answers_and_the_declared_database_is_there(live: Rehearsal) -> None:
    start = time.monotonic()
    version = _psql(live, "select version()")
    TIMINGS["kubectl exec psql select version()"] = time.monotonic() - start
    print(version)
    assert version.startswith("PostgreSQL 17.12")
    owner = _psql(live, "select pg_get_userbyid(datdba) from pg_database where datname = 'mlflow'")
    print(f"database mlflow owned by {owner}")
    assert owner == "mlflow"


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def test_the_backup_plugin_runs_on_the_real_node_and_archives_wal(live: Rehearsal) -> None:
    (pod,) = live.kube.items("pods", "cnpg-system", selector="app=barman-cloud")
    assert pod["spec"]["nodeName"] == REAL_NODE
    (container,), (status,) = pod["spec"]["containers"], pod["status"]["containerStatuses"]
    assert status["ready"], pod["status"]
    image = container["image"]
    assert image.startswith("trainyard.local/mirror/cloudnative-pg/plugin-barman-cloud:v0.15.0@sha256:"), image
    assert status["imageID"].endswith(image.split("@")[1])
    print(f"cnpg-system/{pod['metadata']['name']} on {REAL_NODE}: {image}")
    # Its client and server certificates, issued by the cert-manager stand-in for upstream's two Certificates.
    for name in ("barman-cloud-client", "barman-cloud-server"):
        certificate = live.kube.get("certificates.cert-manager.io", name, "cnpg-system")
        assert _condition(certificate, "Ready").get("status") == "True", certificate.get("status")
    # The operator found it (the Service in its namespace) and injected its sidecar into the instance pod.
    (instance,) = live.kube.items("pods", NAMESPACE, selector=f"cnpg.io/cluster={CLUSTER}")
    containers = {c["name"]: c for c in [*instance["spec"].get("initContainers", []), *instance["spec"]["containers"]]}
    sidecar = containers.get("plugin-barman-cloud")
    assert sidecar is not None, sorted(containers)
    assert "plugin-barman-cloud-sidecar:v0.15.0@sha256:" in sidecar["image"], sidecar["image"]
    print(f"{NAMESPACE}/{instance['metadata']['name']} sidecar plugin-barman-cloud: {sidecar['image']}")

    def archiving() -> dict[str, Any] | None:
        cluster = live.kube.get("clusters.postgresql.cnpg.io", CLUSTER, NAMESPACE)
        condition = _condition(cluster, "ContinuousArchiving")
        return cluster if condition.get("status") == "True" else None

    start = time.monotonic()
    _psql(live, "select pg_switch_wal()")  # a segment to archive now, not when it fills
    cluster = wait_until("WAL archiving through the plugin", archiving, 300, interval=3)
    TIMINGS["WAL archived through the plugin"] = time.monotonic() - start
    print(f"Cluster {CLUSTER}: ContinuousArchiving {_condition(cluster, 'ContinuousArchiving')}, "
          f"first recoverability point {cluster['status'].get('firstRecoverabilityPoint')}")


def _backup_done(live: Rehearsal, name: str) -> Callable[[], dict[str, Any] | None]:
    def done() -> dict[str, Any] | None:
        backup = live.kube.get("backups.postgresql.cnpg.io", name, NAMESPACE)
        phase = backup.get("status", {}).get("phase")
        assert phase != "failed", backup.get("status")
        return backup if phase == "completed" else None

    return done


RESTORED = f"{CLUSTER}-restored"


def _mlflow(live: Rehearsal, command: str, cluster: str) -> dict[str, Any]:
    """tests/node/mlflow_runs.py in the MLflow tool venv, against ``cluster``'s ``mlflow`` database as its owner (the
    password of the Secret CloudNativePG made for it)."""
    if not MLFLOW_PYTHON.is_file():
        pytest.fail(f"MLflow's venv {MLFLOW_PYTHON.parent.parent} not found: run `tools/mlflow/install.sh`")
    secret = live.kube.get("secret", f"{cluster}-app", NAMESPACE)
    password = base64.b64decode(secret["data"]["password"]).decode()
    with forwarded(live, NAMESPACE, f"{cluster}-1", 5432) as port:
        uri = f"postgresql+psycopg://mlflow:{quote(password, safe='')}@127.0.0.1:{port}/mlflow"
        result = subprocess.run([str(MLFLOW_PYTHON), str(Path(__file__).parent / "mlflow_runs.py"), command, uri],
                                capture_output=True, text=True, check=False, timeout=300, cwd=live.settings.state_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.splitlines()[-1]))


def test_backup_drop_and_restore_bring_mlflows_runs_back(live: Rehearsal) -> None:
    """MLflow's runs and model version in its database, a Backup through the plugin, the database dropped, a Cluster
    recovered from the object store to the end of that backup: every run is back (docs/components/cnpg.md, "Restore")."""
    start = time.monotonic()
    written = _mlflow(live, "write", CLUSTER)
    TIMINGS["MLflow runs written (SQL store, port-forward)"] = time.monotonic() - start
    print(f"MLflow in {CLUSTER}/mlflow: {len(written['runs'])} runs, model versions {written['model_versions']}")
    for run in written["runs"]:
        print(f"  {run['name']} {run['id']} {run['status']} params {run['params']} loss {run['loss']}")
    assert len(written["runs"]) == 3 and len(written["model_versions"]) == 1
    for experiment, runs in written["all"]["experiments"].items():
        print(f"  experiment {experiment}: " + ", ".join(f"{name} {status}" for name, _, status in runs))
    print("  model versions: " + ", ".join(f"{name} v{version}" for name, version, _, _ in written["all"]["model_versions"]))
    backup = {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup",
              "metadata": {"name": "before-the-drop", "namespace": NAMESPACE},
              "spec": {"cluster": {"name": CLUSTER}, "method": "plugin",
                       "pluginConfiguration": {"name": "barman-cloud.cloudnative-pg.io"}}}
    start = time.monotonic()
    live.kube.apply([backup], field_manager="trainyard-node-test")
    done = wait_until("the Backup to complete", _backup_done(live, "before-the-drop"), 600, interval=3)
    TIMINGS["Backup (method plugin) completed"] = time.monotonic() - start
    status = done["status"]
    print(f"Backup before-the-drop: {status['phase']} in {TIMINGS['Backup (method plugin) completed']:.1f}s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(status.items()) if k not in ("conditions", "pluginMetadata")))
    assert status.get("backupId") and status.get("beginWal")
    # The stack's ScheduledBackup (immediate: true) took one too, when the Cluster first became Ready.
    scheduled = [b for b in live.kube.items("backups.postgresql.cnpg.io", NAMESPACE)
                 if b["metadata"]["name"] != "before-the-drop"]
    print("other backups: " + ", ".join(f"{b['metadata']['name']} {b.get('status', {}).get('phase')}"
                                        f"{': ' + b['status']['error'] if b.get('status', {}).get('error') else ''}"
                                        for b in scheduled))
    assert scheduled and all(b.get("status", {}).get("phase") == "completed" for b in scheduled)

    _psql(live, "drop database mlflow with (force)")
    assert _psql(live, "select count(*) from pg_database where datname = 'mlflow'") == "0"
    print("dropped database mlflow")

    # The restored Cluster's volume, as the rehearsal provides the stack's (a site's storage class would).
    origin = live.kube.get("clusters.postgresql.cnpg.io", CLUSTER, NAMESPACE)
    volume = NodeVolume(NAMESPACE, f"{RESTORED}-1", origin["spec"]["storage"]["size"], REHEARSAL_STORAGE_CLASS,
                        REAL_NODE, live.settings.state_dir / "volumes" / NAMESPACE / f"{RESTORED}-1")
    print(provide(live.kube, volume))
    restored = {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
                "metadata": {"name": RESTORED, "namespace": NAMESPACE},
                "spec": {"instances": 1, "imageName": origin["spec"]["imageName"],
                         "storage": {"size": origin["spec"]["storage"]["size"], "storageClass": REHEARSAL_STORAGE_CLASS},
                         "affinity": origin["spec"].get("affinity", {}),
                         "bootstrap": {"recovery": {"source": "origin", "database": "mlflow", "owner": "mlflow",
                                                    "recoveryTarget": {"backupID": status["backupId"],
                                                                       "targetImmediate": True}}},
                         "externalClusters": [{"name": "origin", "plugin": {
                             "name": "barman-cloud.cloudnative-pg.io",
                             "parameters": {"barmanObjectName": "mlflow-backups", "serverName": CLUSTER}}}]}}
    start = time.monotonic()
    live.kube.apply([restored], field_manager="trainyard-node-test")

    def ready() -> bool:
        cluster = live.kube.get("clusters.postgresql.cnpg.io", RESTORED, NAMESPACE)
        return _condition(cluster, "Ready").get("status") == "True"

    try:
        wait_until(f"Cluster {RESTORED} to be recovered and Ready", ready, 600, interval=3)
    except TimeoutError:
        cluster = live.kube.get("clusters.postgresql.cnpg.io", RESTORED, NAMESPACE)
        pods = live.kube.run("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout
        raise AssertionError(f"{cluster.get('status')}\n{pods}") from None
    TIMINGS["recovery Cluster Ready"] = time.monotonic() - start
    print(live.kube.run("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout.rstrip())
    back = _mlflow(live, "read", RESTORED)
    print(f"MLflow in {RESTORED}/mlflow (recovered in {TIMINGS['recovery Cluster Ready']:.1f}s): {len(back['runs'])} "
          f"runs, model versions {back['model_versions']}; in all {sum(map(len, back['all']['experiments'].values()))} "
          f"runs of {len(back['all']['experiments'])} experiments, {len(back['all']['model_versions'])} model versions")
    assert back == written
    assert _psql(live, "select count(*) from pg_database where datname = 'mlflow'") == "0"  # the origin's is gone

