"""A real SeaweedFS with exactly the identities Trainyard renders: each tenant reaches its own buckets only.

``weed`` is built from Go modules by ``tools/build.sh seaweedfs`` (``make tools``). The server runs
on 127.0.0.1 (``weed mini``) with the identities file taken from the rendered Secret of the local
stack, test-generated keys substituted for the placeholders, as the Pulumi component would. The
buckets are created by the provisioning program the Job runs (``trainyard.provisioning.object_store``)
from the rendered plan. Then boto3 (the client the Job and most training code use) checks, per
tenant, bucket and operation, what is allowed and what is refused, and prints the matrix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import needs_crds, rendered, stack
from tests.dataplane.s3_probe import SEED_KEY, assert_two_versions_of_one_key, attempt, stand_in_keys
from tests.seaweedfs import until_ready, weed_binary, weed_mini
from trainyard.config.object_store import PURPOSES
from trainyard.manifests import object_store
from trainyard.manifests.generated import substitute
from trainyard.provisioning.object_store import reconcile

pytestmark = [pytest.mark.dataplane, needs_crds]

boto3 = pytest.importorskip("boto3")
from botocore.client import Config  # noqa: E402

STACK = "local"


def client(endpoint: str, access_key: str | None, secret_key: str | None) -> Any:
    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                    signature_version="s3v4" if access_key else __import__("botocore").UNSIGNED)
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access_key,
                        aws_secret_access_key=secret_key, config=config)


@pytest.fixture(scope="module")
def keys() -> dict[str, str]:
    """Test stand-ins for the deploy-time generated values, made the way the component makes them."""
    return stand_in_keys(rendered(STACK))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, str]) -> Iterator[str]:
    if weed_binary() is None:
        pytest.skip("weed is not built (run `make tools` or tools/build.sh seaweedfs)")
    platform = rendered(STACK)
    identities = next(o for o in platform.all_objects if o["kind"] == "Secret"
                      and o["metadata"]["name"] == object_store.SEAWEEDFS_IDENTITIES_SECRET)
    work = tmp_path_factory.mktemp("seaweedfs")
    # Exactly the rendered file, placeholders replaced by this run's keys.
    with weed_mini(work, substitute(identities["stringData"][object_store.SEAWEEDFS_IDENTITIES_KEY], keys)) \
            as (endpoint, proc, log):
        admin = client(endpoint, keys[object_store.ADMIN.access_key.name], keys[object_store.ADMIN.secret_key.name])
        until_ready(admin.list_buckets, proc, log)
        yield endpoint
    # The server's own log never shows a secret key (access key ids are identifiers, not secrets).
    server_log = (work / "weed.log").read_text(errors="replace")
    leaked = [name for name, value in keys.items() if name.endswith("secret-key") and value in server_log]
    assert leaked == [], f"secret keys in the SeaweedFS log: {leaked}"


@pytest.fixture(scope="module")
def provisioned(server: str, keys: dict[str, str]) -> list[str]:
    """Buckets as the Job makes them: the rendered plan, applied by the Job's own program."""
    platform = rendered(STACK)
    config_map = next(o for o in platform.all_objects if o["kind"] == "ConfigMap"
                      and o["metadata"]["name"] == object_store.PROVISIONING_CONFIG)
    plan = json.loads(config_map["data"]["plan.json"])
    admin = client(server, keys[object_store.ADMIN.access_key.name], keys[object_store.ADMIN.secret_key.name])
    first = reconcile(plan, {}, s3=admin)
    second = reconcile(plan, {}, s3=admin)  # idempotent: the Job may run again
    print("\nprovisioning (first run):", *first, sep="\n  ")
    return second


def tenant_client(server: str, keys: dict[str, str], tenant: str) -> Any:
    config = stack(STACK).config
    identity = object_store.tenant_identity(config, next(t for t in config.tenants if t.name == tenant))
    return client(server, keys[identity.access_key.name], keys[identity.secret_key.name])


def test_each_tenant_reaches_its_own_buckets_and_is_denied_the_others(server: str, keys: dict[str, str],
                                                                     provisioned: list[str]) -> None:
    config = stack(STACK).config
    tenants = [t.name for t in config.tenants]
    buckets = [object_store.bucket_name(config, t, p) for t in tenants for p in PURPOSES]
    admin = client(server, keys[object_store.ADMIN.access_key.name], keys[object_store.ADMIN.secret_key.name])
    for bucket in buckets:
        admin.put_object(Bucket=bucket, Key=SEED_KEY, Body=b"seed")
    rows, wrong = [], []
    for tenant in tenants:
        s3 = tenant_client(server, keys, tenant)
        for bucket in buckets:
            for operation in ("list", "get", "put"):
                outcome = attempt(s3, operation, bucket)
                own = bucket.startswith(f"{config.object_store.bucket_prefix}{tenant}-")  # type: ignore[union-attr]
                rows.append((tenant, bucket, operation, outcome))
                if own != (outcome == "allowed") or (not own and "AccessDenied" not in outcome):
                    wrong.append((tenant, bucket, operation, outcome))
    width = max(len(b) for b in buckets)
    print("\nisolation matrix (tenant x bucket x operation -> outcome):")
    for tenant, bucket, operation, outcome in rows:
        print(f"  {tenant:<8} {bucket:<{width}} {operation:<4} -> {outcome}")
    assert wrong == []


def test_anonymous_requests_are_refused(server: str, provisioned: list[str]) -> None:
    config = stack(STACK).config
    anonymous = client(server, None, None)
    for tenant in config.tenants:
        bucket = object_store.bucket_name(config, tenant, "datasets")
        assert "AccessDenied" in attempt(anonymous, "list", bucket)
        assert "AccessDenied" in attempt(anonymous, "put", bucket)


def test_datasets_keep_every_version_of_a_key(server: str, keys: dict[str, str], provisioned: list[str]) -> None:
    config = stack(STACK).config
    tenant = config.tenants[1].name  # team-b: datasets without object lock
    bucket = object_store.bucket_name(config, tenant, "datasets")
    s3 = tenant_client(server, keys, tenant)
    assert_two_versions_of_one_key(s3, bucket)


def test_lifecycle_and_object_lock_read_back_as_rendered(server: str, keys: dict[str, str], provisioned: list[str]) -> None:
    config = stack(STACK).config
    admin = client(server, keys[object_store.ADMIN.access_key.name], keys[object_store.ADMIN.secret_key.name])
    for tenant in config.tenants:
        for bucket in object_store.tenant_buckets(config, tenant):
            if bucket["lifecycle"]:
                got = admin.get_bucket_lifecycle_configuration(Bucket=bucket["name"])["Rules"]
                print(f"\n{bucket['name']} lifecycle: {json.dumps(got, sort_keys=True)}")
                assert sorted(got, key=lambda r: r["ID"]) == sorted(bucket["lifecycle"], key=lambda r: r["ID"])
            if bucket["objectLock"]:
                lock = admin.get_object_lock_configuration(Bucket=bucket["name"])["ObjectLockConfiguration"]
                print(f"{bucket['name']} object lock: {lock}")
                assert lock["Rule"]["DefaultRetention"] == {"Mode": bucket["objectLock"]["mode"],
                                                            "Days": bucket["objectLock"]["days"]}


def test_provisioning_a_second_time_changes_nothing_that_matters(provisioned: list[str]) -> None:
    # Every bucket already exists on the second run: nothing is created again.
    assert provisioned and not any("created" in line for line in provisioned), provisioned
