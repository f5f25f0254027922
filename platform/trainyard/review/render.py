"""Writing a rendered platform as YAML: one file per object, byte-identical for the same input.

Secret values never reach a file: Secret data and any chart value whose key looks like a
credential are replaced by a placeholder before anything is written. What is shown of a Secret:
values built around ``${generated:<name>}`` placeholders (they name a deploy-time value, they are
not one) and keys the Secret lists as configuration (``trainyard.dev/non-secret-keys``).
"""

from __future__ import annotations

import hashlib
import marshal
import os
import re
import shutil
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from trainyard.derived_cache import derived_text
from trainyard.manifests import RenderedPlatform
from trainyard.manifests.crds import CrdSource
from trainyard.manifests.meta import NON_SECRET_KEYS, Manifest, object_key

REDACTED = "<redacted>"
MARKER = ".trainyard-render"
_SECRET_KEY = re.compile(r"(password|passwd|secret|token|credential|private[-_]?key|access[-_]?key)", re.IGNORECASE)
_GENERATED = re.compile(r"\$\{generated:[a-z0-9][a-z0-9./-]*[a-z0-9]\}")


_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[valid-type,misc]
    """Block style, multi-line strings as literal blocks, no aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def to_yaml(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)


# A document that exercises every choice the dumper makes (block styles, literal blocks, quoting,
# unicode, line width): its output is part of the cache key, so a change to to_yaml is a new key.
_FORMAT_PROBE: Any = {
    "a": [1, 1.5, True, None, "", "yes", "0x1F", "2024-01-01", "a: b", "- x", "#c", "multi\nline\n", "ünï", "'q\""],
    "long": "word " * 40, "nested": {"empty_list": [], "empty_map": {}, "k": [{"x": "y"}]},
}


def to_yaml_cached(doc: Any) -> str:
    """``to_yaml(doc)``, from the disk cache for large documents (the upstream CRDs are MBs of YAML).

    Keyed by a digest of the document's marshal form (version 2: no back-references; exact on order
    and types, and decodable, so two documents with the same bytes are equal), Python's and PyYAML's
    versions and the dumper's output for a probe document; a document marshal cannot write is dumped
    directly. Marshal is used, not JSON, because it writes the CRDs several times faster.
    """
    try:
        content = hashlib.sha256(marshal.dumps(doc, 2)).hexdigest()
    except ValueError:
        return to_yaml(doc)
    key = ("yaml/2", sys.version, yaml.__version__, _probe_output(), content)
    text = derived_text("yaml", key, lambda: to_yaml(doc))
    return text if text is not None else to_yaml(doc)


def crd_yaml(source: CrdSource) -> str:
    """The YAML of one CRD as Trainyard declares it. An upstream file Trainyard does not change is cached by
    its blob SHA (it was verified against it), so it is neither parsed nor serialised on a warm cache."""
    if source.patch is not None:
        return to_yaml_cached(source.document())
    key = ("crd-yaml/1", sys.version, yaml.__version__, _probe_output(), source.blob_sha)
    text = derived_text("crd-yaml", key, lambda: to_yaml(source.document()))
    return text if text is not None else to_yaml(source.document())


@lru_cache(maxsize=1)
def _probe_output() -> str:
    return to_yaml(_FORMAT_PROBE)


def is_secret_key(key: str) -> bool:
    """Whether a string under this key is a credential (and so shown only as ``<redacted>``)."""
    return bool(_SECRET_KEY.search(key))


def redact(value: Any, key: str = "") -> Any:
    """A copy of ``value`` with credential-like leaves replaced by ``<redacted>``."""
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if isinstance(value, str) and key and _SECRET_KEY.search(key) and not value.startswith("<") \
            and not is_placeholder(value):
        return REDACTED
    return value


def is_placeholder(value: str) -> bool:
    """A string that is exactly one generated-value placeholder: it names a secret, it is not one."""
    match = _GENERATED.fullmatch(value)
    return match is not None


def secret_value_shown(obj: Manifest, key: str, value: Any) -> bool:
    """Whether a Secret's value under ``key`` may be shown: configuration, or built around placeholders."""
    if not isinstance(value, str):
        return False
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return key in str(annotations.get(NON_SECRET_KEYS, "")).split(",") or bool(_GENERATED.search(value))


def redact_object(obj: Manifest) -> Manifest:
    if obj.get("kind") == "Secret":
        out = dict(obj)
        for field in ("data", "stringData"):
            if field in out:
                out[field] = {k: redact(v) if secret_value_shown(obj, k, v) else REDACTED for k, v in out[field].items()}
        return out
    return obj


def object_path(obj: Manifest) -> Path:
    group, kind, namespace, name = object_key(obj)
    folder = kind if group == "core" else f"{kind}.{group}"
    return Path(folder) / namespace / f"{name}.yaml" if namespace else Path(folder) / f"{name}.yaml"


def rendered_files(rendered: RenderedPlatform) -> dict[Path, str]:
    """Relative path -> file content, for every object and chart release."""
    files: dict[Path, str] = {}
    if rendered.crds_parsed:  # the documents may have been edited since: write what they hold
        for crd in rendered.crds:
            files[object_path(crd)] = to_yaml_cached(crd)
    else:
        for crd in rendered.given_crds:
            files[object_path(crd)] = to_yaml_cached(crd)
        for source in rendered.crd_sources:
            files[object_path(source.identity)] = crd_yaml(source)
    for obj in rendered.objects:
        files[object_path(obj)] = to_yaml(redact_object(obj))
    for release in rendered.releases:
        files[Path("charts") / f"{release.name}.yaml"] = to_yaml(redact(release.as_document()))
    return dict(sorted(files.items()))


class OutputDirError(Exception):
    pass


def write_rendered(rendered: RenderedPlatform, out: Path) -> list[Path]:
    """Make ``out`` hold exactly the rendered files; refuses a non-empty directory it did not write.

    Files whose content is unchanged are left alone and stale ones removed, so the result is the same
    as replacing the directory, without deleting and rewriting hundreds of files on every render.
    """
    if out.exists():
        if not out.is_dir():
            raise OutputDirError(f"{out} exists and is not a directory")
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise OutputDirError(f"{out} is not empty and was not written by trainyard render; choose another --out")
    files = {out / relative: content.encode("utf-8") for relative, content in rendered_files(rendered).items()}
    try:
        _sync(out, files)
    except OSError:
        # A file where a directory must go (or the reverse): replace the directory outright.
        shutil.rmtree(out)
        _sync(out, files)
    return list(files)


def _sync(out: Path, files: dict[Path, bytes]) -> None:
    marker = out / MARKER
    _remove_stale(out, set(files) | {marker})
    made: set[Path] = set()
    for path, data in files.items():
        if not path.is_symlink():
            try:
                if path.read_bytes() == data:
                    continue
            except FileNotFoundError:
                pass
        else:
            path.unlink()
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_bytes(data)
    marker.write_text("written by trainyard render; the directory is replaced on each render\n")


def _remove_stale(out: Path, keep: set[Path]) -> None:
    """Delete what is under ``out`` and not in ``keep`` (files, and the directories left empty)."""
    if not out.is_dir():
        return
    for directory, subdirs, names in os.walk(out, topdown=False):
        here = Path(directory)
        for name in names:
            if here / name not in keep:
                (here / name).unlink()
        for sub in subdirs:
            path = here / sub
            if path.is_symlink():
                path.unlink()
            elif not any(path.iterdir()):
                path.rmdir()
