"""``trainyard-trainjob-resources`` on a real kube-apiserver (1.36): the whole shapes matrix, server-side dry run.

Only Trainer's CRDs, the tenant namespaces and the four objects of the concern are applied (the local stack
with a fake pool of each kind, tests/fixtures/job-shapes-overrides.yaml). Each TrainJob of the matrix
(tests/job_shapes.py: every shape x every approved runtime x whole GPUs, MIG slices, time-sliced replicas) is
created with ``--dry-run=server``: what the API server admits must carry exactly the resourcesPerNode (and
numProcPerNode) that ``trainjob_resources.complete`` computes, and what it refuses must be what
``trainjob_resources.refusals`` refuses, with the policy's message. The table is printed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests import job_shapes
from tests.cluster.conftest import Cluster, bare_api_server, install_policy_params
from tests.conftest import ROOT, rendered
from trainyard import catalog
from trainyard.manifests import admission
from trainyard.manifests import trainjob_resources as tr
from trainyard.manifests.meta import TENANT_LABEL
from trainyard.rehearsal.kube import wait_until
from trainyard.rehearsal.stack import write_rehearsal_stack

pytestmark = pytest.mark.cluster

NOT_YET_SERVED = "There can be a delay between when CustomResourceDefinitions are created and when they are available"
DENIED = "denied request: "


@pytest.fixture(scope="module")
def shapes_config(tmp_path_factory: pytest.TempPathFactory) -> Any:
    overrides = yaml.safe_load((ROOT / "tests" / "fixtures" / "job-shapes-overrides.yaml").read_text(encoding="utf-8"))
    return write_rehearsal_stack(ROOT / "stacks" / "Pulumi.local.yaml",
                                 tmp_path_factory.mktemp("shapes") / "Pulumi.local.yaml", overrides)


@pytest.fixture(scope="module")
def shapes_cluster(tmp_path_factory: pytest.TempPathFactory, shapes_config: Any) -> Iterator[Cluster]:
    platform = rendered("local")
    crds = [c for c in platform.crds if c["spec"]["group"] == catalog.TRAINER_API.split("/")[0]]
    namespaces = [o for o in platform.objects if o["kind"] == "Namespace" and TENANT_LABEL in o["metadata"]["labels"]]
    concern = tr.build(shapes_config, platform.concern("runtimes").objects).objects
    assert len(concern) == 4
    with bare_api_server(tmp_path_factory, "trainjob-resources") as cluster:
        # The validating policy reads which flavors a namespace's queue offers from its params.
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-",
                        stdin=yaml.safe_dump_all([*crds, *namespaces]))
        install_policy_params(cluster, platform, list(admission.tenant_params(shapes_config).values()))
        cluster.wait_established(*(c["metadata"]["name"] for c in crds))
        cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-", stdin=yaml.safe_dump_all(concern))
        # Served is not enough: the API server applies a new admission policy once its informer has it, which took
        # longer than the first dry runs under load (a cold CI run saw a "limits only" job admitted as written and
        # an unequal pair admitted). Wait until the mutating policy completes a job and the validating one refuses.
        completed = yaml.safe_dump(job_shapes.Case("whole", job_shapes.Shape(
            "limits only", limits={"nvidia.com/gpu": 1}), "torch-distributed", "", 0).trainjob("probe-completed"))
        refused = yaml.safe_dump(job_shapes.Case("whole", job_shapes.Shape(
            "unequal", requests={"nvidia.com/gpu": 1}, limits={"nvidia.com/gpu": 4}), "torch-distributed", "", 0)
            .trainjob("probe-refused"))

        seen: list[str] = []

        def in_effect() -> bool:
            done = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=completed, check=False)
            if done.returncode != 0:
                seen[:] = [f"completed probe refused: {done.stderr.strip()}"]
                return False
            got = json.loads(done.stdout)["spec"]["trainer"].get("resourcesPerNode") or {}
            if "requests" not in got:
                seen[:] = [f"completed probe admitted as {got}"]
                return False
            denied = cluster.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", stdin=refused, check=False)
            seen[:] = [f"refused probe: exit {denied.returncode} {denied.stderr.strip()}"]
            return denied.returncode != 0 and "resourcesPerNode" in denied.stderr

        try:
            wait_until("TrainJobs to be served with both policies in effect", in_effect, 120)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; last seen: {seen}") from None
        yield cluster


def dry_run(cluster: Cluster, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    def create() -> subprocess.CompletedProcess[str] | None:
        done = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=yaml.safe_dump(obj), check=False)
        return None if done.returncode != 0 and NOT_YET_SERVED in done.stderr else done
    result: subprocess.CompletedProcess[str] = wait_until("the API server to serve TrainJobs", create, 60, interval=1)
    return result


def expected(case: job_shapes.Case, config: Any) -> tuple[dict[str, Any] | None, int | None, list[str]]:
    flavors = tr.tenant_flavors(config)[job_shapes.TENANT_NAMESPACE]
    completed, num_proc, refused = job_shapes.expected(case, list(rendered("local").concern("runtimes").objects), flavors)
    return (as_strings(completed.as_manifest()) if completed else None), num_proc, refused


def as_strings(resources: dict[str, Any]) -> dict[str, Any]:
    return {kind: {k: str(v) for k, v in values.items()} for kind, values in resources.items()}


def test_the_api_server_completes_and_refuses_every_shape_as_the_rules_say(shapes_cluster: Cluster,
                                                                           shapes_config: Any) -> None:
    rows, wrong = [], []
    for case in job_shapes.cases():
        want, want_proc, want_refused = expected(case, shapes_config)
        done = dry_run(shapes_cluster, case.trainjob("shape"))
        if done.returncode == 0:
            trainer = yaml.safe_load(done.stdout)["spec"]["trainer"]
            got = trainer.get("resourcesPerNode")
            outcome = "admitted: " + (", ".join(f"{k} {v}" for k, v in sorted(as_strings(got)["requests"].items()))
                                      if got else "runtime's resources")
            if want_refused or (as_strings(got) if got else None) != want or trainer.get("numProcPerNode") != want_proc:
                wrong.append(f"{case.id}: admitted as {got} (numProcPerNode {trainer.get('numProcPerNode')}); "
                             f"expected {want_refused or want} (numProcPerNode {want_proc})")
        else:
            message = done.stderr.strip().split(DENIED, 1)[-1]
            outcome = "refused: " + message
            if not want_refused:
                wrong.append(f"{case.id}: refused ({message}); expected admitted as {want}")
            elif tr.POLICY not in done.stderr:
                wrong.append(f"{case.id}: refused by something else: {done.stderr.strip()}")
        rows.append(f"| {case.pool} | {case.runtime} | {case.shape.name} | {outcome[:160]} |")
    print("\n| pool | runtime | shape | API server (dry run) |\n|---|---|---|---|\n" + "\n".join(rows))
    assert wrong == []


def test_a_refusal_names_the_field_and_says_how_to_write_it(shapes_cluster: Cluster) -> None:
    case = job_shapes.Case("whole", job_shapes.Shape("unequal", requests={"nvidia.com/gpu": 1},
                                                     limits={"nvidia.com/gpu": 4}), "torch-distributed", "", 0)
    done = dry_run(shapes_cluster, case.trainjob("unequal"))
    assert done.returncode != 0
    assert ("ValidatingAdmissionPolicy 'trainyard-trainjob-resources' with binding 'trainyard-trainjob-resources' denied "
            "request: spec.trainer.resourcesPerNode: requests.nvidia.com/gpu 1 is not limits.nvidia.com/gpu 4; an extended "
            "resource's request must equal its limit: give one figure (a limit alone is also the request)") in done.stderr

