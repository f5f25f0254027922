"""Chart truth: every chart release of every stack, rendered from the upstream chart with exactly
Trainyard's values, does what those values say.

Parametrised over ``RenderedPlatform.releases`` of each stack, so a chart a concern adds is
covered by being declared. Each case renders with the helm built by ``tools/build.sh helm``
from ../shared/charts (``TRAINYARD_CHARTS_DIR``) and the options Pulumi's ``helm.v4.Chart``
uses (``trainyard.charts``); the checks live in ``trainyard.review.chart_truth`` so that
``trainyard charts STACK`` reports the same. Run with ``-s`` to see each chart's summary.

"Read" means: changing that one leaf changes the rendered output. A value that matters only
under another setting Trainyard leaves off is unread too, and should not be set.
"""

from __future__ import annotations

import copy
import shutil
import time
from typing import Any

import pytest

from tests.charts.conftest import CHARTS_DIR, HELM, MISSING, Renderers
from tests.conftest import CRDS_DIR, STACKS, rendered, stack
from trainyard import catalog, chart_probes, charts, post_render
from trainyard.manifests.chart_release import ChartRelease
from trainyard.review import chart_truth
from trainyard.review.chart_truth import ChartTruth, check_release, format_summary
from trainyard.schemas import Validator


def _cases() -> list[Any]:
    if CRDS_DIR is None:
        return [pytest.param("-", "-", marks=pytest.mark.skip(reason="upstream CRD mirror not found: set TRAINYARD_CRDS_DIR"))]
    return [pytest.param(name, r.name, id=f"{name}-{r.name}") for name in STACKS for r in rendered(name).releases]


CASES = _cases()
_truths: dict[tuple[str, str], ChartTruth] = {}
_timings: dict[tuple[str, str], float] = {}
_validators: list[Validator] = []


def validator() -> Validator:
    """One strict validator for the session (loading the CRD mirror's schemas is the slow part)."""
    if not _validators:
        assert CRDS_DIR is not None
        _validators.append(Validator(CRDS_DIR))
    return _validators[0]


def release_of(stack_name: str, release_name: str) -> ChartRelease:
    return next(r for r in rendered(stack_name).releases if r.name == release_name)


def truth(renderers: Renderers, stack_name: str, release_name: str) -> ChartTruth:
    key = (stack_name, release_name)
    if key not in _truths:
        started = time.perf_counter()
        _truths[key] = check_release(stack_name, stack(stack_name).config, rendered(stack_name),
                                     release_of(stack_name, release_name), renderers(stack_name), validator())
        _timings[key] = time.perf_counter() - started
        print(f"\n{format_summary(_truths[key])}\n  ({_timings[key]:.1f}s)")
    return _truths[key]


def test_every_stack_installs_the_charts_the_controllers_need() -> None:
    if CRDS_DIR is None:
        pytest.skip("upstream CRD mirror not found: set TRAINYARD_CRDS_DIR")
    for name in STACKS:
        assert {"jobset", "kueue", "kubeflow-trainer"} <= {r.chart_name for r in rendered(name).releases}, name


@pytest.mark.parametrize(("stack_name", "release_name"), CASES)
def test_images_come_from_the_stacks_mirror_at_the_pinned_tag(renderers: Renderers, stack_name: str, release_name: str) -> None:
    report = truth(renderers, stack_name, release_name)
    assert report.images, "the chart renders no container image"
    assert report.problems["images"] == []


@pytest.mark.parametrize(("stack_name", "release_name"), CASES)
def test_the_chart_installs_no_crds_and_every_crd_it_renders_is_declared_by_trainyard(
    renderers: Renderers, stack_name: str, release_name: str
) -> None:
    report = truth(renderers, stack_name, release_name)
    assert [o for o in report.rendered.objects if o["kind"] == "CustomResourceDefinition"] == []
    assert report.problems["crds"] == []
    assert report.problems["post-renderer"] == [], "helm's run of the post-renderer must match the in-process filter"


@pytest.mark.parametrize(("stack_name", "release_name"), CASES)
def test_the_modes_trainyard_sets_are_set(renderers: Renderers, stack_name: str, release_name: str) -> None:
    assert truth(renderers, stack_name, release_name).problems["modes"] == []


@pytest.mark.parametrize(("stack_name", "release_name"), CASES)
def test_every_value_path_trainyard_sets_is_read_by_the_chart(renderers: Renderers, stack_name: str, release_name: str) -> None:
    report = truth(renderers, stack_name, release_name)
    assert report.probes.probes, "Trainyard sets no values on this chart"
    assert report.problems["unread values"] == []


