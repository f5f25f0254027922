"""`trainyard preview-comment`: Pulumi's preview JSON and event log as the same review as `trainyard diff`.

The fixtures follow Pulumi's documented shapes: ``PreviewDigest`` (sdk/go/common/display/json.go)
for ``pulumi preview --json`` and ``EngineEvent`` (sdk/go/common/apitype/events.go) for the event log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainyard.cli import main
from trainyard.review.markdown import to_markdown
from trainyard.review.preview_comment import PreviewFormatError, load_preview, parse_property_path, preview_review

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "preview"
DIGEST = FIXTURES / "prod-preview.json"
EVENTS = FIXTURES / "prod-events.jsonl"


def test_steps_become_object_changes_with_named_paths_and_old_new_values() -> None:
    review = preview_review(load_preview(DIGEST))
    by_id = {c.id: c for c in review.changes}
    queue = by_id["ClusterQueue/assistant"]
    assert (queue.action, queue.tenant) == ("changed", "assistant")
    gpu = next(f for f in queue.fields if f.path.endswith("resources[nvidia.com/gpu].nominalQuota"))
    assert (gpu.path, gpu.old, gpu.new) == ("spec.resourceGroups[0].flavors[h100].resources[nvidia.com/gpu].nominalQuota", 32, 40)
    assert by_id["Namespace/vision"].action == "added"
    assert by_id["NetworkPolicy/eval/allow-legacy-metrics"].action == "removed"
    assert by_id["StorageClass/checkpoints"].action == "replaced"
    assert by_id["StorageClass/checkpoints"].note == "replaced because of `parameters`"
    assert by_id["Deployment/kueue-system/kueue-controller-manager"].concern == "Installs"
    assert not any(c.kind in ("Stack", "Queueing") for c in review.changes)
    assert review.plan == {"create": 5, "update": 6, "replace": 1, "delete": 1, "same": 98}
    assert review.unchanged == 98


def test_highlights_read_like_trainyard_diff() -> None:
    review = preview_review(load_preview(DIGEST))
    assert review.highlights[:4] == (
        "`assistant` h100 nominal quota 32 -> 40 (+8)",
        "tenant `vision` added (namespace `vision`)",
        "runtime `torch-distributed` image digest changed (`node`: `sha256:631af2fb862d` -> `sha256:9b2e9b2e9b2e`)",
        "chart `kueue` version 0.19.1 -> 0.19.2",
    )
    markdown = to_markdown(review)
    assert markdown.startswith("<!-- trainyard-preview:prod -->\n## Trainyard review: prod (pulumi preview)\n")
    assert "**Pulumi plan:** 5 to create, 6 to update, 1 to replace, 1 to delete, 98 unchanged" in markdown
    assert "  + spec.egress[0].ports[1].port: 9443" in markdown
    assert "- **warning** `ClusterQueue/vision`: ClusterQueue vision: cohort product has no lending capacity" in markdown
    assert "jobset: controller is external" not in markdown  # info diagnostics are left out


def test_secret_values_stay_redacted() -> None:
    markdown = to_markdown(preview_review(load_preview(DIGEST)))
    assert "~ data.password: <redacted> (value changed)" in markdown
    assert "[secret]" not in markdown


def test_policy_events_come_from_the_event_log() -> None:
    review = preview_review(load_preview(DIGEST, EVENTS))
    assert [(v.severity, v.rule_id, v.object_id) for v in review.violations] == [
        ("mandatory", "trainyard/network-egress-allowlist", "NetworkPolicy/eval/allow-object-store"),
        ("advisory", "trainyard/queue-lending-limit", "ClusterQueue/vision"),
    ]
    markdown = to_markdown(review)
    assert "| mandatory | trainyard/network-egress-allowlist | `NetworkPolicy/eval/allow-object-store` | " \
           "Egress to port 9443 leaves the approved storage endpoints. |" in markdown
    assert "<{%" not in markdown  # Pulumi colour tags are stripped
    assert "- **error**: preview failed: 1 mandatory policy violation" in markdown
    assert "Previewing update" not in markdown  # ephemeral events are left out
    assert "policy pack: 2 violations (1 mandatory)" in review.highlights


def test_an_event_log_alone_is_read_too() -> None:
    review = preview_review(load_preview(FIXTURES / "events-only.jsonl"))
    assert [c.id for c in review.changes] == ["ClusterQueue/assistant", "ClusterTrainingRuntime/torch-distributed"]
    assert review.plan == {"update": 2, "same": 109}


def test_no_changes() -> None:
    review = preview_review(load_preview(FIXTURES / "no-changes.json"))
    assert review.changes == ()
    assert "No changes." in to_markdown(review)


def test_step_order_does_not_change_the_comment(tmp_path: Path) -> None:
    doc = json.loads(DIGEST.read_text())
    doc["steps"].reverse()
    doc["diagnostics"].reverse()
    reordered = tmp_path / "reordered.json"
    reordered.write_text(json.dumps(doc))
    assert to_markdown(preview_review(load_preview(reordered))) == to_markdown(preview_review(load_preview(DIGEST)))


def test_many_changes_are_summarised_per_kind_and_folded(tmp_path: Path) -> None:
    steps = [{"op": "create", "urn": f"urn:pulumi:prod::trainyard::kubernetes:networking.k8s.io/v1:NetworkPolicy::t{i}/deny",
              "newState": {"inputs": {"metadata": {"name": "deny", "namespace": f"t{i}"}}}} for i in range(30)]
    path = tmp_path / "large.json"
    path.write_text(json.dumps({"steps": steps, "changeSummary": {"create": 30}}))
    markdown = to_markdown(preview_review(load_preview(path)))
    assert "| NetworkPolicy | 30 |" in markdown
    assert "<details><summary>30 objects</summary>" in markdown


def test_property_paths_follow_pulumi_syntax() -> None:
    assert parse_property_path('spec.items[0]["a.b/c"].value') == ["spec", "items", 0, "a.b/c", "value"]
    assert parse_property_path("metadata.labels") == ["metadata", "labels"]


def test_cli_writes_the_comment_and_rejects_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "comment.md"
    assert main(["preview-comment", str(DIGEST), "--events", str(EVENTS), "--out", str(out)]) == 0
    assert "### Policy violations" in out.read_text()
    bad = tmp_path / "plan.txt"
    bad.write_text("Previewing update (prod):\n  ~ kubernetes:core/v1:Namespace team-a update\n")
    assert main(["preview-comment", str(bad)]) == 2
    assert "not JSON" in capsys.readouterr().err
    with pytest.raises(PreviewFormatError, match="neither"):
        other = tmp_path / "other.json"
        other.write_text('{"resources": []}')
        load_preview(other)


def test_a_real_preview_of_pulumi_3_274_is_read() -> None:
    """Recorded from `pulumi preview --diff --json` and `--event-log` (Pulumi v3.274.1, a component-only project;
    stack traces stripped, debug diagnostics dropped from the log)."""
    review = preview_review(load_preview(FIXTURES / "real-component-update.json",
                                         FIXTURES / "real-component-update-events.jsonl"))
    assert [(c.action, c.id, [(f.path, f.old, f.new) for f in c.fields]) for c in review.changes] == [
        ("changed", "Team/team-a", [("gpus", 16, 24)])]
    assert review.plan == {"same": 1, "update": 1}
    assert [(d.severity, d.message) for d in review.diagnostics] == [("warning", "a warning from the program")]
    assert "[secret]" not in to_markdown(review)
