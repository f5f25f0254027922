"""The stack settings reference (docs/stack-config.md), generated from the config model.

Generated, not written by hand, so the reference cannot drift from what the loader accepts;
a test checks that the committed file is current (`make schema` rewrites it).
"""

from __future__ import annotations

import json
from typing import Any

from trainyard.config.model import PlatformConfig

HEADER = """# Stack settings reference

Generated from `trainyard.config.model` by `make schema`; do not edit by hand.
Every setting lives under the Pulumi config key `trainyard:platform` in `stacks/Pulumi.<env>.yaml`.
Unknown fields are rejected. Editors can validate stack files with `stacks/schema.json`.

| setting | default | description |
|---|---|---|
"""


def _ref(schema: dict[str, Any]) -> str | None:
    for candidate in (schema, schema.get("items", {}), *schema.get("anyOf", []),
                      *(s.get("items", {}) for s in schema.get("anyOf", []))):
        if isinstance(candidate, dict) and "$ref" in candidate:
            return str(candidate["$ref"]).rsplit("/", 1)[-1]
    return None


def _rows(schema: dict[str, Any], defs: dict[str, Any], prefix: str, seen: tuple[str, ...]) -> list[str]:
    rows = []
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        ref = _ref(prop)
        description = prop.get("description") or (defs[ref].get("description", "").split("\n")[0] if ref else "")
        if name in required:
            default = "required"
        elif "default" in prop and not isinstance(prop["default"], dict):
            default = f"`{json.dumps(prop['default'])}`"
        else:
            default = ""
        rows.append(f"| `{path}` | {default} | {' '.join(description.split())} |")
        if ref and ref not in seen:
            is_list = prop.get("type") == "array" or any(s.get("type") == "array" for s in prop.get("anyOf", []))
            rows += _rows(defs[ref], defs, f"{path}[]." if is_list else f"{path}.", (*seen, ref))
    return rows


def reference_markdown() -> str:
    schema = PlatformConfig.model_json_schema()
    return HEADER + "\n".join(_rows(schema, schema.get("$defs", {}), "", ())) + "\n"