@pytest.mark.parametrize(("stack_name", "release_name"), CASES)
def test_the_chart_output_passes_the_strict_schemas(renderers: Renderers, stack_name: str, release_name: str) -> None:
    assert truth(renderers, stack_name, release_name).problems["schemas"] == []


def test_kueue_renders_its_crds_as_templates_and_the_post_renderer_drops_every_one(renderers: Renderers) -> None:
    # The reason for the post-renderer (issue 13): skipCrds does not reach templates/crd/.
    report = truth(renderers, "prod", "kueue")
    declared = sorted(c["metadata"]["name"] for c in rendered("prod").crds if c["spec"]["group"] == "kueue.x-k8s.io")
    assert sorted(o["metadata"]["name"] for o in report.rendered.dropped) == declared


# ------------------------------------------------------------ the checks can fail


def _kueue(stack_name: str = "prod") -> ChartRelease:
    return release_of(stack_name, "kueue")


def test_seaweedfs_without_trainyards_master_toml_is_reported(renderers: Renderers) -> None:
    # The chart's default master.config is a comment: weed then grows 7 volumes per bucket (its default).
    release = release_of("staging", "seaweedfs")
    values: dict[str, Any] = copy.deepcopy(release.values)
    values["master"]["config"] = "# Enter any extra configuration for master.toml here."
    problems = chart_truth.MODE_CHECKS["seaweedfs"](stack("staging").config, renderers("staging").render(release, values))
    assert problems == [f"master.volume_growth.{k} is None, not 1" for k in ("copy_1", "copy_2", "copy_3", "copy_other")]


def test_mlflow_with_the_charts_own_probes_workers_and_job_runner_is_reported(renderers: Renderers) -> None:
    # The chart's defaults: liveness 10 s + 5 x 30 s, MLflow's 4 workers, the job runner on (MLflow's default).
    release = release_of("staging", "mlflow")
    values: dict[str, Any] = copy.deepcopy(release.values)
    del values["livenessProbe"], values["extraArgs"], values["extraEnvVars"]["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"]
    config = stack("staging").config.model_copy(
        update={"mlflow": stack("staging").config.mlflow.model_copy(update={"workers": 2})})
    problems = chart_truth.MODE_CHECKS["mlflow"](config, renderers("staging").render(release, values))
    assert problems[0].startswith("the server's args lack --workers=2")
    assert problems[1:] == ["MLFLOW_SERVER_ENABLE_JOB_EXECUTION is None, not 'false'",
                            "the liveness probe restarts a server not healthy after 160 s (under 330 s)"]


def test_a_misspelt_value_path_is_reported_unread(renderers: Renderers) -> None:
    release = _kueue()
    values: dict[str, Any] = copy.deepcopy(release.values)
    # "imagee" for "image": Helm ignores unknown keys; the chart keeps its default image.
    values["controllerManager"]["manager"]["imagee"] = values["controllerManager"]["manager"].pop("image")
    values["managerConfig"]["controllerManagerConfigYml"] = values["managerConfig"].pop("controllerManagerConfigYaml")
    report = chart_probes.probe_values(renderers("prod"), release, values)
    assert sorted(p.path for p in report.unread) == [
        "controllerManager.manager.imagee.pullPolicy",
        "controllerManager.manager.imagee.repository",
        "controllerManager.manager.imagee.tag",
        "managerConfig.controllerManagerConfigYml",
    ]


def test_a_value_the_chart_reads_is_reported_read_with_its_evidence(renderers: Renderers) -> None:
    values = {"controllerManager": {"manager": {"image": {"tag": "v0.19.2"}}}}
    report = chart_probes.probe_values(renderers("prod"), _kueue(), values)
    (probe,) = report.probes
    assert probe.read and "manager/manager.yaml" in probe.evidence and "image:" in probe.evidence


def test_an_image_outside_the_mirror_and_an_unpinned_tag_are_reported(renderers: Renderers) -> None:
    from trainyard.review.chart_truth import image_problems

    config = stack("prod").config
    images = ["registry.k8s.io/kueue/kueue:v0.19.2", "registry.trainyard.internal/mirror/x:main"]
    problems = image_problems(config, _kueue(), images)
    assert any("not from the stack's mirror" in p for p in problems)
    assert any("not pinned (tag main)" in p for p in problems)
    assert any("controller image registry.trainyard.internal/mirror/kueue/kueue:v0.19.2" in p for p in problems)


