"""``trainyard stack preflight`` and ``trainyard stack init``: a stack on the site's own backend and secrets provider.

A site deploys with the Pulumi CLI it trusts, a state backend it runs (an S3 bucket on its object
store, Azure Blob, GCS, PostgreSQL, a self-hosted Pulumi service, or a directory on a shared volume)
and a secrets provider backed by its key management (AWS KMS or a KMS with its API, Azure Key Vault,
Google Cloud KMS, HashiCorp Vault / OpenBao transit). ``pulumi stack init --secrets-provider URL``
records the provider in the stack file (``secretsprovider:`` and the wrapped data key ``encryptedkey:``,
or ``encryptionsalt:`` for a passphrase) and rewrites that file as it does so. The stack file is the
reviewed one, so ``stack init`` here keeps it byte for byte and appends only those keys, which are
not secret (the data key is wrapped by the KMS key; Ref: https://www.pulumi.com/docs/iac/concepts/secrets/
"Configuring secrets encryption": "the encrypted key is stored in the stack configuration file").

Preflight checks, each with its fix: the Pulumi CLI and the Kubernetes provider plugin at the version
the program's SDK was generated for; the stack's kubeconfig context exists; the backend and secrets
provider URLs are of a kind Pulumi opens, and fit the stack (a stack that protects data keeps its state
off a single machine's disk and its secrets behind a key service, not a passphrase); and the image lock
holds a registry-reported digest for every image, which the program itself demands of such a stack.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import yaml

from trainyard.config.sections import ClusterAccess
from trainyard.project import Stack
from trainyard.supply.gate import unlocked_images

# Ref: https://www.pulumi.com/docs/iac/concepts/secrets/#available-encryption-providers
KEY_SERVICE_PROVIDERS = {
    "awskms": "AWS KMS (or a key service with its API)",
    "azurekeyvault": "Azure Key Vault",
    "gcpkms": "Google Cloud KMS",
    "hashivault": "HashiCorp Vault / OpenBao transit engine",
}
SECRETS_PROVIDERS = {**KEY_SERVICE_PROVIDERS, "passphrase": "a passphrase (PULUMI_CONFIG_PASSPHRASE[_FILE])",
                     "default": "the backend's default (Pulumi Cloud's keys; a passphrase on a self-managed backend)"}
# Ref: https://www.pulumi.com/docs/iac/concepts/state-and-backends/#using-a-self-managed-backend
BACKENDS = {
    "s3": "an S3 bucket (AWS, or the site's MinIO/SeaweedFS/Ceph with ?endpoint=https://...&use_path_style=true)",
    "azblob": "an Azure Blob container",
    "gs": "a Google Cloud Storage bucket",
    "postgres": "a PostgreSQL database",
    "file": "a local directory",
    "https": "a Pulumi Cloud or self-hosted Pulumi service",
}
# What `pulumi stack init` writes into the stack file besides config (Ref: sdk/go/common/workspace/project.go,
# ProjectStack: SecretsProvider `secretsprovider`, EncryptedKey `encryptedkey`, EncryptionSalt `encryptionsalt`).
ENCRYPTION_KEYS = ("secretsprovider", "encryptedkey", "encryptionsalt")
WRITTEN_BY = ("# Written by `trainyard stack init`: the stack's secrets provider (not secret: the data key is wrapped by "
              "the key service). Commit it.")


class DeployError(Exception):
    """A reason not to initialise or deploy a stack: printed as ``error: ...``, exit 2."""


@dataclass(frozen=True)
class Finding:
    """One preflight check: ``ok``, ``warning`` (deploys, but see ``fix``) or ``error`` (does not)."""

    check: str
    level: str
    detail: str
    fix: str = ""

    def as_json(self) -> dict[str, str]:
        return {"check": self.check, "level": self.level, "detail": self.detail, "fix": self.fix}

    def line(self) -> str:
        mark = {"ok": "ok     ", "warning": "warning", "error": "ERROR  "}[self.level]
        return f"  {mark} {self.check}: {self.detail}" + (f"\n            fix: {self.fix}" if self.fix else "")


def redact(url: str) -> str:
    """A URL as it may be printed: any password in it replaced (a PostgreSQL backend URL can carry one)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def check_backend(url: str | None, protect_data: bool) -> Finding:
    if not url:
        return Finding("backend", "error", "no state backend named",
                       "pass --backend URL or set PULUMI_BACKEND_URL (e.g. s3://pulumi-state?endpoint=...&region=...)")
    scheme = urlsplit(url).scheme
    if scheme not in BACKENDS:
        kinds = ", ".join(f"{k}://" for k in BACKENDS)
        return Finding("backend", "error", f"{redact(url)}: not a backend Pulumi opens", f"one of {kinds}")
    if scheme == "file" and protect_data:
        return Finding("backend", "error", f"{url}: state on one machine's disk, for a stack that protects data",
                       "keep the state where the site keeps its data (an s3:// bucket on the object store, azblob://, "
                       "gs://, postgres://, a Pulumi service); file:// is for the rehearsal and for trials")
    endpoint = parse_qs(urlsplit(url).query).get("endpoint", [""])[0]
    if scheme == "s3" and endpoint and "://" not in endpoint:
        # Ref: gocloud.dev aws.V2ConfigFromURLParams: `endpoint` becomes the SDK's endpoint URL as given.
        return Finding("backend", "error", f"{redact(url)}: endpoint={endpoint} has no scheme",
                       f"endpoint=https://{endpoint} (or http:// on a lab network)")
    return Finding("backend", "ok", f"{redact(url)}: {BACKENDS[scheme]}")


