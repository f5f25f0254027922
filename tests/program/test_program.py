"""The Pulumi program under the SDK's mocks registers exactly the rendered manifests.

Runs ``platform/__main__.py`` as Pulumi would, with the stack's config, and checks that
every Kubernetes resource it registers is one rendered manifest (same type, same inputs),
one for one; that every resource names the explicit provider; and that CRDs and other
data-holding resources are retained on delete and protected as the stack says.
"""

from __future__ import annotations

import json
import runpy
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from tests.conftest import ROOT, rendered
from trainyard.components.kubernetes_object import KubernetesObject, type_token
from trainyard.manifests.lifecycle import holds_data
from trainyard.supply.lock import ImageLock, load_lock


@dataclass
class Registered:
    resources: list[pulumi.runtime.MockResourceArgs] = field(default_factory=list)


class Mocks(pulumi.runtime.Mocks):
    def __init__(self, registered: Registered) -> None:
        self.registered = registered

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.registered.resources.append(args)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


def registry_filled_lock(directory: Path) -> Path:
    """The committed lock as `trainyard images lock` leaves it after the mirror confirmed every digest.

    Same digests, so the render is unchanged; only the source says a registry reported them.
    The program refuses placeholders on stacks that protect data (test below).
    """
    lock = load_lock(ROOT / "images.lock.yaml")
    filled = ImageLock({key: replace(entry, source="registry") for key, entry in lock.entries.items()})
    path = directory / "images.lock.yaml"
    path.write_text(filled.dump())
    return path


DATA_CACHE = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.data-cache.yaml")


def stack_file(stack: str) -> Path:
    """A stack name (stacks/Pulumi.<name>.yaml) or the path of a fixture stack."""
    return Path(stack) if "/" in stack else ROOT / "stacks" / f"Pulumi.{stack}.yaml"


