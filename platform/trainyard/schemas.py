"""Strict schema validation of manifests: Kubernetes built-ins and upstream CRDs.

Built-in kinds are validated against the strict OpenAPI schemas shipped by
``kubernetes-validate`` (unknown fields rejected). Custom resources are validated against
the ``openAPIV3Schema`` of the exact upstream CRD version, made strict the way the API
server prunes: an object schema with properties and no ``x-kubernetes-preserve-unknown-fields``
admits no other fields. CEL rules (``x-kubernetes-validations``) are not evaluated here;
the cluster tier checks them on a real API server.

A CRD that ../shared/crds does not hold but Trainyard renders objects of (the barman-cloud plugin's
``ObjectStore``) comes from the tools cache (``tools/build.sh barman-cloud-crd``), found through
``$TRAINYARD_BARMAN_CLOUD_CRD`` and verified against its pinned blob SHA like every mirrored CRD
(``pinned_crd``; the pin is ``catalog.BARMAN_CLOUD_CRD``).
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from trainyard import catalog, yamlio
from trainyard.manifests.crds import CrdUnavailable, git_blob_sha, parsed
from trainyard.manifests.meta import Manifest, object_id


@dataclass(frozen=True)
class SchemaError:
    object: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.object}: {self.path or '(root)'}: {self.message}"


class SchemaNotFound(Exception):
    pass


BARMAN_CLOUD_CRD_ENV = "TRAINYARD_BARMAN_CLOUD_CRD"


def barman_cloud_crd_path() -> Path:
    """Where the barman-cloud plugin's ObjectStore CRD is read from: ``$TRAINYARD_BARMAN_CLOUD_CRD``, else where
    ``tools/build.sh barman-cloud-crd`` copies it (``$TRAINYARD_TOOLS_DIR/share/barman-cloud-crd/<upstream path>``,
    the tools dir defaulting to ~/.cache/trainyard/tools)."""
    explicit = os.environ.get(BARMAN_CLOUD_CRD_ENV)
    if explicit:
        return Path(explicit)
    tools = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools")
    return tools / "share" / "barman-cloud-crd" / catalog.BARMAN_CLOUD_CRD.repo_path


def pinned_crd(path: Path, pin: catalog.CrdFile, origin: str) -> Manifest:
    """The CRD at ``path``, once its content matched ``pin``'s git blob SHA (``origin`` names the upstream
    release in the error); CrdUnavailable if it does not, or is not a CustomResourceDefinition."""
    content = path.read_bytes()
    if git_blob_sha(content) != pin.blob_sha:
        raise CrdUnavailable(f"{path}: content does not match upstream {origin}:{pin.repo_path} "
                             f"(blob {git_blob_sha(content)}, pinned {pin.blob_sha})")
    crd = yamlio.safe_load(content)
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise CrdUnavailable(f"{path}: not a CustomResourceDefinition")
    return crd


def barman_cloud_crd(path: Path | None = None) -> Manifest:
    """The barman-cloud plugin's ObjectStore CRD at the pinned release, verified (see ``pinned_crd``)."""
    origin = f"{catalog.BARMAN_CLOUD_PLUGIN_MODULE}@{catalog.BARMAN_CLOUD_PLUGIN_VERSION}"
    return pinned_crd(path or barman_cloud_crd_path(), catalog.BARMAN_CLOUD_CRD, origin)


def strict_crd_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema equivalent of a structural CRD schema, rejecting unknown fields."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items() if not k.startswith("x-kubernetes-validations")}
        if out.pop("x-kubernetes-int-or-string", False):
            out.pop("type", None)
            out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
        if out.pop("nullable", False) and "type" in out:
            out["type"] = [out["type"], "null"]
        if isinstance(out.get("pattern"), str):
            out["pattern"] = _python_pattern(out["pattern"])
        preserve = out.pop("x-kubernetes-preserve-unknown-fields", False)
        for key in list(out):
            if key.startswith("x-kubernetes-"):
                out.pop(key)
        if out.get("type") in ("object", ["object", "null"]) and "properties" in out and not preserve:
            out.setdefault("additionalProperties", False)
        return out

    strict: dict[str, Any] = walk(copy.deepcopy(schema))
    # The CRD schema says only "metadata: object"; the API server validates ObjectMeta itself.
    strict.setdefault("properties", {})["metadata"] = {"$ref": "#/$defs/ObjectMeta"}
    strict["$defs"] = {"ObjectMeta": _object_meta_schema()}
    return strict


def _python_pattern(pattern: str) -> str:
    """A CRD pattern (Go RE2) that Python's re accepts: RE2 allows an inline flag group after ``^``
    (Kueue's AdmissionCheck ``parameters.kind`` is ``^(?i)[a-z]...``); Python wants global flags first."""
    match = re.match(r"^\^(\(\?[a-zA-Z]+\))", pattern)
    return f"{match.group(1)}^{pattern[match.end():]}" if match else pattern


def _object_meta_schema() -> dict[str, Any]:
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "maxLength": 253, "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
            "namespace": {"type": "string", "maxLength": 63, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
            "labels": string_map,
            "annotations": string_map,
        },
    }


