"""A controller's CRDs have one owner on the cluster: Trainyard's declared CRDs, not the chart's copies (issue 13).

Kueue 0.19.2 renders its 11 CRDs as ordinary templates (``templates/crd/*.yaml``, no switch), so ``skipCrds``
does not reach them; every chart is installed through Trainyard's post-renderer (``trainyard/post_render.py``),
which drops them. The chart tier shows the render: the chart renders exactly the Kueue CRDs Trainyard declares,
with the same spec, and the post-renderer drops every one
(tests/charts/test_chart_truth.py::test_kueue_renders_its_crds_as_templates_and_the_post_renderer_drops_every_one,
::test_the_chart_installs_no_crds_and_every_crd_it_renders_is_declared_by_trainyard) and the registered Chart
inputs carry it (tests/program/test_program.py::test_the_registered_post_renderer_leaves_no_crd_in_any_chart).
This module shows what the cluster ends up with when the real engine and provider install the chart.

The program is tests/fixtures/chart-crds-program: Trainyard's ``Platform`` (provider, ``Crds`` group,
``ConcernGroup._chart`` with ``skipCrds`` and the post-renderer), narrowed to Kueue's CRDs and Kueue's release,
on the local stack's rehearsal overlay with Kueue not external. Its docstring lists what differs from
production and why (the chart is read from the verified mirror directory instead of the OCI registry; the
Chart's own ``skipAwait``, since no container runs here). The stack (`pulumi up`, the environment of
``tools/pulumi-local.sh env``: file state, passphrase secrets, the provider built in the tools cache) runs
against a private control plane of its own (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; no
kwok, no Kueue): nothing but the engine writes the CRDs.

Two installs, each on its own control plane, one after the other:

- ``trainyard``: as every stack installs it. Each Kueue CRD has exactly one manager that applied it, the field
  manager the provider recorded for Trainyard's declared CRD resource in the ``Crds`` group; the state has no
  CRD under the Chart; the live CRD carries Trainyard's spec (each field of the rendered CRD, whose file the
  render verified against the upstream blob SHA in ``catalog``) and none of the chart's labels.
- ``passthrough``: the control, the same program with the post-renderer swapped for ``cat`` (drops nothing):
  the chart's copies are applied too, so each CRD has a second manager, the Chart child's. It is what the
  first install's assertions would meet if the post-renderer stopped dropping CRDs: they can fail.

Not covered: on a real cluster Kueue itself writes each converted CRD's conversion ``caBundle`` (its
internal cert manager, an Update by the controller, not an apply); no Kueue runs here.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import BIN_DIR, Cluster, private_cluster, tools_problem
from tests.cluster.test_rehearsal import missing_from
from tests.conftest import CRDS_DIR, ROOT
from trainyard import catalog, charts
from trainyard.manifests import render_platform
from trainyard.manifests.crds import git_blob_sha
from trainyard.manifests.meta import Manifest
from trainyard.project import open_stack
from trainyard.rehearsal.stack import EXTERNAL, write_rehearsal_stack

pytestmark = pytest.mark.cluster

STACK = "local"
PROGRAM = ROOT / "tests" / "fixtures" / "chart-crds-program"
PULUMI_LOCAL = ROOT / "tools" / "pulumi-local.sh"
KUEUE = catalog.release("kueue", catalog.DEFAULT_VERSIONS["kueue"])
KUEUE_CRDS = sorted(f"{f.name.removeprefix('kueue.x-k8s.io_').removesuffix('.yaml')}.kueue.x-k8s.io" for f in KUEUE.crds)
CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
CHART_TYPE = "kubernetes:helm.sh/v4:Chart"
CRDS_GROUP_TYPE = "trainyard:platform:Crds"
DEPLOYMENT = ("kueue-system", "kueue-controller-manager")
# Labels the Kueue chart puts on everything it renders (templates/_helpers.tpl "kueue.labels").
CHART_LABEL = "helm.sh/chart"


@dataclass(frozen=True)
class Install:
    """What one `pulumi up` of the program left: the run, the live objects (with managedFields), the state."""

    mode: str
    returncode: int
    output: str
    seconds: float
    declared: dict[str, Manifest]
    live_crds: dict[str, Manifest]
    deployment: Manifest | None
    resources: list[dict[str, Any]]

    def explain(self) -> str:
        return f"pulumi up ({self.mode}) exited {self.returncode}:\n{self.output[-6000:]}"

    def urns_of(self, name: str, type_: str = CRD_TYPE) -> list[dict[str, Any]]:
        """The state's resources of ``type_`` for the object ``name`` (the logical name may carry the chart's prefix)."""
        return [r for r in self.resources if r["type"] == type_ and r.get("outputs", {}).get("metadata", {}).get("name") == name]

    def declared_crd(self, name: str) -> dict[str, Any]:
        """The state's resource for Trainyard's declared CRD ``name`` (in the ``Crds`` group)."""
        (resource,) = [r for r in self.urns_of(name) if self.parent_type(r) == CRDS_GROUP_TYPE]
        return resource

    def chart_children(self) -> list[dict[str, Any]]:
        (chart,) = [r for r in self.resources if r["type"] == CHART_TYPE]
        return [r for r in self.resources if r.get("parent") == chart["urn"]]

    def parent_type(self, resource: dict[str, Any]) -> str:
        parent = next(r for r in self.resources if r["urn"] == resource["parent"])
        return str(parent["type"])


def appliers(obj: Manifest) -> list[tuple[str, str]]:
    """(manager, operation) of every managedFields entry of the object itself (not of its status subresource)."""
    return sorted((e["manager"], e["operation"]) for e in obj["metadata"].get("managedFields") or []
                  if not e.get("subresource"))


def engine_env(cluster: Cluster, base: Path, stack_file: Path) -> dict[str, str]:
    """The environment tools/pulumi-local.sh runs Pulumi with (its `env` command), for this test's state and cluster."""
    env = {**cluster.env, "TRAINYARD_STATE_DIR": str(base / "state"), "TRAINYARD_RUN_DIR": str(base / "pulumi-local-run"),
           "TRAINYARD_PULUMI_HOME": str(base / "pulumi-home"), "TRAINYARD_STACK_FILE": str(stack_file)}
    done = subprocess.run([str(PULUMI_LOCAL), "env", STACK], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        words = shlex.split(line)
        if words[:1] == ["export"]:
            key, _, value = words[1].partition("=")
            env[key] = value
    return env


def run_dir(base: Path, stack_file: Path, chart_dir: Path | None, mode: str) -> Path:
    """A Pulumi project like the one tools/pulumi-local.sh prepares, whose main is the test program (Kueue's
    chart from ``chart_dir``; None: as the stack renders it)."""
    run = base / "run"
    (run / "stacks").mkdir(parents=True)
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    project["main"] = "program/"
    (run / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
    (run / "program").symlink_to(PROGRAM)
    (run / ".venv").symlink_to(ROOT / ".venv")
    document = yaml.safe_load(stack_file.read_text())
    document["config"].update({"trainyard-test:postRenderer": mode})
    if chart_dir is not None:
        document["config"]["trainyard-test:kueueChart"] = str(chart_dir)
    (run / "stacks" / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return run


def pulumi(run: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN_DIR / "pulumi"), *args, "--non-interactive"], cwd=run, env=env, capture_output=True, text=True,
                          check=False, timeout=1200)


def install(base: Path, mode: str) -> Install:
    """The program's `pulumi up` on a private control plane of its own; what it left, read before the plane stops."""
    stack_file = base / f"Pulumi.{STACK}.yaml"
    # The local stack's rehearsal overlay with Kueue's chart installed (every other controller stays external).
    config = write_rehearsal_stack(open_stack(STACK, ROOT).path, stack_file,
                                   {"rehearsal": {"external_controllers": [c for c in EXTERNAL if c != "kueue"]}})
    rendered = render_platform(config, ROOT, ROOT / "stacks")  # every CRD file verified against its blob SHA
    (release,) = [r for r in rendered.releases if r.name == "kueue"]
    declared = {c["metadata"]["name"]: c for c in rendered.crds if c["spec"]["group"] == "kueue.x-k8s.io"}
    mirror = charts.charts_dir(ROOT)
    assert mirror is not None
    chart_dir = charts.assemble(charts.chart_source(release, mirror), mirror, base / "charts").path  # listing verified
    with private_cluster(base / "cluster", with_fake_nodes=False) as cluster:
        env = engine_env(cluster, base, stack_file)
        run = run_dir(base, stack_file, chart_dir, mode)
        for args in (("login", env["PULUMI_BACKEND_URL"]),
                     ("stack", "select", "--create", "--secrets-provider", "passphrase", STACK)):
            done = pulumi(run, env, *args)
            assert done.returncode == 0, done.stdout + done.stderr
        start = time.monotonic()
        up = pulumi(run, env, "up", "--yes", "--skip-preview", "--stack", STACK)
        seconds = time.monotonic() - start
        output = up.stdout + up.stderr
        (base / "pulumi-up.log").write_text(output)
        listed = cluster.kubectl("get", "crd", "-o", "json", "--show-managed-fields", check=False)
        live = {c["metadata"]["name"]: c for c in json.loads(listed.stdout or '{"items": []}')["items"]}
        found = cluster.kubectl("get", "deployment", "-n", DEPLOYMENT[0], DEPLOYMENT[1], "-o", "json",
                                "--show-managed-fields", check=False)
        deployment = json.loads(found.stdout) if found.returncode == 0 else None
    state_file = base / "state" / ".pulumi" / "stacks" / "trainyard" / f"{STACK}.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {"checkpoint": {"latest": {}}}
    resources = state["checkpoint"]["latest"].get("resources") or []
    return Install(mode, up.returncode, output, seconds, declared, live, deployment, resources)


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Install]]:
    problem = tools_problem("etcd", "kube-apiserver", "pulumi", "pulumi-kubernetes")  # no controllers
    if problem is not None:
        pytest.skip(problem)
    if charts.charts_dir(ROOT) is None:
        pytest.skip(f"upstream chart mirror not found: set {charts.CHARTS_DIR_ENV} (default ../shared/charts)")
    done = {}
    for mode in ("trainyard", "passthrough"):
        base = tmp_path_factory.mktemp(f"chart-crds-{mode}")
        done[mode] = install(base, mode)
        shutil.rmtree(base / "cluster", ignore_errors=True)  # etcd's data; the state and logs stay for a reader
    yield done


