"""Deploy-time kubeconfigs for a MultiKueue manager's worker Secrets.

The rendered Secret carries a placeholder naming the source (``manifests.multikueue``); here the
Pulumi program replaces it with the secret value, read at deploy time from the stack's Pulumi
config secret (``pulumi config set --secret trainyard:<key> < worker.kubeconfig``) or from a file.
The value is a Pulumi secret from the start, so it is encrypted in the state and never printed.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pulumi

from trainyard.config.model import PlatformConfig
from trainyard.config.multikueue import KubeconfigSource
from trainyard.manifests.concern import Concern
from trainyard.manifests.multikueue import KUBECONFIG_KEY, kubeconfig_secret_name


def kubeconfig_value(source: KubeconfigSource, root: Path) -> pulumi.Output[str]:
    if source.pulumi_secret is not None:
        return pulumi.Config("trainyard").require_secret(source.pulumi_secret)
    path = Path(str(source.file))
    path = path if path.is_absolute() else root / path
    try:
        return pulumi.Output.secret(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise pulumi.RunError(f"multikueue kubeconfig file {path}: cannot read: {exc.strerror}") from None


def with_kubeconfigs(config: PlatformConfig, concern: Concern, root: Path) -> Concern:
    """``concern`` with each worker kubeconfig Secret holding its deploy-time value (other concerns unchanged)."""
    if concern.name != "multikueue" or config.multikueue is None:
        return concern
    values = {kubeconfig_secret_name(w): w.kubeconfig for w in config.multikueue.workers}
    objects = []
    for obj in concern.objects:
        name = obj["metadata"]["name"]
        if obj["kind"] == "Secret" and name in values:
            secret = copy.deepcopy(obj)
            secret["stringData"] = {KUBECONFIG_KEY: kubeconfig_value(values[name], root)}
            objects.append(secret)
        else:
            objects.append(obj)
    return Concern(concern.name, tuple(objects), concern.releases, concern.tenant_objects)