def crd_validators(crds: Iterable[Manifest]) -> dict[tuple[str, str], LazyValidator]:
    """(apiVersion, kind) -> strict validator, for every served version of the given CRD manifests."""
    out: dict[tuple[str, str], LazyValidator] = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        group, kind = spec.get("group"), (spec.get("names") or {}).get("kind")
        for version in spec.get("versions") or ():
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema and group and kind:
                out[(f"{group}/{version['name']}", kind)] = LazyValidator(schema)
    return out


class LazyValidator:
    """Builds the (large) strict schema only for the kinds actually validated."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._schema = schema
        self._validator: jsonschema.protocols.Validator | None = None

    def iter_errors(self, instance: Any) -> Iterator[jsonschema.ValidationError]:
        if self._validator is None:
            self._validator = jsonschema.Draft202012Validator(strict_crd_schema(self._schema))
        return iter(self._validator.iter_errors(instance))


def object_meta_errors(obj: Manifest) -> list[tuple[tuple[str | int, ...], str]]:
    """(path parts, message) for what the API server refuses in any object's metadata (names, labels, annotations)."""
    validator = jsonschema.Draft202012Validator(_object_meta_schema())
    meta = obj.get("metadata")
    known = {"name", "namespace", "labels", "annotations"}
    shown = {k: v for k, v in meta.items() if k in known} if isinstance(meta, dict) else meta
    return [(("metadata", *e.absolute_path), e.message) for e in validator.iter_errors(shown)]


class Validator:
    """Validates manifests; upstream CRDs come from a directory laid out like ../shared/crds, Trainyard's own
    (the admission params' ``TenantPolicy``) from the code that defines them."""

    def __init__(self, crd_dir: Path, kubernetes_version: str = catalog.KUBERNETES_VERSION) -> None:
        from trainyard.manifests import policy_params

        self.kubernetes_version = kubernetes_version
        self._crd_schemas: dict[tuple[str, str], dict[str, Any]] = {}
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
        self.add_crd(policy_params.crd())
        for path in sorted(crd_dir.rglob("*.yaml")):
            crd = parsed(path.read_bytes())  # from the derived cache: parsing the YAML took seconds per Validator
            if isinstance(crd, dict) and crd.get("kind") == "CustomResourceDefinition":
                self.add_crd(crd)

    def add_crd(self, crd: Manifest) -> None:
        """Validate custom resources of ``crd`` too (a chart's own CRDs, for the objects that chart renders)."""
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = version.get("schema", {}).get("openAPIV3Schema")
            if schema:
                key = (f"{group}/{version['name']}", kind)
                if self._crd_schemas.get(key) != schema:
                    self._crd_schemas[key] = schema
                    self._validators.pop(key, None)

    def knows(self, api_version: str, kind: str) -> bool:
        if (api_version, kind) in self._crd_schemas:
            return True
        return _builtin_schema_path(self.kubernetes_version, api_version, kind).is_file()

    def _validator(self, api_version: str, kind: str) -> jsonschema.protocols.Validator:
        key = (api_version, kind)
        if key not in self._validators:
            if key in self._crd_schemas:
                schema = strict_crd_schema(self._crd_schemas[key])
                self._validators[key] = jsonschema.Draft202012Validator(schema)
            else:
                self._validators[key] = _builtin_validator(self.kubernetes_version, api_version, kind)
        return self._validators[key]

    def errors(self, obj: Manifest) -> list[SchemaError]:
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        if not self.knows(api_version, kind):
            raise SchemaNotFound(f"no schema for {api_version} {kind}")
        validator = self._validator(api_version, kind)
        return [
            SchemaError(object_id(obj), ".".join(str(p) for p in err.absolute_path), err.message)
            for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
        ]


def _schema_root() -> Path:
    import kubernetes_validate

    return Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


def _builtin_schema_path(version: str, api_version: str, kind: str) -> Path:
    # kubernetes-validate names files <kind>-<first group segment>-<version>.json, e.g. role-rbac-v1.json.
    if "/" in api_version:
        group, ver = api_version.split("/")
        prefix = f"{group.split('.')[0]}-{ver}"
    else:
        prefix = api_version
    return _schema_root() / f"v{version}-local-strict" / f"{kind.lower()}-{prefix}.json"


@lru_cache(maxsize=4)
def _definitions(version: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((_schema_root() / f"v{version}-local-strict" / "_definitions.json").read_text())
    return result


@lru_cache(maxsize=4)
def _definitions_registry(version: str) -> Any:
    """The shared definitions, crawled once: an uncrawled registry is crawled again on every ``$ref`` lookup."""
    from referencing import Registry, Resource

    definitions = Resource.from_contents(_definitions(version))
    registry: Registry[Any] = Registry().with_resources(
        [("file://_definitions.json", definitions), ("_definitions.json", definitions)]
    )
    return registry.crawl()


def _builtin_validator(version: str, api_version: str, kind: str) -> jsonschema.protocols.Validator:
    from referencing import Resource

    path = _builtin_schema_path(version, api_version, kind)
    schema = json.loads(path.read_text())
    registry = (Resource.from_contents(schema) @ _definitions_registry(version)).crawl()
    return jsonschema.Draft202012Validator(schema, registry=registry)
