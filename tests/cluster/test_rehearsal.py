"""`pulumi up` of the local stack against a real kube-apiserver, through tools/pulumi-local.sh.

One module, one deployed stack, tests in order (each a real engine run or a real API call):
a real server-side apply of the rendered objects (then removed again), the yardstick; first `up`;
no-op `up`; live objects equal `trainyard render`; `kubectl apply --server-side --dry-run=server`
of the same objects; the admission policies on the server; a quota change
previewed field by field; a change the CRD's CEL rules reject; `up` after the cluster was
recreated under a kept state; `destroy` that keeps the data.
Timings are printed as a table at the end (and written to the module's tmp dir), with the ratios of
the two `up`s to the server-side apply of the same objects (recorded, never asserted).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import BIN_DIR, TRAINYARD, Cluster, Key, key_of, live_objects, resource_of
from tests.conftest import ROOT
from trainyard.config import load_stack
from trainyard.manifests import render_platform
from trainyard.manifests.generated import names_in
from trainyard.manifests.lifecycle import DATA_HOLDING_KINDS
from trainyard.manifests.meta import Manifest
from trainyard.manifests.rehearsal import fake_nodes
from trainyard.rehearsal.apply import remove_applied, server_side_apply
from trainyard.rehearsal.kube import Kube

pytestmark = pytest.mark.cluster

STACK = "local"
PULUMI_LOCAL = ROOT / "tools" / "pulumi-local.sh"
ENGINE_TIME = re.compile(r"^==> pulumi \w+: exit \d+, engine time (\d+) ms$", re.MULTILINE)
# metadata the API server owns; never part of what Trainyard declares
SERVER_METADATA = frozenset({"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
                             "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"})


# ----------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class Run:
    command: str
    returncode: int
    stdout: str
    stderr: str
    wall: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def engine(self) -> float | None:
        """Seconds the `pulumi` command itself took (tools/pulumi-local.sh prints it)."""
        found = ENGINE_TIME.findall(self.stderr)
        return int(found[-1]) / 1000 if found else None

    def explain(self) -> str:
        return f"`{self.command}` exited {self.returncode}:\n{self.output[-6000:]}"


class Engine:
    """tools/pulumi-local.sh with its state, run dir and Pulumi home in the test's tmp dir."""

    def __init__(self, cluster: Cluster, base: Path) -> None:
        self.cluster = cluster
        self.base = base
        self.env = {**cluster.env,
                    "TRAINYARD_STATE_DIR": str(base / "state"),
                    "TRAINYARD_RUN_DIR": str(base / "run"),
                    "TRAINYARD_PULUMI_HOME": str(base / "pulumi-home")}
        self.env.pop("TRAINYARD_STACK_FILE", None)

    def run(self, command: str, *args: str, stack_file: Path | None = None, timeout: float = 600) -> Run:
        env = dict(self.env)
        if stack_file is not None:
            env["TRAINYARD_STACK_FILE"] = str(stack_file)
        argv = [str(PULUMI_LOCAL), command, STACK, *args]
        start = time.monotonic()
        result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
        return Run(" ".join(["tools/pulumi-local.sh", command, STACK, *args]), result.returncode, result.stdout,
                   result.stderr, time.monotonic() - start)


@dataclass(frozen=True)
class Timing:
    step: str
    wall: float
    engine: float | None
    note: str


def versions(cluster: Cluster, keys: list[Key]) -> dict[Key, str]:
    """A fingerprint of what was declared in every one of these objects that exists: equal means untouched.

    Status is left out, with resourceVersion and managedFields: controllers keep writing status in the
    background (the quota controller recounts ResourceQuota usage every sync period), which moves the
    resourceVersion without anyone touching what Trainyard declared.
    """
    out = {}
    for key, obj in live_objects(cluster, keys).items():
        meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")}
        declared = {k: v for k, v in obj.items() if k != "status"} | {"metadata": meta}
        out[key] = json.dumps(declared, sort_keys=True)
    return out


