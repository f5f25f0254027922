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
