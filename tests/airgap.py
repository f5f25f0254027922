"""The air-gap tests' shared parts: the local stack as an air-gapped site runs it, and a connected-side source
registry filled with small images for every image of its bill of materials (tests/registry/test_airgap.py,
tests/cluster/test_airgap_up.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import ROOT
from tests.oci_registry import Registry, layer
from trainyard.project import open_stack
from trainyard.rehearsal.stack import EXTERNAL, write_rehearsal_stack
from trainyard.supply.bom import Bom

MIRROR_HOST = "registry.trainyard.internal"
SOURCE_HOST = "connected.trainyard.test"
SOURCE_PREFIX = f"{SOURCE_HOST}/upstream/"


def airgap_overlay(crds: dict[str, Any] | None = None, charts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The local stack as an air-gapped site runs it: images and charts from its mirror, Kueue's chart installed
    (the other controllers stay external), serving off (its runtimes are pinned by digests no test can build)."""
    return {"serving": None,
            "images": {"registry_mirror": f"{MIRROR_HOST}/mirror/"},
            "charts": charts or {"mirror": f"oci://{MIRROR_HOST}/charts"},
            "crds": crds or {"source": "release"},
            "rehearsal": {"external_controllers": [c for c in EXTERNAL if c != "kueue"]}}


def write_stack(directory: Path, overlay: dict[str, Any], lock: Path) -> Path:
    """The local stack with ``overlay`` (and the image lock ``lock``), written as ``directory/Pulumi.local.yaml``."""
    path = directory / "Pulumi.local.yaml"
    overlay = {**overlay, "images": {**overlay["images"], "lock_file": str(lock)}}
    write_rehearsal_stack(open_stack("local", ROOT).path, path, overlay)
    return path


def fill_source(source: Registry, bom: Bom, work: Path) -> dict[str, str]:
    """One small image per BOM image at ``<source>/upstream/<upstream repository>:<tag>`` (the first a
    two-platform index); the BOM reference -> the digest the source serves."""
    work.mkdir(parents=True, exist_ok=True)
    digests = {}
    for index, image in enumerate(bom.images):
        upstream = image.upstream or image.reference
        repository = "upstream/" + upstream.split("/", 1)[1].rsplit(":", 1)[0]
        target = f"{source.address}/{repository}:{upstream.rsplit(':', 1)[1]}"
        if index == 0:
            children = []
            for arch in ("amd64", "arm64"):
                source.crane("append", "--insecure", "-f", str(layer(work, f"{upstream} {arch}")), "-t", f"{target}-{arch}")
                children.append(f"-m={target}-{arch}")
            source.crane("index", "append", "--insecure", "-t", target, *children)
        else:
            source.crane("append", "--insecure", "-f", str(layer(work, upstream)), "-t", target)
        digests[image.reference] = source.crane("digest", "--insecure", target)
    return digests


def registry_catalog(registry: Registry) -> list[str]:
    """The repositories a registry holds (``crane catalog``)."""
    return [line for line in registry.crane("catalog", "--insecure", registry.address).splitlines() if line]