def pulumi_path(parts: tuple[str | int, ...]) -> str:
    """A property path as Pulumi's detailedDiff writes it: a.b[0]["c.d"]."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text


def changed_paths(old: Any, new: Any, parts: tuple[str | int, ...] = ()) -> set[str]:
    """Paths of the leaves that differ between two manifests."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: set[str] = set()
        for k in old.keys() | new.keys():
            if k not in old or k not in new:
                out.add(pulumi_path((*parts, k)))
            else:
                out |= changed_paths(old[k], new[k], (*parts, k))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return set().union(*(changed_paths(a, b, (*parts, i)) for i, (a, b) in enumerate(zip(old, new, strict=True))))
    return set() if old == new else {pulumi_path(parts)}


def missing_from(rendered: Any, live: Any, path: str = "") -> list[str]:
    """Where a field of the rendered object is absent from, or different in, the live one."""
    if isinstance(rendered, dict):
        if not isinstance(live, dict):
            return [f"{path}: live {live!r} is not a map"]
        problems = []
        for k, v in rendered.items():
            if path == ".metadata" and k in SERVER_METADATA:
                continue
            if k not in live:
                problems.append(f"{path}.{k}: missing in the live object")
            else:
                problems += missing_from(v, live[k], f"{path}.{k}")
        return problems
    if isinstance(rendered, list):
        if not isinstance(live, list) or len(live) != len(rendered):
            return [f"{path}: live {live!r} != rendered {rendered!r}"]
        return [p for i, (r, lv) in enumerate(zip(rendered, live, strict=True)) for p in missing_from(r, lv, f"{path}[{i}]")]
    return [] if rendered == live else [f"{path}: live {live!r} != rendered {rendered!r}"]


def stack_variant(path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the local stack file with `change` applied to its platform config; valid for Trainyard."""
    document = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{STACK}.yaml").read_text())
    change(document["config"]["trainyard:platform"])
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    load_stack(path)  # raises ConfigError if Trainyard itself would refuse it
    return path


def render(stack_file: Path) -> dict[Key, Manifest]:
    rendered = render_platform(load_stack(stack_file), ROOT, ROOT / "stacks")
    return {key_of(o): o for o in rendered.all_objects}


def wait_for_quota_usage(cluster: Cluster, namespaces: list[str], timeout: float = 120) -> float:
    """Wait until every hard limit of the namespaces' ResourceQuotas has a usage; return the seconds waited."""
    start = time.monotonic()
    while True:
        quotas = [q for ns in namespaces for q in cluster.get_json("resourcequotas", "-n", ns)["items"]]
        unknown = {f"{q['metadata']['namespace']}/{q['metadata']['name']}": sorted(set(q["spec"]["hard"])
                   - set((q.get("status") or {}).get("used") or {})) for q in quotas}
        unknown = {k: v for k, v in unknown.items() if v}
        if quotas and not unknown:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"quota usage still unknown after {timeout:.0f}s: {unknown}")
        time.sleep(1)


