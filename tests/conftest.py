"""Shared fixtures: the project root, the upstream CRD mirror, loaded and rendered stacks.

The CRD mirror is found through TRAINYARD_CRDS_DIR (default: ../shared/crds next to the
project). Tests that need it skip, saying why, where it is absent (a user's fresh clone).
The barman-cloud plugin's ObjectStore CRD, which the mirror lacks, through TRAINYARD_BARMAN_CLOUD_CRD
(default: where `tools/build.sh barman-cloud-crd` copies it in the tools cache); likewise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainyard.manifests import RenderedPlatform
from trainyard.manifests.meta import Manifest
from trainyard.project import Stack, open_stack
from trainyard.schemas import barman_cloud_crd_path

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


# Not in the mirror: fetched from the plugin's pinned Go module into the tools cache (docs/tools.md).
BARMAN_CLOUD_CRD = barman_cloud_crd_path()


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def crds() -> Path:
    if CRDS_DIR is None:
        pytest.skip("upstream CRD mirror not found: set TRAINYARD_CRDS_DIR (default ../shared/crds)")
    return CRDS_DIR


@pytest.fixture(scope="session")
def barman_cloud_crd() -> Manifest:
    """The plugin's ObjectStore CRD, verified against catalog.BARMAN_CLOUD_CRD (a drifted file fails, not skips)."""
    from trainyard.schemas import barman_cloud_crd

    if not BARMAN_CLOUD_CRD.is_file():
        pytest.skip(f"barman-cloud ObjectStore CRD not found at {BARMAN_CLOUD_CRD}: run `tools/build.sh barman-cloud-crd` "
                    "(or set TRAINYARD_BARMAN_CLOUD_CRD)")
    return barman_cloud_crd(BARMAN_CLOUD_CRD)


_rendered_cache: dict[str, RenderedPlatform] = {}


def stack(name: str) -> Stack:
    return open_stack(name, ROOT)


def rendered(name: str) -> RenderedPlatform:
    if CRDS_DIR is None:
        pytest.skip("upstream CRD mirror not found: set TRAINYARD_CRDS_DIR (default ../shared/crds)")
    if name not in _rendered_cache:
        _rendered_cache[name] = stack(name).render()
    return _rendered_cache[name]


# In CI the tiers that need the platform tools run after those tools were built (.ci/run): there a skip (a tool, a
# package or a kernel feature missing) would pass unseen, so ``TRAINYARD_FAIL_ON_SKIP=1`` makes it a failure that
# names why. Off by default: on a newcomer's machine a tier without its tools skips, saying so.
FAIL_ON_SKIP = os.environ.get("TRAINYARD_FAIL_ON_SKIP") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if FAIL_ON_SKIP and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where CI needs it to run (TRAINYARD_FAIL_ON_SKIP=1): {reason}"
    return None
