"""Serving tier: real MLflow, a real S3 server and KServe's own storage initializer code, on loopback.

The servers and KServe's ``kserve_storage`` run from the data plane's tool venv (``make serving-env``:
``tools/mlflow/install.sh``, pinned in ``tools/mlflow/requirements.txt``; the dataplane tier's MLflow
server uses the same venv), apart from the project venv whose Pulumi pins conflict with theirs. The
S3 server is SeaweedFS (``weed`` from ``tools/build.sh seaweedfs``) when it is built, else moto's
server (a second real S3 implementation, with IAM identity policies enforced). Tests skip, saying
why, when that venv is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import loopback
from trainyard import catalog

TOOLS = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools")
# The data plane's one Python venv (tools/mlflow/requirements.txt: MLflow, kserve-storage, moto, boto3).
SERVING_VENV = Path(os.environ.get("TRAINYARD_SERVING_VENV")
                    or TOOLS / f"mlflow-{catalog.release('mlflow', catalog.DEFAULT_VERSIONS['mlflow']).app_version}")
PYTHON = SERVING_VENV / "bin" / "python"
TOOLS_BIN = TOOLS / "bin"
WEED = TOOLS_BIN / "weed"
REGION = "us-east-1"
ADMIN = ("TRAINYARDADMINKEY000", "trainyard-admin-secret-key-for-tests-0000")


def needs_serving_env() -> None:
    if not PYTHON.is_file():
        pytest.skip(f"{SERVING_VENV} not found: run `make serving-env` (tools/mlflow/install.sh; pinned in "
                    "tools/mlflow/requirements.txt)")


def free_port() -> int:
    return loopback.free_port()


def wait_http(url: str, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return  # the server answers (403 from an S3 server without credentials is an answer)
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not start at {url}") from None
            time.sleep(0.5)


def serving_python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with the data-plane venv's Python, in exactly ``env`` (plus PATH/HOME): no ambient credentials."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run([str(PYTHON), "-c", code, *args], capture_output=True, text=True, env={**base, **env},
                          timeout=300, check=False)


@dataclass(frozen=True)
class S3Server:
    """A running S3 server: URL, implementation, admin keys, and the keys of each read-only identity."""

    url: str
    kind: str
    admin: tuple[str, str]
    identities: dict[str, tuple[str, str]]

    def admin_env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.admin[0], "AWS_SECRET_ACCESS_KEY": self.admin[1],
                "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL": self.url, "MLFLOW_S3_ENDPOINT_URL": self.url}


# identity name -> the buckets it may read and list
READ_ONLY = {"serving-team-a": ("team-a-models",), "serving-team-b": ("team-b-models",)}
BUCKETS = ("team-a-models", "team-b-models")

SEAWEEDFS_KEYS = {name: (f"{name.upper().replace('-', '')}KEY000000"[:20], f"{name}-secret-key-for-tests-000000")
                  for name in READ_ONLY}


def _start_seaweedfs(tmp: Path, port: int) -> tuple[subprocess.Popen[bytes], dict[str, tuple[str, str]]]:
    config = {"identities": [
        {"name": "admin", "credentials": [{"accessKey": ADMIN[0], "secretKey": ADMIN[1]}], "actions": ["Admin"]},
        *({"name": name, "credentials": [{"accessKey": SEAWEEDFS_KEYS[name][0], "secretKey": SEAWEEDFS_KEYS[name][1]}],
           "actions": [a for b in buckets for a in (f"Read:{b}", f"List:{b}")]} for name, buckets in READ_ONLY.items()),
    ]}
    (tmp / "s3.json").write_text(json.dumps(config))
    (tmp / "weed").mkdir()
    # The flags of the object-store branch's SeaweedFS test: loopback only, every port chosen here.
    ports = {"master.port": free_port(), "volume.port": free_port(), "filer.port": free_port()}
    proc = subprocess.Popen([str(WEED), "mini", f"-dir={tmp / 'weed'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                             f"-s3.port={port}", f"-s3.config={tmp / 's3.json'}", "-s3.port.iceberg=0",
                             "-s3.port.lance=0", "-webdav=false", "-admin.ui=false", "-master.telemetry=false",
                             *(f"-{flag}={p}" for flag, p in ports.items()),
                             *(f"-{flag}.grpc={free_port()}" for flag in ports)],
                            stdout=(tmp / "weed.log").open("wb"), stderr=subprocess.STDOUT, cwd=tmp)
    return proc, {"admin": ADMIN, **SEAWEEDFS_KEYS}


# moto's server enforces IAM identity policies (SigV4 keys and the users' policies) once its
# INITIAL_NO_AUTH_ACTION_COUNT requests are used up (moto/core/authorization.py). The launcher runs
# moto in-process, creates the users, keys and buckets with authentication off, then turns it on for
# every request that follows, and prints the keys. moto names HEAD on a bucket "s3:HeadBucket"
# (moto/s3/responses.py), where AWS checks s3:ListBucket; the read-only policy lists both, so the
# identity may do exactly what SeaweedFS's Read/List actions allow, on its own bucket.
MOTO_LAUNCHER = """
import json, sys, threading, boto3
from moto import settings
from moto.server import ThreadedMotoServer
port, users, buckets = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
server.start()
url = f"http://127.0.0.1:{port}"
kw = dict(endpoint_url=url, region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup")
iam, s3 = boto3.client("iam", **kw), boto3.client("s3", **kw)
def user(name, statement):
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName=name,
                        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [statement]}))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return name, (key["AccessKeyId"], key["SecretAccessKey"])