def trainjob(name: str, namespace: str, runtime: str, queue: str | None,
             image: str = "registry.trainyard.internal/llm/train:1.0") -> str:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue is not None else {}
    return json.dumps({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": {"image": image, "numNodes": 1}},
    })


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def engine(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """The module's own Pulumi state on the session's cluster. It expects a cluster the local stack is not
    deployed on yet (modules that share `deployed_rehearsal` sort after this one), and it ends with
    `destroy`, so it forgets the session's "already deployed" markers: the next such module deploys again."""
    yield Engine(cluster, tmp_path_factory.mktemp("pulumi"))
    for marker in cluster.state_dir.glob("deployed.*.sha256"):
        marker.unlink()


@pytest.fixture(scope="module")
def timings() -> list[Timing]:
    return []


@pytest.fixture(scope="module")
def rendered_objects(tmp_path_factory: pytest.TempPathFactory, cluster: Cluster) -> dict[Key, Manifest]:
    """What `trainyard render local` writes, read back from its files (chart releases aside)."""
    out = tmp_path_factory.mktemp("render") / STACK
    subprocess.run([str(TRAINYARD), "render", STACK, "--out", str(out)], cwd=ROOT, env=cluster.env, check=True,
                   capture_output=True, text=True)
    objects = [yaml.safe_load(p.read_text()) for p in sorted(out.rglob("*.yaml")) if "charts" not in p.relative_to(out).parts]
    return {key_of(o): o for o in objects}


@pytest.fixture(scope="module")
def server_side_applied(engine: Engine, rendered_objects: dict[Key, Manifest], timings: list[Timing]) -> None:
    """The yardstick: `kubectl apply --server-side` of the rendered objects, twice, then removed again.

    Not a dry run: the API server writes them, as Pulumi's provider does. CRDs and Namespaces stay
    (as `pulumi destroy` leaves them), so the first `up` below starts from the same cluster.
    """
    kube = Kube(BIN_DIR / "kubectl", engine.cluster.kubeconfig)
    objects = list(rendered_objects.values())
    first = server_side_apply(kube, objects)
    timings.append(Timing("kubectl apply --server-side (first)", first.seconds, None, f"the same {first.objects} objects"))
    again = server_side_apply(kube, objects)
    timings.append(Timing("kubectl apply --server-side (no-op)", again.seconds, None, "applied again, nothing changes"))
    remove_applied(kube, objects)


@pytest.fixture(scope="module")
def first_up(engine: Engine, rendered_objects: dict[Key, Manifest], timings: list[Timing],
             server_side_applied: None) -> Run:
    run = engine.run("up", "--yes", "--skip-preview")
    timings.append(Timing("pulumi up (first)", run.wall, run.engine, f"{len(rendered_objects)} objects created"))
    return run


@pytest.fixture
def deployed(first_up: Run) -> Run:
    if first_up.returncode != 0:
        pytest.fail(f"the first pulumi up failed, so this cannot be checked: {first_up.explain()}")
    return first_up


# ----------------------------------------------------------------------------- tests, in order


def test_up_creates_every_rendered_object(engine: Engine, first_up: Run, rendered_objects: dict[Key, Manifest]) -> None:
    assert first_up.returncode == 0, first_up.explain()
    assert "local control plane built from Go modules" in first_up.stderr
    live = live_objects(engine.cluster, list(rendered_objects))
    assert sorted(set(rendered_objects) - set(live)) == []
    created = re.search(r"\+ (\d+) created", first_up.stdout)
    assert created is not None, first_up.explain()
    assert int(created.group(1)) > len(rendered_objects)  # the objects, plus the stack, provider and components


# With the real Kueue running: its webhooks write back what they admit (quantities as Quantity.String(),
# defaults), and the builders emit exactly that, so the second `up` changes nothing.
def test_second_up_changes_nothing(engine: Engine, deployed: Run, timings: list[Timing]) -> None:
    run = engine.run("up", "--yes", "--skip-preview", "--expect-no-changes")
    timings.append(Timing("pulumi up (no-op)", run.wall, run.engine, "--expect-no-changes"))
    assert run.returncode == 0, run.explain()
    summary = run.stdout[run.stdout.rindex("Resources:"):]
    assert re.search(r"^\s+\d+ unchanged$", summary, re.MULTILINE), summary
    assert not re.search(r"created|updated|deleted|replaced", summary), summary


def as_stored(obj: Manifest) -> Manifest:
    """The rendered object as the API server keeps it: a Secret's ``stringData`` lands in ``data`` (base64).

    A generated value (``${generated:...}``) is made at deploy time and never rendered: only its key is
    compared, through ``missing_from``'s absent-field check, with the live value's own base64 in its place.
    """
    if obj["kind"] != "Secret" or "stringData" not in obj:
        return obj
    stored = {k: v for k, v in obj.items() if k != "stringData"}
    stored["data"] = {**obj.get("data", {}), **{
        key: None if names_in(value) else base64.b64encode(value.encode()).decode()
        for key, value in obj["stringData"].items()}}
    return stored


def test_live_objects_match_the_render(engine: Engine, deployed: Run, rendered_objects: dict[Key, Manifest]) -> None:
    live = live_objects(engine.cluster, list(rendered_objects))
    problems = {}
    for k, obj in rendered_objects.items():
        stored = as_stored(obj)
        if obj["kind"] == "Secret":  # a generated value: present, whatever it is
            live_data = live[k].get("data", {})
            stored = {**stored, "data": {key: live_data.get(key, "(absent)") if value is None else value
                                         for key, value in stored.get("data", {}).items()}}
        problems[f"{resource_of(k)} {k[2]}/{k[3]}"] = missing_from(stored, live[k])
    assert {k: v for k, v in problems.items() if v} == {}


def test_server_side_apply_dry_run_of_the_render(engine: Engine, deployed: Run, rendered_objects: dict[Key, Manifest],
                                                 timings: list[Timing]) -> None:
    keys = list(rendered_objects)
    before = versions(engine.cluster, keys)
    manifest = "".join("---\n" + json.dumps(o) + "\n" for o in rendered_objects.values())
    start = time.monotonic()
    # --force-conflicts: a VAP's matchConstraints and a binding's matchResources are atomic structs
    # that the server fills with defaults (matchPolicy, namespaceSelector, objectSelector), so a second
    # field manager applying the same rendered value conflicts with Pulumi's. Nothing is written (dry run).
    result = engine.cluster.kubectl("apply", "--server-side", "--dry-run=server", "--force-conflicts",
                                    "--field-manager=trainyard-dry-run", "-f", "-", stdin=manifest)
    wall = time.monotonic() - start
    timings.append(Timing("kubectl apply --server-side --dry-run=server", wall, None,
                          f"the same {len(keys)} rendered objects"))
    assert result.stdout.count("serverside-applied (server dry run)") == len(keys), result.stdout
    assert versions(engine.cluster, keys) == before


def test_admission_policies_on_the_server(engine: Engine, deployed: Run, timings: list[Timing]) -> None:
    def dry_run(job: str) -> subprocess.CompletedProcess[str]:
        return engine.cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=job, check=False)

    def denied(job: str, policy: str, message: str) -> None:
        deadline = time.monotonic() + 30  # a new policy is enforced once the server has compiled it
        while True:
            result = dry_run(job)
            if result.returncode != 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert result.returncode != 0, f"admitted, expected {policy} to deny:\n{result.stdout}"
        assert f"ValidatingAdmissionPolicy '{policy}'" in result.stderr, result.stderr
        assert message in result.stderr, result.stderr

    # With the real Kueue in the path, its mutating webhook (LocalQueueDefaulting) labels a TrainJob that
    # names no queue with the namespace's LocalQueue `default` before the policy looks at it.
    defaulted = engine.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                       stdin=trainjob("no-queue", "team-a", "torch-distributed", None))
    assert json.loads(defaulted.stdout)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    denied(trainjob("other-queue", "team-b", "torch-distributed", "team-a-queue"), "trainyard-trainjob-queue",
           'not "team-a-queue"')
    denied(trainjob("unapproved", "team-a", "my-own-runtime", "default"), "trainyard-trainjob-runtime",
           "runtimeRef must name an approved ClusterTrainingRuntime")
    denied(trainjob("bad-image", "team-a", "torch-distributed", "default", image="docker.io/someone/train:1"),
           "trainyard-trainjob-image", "is not from an approved registry")

    # Admission also asks each tenant's ResourceQuota, which refuses TrainJobs ("status unknown for
    # quota") until the quota controller has counted them; the rehearsal makes it count TrainJobs before
    # the stack is deployed (Rehearsal.wait_for_quota_controller), so this wait is short.
    waited = wait_for_quota_usage(engine.cluster, ["team-a", "team-b"])
    timings.append(Timing("wait for tenant quota usage", waited, None, "before a TrainJob is admitted"))
    for namespace, queue in (("team-a", "default"), ("team-b", "default"), ("default", None)):
        ok = dry_run(trainjob("good", namespace, "torch-distributed", queue))
        assert ok.returncode == 0, f"{namespace}: {ok.stderr}"
        assert "created (server dry run)" in ok.stdout


