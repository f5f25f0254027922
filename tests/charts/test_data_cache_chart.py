"""Chart truth with the data cache on: the Trainer chart of the data-cache fixture stack.

The three main stacks leave the cache off (their Trainer release is covered by test_chart_truth.py,
and ``_trainer_modes`` there fails if the LWS controller or the initializer's ClusterRole appear).
Here the Trainer chart renders with ``dataCache.enabled`` and the LWS subchart's image pinned: every
value is read, images come from the mirror pinned, the output passes the strict schemas, exactly
one LWS controller is installed, and Helm's condition semantics are shown on the real chart.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.charts.conftest import Renderers
from tests.conftest import ROOT, rendered, stack
from trainyard import chart_probes
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.data_cache import CHART_CLUSTER_ROLE
from trainyard.review.chart_truth import check_release, format_summary
from trainyard.schemas import Validator

FIXTURE = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.data-cache.yaml")


def trainer() -> ChartRelease:
    return next(r for r in rendered(FIXTURE).releases if r.name == "trainer")


def lws_controllers(objects: Any) -> list[str]:
    return [o["metadata"]["name"] for o in objects if o["kind"] == "Deployment" and "lws" in o["metadata"]["name"]]


def test_the_trainer_chart_with_the_cache_on_passes_chart_truth(renderers: Renderers, crds: Any) -> None:
    report = check_release("data-cache", stack(FIXTURE).config, rendered(FIXTURE), trainer(), renderers(FIXTURE),
                           Validator(crds))
    print(f"\n{format_summary(report)}")
    assert report.ok, report.problems
    assert {p.path for p in report.probes.read} >= {"dataCache.enabled", "lws.image.manager.repository",
                                                    "lws.image.manager.tag", "lws.image.manager.pullPolicy"}
    assert lws_controllers(report.rendered.objects) == ["trainer-lws-controller-manager"]
    assert any(o["kind"] == "ClusterRole" and o["metadata"]["name"] == CHART_CLUSTER_ROLE for o in report.rendered.objects)
    assert "registry.trainyard.internal/mirror/lws/lws:v0.8.0@sha256:" in " ".join(report.images)


def test_dataCache_lws_install_false_does_not_remove_the_subchart(renderers: Renderers) -> None:
    # Chart.yaml: condition "dataCache.enabled,dataCache.lws.install". Helm takes the first path that holds
    # a bool (helm v3.22.0 pkg/chartutil/dependencies.go processDependencyConditions), so with
    # dataCache.enabled true the second is never read: LWS cannot be installed on its own beside it.
    values: dict[str, Any] = copy.deepcopy(trainer().values)
    values["dataCache"]["lws"] = {"install": False}
    objects = renderers(FIXTURE).render(trainer(), values).objects
    assert lws_controllers(objects) == ["trainer-lws-controller-manager"]
    # The chart-truth probe reports the path as unread, which is why Trainyard does not set it.
    report = chart_probes.probe_values(renderers(FIXTURE), trainer(), {"dataCache": {"enabled": True, "lws": {"install": False}}})
    assert [p.path for p in report.unread] == ["dataCache.lws.install"]


def test_the_lws_crd_is_declared_by_trainyard_and_not_installed_by_the_chart(renderers: Renderers) -> None:
    # The subchart keeps its CRD in crds/, which Trainyard's installs skip (skipCrds); Trainyard declares it.
    report = renderers(FIXTURE).render(trainer())
    assert [o for o in report.all_objects if o["kind"] == "CustomResourceDefinition"] == []
    assert "leaderworkersets.leaderworkerset.x-k8s.io" in {c["metadata"]["name"] for c in rendered(FIXTURE).crds}
    assert "leaderworkersets.leaderworkerset.x-k8s.io" not in {c["metadata"]["name"] for c in rendered("prod").crds}
