"""Shared fixtures: the project root, the upstream CRD mirror, loaded and rendered stacks.

The CRD mirror is found through TRAINYARD_CRDS_DIR (default: ../shared/crds next to the
project). Tests that need it skip, saying why, where it is absent (a user's fresh clone).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainyard.manifests import RenderedPlatform
from trainyard.project import Stack, open_stack

ROOT = Path(__file__).resolve().parents[1]
STACKS = ("local", "staging", "prod")


def crds_dir() -> Path | None:
    candidate = Path(os.environ.get("TRAINYARD_CRDS_DIR") or ROOT.parent / "shared" / "crds")
    return candidate if (candidate / "kueue").is_dir() else None


CRDS_DIR = crds_dir()
if CRDS_DIR is not None:
    os.environ["TRAINYARD_CRDS_DIR"] = str(CRDS_DIR)

needs_crds = pytest.mark.skipif(
    CRDS_DIR is None,
    reason="upstream CRD mirror not found: set TRAINYARD_CRDS_DIR (default ../shared/crds) to run this test",
)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def crds() -> Path:
    if CRDS_DIR is None:
        pytest.skip("upstream CRD mirror not found: set TRAINYARD_CRDS_DIR (default ../shared/crds)")
    return CRDS_DIR


_rendered_cache: dict[str, RenderedPlatform] = {}


def stack(name: str) -> Stack:
    return open_stack(name, ROOT)


def rendered(name: str) -> RenderedPlatform:
    if CRDS_DIR is None:
        pytest.skip("upstream CRD mirror not found: set TRAINYARD_CRDS_DIR (default ../shared/crds)")
    if name not in _rendered_cache:
        _rendered_cache[name] = stack(name).render()
    return _rendered_cache[name]
