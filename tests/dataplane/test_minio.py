"""A real MinIO provisioned exactly as prod's Job does it: each identity reaches its own buckets only.

``minio`` is built from its Go module by ``tools/build.sh minio`` (a test server only: AGPL-3.0,
never shipped or linked into Trainyard). The server runs on 127.0.0.1 with the root user of the
rendered ``config.env`` of the prod stack (object store backend ``minio``), test-generated keys
substituted for the placeholders, as the Pulumi component would. Then the provisioning program is
run as the Job runs it: the script and plan from the rendered ConfigMap, the identities file from
the rendered Secret, the admin credentials and region from the Job's environment, only the endpoint
pointing here. It creates the buckets (S3) and the identities (MinIO admin API: policy, user,
attachment). boto3 then checks, per identity, bucket and operation, what is allowed and what is
refused, and prints the matrix; versioning, lifecycle and object lock read back as rendered; and a
second run of the Job changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.conftest import needs_crds, rendered, stack
from tests.dataplane.s3_probe import SEED_KEY, assert_two_versions_of_one_key, attempt, stand_in_keys
from tests.minio_server import minio_binary, minio_server, until_ready
from trainyard.manifests import object_store
from trainyard.manifests.generated import substitute
from trainyard.provisioning.object_store import ProvisioningError, reconcile

pytestmark = [pytest.mark.dataplane, needs_crds]

boto3 = pytest.importorskip("boto3")
pytest.importorskip("minio", reason="the minio SDK is not installed (pip install minio==7.2.20, "
                                    "platform/trainyard/provisioning/image/requirements.txt)")
from botocore.client import Config  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402
from minio import MinioAdmin  # noqa: E402
from minio.credentials.providers import StaticProvider  # noqa: E402

STACK = "prod"


def client(endpoint: str, access_key: str, secret_key: str) -> Any:
    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4")
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access_key,
                        aws_secret_access_key=secret_key, config=config)


def rendered_object(kind: str, name: str) -> dict[str, Any]:
    return next(o for o in rendered(STACK).all_objects if o["kind"] == kind
                and (o["metadata"]["name"] == name or (kind == "Job" and o["metadata"]["name"].startswith(name))))


@pytest.fixture(scope="module")
def keys() -> dict[str, str]:
    """Test stand-ins for the deploy-time generated values, made the way the component makes them."""
    return stand_in_keys(rendered(STACK))


@dataclass(frozen=True)
class Server:
    endpoint: str
    root_user: str
    root_password: str

    def s3(self) -> Any:
        return client(self.endpoint, self.root_user, self.root_password)

    def admin(self) -> Any:
        return MinioAdmin(endpoint=urlparse(self.endpoint).netloc,
                          credentials=StaticProvider(self.root_user, self.root_password), secure=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, str]) -> Iterator[Server]:
    if minio_binary() is None:
        pytest.skip("minio is not built (run tools/build.sh minio)")
    assert stack(STACK).config.object_store.backend == "minio"  # type: ignore[union-attr]
    # The root user exactly as the rendered config.env the operator hands the Tenant, keys substituted.
    config_env = substitute(rendered_object("Secret", object_store.MINIO_CONFIG_SECRET)["stringData"]["config.env"], keys)
    root = dict(re.findall(r"^export (MINIO_ROOT_USER|MINIO_ROOT_PASSWORD)=(\S+)$", config_env, re.MULTILINE))
    work = tmp_path_factory.mktemp("minio")
    with minio_server(work, root["MINIO_ROOT_USER"], root["MINIO_ROOT_PASSWORD"]) as (endpoint, proc, log):
        found = Server(endpoint, root["MINIO_ROOT_USER"], root["MINIO_ROOT_PASSWORD"])
        until_ready(found.s3().list_buckets, proc, log)
        yield found
    # The server's own log never shows a secret key (access key ids are identifiers, not secrets).
    server_log = (work / "minio.log").read_text(errors="replace")
    leaked = [name for name, value in keys.items() if name.endswith("secret-key") and value in server_log]
    assert leaked == [], f"secret keys in the MinIO log: {leaked}"


def run_job(server: Server, keys: dict[str, str], work: Path) -> list[str]:
    """The provisioning Job's container command, with its mounts and environment, against this server."""
    config_map = rendered_object("ConfigMap", object_store.PROVISIONING_CONFIG)
    identities = rendered_object("Secret", object_store.PROVISIONING_IDENTITIES)
    admin_secret = rendered_object("Secret", object_store.ADMIN_SECRET)
    container = rendered_object("Job", "object-store-provision-")["spec"]["template"]["spec"]["containers"][0]
    files = {"/provision/object_store.py": config_map["data"]["object_store.py"],
             "/provision/plan.json": config_map["data"]["plan.json"],
             "/identities/identities.json": substitute(identities["stringData"]["identities.json"], keys)}
    for path, text in files.items():
        (work / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (work / path.lstrip("/")).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({e["name"]: e["value"] for e in container["env"]})
    assert container["envFrom"] == [{"secretRef": {"name": object_store.ADMIN_SECRET}}]
    env.update({k: substitute(v, keys) for k, v in admin_secret["stringData"].items()})
    env["AWS_ENDPOINT_URL"] = server.endpoint  # the only difference: this server, not the in-cluster Service
    python, *args = container["command"]
    assert python == "python3"
    done = subprocess.run([sys.executable, *(str(work / a.lstrip("/")) for a in args)], env=env, cwd=work,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"the provisioning program failed:\n{done.stdout}\n{done.stderr}"
    secrets = [v for n, v in keys.items() if n.endswith("secret-key")]
    assert not any(s in done.stdout + done.stderr for s in secrets), "the provisioning log shows a secret key"
    return done.stdout.splitlines()


def normalized(policy: dict[str, Any]) -> dict[str, Any]:
    """A policy document with its statements, actions and resources sorted: MinIO returns them in any order."""
    statements = [{**st, "Action": sorted(st["Action"]), "Resource": sorted(st["Resource"])} for st in policy["Statement"]]
    return {**policy, "Statement": sorted(statements, key=lambda st: json.dumps(st, sort_keys=True))}


def server_state(server: Server, keys: dict[str, str]) -> dict[str, Any]:
    """Everything the Job manages, as the server reports it: buckets and their settings, users and policies."""
    s3, admin = server.s3(), server.admin()
    state: dict[str, Any] = {"buckets": {}, "identities": {}}
    for bucket in sorted(b["Name"] for b in s3.list_buckets()["Buckets"]):
        entry: dict[str, Any] = {"versioning": s3.get_bucket_versioning(Bucket=bucket).get("Status")}
        try:
            entry["lifecycle"] = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
        except ClientError as exc:
            entry["lifecycle"] = exc.response["Error"]["Code"]
        try:
            entry["objectLock"] = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
        except ClientError as exc:
            entry["objectLock"] = exc.response["Error"]["Code"]
        state["buckets"][bucket] = entry
    for identity in object_store.identities(stack(STACK).config):
        user = json.loads(admin.user_info(keys[identity.access_key.name]))
        info = json.loads(admin.policy_info(f"trainyard-{identity.name}"))
        state["identities"][identity.name] = {
            "policy": normalized(info.get("Policy", info)),  # newer servers wrap the document with its dates
            "user": {k: user.get(k) for k in ("policyName", "status", "memberOf")},
        }
    return state


@pytest.fixture(scope="module")
def provisioned(server: Server, keys: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The Job run twice (it may run again whenever its inputs change), with the server's state after each."""
    first = run_job(server, keys, tmp_path_factory.mktemp("job-1"))
    print("\nprovisioning (first run):", *first, sep="\n  ")
    after_first = server_state(server, keys)
    second = run_job(server, keys, tmp_path_factory.mktemp("job-2"))
    return {"first": first, "second": second, "after_first": after_first, "after_second": server_state(server, keys)}


def test_each_identity_reaches_its_own_buckets_and_is_denied_the_others(server: Server, keys: dict[str, str],
                                                                       provisioned: dict[str, Any]) -> None:
    config = stack(STACK).config
    plan = json.loads(rendered_object("ConfigMap", object_store.PROVISIONING_CONFIG)["data"]["plan.json"])
    buckets = [b["name"] for b in plan["buckets"]]
    admin = server.s3()
    for bucket in buckets:
        admin.put_object(Bucket=bucket, Key=SEED_KEY, Body=b"seed")
    rows, wrong = [], []
    # Tenants (read-write on their three buckets), their serving identities (read-only on models), services.
    for identity in object_store.identities(config):
        s3 = client(server.endpoint, keys[identity.access_key.name], keys[identity.secret_key.name])
        for bucket in buckets:
            for operation in ("list", "get", "put"):
                outcome = attempt(s3, operation, bucket)
                expected = bucket in identity.buckets and (operation != "put" or identity.access == "read-write")
                rows.append((identity.name, bucket, operation, outcome))
                if expected != (outcome == "allowed") or (not expected and "AccessDenied" not in outcome):
                    wrong.append((identity.name, bucket, operation, outcome))
    width, who = max(len(b) for b in buckets), max(len(r[0]) for r in rows)
    print("\nisolation matrix (identity x bucket x operation -> outcome):")
    for name, bucket, operation, outcome in rows:
        print(f"  {name:<{who}} {bucket:<{width}} {operation:<4} -> {outcome}")
    assert wrong == []
    assert {r[3] for r in rows} == {"allowed", "denied (AccessDenied)"}


def test_no_identity_may_create_buckets_or_use_the_admin_api(server: Server, keys: dict[str, str],
                                                            provisioned: dict[str, Any]) -> None:
    config = stack(STACK).config
    tenant = object_store.tenant_identity(config, config.tenants[0])
    s3 = client(server.endpoint, keys[tenant.access_key.name], keys[tenant.secret_key.name])
    with pytest.raises(ClientError) as refused:
        s3.create_bucket(Bucket=f"{config.tenants[0].name}-scratch")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    admin_as_tenant = MinioAdmin(endpoint=urlparse(server.endpoint).netloc, secure=False,
                                 credentials=StaticProvider(keys[tenant.access_key.name], keys[tenant.secret_key.name]))
    with pytest.raises(Exception, match=r"AccessDenied|Access Denied"):
        admin_as_tenant.user_add("intruder", "intruder-secret-1")


def test_datasets_keep_every_version_of_a_key(server: Server, keys: dict[str, str], provisioned: dict[str, Any]) -> None:
    config = stack(STACK).config
    tenant = config.tenants[0]
    bucket = object_store.bucket_name(config, tenant, "datasets")
    identity = object_store.tenant_identity(config, tenant)
    s3 = client(server.endpoint, keys[identity.access_key.name], keys[identity.secret_key.name])
    assert_two_versions_of_one_key(s3, bucket)


def test_object_lock_keeps_a_dataset_version_from_its_tenant(server: Server, keys: dict[str, str],
                                                            provisioned: dict[str, Any]) -> None:
    # GOVERNANCE retention, 30 days by default: the tenant cannot delete a version it wrote (it has no
    # s3:BypassGovernanceRetention). MinIO answers InvalidRequest ("Object is WORM protected"), AWS AccessDenied.
    config = stack(STACK).config
    tenant = config.tenants[0]
    bucket = object_store.bucket_name(config, tenant, "datasets")
    identity = object_store.tenant_identity(config, tenant)
    s3 = client(server.endpoint, keys[identity.access_key.name], keys[identity.secret_key.name])
    version = s3.put_object(Bucket=bucket, Key="locked/object.txt", Body=b"keep")["VersionId"]
    # The bucket's default retention applied to the new version (read as the admin: MinIO shows
    # retention only to callers with s3:GetObjectRetention, which tenants are not granted).
    retention = server.s3().get_object_retention(Bucket=bucket, Key="locked/object.txt", VersionId=version)["Retention"]
    assert retention["Mode"] == "GOVERNANCE"
    with pytest.raises(ClientError) as refused:
        s3.delete_object(Bucket=bucket, Key="locked/object.txt", VersionId=version)
    print(f"\ndeleting a locked version of {bucket}: {refused.value.response['Error']}")
    assert refused.value.response["Error"]["Code"] in ("InvalidRequest", "AccessDenied")
    assert s3.get_object(Bucket=bucket, Key="locked/object.txt", VersionId=version)["Body"].read() == b"keep"


def test_object_lock_asked_for_an_existing_bucket_is_a_clear_error(server: Server, provisioned: dict[str, Any]) -> None:
    # MinIO enables object lock only at creation: a stack that adds object_lock to a bucket that exists
    # gets a message saying what to do, not a traceback (and the other buckets are still converged).
    s3 = server.s3()
    s3.create_bucket(Bucket="trainyard-late-lock")
    bucket = {"name": "trainyard-late-lock", "versioning": True, "objectLock": {"mode": "GOVERNANCE", "days": 30},
              "lifecycle": []}
    with pytest.raises(ProvisioningError) as failed:
        reconcile({"buckets": [bucket]}, {}, s3=s3)
    print(f"\n{failed.value}")
    assert "exists without object lock" in str(failed.value)
    assert failed.value.log == ["bucket trainyard-late-lock: FAILED"]
    s3.delete_bucket(Bucket="trainyard-late-lock")


def test_lifecycle_and_object_lock_read_back_as_rendered(server: Server, provisioned: dict[str, Any]) -> None:
    plan = json.loads(rendered_object("ConfigMap", object_store.PROVISIONING_CONFIG)["data"]["plan.json"])
    state = provisioned["after_first"]["buckets"]
    assert sorted(state) == sorted(b["name"] for b in plan["buckets"])
    for bucket in plan["buckets"]:
        got = state[bucket["name"]]
        assert got["versioning"] == "Enabled"
        if bucket["lifecycle"]:
            print(f"\n{bucket['name']} lifecycle: {json.dumps(got['lifecycle'], sort_keys=True)}")
            assert sorted(got["lifecycle"], key=lambda r: r["ID"]) == sorted(bucket["lifecycle"], key=lambda r: r["ID"])
        else:
            assert got["lifecycle"] == "NoSuchLifecycleConfiguration"
        if bucket["objectLock"]:
            print(f"{bucket['name']} object lock: {got['objectLock']}")
            assert got["objectLock"] == {"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {
                "Mode": bucket["objectLock"]["mode"], "Days": bucket["objectLock"]["days"]}}}
        else:
            assert got["objectLock"] == "ObjectLockConfigurationNotFoundError"


def test_each_identity_holds_exactly_its_planned_policy(provisioned: dict[str, Any]) -> None:
    plan = json.loads(rendered_object("ConfigMap", object_store.PROVISIONING_CONFIG)["data"]["plan.json"])
    state = provisioned["after_first"]["identities"]
    assert sorted(state) == sorted(i["name"] for i in plan["identities"])
    for identity in plan["identities"]:
        got = state[identity["name"]]
        assert got["user"]["policyName"] == f"trainyard-{identity['name']}"
        assert got["user"]["status"] == "enabled"
        assert got["policy"] == normalized(identity["policy"])


def test_provisioning_a_second_time_changes_nothing(provisioned: dict[str, Any]) -> None:
    print("\nprovisioning (second run):", *provisioned["second"], sep="\n  ")
    assert provisioned["second"] and not any("created" in line for line in provisioned["second"])
    assert provisioned["after_second"] == provisioned["after_first"]
