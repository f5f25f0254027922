"""Node tier: CloudNativePG installed by `pulumi up` from its real chart, and the MLflow database running for real on
the real node, from images built here and pulled from the rehearsal's loopback mirror by digest (issue #22, item 4's
CloudNativePG and the ground item 6's backups stand on).

`trainyard cluster up local --real-nodes` with the local stack's MLflow database declared (MLflow's own chart stays
external, backups off: the barman-cloud plugin is not built yet), PostgreSQL 17 (the major Debian trixie ships, which
the operand image is made of: docs/architecture.md). What is proven, each by the live cluster:

- the operator's pod runs on the real node by the digest the factory built and the rehearsal's lock holds;
- its webhook answers: the API server sends a dry-run create of an invalid Cluster to the operator's pod, which
  refuses it with its own message (a fixed PostgreSQL parameter);
- the stack's `Cluster/mlflow-db` reaches Ready, its instance pod Running on the real node (its volume a node-local
  PersistentVolume), from the operand image built from Debian's packages, by digest; its init container copied the
  instance manager out of the operator's image;
- `psql` in the instance (`kubectl exec`, as `kubectl cnpg psql` does) answers `select version()` with PostgreSQL
  17, and the database the stack declared exists, owned by its application user.

Needs root, the cluster and node tools (`tools/build.sh cluster kubelet coredns kube-router cnpg`), Debian's
containerd, runc, CNI plugins and nftables, and deb.debian.org for the operand's packages on a cold cache; skips
saying which is missing elsewhere (`make test-node`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.node.one_node import deployed_platform
from trainyard.rehearsal.session import REAL_NODE, Rehearsal
from trainyard.supply.lock import load_lock

pytestmark = pytest.mark.node
TOOLS = ("cluster", "kubelet", "coredns", "kube-router", "cnpg", "kserve", "kube-rbac-proxy")
TIMINGS: dict[str, float] = {}
NAMESPACE, CLUSTER = "mlflow", "mlflow-db"
# The local stack's MLflow database, as tests/cluster/test_destroy_keeps_data.py declares it (backups off), at the
# major built here.
MLFLOW_DATABASE: dict[str, Any] = {
    "mlflow": {"enabled": True, "object_store": {"endpoint_url": "http://seaweedfs-all-in-one.object-store.svc:8333"},
               "backup": {"enabled": False}, "database": {"postgresql": "17", "storage_size": "1Gi"}},
    "object_store": {"platform_buckets": [{"name": "mlflow-artifacts"}, {"name": "mlflow-backups"}],
                     "services": [{"name": "mlflow", "namespace": "mlflow",
                                   "buckets": ["mlflow-artifacts", "mlflow-backups"]}]},
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    with deployed_platform(tmp_path_factory, "postgres", TOOLS, TIMINGS,
                           "then every controller Ready and the Cluster Ready", MLFLOW_DATABASE) as session:
        yield session


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
    (pod,) = live.kube.items("pods", "cnpg-system")
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
    (init,) = pod["spec"]["initContainers"]
    init_status = pod["status"]["initContainerStatuses"][0]
    assert init["name"] == "bootstrap-controller" and init["command"][:3] == ["/manager", "bootstrap", "/controller/manager"]
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


def _psql(live: Rehearsal, sql: str) -> str:
    pod = f"{CLUSTER}-1"
    result = live.kube.run("exec", "-n", NAMESPACE, pod, "-c", "postgres", "--", "psql", "-tA", "-c", sql)
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


def test_timings(live: Rehearsal) -> None:
    print("\n| step | seconds |\n|---|---:|")
    for step, seconds in TIMINGS.items():
        print(f"| {step} | {seconds:.1f} |")
