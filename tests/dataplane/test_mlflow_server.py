"""The real MLflow server, with Trainyard's settings, against a real PostgreSQL and a real S3 server.

What runs: MLflow from PyPI at the chart's appVersion (tools/mlflow, `make tools`), Debian's
PostgreSQL (a private instance: initdb on a free loopback port, as the ``postgres`` user when
run as root), and SeaweedFS (``weed mini``, built by tools/build.sh) or, while that binary is
absent, moto's S3 server from the same venv as a stopgap (the log says which; moto enforces no identity).

What is Trainyard's: everything the rendered staging stack decides. The server's flags and
environment are derived from the MLflow chart values Trainyard renders (backend store, proxied
artifact destination, basic-auth app, default permission, allowed hosts), the databases from the
CNPG Cluster and Database objects, the S3 server's identities from the rendered identities file
(test-generated keys) and its buckets from the rendered provisioning plan, the tenant users and
passwords from the rendered Secrets with their generated placeholders filled the way the deploy-time
component fills them, and the tenant users are created by the very reconciler script the server's
sidecar runs.

Checks: an anonymous request and a wrong password are refused; with a tenant's Secret (and no
object-store key) a client logs params, metrics and an artifact, registers a model version and
reads the artifact back through the proxy; the artifact lies in the artifacts bucket under the
rendered prefix; a second tenant gets PERMISSION_DENIED on the first tenant's run, artifact and
model (default permission NO_PERMISSIONS). The run log (commands and responses) is printed.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import string
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import loopback
from tests.conftest import rendered, stack
from tests.seaweedfs import until_ready, weed_binary, weed_mini
from trainyard import catalog
from trainyard.components.generated import generate
from trainyard.manifests import generated, object_store
from trainyard.manifests import mlflow as mlflow_manifests
from trainyard.provisioning.object_store import reconcile

pytestmark = pytest.mark.dataplane

HERE = Path(__file__).parent
TOOLS = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools")
APP_VERSION = catalog.release("mlflow", catalog.DEFAULT_VERSIONS["mlflow"]).app_version
VENV_PYTHON = TOOLS / f"mlflow-{APP_VERSION}" / "bin" / "python"
STACK = "staging"
LOG: list[str] = []


def log(line: str) -> None:
    LOG.append(line)


def _free_port() -> int:
    return loopback.free_port()


def _wait_http(url: str, what: str, proc: subprocess.Popen[bytes], output: Path, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = output.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{what} did not answer on {url} within {seconds}s:\n{output.read_text(errors='replace')[-3000:]}")


class _Generated(str):
    """A generated value; its repr never shows it (pytest prints fixture values in failure reports)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'<generated>'"


