"""What the CrossGuard pack needs besides the rules, kept here so that it is typed and tested.

The pack in ``policies/`` runs inside ``pulumi preview --policy-pack policies``: it sees
resources, not manifests, and is started by the engine, not by ``trainyard``. Three things
bridge the gap:

- the stack's config: the engine hands the policy pack the stack's configuration in
  ``PULUMI_CONFIG`` (a JSON object of ``namespace:key`` -> value, object values JSON-encoded),
  so the pack reads ``trainyard:platform`` exactly as the program does. Without it (an older
  engine), ``PULUMI_STACK`` names the stack file to load.
- manifests: ``KubernetesObject`` registers each manifest as-is under the type token
  ``kubernetes:<group>/<version>:<Kind>``, so a resource's properties *are* the manifest.
- enforcement levels: the stack's per-rule severities, which ``trainyard policy-config STACK``
  also writes as a ``--policy-pack-config`` file.
- generated values: the engine shows the pack objects with deploy-time values substituted; the
  rules judge the rendered form, so where a field is its rendered template with the placeholders
  filled in, the placeholders are put back (``with_placeholders``).

Ref: https://www.pulumi.com/docs/iac/using-pulumi/crossguard/configuration/
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainyard.config import validate_platform
from trainyard.config.load import CONFIG_KEY
from trainyard.config.model import PlatformConfig
from trainyard.config.security import PolicyLevel
from trainyard.manifests.generated import names_in, restore
from trainyard.manifests.meta import Manifest, object_key
from trainyard.policy.rules import RULES

# Resources of these types are not Kubernetes objects (the provider, Helm charts as a whole).
NOT_MANIFESTS = ("pulumi:providers:", "kubernetes:helm.sh/")


def stack_of(urn: str) -> str | None:
    """The stack named in a URN (``urn:pulumi:<stack>::<project>::<type>::<name>``)."""
    parts = urn.split(":", 3)
    return parts[2].split("::", 1)[0] or None if len(parts) == 4 and parts[:2] == ["urn", "pulumi"] else None


class PackConfigError(Exception):
    """The pack cannot tell which stack it is checking."""


def enforcement_levels(config: PlatformConfig | None) -> dict[str, PolicyLevel]:
    """Rule id -> enforcement level: the rule's default severity, overridden by the stack's."""
    overrides = config.security.policy.severity if config is not None else {}
    return {rule.id: overrides.get(rule.id, rule.severity) for rule in RULES}


def policy_config(config: PlatformConfig) -> dict[str, dict[str, str]]:
    """The content of a ``--policy-pack-config`` file for this stack."""
    return {rule_id: {"enforcementLevel": level} for rule_id, level in sorted(enforcement_levels(config).items())}


# Leaves returned as they are before any ``isinstance`` against an abstract class: those checks were most of the
# pack's time (a manifest's leaves outnumber its containers, and the pack copies every resource once per rule).
_LEAVES = frozenset({str, int, float, bool, type(None)})


def plain(value: Any) -> Any:
    """A deep copy as plain dicts and lists (the policy SDK hands over read-only mapping proxies)."""
    if type(value) in _LEAVES:
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(v) for v in value]
    return value


def manifest_from(resource_type: str, props: Mapping[str, Any]) -> Manifest | None:
    """The manifest a Kubernetes resource was registered with, or None for anything else."""
    if not resource_type.startswith("kubernetes:") or resource_type.startswith(NOT_MANIFESTS):
        return None
    manifest: Manifest = plain(props)
    if "kind" not in manifest or "apiVersion" not in manifest:
        # Typed pulumi_kubernetes resources carry both; fill them from the token otherwise.
        _, group_version, kind = resource_type.split(":", 2)
        manifest.setdefault("kind", kind)
        manifest.setdefault("apiVersion", group_version.removeprefix("core/"))
    return manifest


def platform_config_from_environment(environ: Mapping[str, str], root: Path | None = None) -> PlatformConfig:
    """The stack's PlatformConfig, as the engine passes it to a policy pack; raises ConfigError, PackConfigError."""
    raw = environ.get("PULUMI_CONFIG")
    if raw:
        value = json.loads(raw).get(CONFIG_KEY)
        if value is not None:
            return validate_platform(json.loads(value) if isinstance(value, str) else value,
                                     f"pulumi config {CONFIG_KEY}")
    stack = environ.get("PULUMI_STACK")
    if stack:
        from trainyard.project import open_stack

        return open_stack(stack, root).config
    raise PackConfigError(f"no stack config: neither PULUMI_CONFIG (with {CONFIG_KEY}) nor PULUMI_STACK is set; "
                          "run the pack through `pulumi preview --policy-pack policies`")


_TEMPLATES: dict[int, dict[tuple[str, str, str, str], Manifest]] = {}


def _templates(config: PlatformConfig, root: Path) -> dict[tuple[str, str, str, str], Manifest]:
    """The stack's rendered objects that reference generated values, by identity (rendered once per config)."""
    if id(config) not in _TEMPLATES:
        from trainyard.manifests import render_platform

        rendered = render_platform(config, root)
        _TEMPLATES[id(config)] = {object_key(o): o for o in rendered.all_objects if any(True for _ in names_in(o))}
    return _TEMPLATES[id(config)]


def with_placeholders(obj: Manifest, config: PlatformConfig, root: Path) -> Manifest:
    """``obj`` as rendered where it differs from the render only by the generated values in it."""
    template = _templates(config, root).get(object_key(obj))
    return obj if template is None else restore(template, obj)
