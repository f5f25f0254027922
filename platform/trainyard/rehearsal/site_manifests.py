"""What the rehearsal installs as the site, from upstream's own manifests: where they are, and how they are marked.

A site brings some things Trainyard does not declare: the Prometheus its ServiceMonitors are for
(``prometheus_install.py``, from prometheus-operator's ``bundle.yaml``) and the barman-cloud plugin its backups go
through (``barman_cloud_install.py``, from the plugin's ``manifest.yaml``). The rehearsal with real nodes plays that
site, installing each from the manifest ``tools/build.sh`` copied out of the upstream module into the tools cache's
``share/``, applied under one field manager and labelled with what it is for, so that nothing of it is mistaken for
the stack's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainyard import yamlio
from trainyard.config.model import PlatformConfig
from trainyard.manifests.placement import pod_placement
from trainyard.rehearsal.settings import ClusterError

FIELD_MANAGER = "trainyard-rehearsal-site"
LABEL_KEY = "trainyard.dev/rehearsal"
Manifest = dict[str, Any]


def share_path(tools_dir: Path, tool: str, name: str) -> Path:
    return tools_dir / "share" / tool / name


def documents(tools_dir: Path, tool: str, name: str, loader: type[yaml.SafeLoader] = yamlio.SafeLoader) -> list[Manifest]:
    """The documents of ``share/<tool>/<name>`` (refused, with the command that provides it, where absent)."""
    path = share_path(tools_dir, tool, name)
    if not path.is_file():
        raise ClusterError(f"{path} not found: run `tools/build.sh {tool}` (it copies {name} out of the upstream module)")
    return [doc for doc in yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader) if doc]


def place(pod: Manifest, config: PlatformConfig) -> None:
    """The stack's ``system_pods`` placement added to an upstream pod spec (changed in place), as every platform pod
    gets it: its node selector merged into the pod's own, its tolerations where the stack sets any."""
    placement = pod_placement(config)
    pod["nodeSelector"] = {**pod.get("nodeSelector", {}), **placement.get("nodeSelector", {})}
    if "tolerations" in placement:
        pod["tolerations"] = placement["tolerations"]


def labelled(obj: Manifest, purpose: str) -> Manifest:
    """``obj`` (changed in place) with the rehearsal's label saying what the site installed it for."""
    obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}), LABEL_KEY: purpose}
    return obj