def _generated_value(name: str) -> str:
    # As the deploy-time component does: 40 letters and digits (GeneratedValue's "password" alphabet).
    spec = generated.GeneratedValue(name)
    return _Generated("".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(spec.length)))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    # Not under pytest's tmp_path: the postgres user must traverse it when the test runs as root.
    path = Path(tempfile.mkdtemp(prefix="trainyard-dataplane-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _pg_bin() -> Path | None:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return candidates[-1].parent if candidates else None


@pytest.fixture(scope="module")
def postgres(workdir: Path) -> Iterator[dict[str, Any]]:
    """A private PostgreSQL with the CNPG Cluster's owner and the two databases Trainyard declares."""
    pg_bin = _pg_bin()
    if pg_bin is None:
        pytest.skip("PostgreSQL not installed (apt-get install postgresql): no initdb under /usr/lib/postgresql/*/bin")
    objects = rendered(STACK).concern("mlflow").objects
    cluster = next(o for o in objects if o["kind"] == "Cluster")
    database = next(o for o in objects if o["kind"] == "Database")
    initdb = cluster["spec"]["bootstrap"]["initdb"]
    owner, password = initdb["owner"], _generated_value(mlflow_manifests.GENERATED_DB_PASSWORD)
    data, sockets = workdir / "pgdata", workdir / "pgsock"
    sockets.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root; run the server as Debian's postgres user
        shutil.chown(workdir, "postgres")
        shutil.chown(sockets, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run([*as_user, str(pg_bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth-local=trust",
                    "--auth-host=scram-sha-256"], check=True, capture_output=True)
    subprocess.run([*as_user, str(pg_bin / "pg_ctl"), "-D", str(data), "-l", str(workdir / "postgres.log"), "-w",
                    "-o", f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1", "start"], check=True, capture_output=True)
    log(f"$ initdb + pg_ctl start ({pg_bin}) on 127.0.0.1:{port}")

    def psql(sql: str) -> None:
        subprocess.run([*as_user, str(pg_bin.parent / "bin" / "psql"), "-h", str(sockets), "-p", str(port), "-U", "postgres",
                        "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True, capture_output=True)

    # What CloudNativePG does for initdb{database, owner, secret} and the Database object.
    psql(f"CREATE ROLE {owner} LOGIN PASSWORD '{password}'")
    psql(f"CREATE DATABASE {initdb['database']} OWNER {owner}")
    psql(f"CREATE DATABASE {database['spec']['name']} OWNER {database['spec']['owner']}")
    log(f"  role {owner}, databases {initdb['database']} and {database['spec']['name']} (owner {owner})")
    try:
        yield {"host": "127.0.0.1", "port": port, "user": owner, "password": password}
    finally:
        subprocess.run([*as_user, str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                       check=False, capture_output=True)


def _venv_python() -> Path:
    if not VENV_PYTHON.is_file():
        pytest.skip(f"MLflow {APP_VERSION} venv not found at {VENV_PYTHON.parent.parent}: run `make tools`")
    return VENV_PYTHON


@pytest.fixture(scope="module")
def object_store_keys() -> dict[str, str]:
    """Test stand-ins for the object store's generated keys: every identity the stack renders, and the admin's.

    Made the way the deploy-time component makes them (trainyard.components.generated); secret keys never
    show in pytest's reports.
    """
    specs = [key for identity in (object_store.ADMIN, *object_store.identities(stack(STACK).config))
             for key in (identity.access_key, identity.secret_key)]
    return {s.name: _Generated(generate(s.length, s.alphabet)) if s.name.endswith("/secret-key")
            else generate(s.length, s.alphabet) for s in specs}


def identity_keys(keys: dict[str, str], identity: object_store.Identity) -> tuple[str, str]:
    """(access key, secret key) of ``identity`` among ``keys``."""
    return keys[identity.access_key.name], keys[identity.secret_key.name]


def _s3_client(endpoint: str, keys: tuple[str, str]) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=keys[0],
                        aws_secret_access_key=keys[1])


@pytest.fixture(scope="module")
def s3(workdir: Path, object_store_keys: dict[str, str]) -> Iterator[dict[str, str]]:
    """An S3 server with the stack's buckets, made by the provisioning program; the MLflow service's credentials.

    SeaweedFS reads exactly the rendered identities file (every tenant's read-write identity, its
    read-only serving identity, the MLflow service's, the admin's), the placeholders filled with
    ``object_store_keys``. moto, the stopgap, accepts any key: there no identity is enforced.
    """
    _venv_python()
    config, platform = stack(STACK).config, rendered(STACK)
    values = next(r for r in platform.releases if r.component == "mlflow").values
    bucket = values["artifactRoot"]["s3"]["bucket"]
    service = next(s for s in config.object_store.services if s.name == "mlflow")  # type: ignore[union-attr]
    key, secret = identity_keys(object_store_keys, object_store.service_identity(config, service))
    admin = identity_keys(object_store_keys, object_store.ADMIN)
    plan = json.loads(next(o for o in platform.all_objects if o["kind"] == "ConfigMap"
                           and o["metadata"]["name"] == object_store.PROVISIONING_CONFIG)["data"]["plan.json"])

    def provision(endpoint: str) -> None:
        # The provisioning Job's own program on the rendered plan: every tenant and platform bucket.
        steps = reconcile(plan, {}, s3=_s3_client(endpoint, admin))
        log(f"  provisioning (admin identity): {len(steps)} buckets, e.g. {steps[0]}")

    if weed_binary() is not None:
        identities = next(o for o in platform.all_objects if o["kind"] == "Secret"
                          and o["metadata"]["name"] == object_store.SEAWEEDFS_IDENTITIES_SECRET)
        config_json = generated.substitute(identities["stringData"][object_store.SEAWEEDFS_IDENTITIES_KEY],
                                           object_store_keys)
        with weed_mini(workdir / "weed", config_json) as (endpoint, proc, log_file):
            log(f"$ weed mini ... -> SeaweedFS (weed mini) on {endpoint}, the rendered identities file "
                f"({len(json.loads(config_json)['identities'])} identities)")
            until_ready(_s3_client(endpoint, admin).list_buckets, proc, log_file)
            provision(endpoint)
            yield {"endpoint": endpoint, "key": key, "secret": secret, "bucket": bucket, "server": "SeaweedFS (weed mini)"}
        return
    port = _free_port()
    command = [str(_venv_python().parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    server = "moto_server (stopgap: the SeaweedFS binary is not built; `make tools`)"
    proc = subprocess.Popen(command, stdout=(workdir / "s3.log").open("wb"), stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_http(endpoint, server, proc, workdir / "s3.log")
        log(f"$ {' '.join(command[:2])} ... -> {server} on {endpoint} (no identity enforced)")
        provision(endpoint)
        yield {"endpoint": endpoint, "key": key, "secret": secret, "bucket": bucket, "server": server}
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def server(workdir: Path, postgres: dict[str, Any], s3: dict[str, str]) -> Iterator[dict[str, Any]]:
    """``mlflow server`` with the flags and environment the chart renders from Trainyard's values."""
    python = _venv_python()
    platform = rendered(STACK)
    values = next(r for r in platform.releases if r.component == "mlflow").values
    port = _free_port()
    front = loopback.free_port(exclude=[port])
    admin_password = _generated_value(mlflow_manifests.GENERATED_ADMIN_PASSWORD)
    auth = values["auth"]
    # The chart's auth_ini_configmap.yaml, with its placeholders filled as its init container does.
    ini = workdir / "basic_auth.ini"
    ini.write_text("[mlflow]\n"
                   f"default_permission = {auth['defaultPermission']}\n"
                   f"database_uri = postgresql://{postgres['user']}:{postgres['password']}@127.0.0.1:{postgres['port']}/"
                   f"{auth['postgres']['database']}\n"
                   f"admin_username = {mlflow_manifests.ADMIN_USER}\n"
                   f"admin_password = {admin_password}\n"
                   "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    artifacts = values["artifactRoot"]["s3"]
    assert values["artifactRoot"]["proxiedArtifactStorage"] is True and auth["enabled"] is True
    # templates/deployment.yaml: args of the mlflow container.
    command = [str(python.parent / "mlflow"), "server", "--host=127.0.0.1", f"--port={port}",
               "--backend-store-uri=postgresql://",
               f"--artifacts-destination=s3://{artifacts['bucket']}/{artifacts['path']}", "--serve-artifacts",
               f"--app-name={auth['appName']}", "--workers=1"]
    env = {"PATH": os.environ["PATH"], "HOME": str(workdir),
           # configmap.yaml (PGHOST/PGPORT/PGDATABASE) and existingDatabaseSecret (PGUSER/PGPASSWORD)
           "PGHOST": postgres["host"], "PGPORT": str(postgres["port"]),
           "PGDATABASE": values["backendStore"]["postgres"]["database"],
           "PGUSER": postgres["user"], "PGPASSWORD": postgres["password"],
           "MLFLOW_AUTH_CONFIG_PATH": str(ini),
           "AWS_ACCESS_KEY_ID": s3["key"], "AWS_SECRET_ACCESS_KEY": s3["secret"], "AWS_DEFAULT_REGION": "us-east-1",
           # extraEnvVars (Trainyard's value names the in-cluster endpoint; here the local server)
           **{k: s3["endpoint"] for k in values["extraEnvVars"] if k == "MLFLOW_S3_ENDPOINT_URL"},
           # and a second loopback port, where a test may put a forwarder in front (tests/lab/outage.py): clients
           # of the Service reach the server under the Service's one name, whatever stands between.
           "MLFLOW_SERVER_ALLOWED_HOSTS": ",".join([*values["serverAllowedHosts"], f"127.0.0.1:{port}",
                                                    f"127.0.0.1:{front}"]),
           # flask_secret.yaml from Trainyard's flaskServerSecretKey (a generated value); required by basic-auth's CSRF.
           "MLFLOW_FLASK_SERVER_SECRET_KEY": _generated_value(mlflow_manifests.GENERATED_FLASK_KEY),
           "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    proc = subprocess.Popen(command, env=env, stdout=(workdir / "mlflow.log").open("wb"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/health", "mlflow server", proc, workdir / "mlflow.log")
        log(f"$ mlflow server {' '.join(command[2:])}")
        log(f"  MLflow {APP_VERSION} up on {url}; basic-auth, default_permission={auth['defaultPermission']}")
        yield {"url": url, "admin": (mlflow_manifests.ADMIN_USER, admin_password), "workdir": workdir,
               "front_port": front}
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def tenants(server: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each tenant's trainyard-mlflow Secret, filled, after the sidecar's reconciler created the users."""
    platform = rendered(STACK)
    names = list(platform.concern("mlflow").tenant_objects)
    values = {n: _generated_value(n) for n in generated.names_in([list(o.values()) for o in platform.concern("mlflow").objects])}
    tenant_dir = server["workdir"] / "tenants"
    tenant_dir.mkdir()
    users = next(o for o in platform.concern("mlflow").objects if o["metadata"]["name"] == mlflow_manifests.TENANT_USERS_SECRET)
    for user, password in generated.substitute(users["stringData"], values).items():
        (tenant_dir / user).write_text(password)
    sync = subprocess.run([str(_venv_python()), str(mlflow_manifests.SYNC_SCRIPT)], check=False, capture_output=True, text=True,
                          env={"MLFLOW_URL": server["url"], "ADMIN_USERNAME": server["admin"][0],
                               "ADMIN_PASSWORD": server["admin"][1], "TENANT_DIR": str(tenant_dir), "INTERVAL": "0"})
    log(f"$ python mlflow_tenant_sync.py (INTERVAL=0) -> exit {sync.returncode}")
    LOG.extend("  " + line for line in sync.stdout.splitlines() + sync.stderr.splitlines())
    assert sync.returncode == 0, sync.stderr
    out = {}
    for name in names:
        secret = next(o for o in platform.concern("mlflow").tenant_objects[name] if o["kind"] == "Secret")
        env = {k: _Generated(v) if k == "MLFLOW_TRACKING_PASSWORD" else v
               for k, v in generated.substitute(secret["stringData"], values).items()}
        env["MLFLOW_TRACKING_URI"] = server["url"]  # in-cluster: http://mlflow.mlflow.svc:80
        out[name] = env
    return out


def _http(url: str, auth: tuple[str, str] | None) -> int:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _client(env: dict[str, str], *args: str) -> dict[str, str]:
    # A pod's environment: the tenant Secret only, no AWS key.
    run = subprocess.run([str(_venv_python()), str(HERE / "mlflow_client.py"), *args], check=False, capture_output=True,
                         text=True,
                         env={"PATH": os.environ["PATH"], "HOME": tempfile.gettempdir(), **env}, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, str] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def test_mlflow_with_trainyard_settings_isolates_tenants(server: dict[str, Any], tenants: dict[str, dict[str, str]],
                                                          s3: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    first, second = sorted(tenants)[:2]
    search = f"{server['url']}/api/2.0/mlflow/experiments/search?max_results=10"
    try:
        anonymous = _http(search, None)
        log(f"$ GET /api/2.0/mlflow/experiments/search (no credentials) -> HTTP {anonymous}")
        assert anonymous == 401
        wrong = _http(search, (first, "not-the-password"))
        log(f"$ GET /api/2.0/mlflow/experiments/search as {first} with a wrong password -> HTTP {wrong}")
        assert wrong == 401
        own = _http(search, (first, tenants[first]["MLFLOW_TRACKING_PASSWORD"]))
        log(f"$ GET /api/2.0/mlflow/experiments/search as {first} (its Secret) -> HTTP {own}")
        assert own == 200

        experiment, model = f"{first}/lora-sft", f"{first}-lora-adapter"
        written = _client(tenants[first], "write", experiment, model)
        log(f"$ [{first}] set_experiment({experiment!r}); log_params, 3x log_metric('loss'), "
            f"log_artifacts(model/); create_registered_model({model!r}); create_model_version")
        log(f"  -> run {written['run_id']}, artifact_uri {written['artifact_uri']}, model version {written['model_version']}")
        assert written["artifact_uri"].startswith("mlflow-artifacts:"), "artifacts must go through the proxy"
        assert written["model_version"] == "1"

        listed = _s3_client(s3["endpoint"], (s3["key"], s3["secret"])).list_objects_v2(Bucket=s3["bucket"])
        stored = [o["Key"] for o in listed.get("Contents", []) if written["run_id"] in o["Key"]]
        log(f"$ [mlflow service] list_objects_v2({s3['bucket']}) -> {stored}")
        prefix = next(r for r in rendered(STACK).releases if r.component == "mlflow").values["artifactRoot"]["s3"]["path"]
        assert stored and all(k.startswith(f"{prefix}/") and k.endswith("model/adapter_config.json") for k in stored)

        own_read = _client(tenants[first], "read", written["run_id"], model)
        log(f"$ [{first}] get_run, download_artifacts(model/adapter_config.json), get_registered_model, metric history")
        LOG.extend(f"  {k}: {v}" for k, v in own_read.items())
        assert own_read == {"get_run": "ok: 16", "download_artifact": 'ok: {"r": 16}',
                            "get_registered_model": f"ok: {model}", "metric_history": "ok: [2.31, 1.87, 1.52]"}

        other_read = _client(tenants[second], "read", written["run_id"], model)
        log(f"$ [{second}] the same four reads of {first}'s run and model")
        LOG.extend(f"  {k}: {v}" for k, v in other_read.items())
        assert all(v.startswith("PERMISSION_DENIED") for v in other_read.values()), other_read

        # The artifact proxy itself: what a client without the tracking API would call.
        path = written["artifact_uri"].removeprefix("mlflow-artifacts:/") + "/model/adapter_config.json"
        proxy = f"{server['url']}/api/2.0/mlflow-artifacts/artifacts/{path}"
        for who, expected in ((first, 200), (second, 403), (None, 401)):
            auth = (who, tenants[who]["MLFLOW_TRACKING_PASSWORD"]) if who else None
            status = _http(proxy, auth)
            log(f"$ GET /api/2.0/mlflow-artifacts/artifacts/{path} as {who or 'anonymous'} -> HTTP {status}")
            assert status == expected

        other_write = _client(tenants[second], "write", f"{second}/eval", f"{second}-model")
        log(f"$ [{second}] its own experiment and model -> run {other_write['run_id']}, version {other_write['model_version']}")
        assert other_write["model_version"] == "1"
    finally:
        with capsys.disabled():
            print("\n==== MLflow dataplane run log (" + s3["server"] + ") ====\n" + "\n".join(LOG))
