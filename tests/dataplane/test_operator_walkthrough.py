"""The operator's walkthrough (docs/operators.md), run: from a clone to `pulumi preview` on a site-shaped setup.

What a platform engineer does for their own cluster, with every piece real except the key service:
- the state backend is an S3 bucket on a real SeaweedFS (``weed``, built from Go modules), not Pulumi
  Cloud and not a local directory;
- the secrets provider is ``awskms://``: Pulumi's own AWS KMS driver, against moto's KMS server on
  loopback (moto is in the data plane's tool venv, ``tools/mlflow``), a stand-in for the site's key
  service (it is named as one in the guide);
- the cluster is a real kube-apiserver + etcd (the rehearsal control plane), reached through the
  kubeconfig context the stack names;
- the engine is the real Pulumi CLI and Kubernetes provider (``tools/build.sh pulumi pulumi-kubernetes``).

The stack file is the repository's ``local`` stack, copied into a project directory of the test's own
(so the repository's file is never touched): ``trainyard stack init`` must leave its bytes as they were
and append only the secrets provider's keys; ``pulumi preview`` then plans the whole platform.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import BIN_DIR, TOOLS_DIR, private_cluster, tools_problem
from tests.conftest import CRDS_DIR, ROOT, needs_crds
from tests.loopback import free_port, running, until_ready
from tests.seaweedfs import until_ready as weed_ready
from tests.seaweedfs import weed_binary, weed_mini

pytestmark = [pytest.mark.dataplane, needs_crds]

boto3 = pytest.importorskip("boto3")

TRAINYARD = Path(sys.executable).parent / "trainyard"
STACK = "local"
BUCKET = "pulumi-state"
ALIAS = "alias/trainyard-local"
REGION = "us-east-1"
# Test keys for the state bucket's one identity (and, as moto accepts any, for the KMS calls).
ACCESS_KEY, SECRET_KEY = "walkthrough-admin", "walkthrough-secret-key-0123456789"


def moto_server() -> Path | None:
    found = sorted(TOOLS_DIR.glob("mlflow-*/bin/moto_server"))
    return found[-1] if found else None


@pytest.fixture(scope="module")
def problem() -> None:
    missing = tools_problem("etcd", "kube-apiserver", "pulumi", "pulumi-kubernetes")
    if missing:
        pytest.skip(missing)
    if weed_binary() is None:
        pytest.skip("weed is not built (tools/build.sh seaweedfs)")
    if moto_server() is None:
        pytest.skip("the KMS stand-in (moto, in the data plane's venv) is not installed (tools/mlflow/install.sh)")


@pytest.fixture(scope="module")
def state_bucket(problem: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    identities = {"identities": [{"name": "pulumi", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                                  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
    with weed_mini(tmp_path_factory.mktemp("state-store"), json.dumps(identities)) as (endpoint, proc, log):
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY)
        weed_ready(s3.list_buckets, proc, log)
        s3.create_bucket(Bucket=BUCKET)
        yield endpoint


@pytest.fixture(scope="module")
def kms(problem: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = moto_server()
    assert server is not None
    port = free_port()
    work = tmp_path_factory.mktemp("kms")
    endpoint = f"http://127.0.0.1:{port}"
    with running([str(server), "-H", "127.0.0.1", "-p", str(port)], work / "moto.log", cwd=work) as proc:
        client = boto3.client("kms", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                              aws_secret_access_key=SECRET_KEY)
        until_ready("moto KMS", client.list_keys, proc, work / "moto.log", timeout=120)
        key = client.create_key(Description="trainyard local stack secrets")["KeyMetadata"]["KeyId"]
        client.create_alias(AliasName=ALIAS, TargetKeyId=key)
        yield endpoint


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project directory as a clone has it: Pulumi.yaml, the program, runtimes, the stack file (a copy)."""
    root = tmp_path_factory.mktemp("clone")
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    for name in ("platform", "runtimes", "serving-runtimes", "images.lock.yaml", ".venv"):
        (root / name).symlink_to(ROOT / name)
    (root / "stacks").mkdir()
    shutil.copy(ROOT / "stacks" / f"Pulumi.{STACK}.yaml", root / "stacks" / f"Pulumi.{STACK}.yaml")
    return root


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    print(f"\n$ {' '.join(args)}  (exit {result.returncode})\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


def test_from_a_clone_to_preview_on_an_s3_backend_with_a_kms(
        state_bucket: str, kms: str, project: Path, tmp_path: Path) -> None:
    with private_cluster(tmp_path / "cluster", with_fake_nodes=True) as cluster:
        backend = f"s3://{BUCKET}?endpoint={state_bucket}&use_path_style=true&region={REGION}"
        provider = f"awskms://{ALIAS}?region={REGION}"
        env = {key: value for key, value in os.environ.items() if not key.startswith(("PULUMI_", "AWS_"))}
        env.update({
            "PATH": f"{BIN_DIR}:{env.get('PATH', '')}",  # the pulumi CLI, language host and provider plugin
            "PULUMI_HOME": str(tmp_path / "pulumi-home"), "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "KUBECONFIG": str(cluster.kubeconfig), "TRAINYARD_CRDS_DIR": str(CRDS_DIR),
            "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION,
            # Pulumi's awskms driver (AWS SDK v2) finds the key service here (Ref: AWS SDKs and Tools reference,
            # "Service-specific endpoints": AWS_ENDPOINT_URL_<SERVICE>).
            "AWS_ENDPOINT_URL_KMS": kms,
        })
        stack_file = project / "stacks" / f"Pulumi.{STACK}.yaml"
        reviewed = stack_file.read_bytes()

        checks = run([str(TRAINYARD), "stack", "preflight", STACK, "--backend", backend, "--secrets-provider", provider],
                     project, env)
        assert checks.returncode == 0, checks.stdout + checks.stderr

        init = run([str(TRAINYARD), "stack", "init", STACK, "--backend", backend, "--secrets-provider", provider],
                   project, env)
        assert init.returncode == 0, init.stderr
        written = stack_file.read_bytes()
        assert written.startswith(reviewed), "stack init changed the reviewed part of the stack file"
        appended = written[len(reviewed):].decode()
        print(f"appended to stacks/Pulumi.{STACK}.yaml:\n{appended}")
        assert f"secretsprovider: {provider}" in appended and "encryptedkey: " in appended
        assert "encryptionsalt" not in appended  # a key service, not a passphrase

        again = run([str(TRAINYARD), "stack", "init", STACK, "--backend", backend, "--secrets-provider", provider],
                    project, env)
        assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr
        assert stack_file.read_bytes() == written

        preview = run([str(BIN_DIR / "pulumi"), "preview", "--stack", STACK, "--non-interactive", "--diff"],
                      project, {**env, "PULUMI_BACKEND_URL": backend}, timeout=1800)
        assert preview.returncode == 0, preview.stdout[-4000:] + preview.stderr[-4000:]
        assert "to create" in preview.stdout

        # The state lives in the bucket, and its secrets go through the key service.
        s3 = boto3.client("s3", endpoint_url=state_bucket, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY)
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        print("state bucket:", *keys, sep="\n  ")
        checkpoint_key = next(k for k in keys if k.endswith(f"/{STACK}.json"))
        checkpoint: dict[str, Any] = json.loads(s3.get_object(Bucket=BUCKET, Key=checkpoint_key)["Body"].read())
        providers = (checkpoint.get("checkpoint", {}).get("latest") or {}).get("secrets_providers") or {}
        assert providers.get("type") in (None, "cloud"), providers
