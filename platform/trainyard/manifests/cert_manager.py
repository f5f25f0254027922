"""cert-manager: issues the serving certificate of KServe's webhooks.

KServe's chart asks cert-manager for the webhook certificate (an Issuer and a Certificate in the
``kserve`` namespace, and ``cert-manager.io/inject-ca-from`` on its webhook configurations), so
cert-manager must run before KServe. A stack whose cluster already runs cert-manager says so
(``serving.cert_manager.install: false``): Trainyard then declares neither its CRDs nor its chart.

Chart values (cert-manager v1.21.1 values.yaml):
- ``crds.enabled: false``: Trainyard declares the CRDs itself (verified, retained, protected).
- ``imageRegistry``/``imageNamespace``: every cert-manager image from the stack's mirror.
- ``image``, ``webhook.image``, ``cainjector.image``, ``acmesolver.image``: ``tag`` and ``digest`` from the
  image lock, where it has the image: the chart then renders ``<repository>:<tag>@<digest>`` (pods, and the
  controller's ``--acme-http01-solver-image`` argument). Without a lock entry nothing is set and the chart
  renders ``:<appVersion>``, the catalog's tag (``images verify`` reports the image).
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
from trainyard.manifests.installs import mirrored_parts, pinned_chart, pinned_image, system_namespace
from trainyard.manifests.meta import Manifest
from trainyard.manifests.network import controller_policies
from trainyard.supply.lock import ImageLock

COMPONENT = "cert-manager"


def installed(config: PlatformConfig) -> bool:
    """Trainyard installs cert-manager: serving is on and the stack does not bring its own."""
    return config.serving is not None and config.serving.cert_manager.install


def release_of(config: PlatformConfig) -> catalog.Release:
    return catalog.release("cert_manager", config.versions.cert_manager)


# The catalog's further images and the values key of each (the controller's is the top-level ``image``).
# The startupapicheck Job is a helm hook: Pulumi's helm.v4.Chart renders without hooks, so it is never pulled.
IMAGE_KEYS = ("webhook", "cainjector", "acmesolver")


def image_values(config: PlatformConfig, lock: ImageLock) -> dict[str, Any]:
    """``tag`` and ``digest`` of every image the chart renders, where the lock has its digest.

    Ref: cert-manager v1.21.1 templates/_helpers.tpl "cert-manager.image" (``:<tag>@<digest>`` when both are
    set); templates/deployment.yaml:89 (controller) and :117 (``--acme-http01-solver-image``),
    webhook-deployment.yaml:84, cainjector-deployment.yaml:79. The repository stays the chart's composition
    ``<imageRegistry>/<imageNamespace>/<image.name>``, which is the mirrored name the lock is keyed by.
    """
    pinned = release_of(config)
    out: dict[str, Any] = {}
    for key, image in (("image", pinned.installed()[2]), *((key, pinned.image_for(key)) for key in IMAGE_KEYS)):
        ref = pinned_image(config, image, lock)
        if ref.digest is None:
            continue
        pin = {"tag": ref.tag, "digest": ref.digest}
        if key == "image":
            out["image"] = pin
        else:
            out[key] = {"image": pin}
    return out


def values(config: PlatformConfig, lock: ImageLock | None = None) -> dict[str, Any]:
    pinned = release_of(config)
    registry, repository, _ = mirrored_parts(config, pinned.installed()[2])
    namespace = repository.rsplit("/", 1)[0]
    return {
        "crds": {"enabled": False},
        "imageRegistry": registry,
        "imageNamespace": namespace,
        **image_values(config, lock if lock is not None else ImageLock()),
        "global": {"leaderElection": {"namespace": pinned.namespace}},
    }


def chart_release(config: PlatformConfig, lock: ImageLock | None = None) -> ChartRelease:
    return pinned_chart(config, release_of(config), COMPONENT, values(config, lock))


def build(config: PlatformConfig, lock: ImageLock | None = None) -> Concern:
    """cert-manager's namespace, its network policies and its chart, where Trainyard installs it."""
    if not installed(config):
        return Concern("cert-manager")
    release = chart_release(config, lock)
    objects: list[Manifest] = []
    if not release.external:
        objects = [system_namespace(release.namespace, COMPONENT), *controller_policies(config, release.namespace, COMPONENT)]
    return Concern("cert-manager", objects=tuple(objects), releases=(release,))
