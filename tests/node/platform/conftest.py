"""One deployment of the local stack on a real node for every module of this package (issue #22 item 7: each module
deployed the whole platform on its own control plane and node, ~4-5 min each).

``live`` is the rehearsal ``make up`` starts, with the MLflow database and backups and the site's Prometheus declared
(``shared.OVERRIDES``): the control plane, node-0, ``pulumi up``, every controller, the PostgreSQL Cluster and the
Prometheus Ready. Its modules run in the order of ``ORDER``, which is the story a platform team lives: the platform
installed and used, monitored, the lab trained on it and its adapter served, its database backed up and restored, then faults and
``pulumi destroy`` last, since they take the platform down. A module not listed is refused (it would run at an
arbitrary point of that story).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.one_node import deployed_platform
from tests.node.platform.shared import OVERRIDES, TIMINGS, TOOLS
from trainyard.rehearsal.session import Rehearsal

ORDER = ("test_controllers", "test_monitoring", "test_lab", "test_serving", "test_postgres", "test_faults_and_destroy")
HERE = Path(__file__).parent


@pytest.fixture(scope="package")
def live(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Rehearsal]:
    failed_before = request.session.testsfailed
    with deployed_platform(tmp_path_factory, "platform", TOOLS, TIMINGS,
                           "then every controller, the Cluster, the operator and the Prometheus Ready",
                           OVERRIDES, failed=lambda: request.session.testsfailed > failed_before) as session:
        yield session


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """This package's tests in ``ORDER`` of their modules (each module's own order kept), where pytest put them."""
    places = [n for n, item in enumerate(items) if item.path.parent == HERE]
    unknown = sorted({items[n].path.name for n in places if items[n].path.stem not in ORDER})
    if unknown:
        raise pytest.UsageError(f"{HERE}: {', '.join(unknown)} not in conftest.ORDER (where in the story does it run?)")
    ordered = sorted((items[n] for n in places), key=lambda item: ORDER.index(item.path.stem))
    for n, item in zip(places, ordered, strict=True):
        items[n] = item
