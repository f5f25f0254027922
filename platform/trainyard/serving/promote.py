"""``trainyard promote``: a registered model version in MLflow becomes a reviewable InferenceService file.

From (tenant, model name, version or alias) to one YAML file in the tenant's namespace:

1. MLflow's client (REST) resolves the version (among the model's versions), or the alias, and the
   version's artifact location (its ``s3://`` source; ``get_model_version_download_uri`` resolves
   ``models:/`` sources to where the files are).
2. The location must be an ``s3://`` path inside the tenant's own model bucket: KServe's storage
   initializer has no ``models:/`` or ``mlflow-artifacts:`` scheme (kserve_storage.py at v0.20.0), and
   the tenant's serving identity can read nothing else. Anything else is refused, naming what was found.
3. The InferenceService names an approved ClusterServingRuntime (the tenant's choice or the stack's
   default), the tenant's ``kserve-predictor`` ServiceAccount (its read-only S3 Secret), a restricted pod
   security context, cluster-local visibility unless the tenant may expose models, and resources.
   A LoRA adapter is served on its base model: both are downloaded (``spec.predictor.storageUris``),
   and vLLM loads the adapter with ``--lora-modules NAME=PATH`` on a runtime that has ``--enable-lora``.
4. The file is checked with the stack's policy rules (what ``trainyard check STACK FILE`` runs) and
   written; ``--apply`` then applies it with the tenant's kubeconfig/context (server-side apply).

Who approves what: see docs/promotion.md.
"""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainyard.config.model import PlatformConfig, Tenant
from trainyard.manifests.kueue import toleration_for
from trainyard.manifests.meta import TENANT_LABEL, Manifest
from trainyard.manifests.serving import (
    CLUSTER_LOCAL,
    SERVICE_ACCOUNT,
    VISIBILITY_LABEL,
    enabled,
    load_serving_runtime,
    model_bucket,
)

MODEL_DIR = "/mnt/models"  # KServe's default mount (constants.DefaultModelLocalMountPath)
ADAPTERS_DIR = "/mnt/adapters"  # shares /mnt with MODEL_DIR, as validateMultipleStorageURIsSpec requires
ANNOTATION_PREFIX = "trainyard.dev/"
ENABLE_LORA = "--enable-lora"


class PromoteError(Exception):
    """Promotion cannot go ahead; the message says why and what to do."""


@dataclass(frozen=True)
class ModelRef:
    """A registered model version: name and version, with the alias it was asked for by (if any)."""

    name: str
    version: str
    alias: str | None
    location: str
    tags: Mapping[str, str] = field(default_factory=dict)
    registered: bool = True  # False: a base model named by an adapter's tags, not a registry version


@dataclass(frozen=True)
class Resources:
    gpus: int = 1
    cpu: str = "4"
    memory: str = "32Gi"


def _by_number(client: Any, name: str, version: str) -> Any:
    """The version ``version`` of ``name``, found among the model's versions.

    Not ``get_model_version``: MLflow 3.15.1's SQL store compares the version, a string from the REST
    request, with the integer column (``_validate_model_version`` drops its int; mlflow/mlflow#24515,
    fixed in 3.16.0 by mlflow/mlflow#24565), which PostgreSQL, the backend Trainyard deploys, refuses
    ("operator does not exist: integer = character varying"); sqlite lets it pass. Searching by name
    compares strings only.
    """
    if not version.isdigit():
        raise PromoteError(f"--version {version!r}: give a version number (or --alias)")
    quote = '"' if "'" in name else "'"
    versions = client.search_model_versions(f"name = {quote}{name}{quote}")
    found = next((mv for mv in versions if str(mv.version) == str(int(version))), None)
    if found is None:
        known = ", ".join(sorted((str(mv.version) for mv in versions), key=int)) or "none"
        raise PromoteError(f"model registry: model {name!r} has no version {version} (versions: {known})")
    return found


def _location(client: Any, mv: Any) -> str:
    """Where the version's files are: its ``s3://`` source as registered, else what MLflow resolves it to.

    For any source but ``models:/`` MLflow stores the source itself as the version's storage location
    (SqlAlchemyStore.create_model_version), which is what ``get_model_version_download_uri`` returns; that
    call looks the version up by number (see ``_by_number``), so it is left to ``models:/`` sources.
    """
    source = str(mv.source or "")
    if source.startswith("s3://"):
        return source
    return str(client.get_model_version_download_uri(mv.name, mv.version))


DEFAULT_REGISTRY_TIMEOUT = 30  # seconds


def bound_registry_requests(uri: str, timeout: float) -> None:
    """Fail fast and clearly where the registry cannot be reached, and bound every later request.

    MLflow's client retries a failed request 7 times with exponential backoff, each attempt waiting up to
    120 s (MLFLOW_HTTP_REQUEST_TIMEOUT, _MAX_RETRIES): an unreachable address reads as a hang. A TCP connect
    within ``timeout`` comes first (PromoteError naming the address), then each request is held to ``timeout``
    with one retry, unless the caller set MLflow's own variables.
    """
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme in ("http", "https") and parsed.hostname:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname, port), timeout=timeout).close()
        except OSError as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
            raise PromoteError(f"--tracking-uri {uri}: cannot reach {parsed.hostname}:{port} within {timeout:g} s "
                               f"({reason}); check the address, or give the registry longer with --timeout") from None
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, round(timeout))))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")


