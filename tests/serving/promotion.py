"""The serving side of the handover, shared by the serving and lab tiers: ``trainyard promote``, ``trainyard check``
and KServe's storage initializer with the credentials a tenant's predictor pod gets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, rendered
from trainyard.manifests import generated
from trainyard.manifests.serving import (
    S3_ENDPOINT_ANNOTATION,
    S3_REGION_ANNOTATION,
    S3_SECRET,
    S3_USE_HTTPS_ANNOTATION,
    S3_VERIFY_SSL_ANNOTATION,
    SERVICE_ACCOUNT,
)

TRAINYARD = Path(sys.executable).parent / "trainyard"

# What initializer-entrypoint does (python/storage-initializer/scripts/initializer-entrypoint at v0.20.0):
# its arguments are source/destination pairs (storageUri or each of storageUris with its mountPath).
DOWNLOAD = """
import sys
from kserve_storage import Storage
Storage.download_files(sys.argv[1::2], sys.argv[2::2])
"""


def promote(stack: str, tenant: str, tracking_uri: str, out: Path, *args: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``trainyard promote STACK --tenant T --tracking-uri URL --out FILE ARGS`` (``env``: e.g. the tenant's MLflow Secret)."""
    return subprocess.run([str(TRAINYARD), "promote", stack, "--tenant", tenant, "--tracking-uri", tracking_uri,
                           "--out", str(out), *args], capture_output=True, text=True, cwd=ROOT, check=False,
                          timeout=300, env={**os.environ, **(env or {})})


def check(stack: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINYARD), "check", stack, str(path)], capture_output=True, text=True, cwd=ROOT,
                          check=False, timeout=300)


def kserve_storage_env(secret: dict[str, Any], s3_values: dict[str, str]) -> dict[str, str]:
    """The environment KServe's credential builder gives the storage initializer for an S3 Secret.

    Mirrors pkg/credentials/s3/s3_secret.go BuildSecretEnvs and utils.go BuildS3EnvVars at v0.20.0, for
    the values Trainyard sets: the Secret is an S3 one when it has the configured secret-key entry; the
    keys become AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; annotations give S3_ENDPOINT and AWS_ENDPOINT_URL
    (scheme from s3-usehttps, https unless "0"), S3_USE_HTTPS, S3_VERIFY_SSL and AWS_DEFAULT_REGION.
    """
    data, annotations = secret["stringData"], secret["metadata"]["annotations"]
    assert s3_values["secretAccessKeyName"] in data, "KServe would not recognise this Secret as S3 credentials"
    endpoint, use_https = annotations[S3_ENDPOINT_ANNOTATION], annotations[S3_USE_HTTPS_ANNOTATION]
    return {
        "AWS_ACCESS_KEY_ID": data[s3_values["accessKeyIdName"]],
        "AWS_SECRET_ACCESS_KEY": data[s3_values["secretAccessKeyName"]],
        "S3_USE_HTTPS": use_https,
        "S3_ENDPOINT": endpoint,
        "AWS_ENDPOINT_URL": ("http://" if use_https == "0" else "https://") + endpoint,
        "S3_VERIFY_SSL": annotations[S3_VERIFY_SSL_ANNOTATION],
        "AWS_DEFAULT_REGION": annotations[S3_REGION_ANNOTATION],
    }


def predictor_storage_env(stack: str, tenant: str, keys: dict[str, str], endpoint_url: str) -> dict[str, str]:
    """The storage initializer's environment in ``tenant``'s predictor pod: its rendered serving Secret, filled.

    The Secret is the one the rendered ``kserve-predictor`` ServiceAccount (the promoted InferenceService's)
    names; ``keys`` fills its generated placeholders as the deploy-time component would. The one
    deploy-specific value: the object store's address is this machine's test server.
    """
    platform = rendered(stack)
    objects = platform.tenant_objects(tenant)
    secret = next(o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == S3_SECRET)
    account = next(o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == SERVICE_ACCOUNT)
    assert account["secrets"] == [{"name": S3_SECRET}]
    secret = generated.substitute(secret, keys)
    secret["metadata"]["annotations"][S3_ENDPOINT_ANNOTATION] = endpoint_url.removeprefix("http://")
    kserve = next(r for r in platform.releases if r.name == "kserve")
    return kserve_storage_env(secret, kserve.values["kserve"]["storage"]["s3"])
