"""Reconcile an S3 object store with Trainyard's plan: buckets, versioning, object lock, lifecycle, identities.

This file runs inside the provisioning Job (``python3 object_store.py PLAN IDENTITIES``), shipped to
it in a ConfigMap, and in the data-plane tests against a real SeaweedFS. It imports nothing from
Trainyard, and it is idempotent: every run converges the server to the plan, so the Job can be
re-run whenever its inputs change (its name carries a hash of them).

- Buckets: created if missing (with Object Lock when the plan asks: S3 allows it only at creation),
  versioning enabled, the lifecycle configuration put exactly as planned (or deleted when empty),
  the Object Lock default retention put. Nothing is ever deleted: a bucket that left the plan stays.
- Identities (``identity_api: minio-admin`` only): a policy per identity, the user with the
  planned key pair, the policy attached. SeaweedFS reads its identities from a static file that
  Trainyard renders, so for it this step is skipped.

Admin credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_ENDPOINT_URL, AWS_DEFAULT_REGION). Output names buckets and identities, never keys. A bucket
the server refuses to converge (object lock asked for a bucket created without it) does not stop
the others or the identities: every step runs, then the program names what failed and exits 1.

Ref: S3 API CreateBucket, PutBucketVersioning, PutObjectLockConfiguration,
PutBucketLifecycleConfiguration (https://docs.aws.amazon.com/AmazonS3/latest/API/);
MinIO admin API in the minio SDK (minio/minioadmin.py: policy_add, user_add, policy_set).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def s3_client() -> Any:
    import boto3  # type: ignore[import-untyped,unused-ignore]  # present in the provisioner image
    from botocore.config import Config  # type: ignore[import-untyped,unused-ignore]

    return boto3.client(
        "s3",
        endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 10, "mode": "standard"}),
    )


class ProvisioningError(Exception):
    """Something the plan asks that this server cannot do as things stand; the message says what to change."""

    def __init__(self, message: str, log: list[str] | None = None) -> None:
        super().__init__(message)
        self.log = log or []  # what was done before and beside the failure


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def ensure_bucket(s3: Any, bucket: dict[str, Any]) -> list[str]:
    """Converge one bucket; returns what was done, for the log."""
    name = bucket["name"]
    done: list[str] = []
    lock = bucket.get("objectLock")
    try:
        s3.head_bucket(Bucket=name)
    except Exception as exc:
        if _error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
            raise
        args: dict[str, Any] = {"Bucket": name}
        if lock:
            args["ObjectLockEnabledForBucket"] = True
        s3.create_bucket(**args)
        done.append("created" + (" with object lock" if lock else ""))
    if bucket.get("versioning", True):
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        done.append("versioning enabled")
    if lock:
        try:
            s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": lock["mode"], "Days": lock["days"]}},
            })
        except Exception as exc:
            # MinIO: "Object Lock configuration cannot be enabled on existing buckets".
            if _error_code(exc) != "InvalidBucketState":
                raise
            raise ProvisioningError(
                f"bucket {name} exists without object lock, and this server enables object lock only when a "
                "bucket is created: copy its data to a new bucket created with object lock, or remove "
                "object_lock for it from the stack") from None
        done.append(f"object lock {lock['mode']} {lock['days']}d")
    rules = bucket.get("lifecycle") or []
    if rules:
        s3.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={"Rules": rules})
        done.append(f"lifecycle: {len(rules)} rule(s)")
    else:
        try:
            s3.delete_bucket_lifecycle(Bucket=name)
        except Exception as exc:
            if _error_code(exc) not in ("NoSuchLifecycleConfiguration", "404", "NotImplemented"):
                raise
    return done


def ensure_minio_identities(plan: dict[str, Any], keys: dict[str, dict[str, str]]) -> list[str]:
    missing = [i["name"] for i in plan.get("identities", []) if i["name"] not in keys]
    if missing:
        raise ProvisioningError(f"no keys for identities {', '.join(missing)} in the identities file "
                                "(the Secret object-store-provisioning-identities)")
    from urllib.parse import urlparse

    from minio import MinioAdmin  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from minio.credentials.providers import StaticProvider  # type: ignore[import-untyped,import-not-found,unused-ignore]

    url = urlparse(os.environ["AWS_ENDPOINT_URL"])
    admin = MinioAdmin(endpoint=url.netloc, credentials=StaticProvider(os.environ["AWS_ACCESS_KEY_ID"],
                                                                       os.environ["AWS_SECRET_ACCESS_KEY"]),
                       secure=url.scheme == "https")
    done = []
    for identity in plan.get("identities", []):
        name, pair = identity["name"], keys[identity["name"]]
        policy_name = f"trainyard-{name}"
        admin.policy_add(policy_name, policy=identity["policy"])
        # MinIO users are named by their access key; user_add replaces the secret of an existing one,
        # policy_set replaces the user's policies (attach_policy would fail when already attached).
        admin.user_add(pair["accessKey"], pair["secretKey"])
        admin.policy_set(policy_name, user=pair["accessKey"])
        done.append(f"identity {name}: policy {policy_name}")
    return done


def reconcile(plan: dict[str, Any], keys: dict[str, dict[str, str]], s3: Any | None = None) -> list[str]:
    """Apply the whole plan; returns one log line per step."""
    s3 = s3 if s3 is not None else s3_client()
    log, failed = [], []
    for bucket in plan["buckets"]:
        try:
            log.append(f"bucket {bucket['name']}: {', '.join(ensure_bucket(s3, bucket)) or 'unchanged'}")
        except ProvisioningError as exc:
            log.append(f"bucket {bucket['name']}: FAILED")
            failed.append(str(exc))
    if plan.get("identityApi") == "minio-admin":
        try:
            log += ensure_minio_identities(plan, keys)
        except ProvisioningError as exc:
            failed.append(str(exc))
    if failed:
        raise ProvisioningError("\n".join(failed), log)
    return log


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: object_store.py PLAN.json IDENTITIES.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        plan = json.load(f)
    keys: dict[str, dict[str, str]] = {}
    if os.path.exists(argv[2]):
        with open(argv[2], encoding="utf-8") as f:
            keys = {i["name"]: i for i in json.load(f)}
    try:
        lines = reconcile(plan, keys)
    except ProvisioningError as exc:
        for line in exc.log:
            print(line, flush=True)
        for problem in str(exc).splitlines():
            print(f"error: {problem}", file=sys.stderr)
        return 1
    for line in lines:
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