def check_secrets_provider(url: str | None, protect_data: bool) -> Finding:
    if not url:
        return Finding("secrets provider", "error", "no secrets provider named",
                       "pass --secrets-provider URL, e.g. awskms://alias/trainyard-prod?region=eu-central-1 or "
                       "hashivault://trainyard-prod")
    scheme = url.split("://", 1)[0] if "://" in url else url
    if scheme not in SECRETS_PROVIDERS:
        kinds = ", ".join(SECRETS_PROVIDERS)
        return Finding("secrets provider", "error", f"{url}: not a Pulumi secrets provider", f"one of {kinds}")
    if scheme not in KEY_SERVICE_PROVIDERS and protect_data:
        return Finding("secrets provider", "error",
                       f"{url}: {SECRETS_PROVIDERS[scheme]}, for a stack that protects data",
                       "use the site's key service (" + ", ".join(f"{k}://" for k in KEY_SERVICE_PROVIDERS) + "): a "
                       "passphrase is one more secret to hand out and rotate, and anyone who has it reads the state")
    return Finding("secrets provider", "ok", f"{url}: {SECRETS_PROVIDERS[scheme]}")


def kubeconfig_paths(cluster: ClusterAccess, environ: Mapping[str, str], stack_dir: Path) -> list[Path]:
    """The kubeconfig files the provider reads: the stack's ``cluster.kubeconfig``, else KUBECONFIG, else ~/.kube/config."""
    if cluster.kubeconfig:
        given = Path(os.path.expanduser(cluster.kubeconfig))
        return [given if given.is_absolute() else stack_dir / given]
    if environ.get("KUBECONFIG"):
        return [Path(p) for p in environ["KUBECONFIG"].split(os.pathsep) if p]
    return [Path(environ.get("HOME") or Path.home()) / ".kube" / "config"]


def check_context(cluster: ClusterAccess, environ: Mapping[str, str], stack_dir: Path) -> Finding:
    paths = kubeconfig_paths(cluster, environ, stack_dir)
    contexts: dict[str, Path] = {}
    for path in paths:
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except OSError:
            continue
        except yaml.YAMLError as exc:
            return Finding("kubeconfig context", "error", f"{path}: not YAML ({exc.__class__.__name__})")
        for entry in document.get("contexts") or [] if isinstance(document, dict) else []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                contexts.setdefault(entry["name"], path)
    shown = os.pathsep.join(map(str, paths))
    if not contexts:
        return Finding("kubeconfig context", "error", f"no kubeconfig with contexts at {shown}",
                       "set cluster.kubeconfig in the stack or KUBECONFIG to the file that has context "
                       f"{cluster.context!r}")
    if cluster.context not in contexts:
        return Finding("kubeconfig context", "error",
                       f"context {cluster.context!r} (cluster.context) is not in {shown}; it has: "
                       + ", ".join(sorted(contexts)),
                       "add the context to the kubeconfig, or correct cluster.context in the stack file")
    return Finding("kubeconfig context", "ok", f"{cluster.context} (in {contexts[cluster.context]})")


def provider_version() -> str:
    """The Kubernetes provider version the program's SDK is generated for (the plugin must be this one)."""
    return metadata.version("pulumi-kubernetes")