def test_a_crd_the_chart_installs_or_trainyard_does_not_declare_is_reported() -> None:
    from trainyard.review.chart_truth import crd_problems

    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "x.example.com"}}
    leaked = charts.RenderedChart(_kueue(), {}, objects=(crd,), dropped=(crd,))
    problems = crd_problems(rendered("prod"), leaked)
    assert any("the post-renderer must drop it" in p for p in problems)
    assert any("Trainyard does not declare" in p for p in problems)


def test_the_post_renderer_drops_crds_and_keeps_every_other_document_byte_for_byte() -> None:
    stream = ("---\n# Source: a.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: '01'\n"
              "---\n# Source: crd.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
              "metadata:\n  name: x.example.com\n"
              "--- # trailing comment\napiVersion: v1\nkind: Service\nmetadata:\n  name: b\n")
    out = post_render.filter_manifests(stream)
    assert "CustomResourceDefinition" not in out
    assert "---\n# Source: a.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: '01'\n" in out
    assert "kind: Service" in out


def test_a_chart_that_differs_from_the_pinned_listing_is_refused(tmp_path: Any) -> None:
    if MISSING is not None:
        pytest.skip(MISSING)
    assert CHARTS_DIR is not None and HELM is not None
    shutil.copytree(CHARTS_DIR / "kueue" / "0.19.2", tmp_path / "kueue" / "0.19.2")
    values = tmp_path / "kueue" / "0.19.2" / "values.yaml"
    values.write_text(values.read_text() + "\n# edited\n")
    renderer = charts.ChartRenderer(tmp_path, HELM)
    try:
        with pytest.raises(charts.ChartUnavailable, match=r"does not match the pinned listing hash of kueue/0\.19\.2"):
            renderer.render(_kueue())
    finally:
        renderer.close()


def test_a_dependency_missing_from_the_mirror_is_an_error_when_enabled(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    if MISSING is not None:
        pytest.skip(MISSING)
    parent = tmp_path / "mirror" / "parent" / "1.0.0"
    (parent / "templates").mkdir(parents=True)
    (parent / "Chart.yaml").write_text("apiVersion: v2\nname: parent\nversion: 1.0.0\ndependencies:\n"
                                       "- name: absent\n  version: 2.0.0\n  condition: absent.enabled\n")
    (parent / "values.yaml").write_text("absent:\n  enabled: false\n")
    (parent / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.name }}\n")
    monkeypatch.setitem(catalog.CHART_LISTINGS, "parent/1.0.0", charts.listing_sha256(tmp_path / "mirror", parent))
    assert HELM is not None
    renderer = charts.ChartRenderer(tmp_path / "mirror", HELM)
    try:
        release = ChartRelease(name="p", component="parent", chart="parent", version="1.0.0", namespace="ns",
                               values={"name": "cm"})
        assert renderer.render(release).stubs == ("absent",)
        with pytest.raises(charts.ChartUnavailable, match="dependency absent is enabled"):
            renderer.render(release, {"name": "cm", "absent": {"enabled": True}})
    finally:
        renderer.close()


def test_chart_truth_timings(renderers: Renderers) -> None:
    """Not an assertion on time: prints what the tier costs (run with -s)."""
    for name, release_name in [(c.values[0], c.values[1]) for c in CASES]:
        truth(renderers, name, release_name)
    total = sum(_timings.values())
    print(f"\nchart truth: {len(_truths)} releases, {renderers.helm_runs} helm renders, {total:.1f}s")


@pytest.mark.parametrize("stack_name", [s for s in STACKS if "trainer" not in stack(s).config.rehearsal.external_controllers])
def test_the_sdk_version_configmap_trainyard_builds_equals_the_trainer_charts(renderers: Renderers, stack_name: str) -> None:
    """``installs.trainer_public`` (what the rehearsal applies where it runs Trainer itself) is the chart's own three
    objects: same names, namespace, data, rules, roleRef and subjects (labels differ: the chart's are Helm's)."""
    from trainyard.manifests.installs import TRAINER_PUBLIC, trainer_public

    release = next(r for r in rendered(stack_name).releases if r.component == "trainer")
    chart = {(o["kind"], o["metadata"]["name"]): o for o in renderers(stack_name).render(release).objects}

    def essence(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return {"kind": obj["kind"], "name": meta["name"], "namespace": meta.get("namespace", release.namespace),
                **{k: obj[k] for k in ("data", "rules", "roleRef", "subjects") if k in obj}}

    ours = trainer_public(stack(stack_name).config)
    assert [essence(o) for o in ours] == [essence(chart[(o["kind"], TRAINER_PUBLIC)]) for o in ours]
