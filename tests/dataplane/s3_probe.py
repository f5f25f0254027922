"""What the object-store tests of the data plane share: stand-ins for the generated keys, and one S3 operation
tried with one identity's client, as their isolation matrices print it (``allowed``, ``denied (<code>)``)."""

from __future__ import annotations

from typing import Any

from trainyard.components.generated import generate
from trainyard.manifests import RenderedPlatform
from trainyard.manifests.generated import names_in

PROBE_KEY, SEED_KEY = "probe/object.txt", "seed/object.txt"


def attempt(s3: Any, operation: str, bucket: str) -> str:
    """``list`` the bucket, ``put`` the probe object, or ``get`` the seed object the test wrote as admin."""
    from botocore.exceptions import ClientError  # type: ignore[import-untyped,unused-ignore]  # the tests skip without it

    try:
        if operation == "list":
            s3.list_objects_v2(Bucket=bucket)
        elif operation == "put":
            s3.put_object(Bucket=bucket, Key=PROBE_KEY, Body=b"probe")
        elif operation == "get":
            s3.get_object(Bucket=bucket, Key=SEED_KEY)["Body"].read()
        return "allowed"
    except ClientError as exc:
        return f"denied ({exc.response['Error']['Code']})"


def stand_in_keys(platform: RenderedPlatform) -> dict[str, str]:
    """Test stand-ins for the deploy-time generated values of ``platform``, made the way the component makes them."""
    names = sorted({n for o in platform.all_objects for n in names_in(o)})
    specs = {v.name: v for c in platform.concerns for v in c.generated}
    return {n: generate(specs[n].length, specs[n].alphabet) for n in names}


def assert_two_versions_of_one_key(s3: Any, bucket: str) -> None:
    """Versioning is on: two writes of one key keep two versions, and the first reads back by its version id."""
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    first = s3.put_object(Bucket=bucket, Key="corpus/shard-0.jsonl", Body=b"v1")["VersionId"]
    second = s3.put_object(Bucket=bucket, Key="corpus/shard-0.jsonl", Body=b"v2")["VersionId"]
    versions = s3.list_object_versions(Bucket=bucket, Prefix="corpus/shard-0.jsonl")["Versions"]
    print(f"\n{bucket}/corpus/shard-0.jsonl versions:", [(v["VersionId"], v["IsLatest"]) for v in versions])
    assert {v["VersionId"] for v in versions} == {first, second}
    assert s3.get_object(Bucket=bucket, Key="corpus/shard-0.jsonl", VersionId=first)["Body"].read() == b"v1"