@pytest.fixture
def filtered(installs: dict[str, Install]) -> Install:
    if installs["trainyard"].returncode != 0:
        pytest.fail(installs["trainyard"].explain())
    return installs["trainyard"]


@pytest.fixture
def passthrough(installs: dict[str, Install]) -> Install:
    if installs["passthrough"].returncode != 0:
        pytest.fail(installs["passthrough"].explain())
    return installs["passthrough"]


# ----------------------------------------------------------------------------- tests


def test_the_chart_is_installed_by_the_provider_without_any_crd(filtered: Install) -> None:
    # The engine does not keep a remote component's inputs (the Chart's state holds only what the transform
    # added); the registered inputs (skipCrds, the post-renderer) are checked by tests/program. Here: what the
    # provider rendered and applied.
    children = filtered.chart_children()
    kinds = {r["type"].rsplit(":", 1)[-1] for r in children}
    assert {"Deployment", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "APIService"} <= kinds
    assert "CustomResourceDefinition" not in kinds
    # The chart's objects are on the cluster, applied by the provider for the Chart's child, with skipAwait.
    assert filtered.deployment is not None, "the chart's Deployment is not on the cluster"
    (child,) = [r for r in children if r["type"] == "kubernetes:apps/v1:Deployment"]
    assert appliers(filtered.deployment) == [(child["outputs"]["__fieldManager"], "Apply")]
    assert filtered.deployment["metadata"]["annotations"].get("pulumi.com/skipAwait") == "true"


