"""Writing a rendered platform as YAML: one file per object, byte-identical for the same input.

Secret values never reach a file: Secret data and any chart value whose key looks like a
credential are replaced by a placeholder before anything is written. What is shown of a Secret:
values built around ``${generated:<name>}`` placeholders (they name a deploy-time value, they are
not one) and keys the Secret lists as configuration (``trainyard.dev/non-secret-keys``).
"""

from __future__ import annotations

import json
import re
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from trainyard.derived_cache import derived_text
from trainyard.manifests import RenderedPlatform
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

    Keyed by the document's JSON (order and types included), PyYAML's version and the dumper's
    output for a probe document; a document JSON cannot represent exactly is dumped directly.
    """
    try:
        content = json.dumps(doc, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return to_yaml(doc)
    text = derived_text("yaml", ("yaml/1", yaml.__version__, _probe_output(), content), lambda: to_yaml(doc))
    return text if text is not None else to_yaml(doc)


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
    for crd in rendered.crds:
        files[object_path(crd)] = to_yaml_cached(crd)
    for obj in rendered.objects:
        files[object_path(obj)] = to_yaml(redact_object(obj))
    for release in rendered.releases:
        files[Path("charts") / f"{release.name}.yaml"] = to_yaml(redact(release.as_document()))
    return dict(sorted(files.items()))


class OutputDirError(Exception):
    pass


def write_rendered(rendered: RenderedPlatform, out: Path) -> list[Path]:
    """Replace ``out`` with the rendered files; refuses a non-empty directory it did not write."""
    if out.exists():
        if not out.is_dir():
            raise OutputDirError(f"{out} exists and is not a directory")
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise OutputDirError(f"{out} is not empty and was not written by trainyard render; choose another --out")
        shutil.rmtree(out)
    written = []
    for relative, content in rendered_files(rendered).items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    (out / MARKER).write_text("written by trainyard render; the directory is replaced on each render\n")
    return written
