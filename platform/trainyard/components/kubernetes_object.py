"""One Kubernetes object of any kind, registered with the Kubernetes provider as-is.

The typed classes of ``pulumi_kubernetes`` take snake_case arguments and translate them;
Trainyard's builders already produce exact API-server JSON, so each manifest is handed to
the provider unchanged under the provider's own type token (``kubernetes:<group>/<version>:<Kind>``),
which is what the typed classes and ``apiextensions.CustomResource`` register too.
"""

from __future__ import annotations

from typing import Any

import pulumi

from trainyard.manifests.meta import Manifest


def type_token(obj: Manifest) -> str:
    api_version: str = obj["apiVersion"]
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{obj['kind']}"


def logical_name(obj: Manifest) -> str:
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta["name"]
    return f"{namespace}/{name}" if namespace else str(name)


class KubernetesObject(pulumi.CustomResource):
    """A manifest declared through the Kubernetes provider."""

    def __init__(self, manifest: Manifest, opts: pulumi.ResourceOptions | None = None) -> None:
        props: dict[str, Any] = dict(manifest)
        super().__init__(type_token(manifest), logical_name(manifest), props, opts)