def test_one_trainjob_per_tenant_is_admitted_placed_on_its_pool_and_completes(engine: Engine, deployed: Run,
                                                                             timings: list[Timing]) -> None:
    # What `make up` ends with: the real Kueue admits each tenant's TrainJob, Trainer and JobSet create
    # the pods, kube-scheduler binds them to fake nodes of the flavor's pool, kwok runs them to completion.
    start = time.monotonic()
    smoke = subprocess.run([str(TRAINYARD), "cluster", "smoke", STACK], capture_output=True, text=True,
                           env=engine.cluster.env, cwd=ROOT, timeout=600, check=False)
    timings.append(Timing("trainyard cluster smoke", time.monotonic() - start, None, "one TrainJob per tenant, completed"))
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    for namespace in ("team-a", "team-b"):
        assert re.search(rf"^ok {namespace}/smoke-{namespace}: admitted by ClusterQueue {namespace} \(flavor fake-a100\), "
                         rf"pods .*fake-a100-\d.* on pool fake-a100, completed$", smoke.stdout, re.MULTILINE), smoke.stdout


def test_quota_change_preview_names_exactly_that_field(engine: Engine, deployed: Run, tmp_path: Path,
                                                       timings: list[Timing]) -> None:
    def fewer_gpus(platform: dict[str, Any]) -> None:
        (team_a,) = [t for t in platform["tenants"] if t["name"] == "team-a"]
        quota = team_a["quotas"][0]
        quota["gpus"] -= 1

    original = render(ROOT / "stacks" / f"Pulumi.{STACK}.yaml")
    changed_file = stack_variant(tmp_path / f"Pulumi.{STACK}.yaml", fewer_gpus)
    changed = render(changed_file)
    expected = {k: changed_paths(original[k], changed[k]) for k in original}
    expected = {k: paths for k, paths in expected.items() if paths}
    # GPU quota drives the CPU/memory quotas and the tenant ResourceQuota (flavor_resources,
    # tenants.resource_quota_for): those two objects change, nothing else.
    assert sorted(expected) == [("", "ResourceQuota", "team-a", "trainyard-tenant"),
                                ("kueue.x-k8s.io", "ClusterQueue", "", "team-a")]

    run = engine.run("preview", "--diff", "--json", stack_file=changed_file)
    timings.append(Timing("pulumi preview --diff --json", run.wall, run.engine, "one tenant's GPU quota changed"))
    assert run.returncode == 0, run.explain()
    preview = json.loads(run.stdout)
    steps = {s["urn"].rsplit("::", 1)[-1]: s for s in preview["steps"] if s["op"] != "same"}
    assert {name: s["op"] for name, s in steps.items()} == {"team-a": "update", "team-a/trainyard-tenant": "update"}
    assert steps["team-a"]["urn"].endswith("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue::team-a")
    assert steps["team-a/trainyard-tenant"]["urn"].endswith("kubernetes:core/v1:ResourceQuota::team-a/trainyard-tenant")

    queue = changed[("kueue.x-k8s.io", "ClusterQueue", "", "team-a")]
    (flavor_index, resource_index), = [
        (i, j) for i, flavor in enumerate(queue["spec"]["resourceGroups"][0]["flavors"]) if flavor["name"] == "fake-a100"
        for j, resource in enumerate(flavor["resources"]) if resource["name"] == "nvidia.com/gpu"]
    gpu_path = f"spec.resourceGroups[0].flavors[{flavor_index}].resources[{resource_index}].nominalQuota"
    queue_diff = steps["team-a"]["detailedDiff"]
    assert gpu_path in queue_diff
    assert queue_diff[gpu_path]["kind"] == "update"
    assert set(queue_diff) == expected[("kueue.x-k8s.io", "ClusterQueue", "", "team-a")]
    assert set(steps["team-a/trainyard-tenant"]["detailedDiff"]) == expected[("", "ResourceQuota", "team-a",
                                                                                 "trainyard-tenant")]
    assert preview["changeSummary"]["update"] == 2