def check_pulumi(environ: Mapping[str, str]) -> Finding:
    pulumi = shutil.which("pulumi", path=environ.get("PATH"))
    if pulumi is None:
        return Finding("pulumi CLI", "error", "pulumi is not on PATH",
                       "install the Pulumi CLI (docs/operators.md, \"The engine\"; offline: tools/build.sh pulumi "
                       "builds it from Go modules into ~/.cache/trainyard/tools/bin)")
    try:
        out = subprocess.run([pulumi, "version"], capture_output=True, text=True, timeout=60, check=False,  # noqa: S603
                             env=dict(environ))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Finding("pulumi CLI", "error", f"{pulumi}: cannot run ({exc})")
    version = out.stdout.strip() or out.stderr.strip()
    if out.returncode != 0 or not version.startswith("v3."):
        return Finding("pulumi CLI", "error", f"{pulumi}: `pulumi version` said {version!r}", "a Pulumi CLI v3")
    return Finding("pulumi CLI", "ok", f"{version} ({pulumi})")


def check_plugin(environ: Mapping[str, str]) -> Finding:
    """The provider plugin: on PATH (an ambient plugin, as `tools/build.sh pulumi-kubernetes` makes) or installed."""
    want = provider_version()
    install = (f"pulumi plugin install resource kubernetes v{want} (offline: --file pulumi-resource-kubernetes, the "
               "binary tools/build.sh pulumi-kubernetes builds; or put that binary on PATH)")
    ambient = shutil.which("pulumi-resource-kubernetes", path=environ.get("PATH"))
    if ambient is not None and not environ.get("PULUMI_IGNORE_AMBIENT_PLUGINS"):
        return Finding("kubernetes plugin", "ok", f"{ambient} (on PATH; the program's SDK wants v{want})")
    pulumi = shutil.which("pulumi", path=environ.get("PATH"))
    if pulumi is None:
        return Finding("kubernetes plugin", "error", "cannot list plugins without the pulumi CLI", install)
    out = subprocess.run([pulumi, "plugin", "ls", "--json"], capture_output=True, text=True, timeout=60,  # noqa: S603
                         check=False, env=dict(environ))
    try:
        plugins = json.loads(out.stdout or "[]") or []
    except json.JSONDecodeError:
        plugins = []
    versions = sorted(p.get("version", "") for p in plugins if p.get("name") == "kubernetes" and p.get("kind") == "resource")
    if want in versions:
        return Finding("kubernetes plugin", "ok", f"kubernetes v{want} (installed)")
    have = f" (installed: {', '.join(versions)})" if versions else ""
    return Finding("kubernetes plugin", "error", f"kubernetes v{want} is not installed{have}", install)


def check_image_lock(stack: Stack) -> Finding:
    """The program's own gate, asked before the engine starts: a stack that protects data deploys only locked images."""
    found = unlocked_images(stack)
    errors = [p for p in found if p.error]
    if errors:
        shown = "; ".join(p.message for p in errors[:3]) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
        return Finding("image lock", "error", f"{len(errors)} images without a registry-reported digest: {shown}",
                       f"mirror what `trainyard bom {stack.name} --format sync` lists, then `trainyard images lock "
                       f"{stack.name}` (docs/supply-chain.md); `pulumi up` refuses until then")
    if found:
        return Finding("image lock", "warning", f"{len(found)} images without a registry-reported digest (the stack "
                       "does not protect data, so it deploys them by tag)", f"trainyard images lock {stack.name}")
    return Finding("image lock", "ok", "every image of the bill of materials has a registry-reported digest")


@dataclass(frozen=True)
class Preflight:
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return all(f.level != "error" for f in self.findings)

    def report(self) -> str:
        return "\n".join(f.line() for f in self.findings)


def preflight(stack: Stack, backend: str | None, secrets_provider: str | None,
              environ: Mapping[str, str]) -> Preflight:
    protect = stack.config.lifecycle.protect_data
    return Preflight((
        check_pulumi(environ),
        check_plugin(environ),
        check_context(stack.config.cluster, environ, stack.path.parent),
        check_backend(backend, protect),
        check_secrets_provider(secrets_provider, protect),
        check_image_lock(stack),
    ))


def stack_config_dir(root: Path) -> Path:
    """The project's ``stackConfigDir`` (Pulumi.yaml), where Pulumi reads ``Pulumi.<stack>.yaml``."""
    project = yaml.safe_load((root / "Pulumi.yaml").read_text()) or {}
    return root / str(project.get("stackConfigDir") or ".")


@dataclass
class InitResult:
    stack: str
    file: Path
    backend: str
    secrets_provider: str
    created: bool
    added: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"schema": "trainyard.stack-init/v1", "ok": True, "stack": self.stack, "file": str(self.file),
                "backend": redact(self.backend), "secrets_provider": self.secrets_provider, "created": self.created,
                "added_keys": sorted(self.added)}


def _pulumi(environ: Mapping[str, str], root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["pulumi", *args], cwd=root, env=dict(environ), capture_output=True, text=True,  # noqa: S603, S607
                          timeout=600, check=False)