def run_program(stack: str, monkeypatch: pytest.MonkeyPatch,
                lock: str = "registry-filled") -> tuple[Registered, dict[str, dict[str, bool]]]:
    registered = Registered()
    options: dict[str, dict[str, bool]] = {}
    original = KubernetesObject.__init__

    def recording_init(self: KubernetesObject, manifest: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        meta = manifest["metadata"]
        key = f"{type_token(manifest)}:{meta.get('namespace', '')}/{meta['name']}"
        options[key] = {"protect": bool(opts and opts.protect), "retain_on_delete": bool(opts and opts.retain_on_delete)}
        original(self, manifest, opts)

    monkeypatch.setattr(KubernetesObject, "__init__", recording_init)
    platform_config = yaml.safe_load(stack_file(stack).read_text())["config"]["trainyard:platform"]
    if lock == "registry-filled":
        lock_dir = Path(tempfile.mkdtemp(prefix="trainyard-lock-"))
        platform_config.setdefault("images", {})["lock_file"] = str(registry_filled_lock(lock_dir))
    pulumi.runtime.set_mocks(Mocks(registered), project="trainyard", stack=stack_file(stack).stem.removeprefix("Pulumi."),
                             preview=False)
    pulumi.runtime.set_all_config({"trainyard:platform": json.dumps(platform_config)})

    @pulumi.runtime.test
    def program() -> None:
        runpy.run_path(str(ROOT / "platform" / "__main__.py"), run_name="__main__")

    program()
    return registered, options


def manifest_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{type_token(obj)}:{meta.get('namespace', '')}/{meta['name']}"


@pytest.mark.parametrize("stack", ["local", "prod", DATA_CACHE], ids=["local", "prod", "data-cache"])
def test_registered_kubernetes_resources_are_exactly_the_rendered_manifests(stack: str, monkeypatch: pytest.MonkeyPatch) -> None:
    platform = rendered(stack)
    registered, _ = run_program(stack, monkeypatch)
    kube = [r for r in registered.resources if r.typ.startswith("kubernetes:") and r.typ != "pulumi:providers:kubernetes"
            and not r.typ.startswith("kubernetes:helm")]
    got = {f"{r.typ}:{r.inputs['metadata'].get('namespace', '')}/{r.inputs['metadata']['name']}": r.inputs for r in kube}
    assert len(got) == len(kube), "two resources registered the same object"
    expected = {manifest_key(o): o for o in platform.all_objects}
    assert sorted(got) == sorted(expected)
    for key, inputs in got.items():
        assert json.loads(json.dumps(inputs)) == json.loads(json.dumps(expected[key])), key


@pytest.mark.parametrize("stack", ["local", "prod"])
def test_every_kubernetes_resource_uses_the_explicit_provider(stack: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rendered(stack)
    registered, _ = run_program(stack, monkeypatch)
    providers = [r for r in registered.resources if r.typ == "pulumi:providers:kubernetes"]
    assert [p.name for p in providers] == ["cluster"]
    assert providers[0].inputs.get("context") == yaml.safe_load(
        (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]["trainyard:platform"]["cluster"]["context"]
    for r in registered.resources:
        if r.typ.startswith("kubernetes:"):
            assert r.provider and "::cluster::" in r.provider, r.name


def test_charts_are_declared_only_for_controllers_that_are_not_external(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered("prod")
    prod, _ = run_program("prod", monkeypatch)
    assert sorted(r.name for r in prod.resources if r.typ == "kubernetes:helm.sh/v4:Chart") == [
        "cnpg", "gpu-operator", "jobset", "kueue", "mlflow", "trainer"]
    local, _ = run_program("local", monkeypatch)
    assert [r.name for r in local.resources if r.typ == "kubernetes:helm.sh/v4:Chart"] == []


@pytest.mark.parametrize(("stack", "protect"), [("prod", True), ("local", False)])
def test_data_holding_resources_are_retained_and_protected_as_the_stack_says(
    stack: str, protect: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform = rendered(stack)
    _, options = run_program(stack, monkeypatch)
    data = [manifest_key(o) for o in platform.all_objects if holds_data(o)]
    assert any(k.startswith("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition") for k in data)
    for key in data:
        assert options[key] == {"protect": protect, "retain_on_delete": True}, key
    for obj in platform.all_objects:
        if not holds_data(obj):
            assert options[manifest_key(obj)] == {"protect": False, "retain_on_delete": False}


def test_every_chart_is_declared_with_crds_skipped_and_trainyards_post_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 13: skipCrds does not reach CRDs a chart renders as templates (Kueue); the
    # post-renderer drops them, so the Crds group's CRDs are the only ones applied.
    from trainyard import post_render

    rendered("prod")
    prod, _ = run_program("prod", monkeypatch)
    command, args = post_render.command()
    charts = [r for r in prod.resources if r.typ == "kubernetes:helm.sh/v4:Chart"]
    assert charts
    for chart in charts:
        assert chart.inputs["skipCrds"] is True, chart.name
        assert chart.inputs["postRenderer"] == {"command": command, "args": args}, chart.name


def test_the_registered_post_renderer_leaves_no_crd_in_any_chart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs helm with exactly the registered Chart inputs (chart, version, values, post-renderer)."""
    from tests.charts.conftest import CHARTS_DIR, HELM, MISSING
    from trainyard import charts

    if MISSING is not None:
        pytest.skip(MISSING)
    assert CHARTS_DIR is not None and HELM is not None
    platform = rendered("prod")
    prod, _ = run_program("prod", monkeypatch)
    renderer = charts.ChartRenderer(CHARTS_DIR, HELM)
    try:
        for chart in (r for r in prod.resources if r.typ == "kubernetes:helm.sh/v4:Chart"):
            (release,) = [r for r in platform.releases if r.name == chart.name and r.version == chart.inputs["version"]]
            assert chart.inputs["values"] == json.loads(json.dumps(release.values))
            raw = charts.parse_manifests(renderer.render_text(release, chart.inputs["values"]))
            registered = (chart.inputs["postRenderer"]["command"], chart.inputs["postRenderer"]["args"])
            installed = charts.parse_manifests(renderer.render_text(release, chart.inputs["values"], post_renderer=registered))
            assert [o["kind"] for o in installed].count("CustomResourceDefinition") == 0, chart.name
            assert installed == [o for o in raw if o["kind"] != "CustomResourceDefinition"], chart.name
    finally:
        renderer.close()
def test_prod_refuses_placeholder_digests_and_declares_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered("prod")
    with pytest.raises(Exception, match=r"protects data and refuses images whose digest no registry reported") as caught:
        run_program("prod", monkeypatch, lock="committed")
    assert "registry.trainyard.internal/mirror/kueue/kueue:v0.19.2 has a placeholder digest" in str(caught.value)


def test_local_deploys_with_placeholder_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered("local")
    registered, _ = run_program("local", monkeypatch, lock="committed")
    assert any(r.typ.endswith(":ClusterTrainingRuntime") for r in registered.resources)