def test_crd_cel_rule_rejects_an_immutable_change(engine: Engine, deployed: Run, tmp_path: Path,
                                                  rendered_objects: dict[Key, Manifest], timings: list[Timing]) -> None:
    def relabel(platform: dict[str, Any]) -> None:
        (pool,) = [p for p in platform["gpu_pools"] if p["name"] == "fake-a100"]
        pool["node_labels"]["trainyard.dev/generation"] = "2"

    keys = list(rendered_objects)
    flavor_key = ("kueue.x-k8s.io", "ResourceFlavor", "", "fake-a100")
    before = versions(engine.cluster, keys)
    assert len(before) == len(keys)
    try:
        run = engine.run("up", "--yes", "--skip-preview", stack_file=stack_variant(tmp_path / "relabel.yaml", relabel))
        timings.append(Timing("pulumi up (rejected by CEL)", run.wall, run.engine, "ResourceFlavor nodeLabels changed"))
        assert run.returncode != 0, run.explain()
        assert 'ResourceFlavor.kueue.x-k8s.io "fake-a100" is invalid' in run.stdout, run.explain()
        assert "nodeLabels are immutable when topologyName is set" in run.stdout, run.explain()
        # The API server refused it: the flavor and every other object are exactly as they were.
        assert versions(engine.cluster, keys) == before
        live = engine.cluster.get_json("resourceflavors.kueue.x-k8s.io", "fake-a100")
        assert live["spec"]["nodeLabels"] == rendered_objects[flavor_key]["spec"]["nodeLabels"]
    finally:
        # Pulumi keeps the failed inputs in its state, so restoring is one update (of the state;
        # the server object is applied unchanged).
        restore = engine.run("up", "--yes", "--skip-preview")
    assert restore.returncode == 0, restore.explain()
    assert versions(engine.cluster, keys) == before
    clean = engine.run("preview", "--expect-no-changes")
    assert clean.returncode == 0, clean.explain()


