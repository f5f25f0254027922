"""The Pulumi program under the SDK's mocks registers exactly the rendered manifests.

Runs ``platform/__main__.py`` as Pulumi would, with the stack's config, and checks that
every Kubernetes resource it registers is one rendered manifest (same type, same inputs),
one for one; that every resource names the explicit provider; and that CRDs and other
data-holding resources are retained on delete and protected as the stack says.
"""

from __future__ import annotations

import hashlib
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
from trainyard.manifests.generated import names_in, substitute
from trainyard.manifests.lifecycle import holds_data
from trainyard.supply.lock import ImageLock, load_lock

DYNAMIC = "pulumi-python:dynamic:Resource"
# How a secret travels to the engine (and to mocks): {SIG: SECRET_SIG, "value": ...}.
# Ref: sdk/python/lib/pulumi/runtime/rpc.py (_special_sig_key, _special_secret_sig).
SIG, SECRET_SIG = "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"


def unwrap_secrets(value: Any) -> tuple[Any, bool]:
    """(the value with secret wrappers removed, whether any part of it was secret)."""
    if isinstance(value, dict):
        if value.get(SIG) == SECRET_SIG:
            return unwrap_secrets(value["value"])[0], True
        items = {k: unwrap_secrets(v) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, any(secret for _, secret in items.values())
    if isinstance(value, list):
        pairs = [unwrap_secrets(v) for v in value]
        return [v for v, _ in pairs], any(secret for _, secret in pairs)
    return value, False


@dataclass
class Registered:
    resources: list[pulumi.runtime.MockResourceArgs] = field(default_factory=list)
    # What the mock "generated" for each generated-value resource, by name.
    generated: dict[str, str] = field(default_factory=dict)


class Mocks(pulumi.runtime.Mocks):
    def __init__(self, registered: Registered) -> None:
        self.registered = registered

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.registered.resources.append(args)
        outputs = dict(args.inputs)
        if args.typ == DYNAMIC:
            # Stands in for the provider's create: a value that is recognisably this name's.
            outputs["value"] = "mockgen" + hashlib.sha256(args.name.encode()).hexdigest()[:24]
            self.registered.generated[args.name] = outputs["value"]
        return f"{args.name}-id", outputs

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


def run_program(stack: str, monkeypatch: pytest.MonkeyPatch, lock: str = "registry-filled",
                verify_in_mirror: bool | None = False,
                registered: Registered | None = None) -> tuple[Registered, dict[str, dict[str, Any]]]:
    """Run the program on ``stack`` under the mocks. The mirror check asks no registry here unless a test turns it
    on (``verify_in_mirror=None`` is the stack's own setting); ``registered`` collects what was declared."""
    registered = registered if registered is not None else Registered()
    options: dict[str, dict[str, Any]] = {}
    original = KubernetesObject.__init__

    def recording_init(self: KubernetesObject, manifest: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        meta = manifest["metadata"]
        key = f"{type_token(manifest)}:{meta.get('namespace', '')}/{meta['name']}"
        options[key] = {"protect": bool(opts and opts.protect), "retain_on_delete": bool(opts and opts.retain_on_delete),
                        "secret_fields": sorted((opts and opts.additional_secret_outputs) or [])}
        original(self, manifest, opts)

    monkeypatch.setattr(KubernetesObject, "__init__", recording_init)
    platform_config = yaml.safe_load(stack_file(stack).read_text())["config"]["trainyard:platform"]
    if lock == "registry-filled":
        lock_dir = Path(tempfile.mkdtemp(prefix="trainyard-lock-"))
        platform_config.setdefault("images", {})["lock_file"] = str(registry_filled_lock(lock_dir))
    if verify_in_mirror is not None:
        platform_config.setdefault("images", {})["verify_in_mirror"] = verify_in_mirror
    pulumi.runtime.set_mocks(Mocks(registered), project="trainyard", stack=stack_file(stack).stem.removeprefix("Pulumi."),
                             preview=False)
    pulumi.runtime.set_all_config({"trainyard:platform": json.dumps(platform_config)})

    @pulumi.runtime.test
    def program() -> None:
        runpy.run_path(str(ROOT / "platform" / "__main__.py"), run_name="__main__")

    program()
    return registered, options


_RUNS: dict[str, tuple[Registered, dict[str, dict[str, Any]]]] = {}


def program_run(stack: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Registered, dict[str, dict[str, Any]]]:
    """``run_program(stack)`` with its defaults, run once per stack in this test process and shared by the tests that
    only read what it declared (a run of prod's program under the mocks takes several seconds of CPU)."""
    if stack not in _RUNS:
        _RUNS[stack] = run_program(stack, monkeypatch)
    return _RUNS[stack]


def manifest_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{type_token(obj)}:{meta.get('namespace', '')}/{meta['name']}"


@pytest.mark.parametrize("stack", ["local", "prod", DATA_CACHE], ids=["local", "prod", "data-cache"])
def test_registered_kubernetes_resources_are_exactly_the_rendered_manifests(stack: str, monkeypatch: pytest.MonkeyPatch) -> None:
    platform = rendered(stack)
    registered, _ = program_run(stack, monkeypatch)
    kube = [r for r in registered.resources if r.typ.startswith("kubernetes:") and r.typ != "pulumi:providers:kubernetes"
            and not r.typ.startswith("kubernetes:helm")]
    got = {f"{r.typ}:{r.inputs['metadata'].get('namespace', '')}/{r.inputs['metadata']['name']}": r.inputs for r in kube}
    assert len(got) == len(kube), "two resources registered the same object"
    expected = {manifest_key(o): o for o in platform.all_objects}
    assert sorted(got) == sorted(expected)
    # The program substitutes generated values where render shows placeholders, and sends exactly those
    # fields as secrets; otherwise the inputs are the rendered manifest.
    for key, inputs in got.items():
        plain = {field: unwrap_secrets(value)[0] for field, value in inputs.items()}
        assert json.loads(json.dumps(plain)) == json.loads(json.dumps(substitute(expected[key], registered.generated))), key
        secret_fields = sorted(field for field, value in inputs.items() if unwrap_secrets(value)[1])
        assert secret_fields == sorted(f for f, v in expected[key].items() if any(True for _ in names_in(v))), key


@pytest.mark.parametrize("stack", ["local", "prod"])
def test_each_generated_value_is_one_resource_and_every_field_using_one_is_secret(
    stack: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform = rendered(stack)
    registered, options = program_run(stack, monkeypatch)
    referenced = {name for o in platform.all_objects for name in names_in(o)}
    assert referenced, "the stack references no generated value"
    dynamic = [r.name for r in registered.resources if r.typ == DYNAMIC]
    assert sorted(dynamic) == sorted(referenced)
    for obj in platform.all_objects:
        fields = sorted(f for f, v in obj.items() if any(True for _ in names_in(v)))
        assert options[manifest_key(obj)]["secret_fields"] == fields, manifest_key(obj)


@pytest.mark.parametrize("stack", ["local", "prod"])
def test_every_kubernetes_resource_uses_the_explicit_provider(stack: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rendered(stack)
    registered, _ = program_run(stack, monkeypatch)
    providers = [r for r in registered.resources if r.typ == "pulumi:providers:kubernetes"]
    assert [p.name for p in providers] == ["cluster"]
    assert providers[0].inputs.get("context") == yaml.safe_load(
        (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]["trainyard:platform"]["cluster"]["context"]
    for r in registered.resources:
        if r.typ.startswith("kubernetes:"):
            assert r.provider and "::cluster::" in r.provider, r.name


def test_charts_are_declared_only_for_controllers_that_are_not_external(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered("prod")
    prod, _ = program_run("prod", monkeypatch)
    assert sorted(r.name for r in prod.resources if r.typ == "kubernetes:helm.sh/v4:Chart") == [
        "cert-manager", "cnpg", "gpu-operator", "jobset", "kserve", "kueue", "minio-operator", "minio-tenant", "mlflow",
        "trainer"]
    local, _ = program_run("local", monkeypatch)
    assert [r.name for r in local.resources if r.typ == "kubernetes:helm.sh/v4:Chart"] == []


@pytest.mark.parametrize(("stack", "protect"), [("prod", True), ("local", False)])
def test_data_holding_resources_are_retained_and_protected_as_the_stack_says(
    stack: str, protect: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform = rendered(stack)
    _, options = program_run(stack, monkeypatch)
    data = [manifest_key(o) for o in platform.all_objects if holds_data(o)]
    assert any(k.startswith("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition") for k in data)
    for key in data:
        assert options[key] | {"secret_fields": []} == {"protect": protect, "retain_on_delete": True,
                                                        "secret_fields": []}, key
    for obj in platform.all_objects:
        if not holds_data(obj):
            assert {k: v for k, v in options[manifest_key(obj)].items() if k != "secret_fields"} == {
                "protect": False, "retain_on_delete": False}


def test_every_chart_is_declared_with_crds_skipped_and_trainyards_post_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 13: skipCrds does not reach CRDs a chart renders as templates (Kueue); the
    # post-renderer drops them, so the Crds group's CRDs are the only ones applied.
    from trainyard import post_render

    rendered("prod")
    prod, _ = program_run("prod", monkeypatch)
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
    prod, _ = program_run("prod", monkeypatch)
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


def test_charts_are_pulled_from_the_stacks_oci_chart_mirror_at_their_pinned_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    # prod names charts.mirror: every chart is <mirror>/<chart name> with no upstream repository (issue #24).
    platform = rendered("prod")
    prod, _ = program_run("prod", monkeypatch)
    charts = {r.name: r.inputs for r in prod.resources if r.typ == "kubernetes:helm.sh/v4:Chart"}
    releases = {r.name: r for r in platform.releases if not r.external}
    assert sorted(charts) == sorted(releases)
    for name, inputs in charts.items():
        assert inputs["chart"] == f"oci://registry.trainyard.internal/charts/{releases[name].chart_name}", name
        assert inputs["version"] == releases[name].version, name
        assert "repositoryOpts" not in inputs and "plainHttp" not in inputs, name


def test_a_loopback_chart_mirror_is_reached_over_plain_http_and_a_private_ca_is_passed_to_helm(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    for name, charts in (("loopback", {"mirror": "oci://127.0.0.1:5000/charts", "plain_http": True}),
                         ("private-ca", {"mirror": "oci://charts.example.com/trainyard", "ca_file": str(tmp_path / "ca.pem")})):
        document["config"]["trainyard:platform"]["charts"] = charts
        path = tmp_path / f"Pulumi.{name}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        registered, _ = run_program(str(path), monkeypatch)
        inputs = [r.inputs for r in registered.resources if r.typ == "kubernetes:helm.sh/v4:Chart"]
        assert inputs and all(i["chart"].startswith(charts["mirror"] + "/") for i in inputs)
        if name == "loopback":
            assert all(i["plainHttp"] is True and "repositoryOpts" not in i for i in inputs)
        else:
            assert all("plainHttp" not in i for i in inputs)
            assert all(i["repositoryOpts"]["caFile"].path == str(tmp_path / "ca.pem") for i in inputs)
