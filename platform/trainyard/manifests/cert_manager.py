"""cert-manager: issues the serving certificate of KServe's webhooks.

KServe's chart asks cert-manager for the webhook certificate (an Issuer and a Certificate in the
``kserve`` namespace, and ``cert-manager.io/inject-ca-from`` on its webhook configurations), so
cert-manager must run before KServe. A stack whose cluster already runs cert-manager says so
(``serving.cert_manager.install: false``): Trainyard then declares neither its CRDs nor its chart.

Chart values (cert-manager v1.21.1 values.yaml):
- ``crds.enabled: false``: Trainyard declares the CRDs itself (verified, retained, protected).
- ``imageRegistry``/``imageNamespace``: every cert-manager image from the stack's mirror.
- no ``startupapicheck`` value: it is a post-install hook Job, and Pulumi's ``helm.v4.Chart`` renders
  with hooks off, so it never exists (the chart-truth test showed the value changed nothing).
- ``global.leaderElection.namespace``: the lease in cert-manager's own namespace, not kube-system.

Ref: https://cert-manager.io/docs/installation/helm/
"""

from __future__ import annotations

from typing import Any

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.concern import Concern
from trainyard.manifests.installs import mirrored_parts, pinned_chart, system_namespace
from trainyard.manifests.meta import Manifest
from trainyard.manifests.network import controller_policies

COMPONENT = "cert-manager"


def installed(config: PlatformConfig) -> bool:
    """Trainyard installs cert-manager: serving is on and the stack does not bring its own."""
    return config.serving is not None and config.serving.cert_manager.install


def release_of(config: PlatformConfig) -> catalog.Release:
    return catalog.release("cert_manager", config.versions.cert_manager)


def values(config: PlatformConfig) -> dict[str, Any]:
    pinned = release_of(config)
    registry, repository, _ = mirrored_parts(config, pinned.installed()[2])
    namespace = repository.rsplit("/", 1)[0]
    return {
        "crds": {"enabled": False},
        "imageRegistry": registry,
        "imageNamespace": namespace,
        "global": {"leaderElection": {"namespace": pinned.namespace}},
    }


def chart_release(config: PlatformConfig) -> ChartRelease:
    return pinned_chart(config, release_of(config), COMPONENT, values(config))


def build(config: PlatformConfig) -> Concern:
    """cert-manager's namespace, its network policies and its chart, where Trainyard installs it."""
    if not installed(config):
        return Concern("cert-manager")
    release = chart_release(config)
    objects: list[Manifest] = []
    if not release.external:
        objects = [system_namespace(release.namespace, COMPONENT), *controller_policies(config, release.namespace, COMPONENT)]
    return Concern("cert-manager", objects=tuple(objects), releases=(release,))