def test_up_after_the_cluster_was_recreated(engine: Engine, deployed: Run, rendered_objects: dict[Key, Manifest],
                                           timings: list[Timing]) -> None:
    purge = subprocess.run([str(TRAINYARD), "cluster", "down", "--purge"], capture_output=True, text=True,
                           env=engine.cluster.env, timeout=120, check=False)
    assert purge.returncode == 0, purge.stderr
    # The state still lists every object; the script starts a new cluster (with the stack's fake
    # nodes) and, seeing another cluster than the state's, refreshes before it deploys.
    run = engine.run("up", "--yes", "--skip-preview")
    timings.append(Timing("pulumi up --refresh (cluster recreated)", run.wall, run.engine, "cluster start included"))
    assert run.returncode == 0, run.explain()
    assert "the state was not written against this cluster" in run.stderr
    assert "pulumi up --stack local --refresh" in run.stderr
    live = live_objects(engine.cluster, list(rendered_objects))
    assert sorted(set(rendered_objects) - set(live)) == []
    nodes = {n["metadata"]["name"] for n in engine.cluster.get_json("nodes")["items"]}
    # Every pool's fake nodes (GPU and CPU pools alike), as the rehearsal starts them; no real node in this tier.
    stack_config = load_stack(ROOT / "stacks" / f"Pulumi.{STACK}.yaml")
    expected = {n["metadata"]["name"] for n in fake_nodes(stack_config, every_pool=True)}
    assert {"fake-a100-0", "fake-l4-0", "cpu-0"} <= expected
    assert nodes == expected
    again = engine.run("up", "--yes", "--skip-preview", "--expect-no-changes")
    assert again.returncode == 0, again.explain()
    assert "--refresh" not in again.stderr