def test_each_kueue_crd_has_exactly_one_manager_trainyards_declared_crd(filtered: Install) -> None:
    assert sorted(n for n in filtered.live_crds if n.endswith(".kueue.x-k8s.io")) == KUEUE_CRDS
    wrong = {}
    for name in KUEUE_CRDS:
        live = filtered.live_crds[name]
        declared = filtered.declared_crd(name)["outputs"]["__fieldManager"]
        if appliers(live) != [(declared, "Apply")]:
            wrong[name] = {"appliers": appliers(live), "the declared CRD's manager": declared,
                           "state resources": [r["urn"] for r in filtered.urns_of(name)]}
        # Whatever else is recorded is the API server's own status (Established, NamesAccepted).
        others = {(e["manager"], e.get("subresource")) for e in live["metadata"]["managedFields"] if e.get("subresource")}
        assert others <= {("kube-apiserver", "status")}, (name, others)
    assert wrong == {}, "managers that applied each CRD, expected only the declared CRD's"
    # One Pulumi resource per CRD: none under the Chart.
    assert {name: len(filtered.urns_of(name)) for name in KUEUE_CRDS} == dict.fromkeys(KUEUE_CRDS, 1)


def test_each_kueue_crd_on_the_cluster_is_the_one_trainyard_declares(filtered: Install) -> None:
    assert CRDS_DIR is not None
    assert sorted(filtered.declared) == KUEUE_CRDS
    for crd in KUEUE.crds:
        upstream_bytes = (CRDS_DIR / "kueue" / f"v{KUEUE.version}" / crd.name).read_bytes()
        assert git_blob_sha(upstream_bytes) == crd.blob_sha, crd.name
        upstream = yaml.safe_load(upstream_bytes)
        name = upstream["metadata"]["name"]
        live = filtered.live_crds[name]
        # The upstream schema as served, and every field of Trainyard's CRD (its conversion webhook included),
        # which is also what the provider recorded as the declared resource's inputs.
        assert live["spec"]["versions"] == upstream["spec"]["versions"], name
        assert missing_from(filtered.declared[name], live) == [], name
        resource = filtered.declared_crd(name)
        assert resource["inputs"]["spec"] == filtered.declared[name]["spec"], name
        # Nothing of the chart's copy: its labels are not there.
        assert CHART_LABEL not in (live["metadata"].get("labels") or {}), name


