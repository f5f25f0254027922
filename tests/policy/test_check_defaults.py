"""``trainyard check`` of a tenant's TrainJob: the labels the cluster adds on create are assumed, not demanded.

Kueue's LocalQueue defaulting adds ``kueue.x-k8s.io/queue-name: default`` and Trainyard's
``trainyard-trainjob-default-priority`` the tenant's default priority class (manifests/trainjob_defaults.py);
the cluster tier shows both on the real Kueue and API server (tests/cluster/test_tenant_tools.py, the SDK's
unlabelled job). Here: check assumes exactly those, says so, and still refuses a label that is present and wrong.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import needs_crds, rendered, stack
from trainyard.cli import main
from trainyard.manifests.meta import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from trainyard.manifests.trainjob_defaults import labels_added_on_create, selector_matches

UNLABELLED = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
              "metadata": {"name": "llama-sft", "namespace": "llm-research"},
              "spec": {"runtimeRef": {"name": "torch-distributed"}}}


def trainjob(namespace: str = "llm-research", labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    job = copy.deepcopy(UNLABELLED)
    job["metadata"]["namespace"] = namespace
    if labels is not None:
        job["metadata"]["labels"] = labels
    job["metadata"].update(meta)
    return job


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], job: dict[str, Any], *args: str) -> tuple[int, str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    code = main(["check", "prod", str(path), *args])
    return code, capsys.readouterr().out


@needs_crds
def test_a_tenant_trainjob_without_queue_and_priority_labels_passes_and_check_says_what_it_assumed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(tmp_path, capsys, trainjob())
    print(out)
    assert code == 0
    assert "prod: 0 mandatory, 0 advisory findings" in out
    assert out.startswith("ASSUMED  TrainJob/llm-research/llama-sft")
    assert ("  queue: default (added by Kueue: LocalQueue defaulting, the LocalQueue 'default' of namespace "
            "llm-research)") in out
    assert ("  priority class: standard (added by trainyard-trainjob-default-priority: the default_priority_class of "
            "namespace llm-research)") in out


@needs_crds
def test_the_json_report_lists_the_assumed_labels_with_who_adds_them(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(tmp_path, capsys, trainjob("eval"), "--format", "json")
    assert code == 0
    assumed = {(a["object"], a["label"], a["value"], a["added_by"]) for a in json.loads(out)["assumed"]}
    assert assumed == {("TrainJob/eval/llama-sft", QUEUE_NAME_LABEL, "default", "Kueue"),
                       ("TrainJob/eval/llama-sft", PRIORITY_CLASS_LABEL, "preemptible",
                        "trainyard-trainjob-default-priority")}


@needs_crds
@pytest.mark.parametrize(("labels", "rule", "message"), [
    ({QUEUE_NAME_LABEL: "fast-lane"}, "trainjob-queue-label", "'fast-lane' is not a LocalQueue of namespace"),
    ({PRIORITY_CLASS_LABEL: "critical"}, "trainjob-priority-class", "'critical' is not allowed for tenant llm-research"),
    # An empty priority label is a label: the policy adds nothing (its CEL tests the key), so it is refused.
    ({PRIORITY_CLASS_LABEL: ""}, "trainjob-priority-class", "priority class '' is not allowed"),
])
def test_a_label_that_is_present_but_wrong_is_still_refused_with_the_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], labels: dict[str, str], rule: str, message: str) -> None:
    code, out = check(tmp_path, capsys, trainjob(labels=labels))
    assert code == 1
    assert f"MANDATORY  {rule}  TrainJob/llm-research/llama-sft" in out and message in out
    given = "  queue:" if QUEUE_NAME_LABEL in labels else "  priority class:"
    assert given not in out  # a label the job sets is never assumed over


@needs_crds
def test_outside_a_tenant_namespace_nothing_is_assumed_and_the_missing_queue_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(tmp_path, capsys, trainjob("default"))
    assert code == 1
    assert "ASSUMED" not in out
    assert "has no kueue.x-k8s.io/queue-name label, and Kueue adds none in namespace 'default'" in out


@needs_crds
def test_an_empty_queue_label_is_defaulted_as_kueue_does() -> None:
    # Kueue reads the label's value (QueueNameForObject): "" is no queue, and the webhook writes "default".
    config, objects = stack("prod").config, rendered("prod").all_objects
    added = labels_added_on_create(config, objects, trainjob(labels={QUEUE_NAME_LABEL: "", PRIORITY_CLASS_LABEL: "x"}))
    assert [(a.key, a.value) for a in added] == [(QUEUE_NAME_LABEL, "default")]


@needs_crds
def test_a_trainjob_controlled_by_a_kind_kueue_manages_gets_no_queue() -> None:
    config, objects = stack("prod").config, rendered("prod").all_objects
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "parent", "uid": "1", "controller": True}
    added = labels_added_on_create(config, objects, trainjob(ownerReferences=[owner]))
    assert [a.key for a in added] == [PRIORITY_CLASS_LABEL]
    not_managed = {**owner, "apiVersion": "example.com/v1", "kind": "Pipeline"}
    assert [a.key for a in labels_added_on_create(config, objects, trainjob(ownerReferences=[not_managed]))] == [
        QUEUE_NAME_LABEL, PRIORITY_CLASS_LABEL]


@needs_crds
def test_without_the_defaulting_objects_nothing_is_assumed() -> None:
    """The assumptions follow the stack's objects: no LocalQueue ``default`` (or Namespace), no queue; no default
    priority policy or binding, no priority class."""
    config, objects = stack("prod").config, rendered("prod").all_objects

    def without(kind: str, name: str) -> list[dict[str, Any]]:
        return [o for o in objects if not (o["kind"] == kind and o["metadata"]["name"] == name
                                           and o["metadata"].get("namespace") in (None, "llm-research"))]

    def keys(objs: list[dict[str, Any]]) -> list[str]:
        return [a.key for a in labels_added_on_create(config, objs, trainjob())]

    assert keys(list(objects)) == [QUEUE_NAME_LABEL, PRIORITY_CLASS_LABEL]
    assert keys(without("LocalQueue", "default")) == [PRIORITY_CLASS_LABEL]
    assert keys(without("Namespace", "llm-research")) == []
    assert keys(without("MutatingAdmissionPolicyBinding", "trainyard-trainjob-default-priority")) == [QUEUE_NAME_LABEL]
    untenanted = [copy.deepcopy(o) for o in objects]
    for obj in untenanted:
        if obj["kind"] == "Namespace" and obj["metadata"]["name"] == "llm-research":
            del obj["metadata"]["labels"]["trainyard.dev/tenant"]  # managedJobsNamespaceSelector and binding miss it
    assert keys(untenanted) == []


def test_label_selectors_match_as_the_api_server_reads_them() -> None:
    labels = {"trainyard.dev/tenant": "a", "tier": "gpu"}
    assert selector_matches(None, labels) and selector_matches({}, labels)
    assert selector_matches({"matchExpressions": [{"key": "trainyard.dev/tenant", "operator": "Exists"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, labels)
    assert selector_matches({"matchLabels": {"tier": "gpu"},
                             "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, labels)
    assert not selector_matches({"matchLabels": {"tier": "cpu"}}, labels)