def test_destroy_keeps_crds_namespaces_and_volumes(engine: Engine, deployed: Run, rendered_objects: dict[Key, Manifest],
                                           timings: list[Timing]) -> None:
    run = engine.run("destroy", "--yes")
    timings.append(Timing("pulumi destroy", run.wall, run.engine, "CRDs, namespaces and volumes retained"))
    assert run.returncode == 0, run.explain()
    retained = [k for k in rendered_objects if k[1] in DATA_HOLDING_KINDS]
    gone = [k for k in rendered_objects if k not in retained]
    # Every namespace is retained (tenants', the object store's, and those of the controllers the stack installs).
    assert {"team-a", "team-b", "object-store"} <= {k[3] for k in retained if k[1] == "Namespace"}
    assert {k[3] for k in retained if k[1] == "Namespace"} == {k[3] for k in rendered_objects if k[1] == "Namespace"}
    # The object store's data volume outlives the stack (manifests/lifecycle.py): the local stack renders
    # SeaweedFS's claim although its chart is external (core objects have the group "", see key_of).
    # test_destroy_keeps_data.py proves the same with MLflow's PostgreSQL and protect_data on.
    assert ("", "PersistentVolumeClaim", "object-store", "seaweedfs-data") in retained
    assert all(k in retained for k in rendered_objects if k[1] == "PersistentVolumeClaim")
    live = live_objects(engine.cluster, list(rendered_objects))
    assert sorted(set(retained) - set(live)) == []
    assert sorted(set(gone) & set(live)) == []
    for key in retained:
        if key[1] == "Namespace":
            assert live[key]["status"]["phase"] == "Active"
    for resource in ("clusterqueues", "resourceflavors", "cohorts", "topologies", "workloadpriorityclasses",
                     "clustertrainingruntimes", "localqueues"):
        assert engine.cluster.get_json(resource, "--all-namespaces")["items"] == [], resource


def test_timing_table(timings: list[Timing], tmp_path_factory: pytest.TempPathFactory,
                      capsys: pytest.CaptureFixture[str]) -> None:
    if not timings:
        pytest.skip("no engine run was timed")
    lines = ["| step | wall (s) | engine (s) | note |", "|---|---:|---:|---|"]
    lines += [f"| {t.step} | {t.wall:.1f} | {'' if t.engine is None else f'{t.engine:.1f}'} | {t.note} |" for t in timings]
    by_step = {t.step: t for t in timings}
    # The engine's time against the server-side apply of the same objects (issue #14 aims at 3x or less).
    for up, apply in (("pulumi up (first)", "kubectl apply --server-side (first)"),
                      ("pulumi up (no-op)", "kubectl apply --server-side (no-op)")):
        if up in by_step and apply in by_step and by_step[apply].wall > 0:
            engine = by_step[up].engine if by_step[up].engine is not None else by_step[up].wall
            lines.append(f"| ratio: {up} / {apply} | {engine / by_step[apply].wall:.1f}x | | load average "
                         f"{os.getloadavg()[0]:.1f} |")
    table = "\n".join(lines) + "\n"
    path = tmp_path_factory.mktemp("timings") / "timings.md"
    path.write_text(table)
    with capsys.disabled():
        print(f"\n\ncluster tier timings (wall = tools/pulumi-local.sh or kubectl; engine = the pulumi command) -> {path}")
        print(table)