keys = dict([user("admin", {"Effect": "Allow", "Action": "*", "Resource": "*"})] + [
    user(name, {"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket", "s3:HeadBucket"],
                "Resource": [f"arn:aws:s3:::{b}" for b in allowed] + [f"arn:aws:s3:::{b}/*" for b in allowed]})
    for name, allowed in users.items()])
for bucket in buckets:
    s3.create_bucket(Bucket=bucket)
settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
print("KEYS " + json.dumps(keys), flush=True)
threading.Event().wait()
"""


def _start_moto(tmp: Path, port: int) -> tuple[subprocess.Popen[bytes], dict[str, tuple[str, str]]]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp")}
    proc = subprocess.Popen([str(PYTHON), "-c", MOTO_LAUNCHER, str(port), json.dumps(READ_ONLY), json.dumps(BUCKETS)],
                            stdout=subprocess.PIPE, stderr=(tmp / "moto.log").open("wb"), env=env)
    assert proc.stdout is not None
    try:
        line = ""
        while not line.startswith("KEYS "):  # moto prints its own start-up line first
            line = proc.stdout.readline().decode()
            assert line, f"moto did not start (see {tmp / 'moto.log'})"
    except BaseException:
        proc.kill()
        raise
    return proc, {name: (pair[0], pair[1]) for name, pair in json.loads(line.removeprefix("KEYS ")).items()}


MAKE_BUCKETS = """
import sys, time, boto3
s3 = boto3.client("s3")
deadline = time.monotonic() + 180
while True:  # the S3 port answers before the filer is ready
    try:
        s3.list_buckets()
        break
    except Exception:
        if time.monotonic() > deadline:
            raise
        time.sleep(1)
for bucket in sys.argv[1:]:
    s3.create_bucket(Bucket=bucket)
"""


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    needs_serving_env()
    tmp = tmp_path_factory.mktemp("s3")
    port = free_port()
    kind = "seaweedfs" if WEED.is_file() else "moto"
    proc, keys = (_start_seaweedfs if kind == "seaweedfs" else _start_moto)(tmp, port)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/", kind)
        server = S3Server(url=url, kind=kind, admin=keys.pop("admin"), identities=keys)
        if kind == "seaweedfs":
            made = serving_python(MAKE_BUCKETS, server.admin_env(), *BUCKETS)
            assert made.returncode == 0, made.stderr
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> Iterator[str]:
    """``mlflow server`` with a sqlite backend; artifacts go straight to S3 (team-a's bucket by default)."""
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp), **s3.admin_env()}
    proc = subprocess.Popen([str(SERVING_VENV / "bin" / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
                             "--default-artifact-root", "s3://team-a-models/mlflow", "--no-serve-artifacts",
                             "--workers", "1"],
                            stdout=(tmp / "mlflow.log").open("wb"), stderr=subprocess.STDOUT, env=env, cwd=tmp)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/health", "mlflow server", seconds=180)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
