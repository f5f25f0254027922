"""The barman-cloud CNPG-I plugin, installed in the rehearsal cluster as a site installs it: upstream's manifest.

Trainyard declares what a Cluster's backups need from the plugin (the ``ObjectStore``, the Cluster's ``plugins``
entry, a ``ScheduledBackup``: ``manifests/mlflow.py``) and the NetworkPolicy that lets the CloudNativePG operator
reach it, but not the plugin itself: it is a site prerequisite (docs/components/cnpg.md, "Backups"), as upstream
installs it, with ``kubectl apply -f manifest.yaml``. The rehearsal with real nodes is the site here, so where the
stack declares backups and installs CloudNativePG (``wanted``), ``Rehearsal.deploy`` does what a site would, from
``manifest.yaml`` of github.com/cloudnative-pg/plugin-barman-cloud (``tools/build.sh barman-cloud`` copies it to
``share/``; v0.14.0 stands in for v0.15.0: ``barman_cloud_image.STAND_INS``):

- **before** ``pulumi up``, as docs/components/cnpg.md asks of a site ("install the plugin before enabling
  backups"): the manifest's ``ObjectStore`` CRD (the stack's ObjectStore cannot be applied without it; it is the
  running plugin's own, not the catalog's v0.15.0 document the conformance tier checks, which differs from it in one
  description), then the operator's namespace ``cnpg-system`` (the stack declares it too: its server-side apply adopts
  it, and adds its labels) and the rest of the manifest,
  unchanged but where a site must change it: the Deployment's image and the ``SIDECAR_IMAGE`` its Secret holds name
  the factory's two images under the stack's mirror by digest (``barman_cloud_image.py``), and the pod gets the
  stack's ``system_pods`` placement, as every platform pod. Its two ``Certificate``\\ s (the mTLS between operator and
  plugin) are issued by the rehearsal's cert-manager stand-in (``cert_standin.py``), self-signed as upstream's
  ``selfsigned-issuer`` asks: the plugin trusts exactly the client's ``tls.crt`` (``--client-cert``), and Go's TLS
  client only sends a certificate whose issuer the server names, so a CA-signed one would never be sent. The plugin's
  Deployment is checked Available with every Deployment of ``cnpg-system`` (``Rehearsal.wait_platform_ready``).

Until the plugin's Service is there, the operator keeps the Cluster in "Cluster cannot proceed to reconciliation due
to an unknown plugin being required" and looks again every 10 s (cloudnative-pg v1.30.0
``internal/controller/cluster_controller.go``: ``ErrUnknownPlugin`` -> ``RequeueAfter: 10 * time.Second``). The
plugin was installed after ``pulumi up`` until the MLflow chart ran in the rehearsal: ``pulumi up`` then waits for
MLflow's Deployment, whose init container waits for the database, which waits for the plugin, so the up never ended
(seen on the node tier, 2026-12-07). A site installs the plugin first; so does the rehearsal now.

Everything is applied by server-side apply under ``FIELD_MANAGER`` and labelled ``trainyard.dev/rehearsal:
backups``; the cluster's ``down`` removes it with the cluster. The images are pinned by the digest the factory built
and the loopback registry reported (they are not in the stack's lock: the stack does not run them).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.rehearsal import site_manifests
from trainyard.rehearsal.settings import ClusterError

TOOL = "barman-cloud"  # tools/build.sh: the binary and share/barman-cloud/
MANIFEST = "manifest.yaml"
FIELD_MANAGER = site_manifests.FIELD_MANAGER
PURPOSE = "backups"
LABEL = {site_manifests.LABEL_KEY: PURPOSE}
DEPLOYMENT = "barman-cloud"  # manifest.yaml's Deployment and Service (cnpg.io/pluginName annotations)
SIDECAR_KEY = "SIDECAR_IMAGE"
CRD_NAME = "objectstores.barmancloud.cnpg.io"
Manifest = dict[str, Any]


def wanted(config: PlatformConfig, real_nodes: bool) -> bool:
    """A rehearsal with real nodes, of a stack whose MLflow database is backed up and whose CloudNativePG runs here."""
    return (real_nodes and config.mlflow.enabled and config.mlflow.backup.enabled
            and "cnpg" not in config.rehearsal.external_controllers)


def manifest_path(tools_dir: Path) -> Path:
    return site_manifests.share_path(tools_dir, TOOL, MANIFEST)


def upstream_objects(tools_dir: Path) -> list[Manifest]:
    """Upstream's manifest, parsed (refused with the command that provides it where absent)."""
    return site_manifests.documents(tools_dir, TOOL, MANIFEST)


def crd(objects: Sequence[Manifest]) -> Manifest:
    """The manifest's ObjectStore CRD."""
    found = [o for o in objects if o["kind"] == "CustomResourceDefinition" and o["metadata"]["name"] == CRD_NAME]
    if len(found) != 1:
        raise ClusterError(f"{MANIFEST}: {len(found)} CRDs named {CRD_NAME}, expected one")
    return _labelled(copy.deepcopy(found[0]))


def _labelled(obj: Manifest) -> Manifest:
    return site_manifests.labelled(obj, PURPOSE)


def namespace(objects: Sequence[Manifest]) -> str:
    return str(_deployment(objects)["metadata"]["namespace"])


def _deployment(objects: Sequence[Manifest]) -> Manifest:
    found = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == DEPLOYMENT]
    if len(found) != 1:
        raise ClusterError(f"{MANIFEST}: {len(found)} Deployments named {DEPLOYMENT}, expected one")
    return found[0]


def plugin_objects(config: PlatformConfig, objects: Sequence[Manifest], plugin_image: str,
                   sidecar_image: str) -> list[Manifest]:
    """The operator's namespace and the manifest's objects but its CRD, with the mirror's images and the stack's
    placement; refused where the manifest is not laid out as upstream's (one Deployment whose ``SIDECAR_IMAGE`` comes
    from one Secret)."""
    expected = catalog.release("cnpg", config.versions.cnpg).namespace
    if namespace(objects) != expected:
        raise ClusterError(f"{MANIFEST}: the plugin's Deployment is in {namespace(objects)!r}; the operator only finds "
                           f"plugins in its own namespace {expected!r}")
    # The namespace first (a site installs the plugin before the stack's `pulumi up`, which adopts the namespace).
    out = [_labelled({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": expected}}),
           *(_labelled(copy.deepcopy(o)) for o in objects if o["kind"] != "CustomResourceDefinition")]
    deployment = _deployment(out)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    container["image"] = plugin_image
    sources = [e["valueFrom"]["secretKeyRef"] for e in container.get("env", [])
               if e["name"] == SIDECAR_KEY and "secretKeyRef" in e.get("valueFrom", {})]
    if len(sources) != 1:
        raise ClusterError(f"{MANIFEST}: the Deployment takes {SIDECAR_KEY} from {len(sources)} Secrets, expected one")
    (secret,) = [o for o in out if o["kind"] == "Secret" and o["metadata"]["name"] == sources[0]["name"]]
    secret["data"] = {**secret.get("data", {}), sources[0]["key"]: base64.b64encode(sidecar_image.encode()).decode()}
    site_manifests.place(pod, config)
    return out