def resolve(client: Any, name: str, version: str | None, alias: str | None) -> ModelRef:
    """The model version (by number or alias) and the location of its files, from the MLflow registry."""
    from mlflow.exceptions import MlflowException

    if (version is None) == (alias is None):
        raise PromoteError("give exactly one of --version or --alias")
    try:
        mv = client.get_model_version_by_alias(name, alias) if alias else _by_number(client, name, str(version))
        location = _location(client, mv)
    except MlflowException as exc:
        raise PromoteError(f"model registry: {exc.message}") from None
    return ModelRef(name=name, version=str(mv.version), alias=alias, location=str(location),
                    tags={str(k): str(v) for k, v in (getattr(mv, "tags", None) or {}).items()})


# The tags the lab's reference program puts on the adapter version it registers (docs/lab.md, "Handover contract").
BASE_MODEL_URI_TAG = "trainyard.base_model.uri"
BASE_MODEL_NAME_TAG = "trainyard.base_model.name"
BASE_MODEL_REVISION_TAG = "trainyard.base_model.revision"


def base_from_tags(ref: ModelRef) -> ModelRef | None:
    """The base model an adapter version names in its tags (an approved entry's directory and revision), if any."""
    uri = ref.tags.get(BASE_MODEL_URI_TAG)
    if not uri:
        return None
    return ModelRef(name=ref.tags.get(BASE_MODEL_NAME_TAG, "base-model"), version=ref.tags.get(BASE_MODEL_REVISION_TAG, ""),
                    alias=None, location=uri, registered=False)


def storage_uri(config: PlatformConfig, tenant: Tenant, ref: ModelRef) -> str:
    """The ``s3://`` URI of the version's files; PromoteError unless it lies in the tenant's model bucket."""
    bucket = model_bucket(config, tenant)
    prefix = f"s3://{bucket}/"
    location = ref.location.rstrip("/")
    scheme = location.split(":", 1)[0] if ":" in location else ""
    if scheme != "s3":
        raise PromoteError(
            f"model {ref.name} version {ref.version} is stored at {ref.location!r}; KServe reads s3:// only "
            f"(no models:/ or mlflow-artifacts: scheme). Log the model to an experiment whose artifact location "
            f"is in {prefix}... and register that version")
    if not location.startswith(prefix) or location == prefix.rstrip("/"):
        raise PromoteError(
            f"model {ref.name} version {ref.version} is stored at {ref.location!r}, outside tenant "
            f"{tenant.name}'s model bucket ({prefix}...); its serving identity cannot read it")
    # A location given as a directory stays one: KServe's S3 download takes every key that starts with
    # the path (Bucket.objects.filter(Prefix=...), kserve_storage.py _download_s3 at v0.20.0), so
    # ".../base/qwen" would also fetch ".../base/qwen-instruct/..." into the model directory.
    return location + "/" if ref.location.endswith("/") else location


def _runtime(config: PlatformConfig, root: Path, name: str | None) -> Manifest:
    serving = enabled(config)
    chosen = name or serving.default_runtime or serving.approved_runtimes[0]
    if chosen not in serving.approved_runtimes:
        raise PromoteError(f"runtime {chosen!r} is not approved on this stack ({', '.join(serving.approved_runtimes)})")
    # The stack's image lock pins a runtime file that names its image by tag, as the render does.
    from trainyard.manifests import image_lock

    return load_serving_runtime(root / serving.runtimes_directory / f"{chosen}.yaml", config, image_lock(config, root))


def _supports_lora(runtime: Manifest) -> bool:
    return any(ENABLE_LORA in (c.get("args") or []) for c in runtime["spec"]["containers"])


def placement(config: PlatformConfig, pool_name: str | None, gpus: int) -> dict[str, Any]:
    """The predictor's ``nodeSelector`` and ``tolerations`` for the node pool it runs in: ``pool_name``, else, for a
    predictor without GPUs, the stack's first CPU pool (so that it is not scheduled onto a GPU node); none for a GPU
    predictor without a pool (the GPU request places it)."""
    if pool_name is None:
        if gpus or not config.cpu_pools:
            return {}
        pool_name = config.cpu_pools[0].name
    pool = next((p for p in config.pools if p.name == pool_name), None)
    if pool is None:
        raise PromoteError(f"--pool {pool_name!r} is not a node pool of this stack "
                           f"({', '.join(p.name for p in config.pools) or 'none'})")
    if gpus and config.gpu_pool(pool.name) is None:
        raise PromoteError(f"--pool {pool.name} is a CPU pool: a predictor with {gpus} GPU(s) would never be scheduled")
    out: dict[str, Any] = {"nodeSelector": dict(pool.node_labels)}
    if pool.taints:
        out["tolerations"] = [toleration_for(t.key, t.value, t.effect) for t in pool.taints]
    return out