def test_without_the_post_renderer_the_chart_applies_its_own_copies_as_a_second_manager(
        passthrough: Install, capsys: pytest.CaptureFixture[str], installs: dict[str, Install]) -> None:
    """The control: the assertions above meet two managers on every Kueue CRD when the post-renderer drops nothing."""
    # The post-renderer's only effect: the chart's 11 CRDs, nothing else.
    extra = sorted((r["type"], r["outputs"]["metadata"]["name"]) for r in passthrough.chart_children())
    for r in installs["trainyard"].chart_children():
        extra.remove((r["type"], r["outputs"]["metadata"]["name"]))
    assert extra == [(CRD_TYPE, name) for name in KUEUE_CRDS]
    rows = [("CRD", "appliers with Trainyard's post-renderer", "appliers with `cat` as post-renderer")]
    for name in KUEUE_CRDS:
        copies = passthrough.urns_of(name)
        assert sorted(passthrough.parent_type(r) for r in copies) == sorted([CRDS_GROUP_TYPE, CHART_TYPE]), name
        managers = {passthrough.parent_type(r): r["outputs"]["__fieldManager"] for r in copies}
        live = passthrough.live_crds[name]
        assert appliers(live) == sorted([(managers[CRDS_GROUP_TYPE], "Apply"), (managers[CHART_TYPE], "Apply")]), name
        assert CHART_LABEL in (live["metadata"].get("labels") or {}), name
        rows.append((name, ", ".join(m for m, _ in appliers(installs["trainyard"].live_crds[name])) or "-",
                     ", ".join(m for m, _ in appliers(live))))
    table = "\n".join(f"| {' | '.join(r)} |" for r in [rows[0], ("---",) * 3, *rows[1:]])
    with capsys.disabled():
        print(f"\n\nKueue CRD field managers after `pulumi up` of the chart (pulumi-kubernetes helm.v4.Chart):\n{table}\n"
              + "\n".join(f"  pulumi up ({i.mode}): {i.seconds:.1f}s" for i in installs.values()))
