"""Fixtures for the chart-truth tier: the chart mirror, the built helm, one renderer per stack.

The charts are found through TRAINYARD_CHARTS_DIR (default ../shared/charts next to the
project) and helm through TRAINYARD_HELM or the tools cache (`tools/build.sh helm`). Tests
skip, saying which is missing, where either is absent.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import ROOT, rendered
from trainyard import charts

CHARTS_DIR = charts.charts_dir(ROOT)
HELM = charts.helm_binary()
MISSING = (
    "upstream chart mirror not found: set TRAINYARD_CHARTS_DIR (default ../shared/charts)" if CHARTS_DIR is None
    else "helm not built: run `make helm` (tools/build.sh helm), or set TRAINYARD_HELM" if HELM is None
    else None
)


class Renderers:
    """One ChartRenderer per stack (each sees its own stack's CRDs as installed APIs), cached for the session."""

    def __init__(self) -> None:
        self._by_stack: dict[str, charts.ChartRenderer] = {}

    def __call__(self, stack: str) -> charts.ChartRenderer:
        if MISSING is not None:
            pytest.skip(MISSING)
        assert CHARTS_DIR is not None and HELM is not None
        if stack not in self._by_stack:
            self._by_stack[stack] = charts.ChartRenderer(CHARTS_DIR, HELM, api_versions=charts.api_versions(rendered(stack).crds))
        return self._by_stack[stack]

    def close(self) -> None:
        for renderer in self._by_stack.values():
            renderer.close()

    @property
    def helm_runs(self) -> int:
        return sum(r.helm_runs for r in self._by_stack.values())


@pytest.fixture(scope="session")
def renderers() -> Iterator[Renderers]:
    if MISSING is not None:
        pytest.skip(MISSING)
    made = Renderers()
    yield made
    made.close()