def inference_service(config: PlatformConfig, root: Path, tenant: Tenant, ref: ModelRef, *, name: str,
                      runtime: str | None = None, resources: Resources = Resources(),
                      base: ModelRef | None = None, expose: bool = False, pool: str | None = None) -> Manifest:
    """The InferenceService for ``ref`` (an adapter on ``base`` when given), as a plain manifest."""
    serving = enabled(config)
    served = _runtime(config, root, runtime)
    runtime_name = served["metadata"]["name"]
    if expose and tenant.name not in serving.exposure.public_tenants:
        raise PromoteError(f"tenant {tenant.name} may not expose models (serving.exposure.public_tenants)")
    limits: dict[str, Any] = {"cpu": resources.cpu, "memory": resources.memory}
    if resources.gpus:
        limits["nvidia.com/gpu"] = resources.gpus
    model: dict[str, Any] = {
        "modelFormat": {"name": served["spec"]["supportedModelFormats"][0]["name"]},
        "runtime": runtime_name,
        "resources": {"requests": {"cpu": resources.cpu, "memory": resources.memory}, "limits": limits},
    }
    predictor: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        # The namespace enforces the restricted Pod Security Standard; KServe does not carry a runtime's
        # pod-level securityContext into the predictor pod, so the InferenceService sets it.
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        **placement(config, pool, resources.gpus),
    }
    annotations = {f"{ANNOTATION_PREFIX}registered-model": ref.name, f"{ANNOTATION_PREFIX}model-version": ref.version}
    adapter_uri = storage_uri(config, tenant, ref)
    if base is None:
        model["storageUri"] = adapter_uri
        annotations[f"{ANNOTATION_PREFIX}model-source"] = adapter_uri
    else:
        if not _supports_lora(served):
            lora = [name for name in serving.approved_runtimes if name != runtime_name
                    and _supports_lora(_runtime(config, root, name))]
            raise PromoteError(f"runtime {runtime_name} does not serve LoRA adapters (no {ENABLE_LORA}); approved "
                               f"runtimes that do: {', '.join(lora) or 'none'}")
        base_uri = storage_uri(config, tenant, base)
        adapter_dir = f"{ADAPTERS_DIR}/{ref.name}"
        predictor["storageUris"] = [{"uri": base_uri, "mountPath": MODEL_DIR}, {"uri": adapter_uri, "mountPath": adapter_dir}]
        model["args"] = ["--lora-modules", f"{ref.name}={adapter_dir}"]
        annotations |= {f"{ANNOTATION_PREFIX}base-model": base.name, f"{ANNOTATION_PREFIX}base-model-version": base.version,
                        f"{ANNOTATION_PREFIX}model-source": adapter_uri, f"{ANNOTATION_PREFIX}base-model-source": base_uri}
    predictor["model"] = model
    labels = {TENANT_LABEL: tenant.name}
    if not expose:
        labels[VISIBILITY_LABEL] = CLUSTER_LOCAL
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": tenant.namespace_name, "labels": labels, "annotations": annotations},
        "spec": {"predictor": predictor},
    }


def to_file(isvc: Manifest, ref: ModelRef, base: ModelRef | None) -> str:
    origin = f"models:/{ref.name}/{ref.version}" + (f" (alias {ref.alias})" if ref.alias else "")
    if base is not None and base.registered:
        origin += f", LoRA adapter on models:/{base.name}/{base.version}"
    elif base is not None:
        origin += f", LoRA adapter on {base.name} at {base.location} (revision {base.version}, from the version's tags)"
    header = (f"# Written by `trainyard promote` from {origin}.\n"
              "# Review it like any manifest: `trainyard check STACK FILE`; apply with `trainyard promote ... --apply`\n"
              "# or `kubectl apply --server-side -f FILE` with the tenant's credentials.\n")
    return header + yaml.safe_dump(isvc, sort_keys=False)


APPLY_TIMEOUT = 120  # seconds


def apply(path: Path, kubectl: str, kubeconfig: str | None, context: str | None) -> str:
    """Server-side apply of the written file with the tenant's credentials; PromoteError on failure."""
    command = [kubectl]
    if kubeconfig:
        command += ["--kubeconfig", kubeconfig]
    if context:
        command += ["--context", context]
    command += ["apply", "--server-side", "--field-manager=trainyard-promote", "-f", str(path)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=APPLY_TIMEOUT)  # noqa: S603
    except FileNotFoundError:
        raise PromoteError(f"{kubectl}: not found (set --kubectl)") from None
    except subprocess.TimeoutExpired:
        where = (kubeconfig or "the default kubeconfig") + (f", context {context}" if context else "")
        raise PromoteError(f"kubectl apply did not finish in {APPLY_TIMEOUT} s: is the cluster of {where} reachable? "
                           f"The file is written: apply it later with `kubectl apply --server-side -f {path}`") from None
    if result.returncode != 0:
        said = result.stderr.strip() or result.stdout.strip() or "no output"
        raise PromoteError(f"kubectl apply failed (exit {result.returncode}): {said}")
    return result.stdout.strip()