def _existing_stacks(environ: Mapping[str, str], root: Path) -> set[str]:
    listed = _pulumi(environ, root, "stack", "ls", "--json")
    if listed.returncode != 0:
        raise DeployError(f"`pulumi stack ls` against {redact(environ['PULUMI_BACKEND_URL'])} failed: "
                          + _tail(listed.stderr or listed.stdout))
    return {str(s.get("name", "")).rsplit("/", 1)[-1] for s in json.loads(listed.stdout or "[]")}


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def engine_env(environ: Mapping[str, str], backend: str) -> dict[str, str]:
    """The environment ``pulumi`` runs with: the backend named for this command only (no global ``pulumi login``)."""
    env = dict(environ)
    env["PULUMI_BACKEND_URL"] = backend
    env.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")
    return env


def init_stack(stack: Stack, backend: str, secrets_provider: str, environ: Mapping[str, str]) -> InitResult:
    """Create the Pulumi stack in ``backend`` with ``secrets_provider``; the reviewed stack file gains only its keys."""
    checks = preflight(stack, backend, secrets_provider, environ)
    if not checks.ok:
        raise DeployError(f"{stack.path}: preflight failed\n{checks.report()}")
    expected = stack_config_dir(stack.root) / f"Pulumi.{stack.name}.yaml"
    if stack.path.resolve() != expected.resolve():
        raise DeployError(f"{stack.path}: Pulumi reads stack {stack.name!r} from {expected} (Pulumi.yaml stackConfigDir); "
                          "initialise a stack file of the project")
    env = engine_env(environ, backend)
    original = stack.path.read_bytes()
    before = yaml.safe_load(original) or {}
    present = {k: str(before[k]) for k in ENCRYPTION_KEYS if k in before}
    exists = stack.name in _existing_stacks(env, stack.root)
    if exists:
        if not present:
            raise DeployError(f"{redact(backend)} already has stack {stack.name!r}, but {stack.path} names no secrets "
                              "provider: this backend's stack was made from another copy of the file; take its "
                              f"secretsprovider/encryptedkey lines from there (`pulumi stack export --stack {stack.name}` "
                              "shows the provider in secrets_providers)")
        if present.get("secretsprovider", "passphrase") != secrets_provider and "secretsprovider" in present:
            raise DeployError(f"{stack.path}: stack {stack.name!r} uses secretsprovider {present['secretsprovider']}, "
                              f"not {secrets_provider}; change it with `pulumi stack change-secrets-provider`")
        _verify(env, stack)
        return InitResult(stack.name, stack.path, backend, secrets_provider, created=False)
    if present:
        raise DeployError(f"{stack.path} already names a secrets provider ({', '.join(sorted(present))}) but "
                          f"{redact(backend)} has no stack {stack.name!r}: is this the backend that stack was made in?")
    init = _pulumi(env, stack.root, "stack", "init", stack.name, "--secrets-provider", secrets_provider,
                   "--non-interactive", "--no-select")
    after_bytes = stack.path.read_bytes()
    stack.path.write_bytes(original)  # the reviewed file as it was; only the provider's keys are appended below
    if init.returncode != 0:
        raise DeployError(f"`pulumi stack init {stack.name} --secrets-provider {secrets_provider}` failed:\n"
                          + _tail(init.stderr or init.stdout))
    after = yaml.safe_load(after_bytes) or {}
    changed = sorted(k for k in set(before) | set(after) if k not in ENCRYPTION_KEYS and before.get(k) != after.get(k))
    if changed:
        raise DeployError(f"{stack.path}: `pulumi stack init` changed {', '.join(changed)} besides the secrets "
                          "provider; the stack file was restored, and the stack exists in the backend: "
                          f"`pulumi stack rm {stack.name}` before trying again")
    added = {k: str(after[k]) for k in ENCRYPTION_KEYS if k in after}
    text = original.decode("utf-8")
    block = yaml.safe_dump(added, sort_keys=False, width=10_000)
    stack.path.write_text(text + ("" if text.endswith("\n") else "\n") + WRITTEN_BY + "\n" + block)
    _verify(env, stack)
    return InitResult(stack.name, stack.path, backend, secrets_provider, created=True, added=added)


def _verify(env: Mapping[str, str], stack: Stack) -> None:
    """Pulumi opens the stack with the file as written: config read through the secrets provider."""
    shown = _pulumi(env, stack.root, "config", "--stack", stack.name, "--json")
    if shown.returncode != 0:
        raise DeployError(f"pulumi cannot open stack {stack.name!r} with {stack.path}: " + _tail(shown.stderr))
