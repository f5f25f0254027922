"""`trainyard diff STACK --base REV` and `--against STACK`, on small git repositories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.review.conftest import demo_stack, git
from trainyard.cli import main
from trainyard.config import ConfigError
from trainyard.manifests import RenderedPlatform
from trainyard.project import Stack
from trainyard.review.diff import review_against_revision
from trainyard.review.revision import RevisionError

pytestmark = pytest.mark.usefixtures("crds")


def worktrees(root: Path) -> list[str]:
    return [line for line in git(root, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def test_base_revision_is_rendered_from_the_revision_and_compared_with_the_work_tree(project: Path) -> None:
    (project / "stacks" / "Pulumi.demo.yaml").write_text(demo_stack(nodes=3, tenants=(("team-a", 16), ("team-b", 8))))
    review = review_against_revision("demo", "HEAD", project)
    assert "`team-a` a100 nominal quota 8 -> 16 (+8)" in review.highlights
    assert "flavor `a100`: 16 -> 24 (+8) GPUs, committed 16 -> 24 (+8), free 0" in review.highlights
    assert review.base.startswith("HEAD (") and review.head == "work tree"
    assert len(worktrees(project)) == 1


def test_runtime_digests_come_from_the_revision_too(project: Path) -> None:
    # Runtimes name images by tag; a digest moves in the image lock, and the review shows it on the runtime.
    lock = project / "images.lock.yaml"
    lock.write_text(lock.read_text().replace("631af2fb862da93d", "0000000000000000"))
    review = review_against_revision("demo", "HEAD", project)
    # The other field: TRAINYARD_RUNTIME_IMAGE, the pinned reference the program records (provenance_wiring).
    assert review.highlights == ("runtime `torch-distributed` image digest changed "
                                 "(`node`: `sha256:631af2fb862d` -> `sha256:000000000000`)",
                                 "runtime `torch-distributed`: 1 other field changed")


def test_a_stack_file_missing_at_the_revision_means_everything_is_added(project: Path) -> None:
    (project / "stacks" / "Pulumi.new.yaml").write_text(demo_stack())
    git(project, "add", ".")
    git(project, "commit", "--quiet", "-m", "new stack")
    review = review_against_revision("new", "HEAD~1", project)
    assert review.changes and {c.action for c in review.changes} == {"added"}
    assert review.notes == (f"`stacks/Pulumi.new.yaml` does not exist at {review.base}: everything is added.",)
    assert "tenant `team-a` added with nominal GPU quota a100 8" in review.highlights


@pytest.mark.parametrize("serial", ["0", "1"], ids=["base beside the head", "one after the other"])
def test_the_worktree_is_removed_even_when_rendering_fails(project: Path, serial: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The base fails to render: the error is the plain one (the forked child's run is redone here), and the
    worktree it rendered in is gone either way."""
    monkeypatch.setenv("TRAINYARD_SERIAL", serial)
    seen: list[Path] = []

    def failing_render(stack: Stack) -> RenderedPlatform:
        seen.append(stack.root)
        if stack.root != project:
            raise RuntimeError("boom")
        return Stack.render(stack)

    with pytest.raises(RuntimeError, match="boom"):
        review_against_revision("demo", "HEAD", project, render=failing_render)
    checkouts = [root for root in seen if root != project]
    assert checkouts and not any(root.exists() for root in checkouts)
    assert len(worktrees(project)) == 1


def test_a_head_that_fails_waits_for_the_base_and_leaves_no_worktree(project: Path) -> None:
    (project / "stacks" / "Pulumi.demo.yaml").write_text("config: {trainyard:platform: {tenants: 7}}\n")
    with pytest.raises(ConfigError):
        review_against_revision("demo", "HEAD", project)
    assert len(worktrees(project)) == 1


def test_the_base_beside_the_head_gives_the_review_one_after_the_other_gives(project: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "stacks" / "Pulumi.demo.yaml").write_text(demo_stack(nodes=3, tenants=(("team-a", 16), ("team-b", 8))))
    from trainyard.review.diff import review_to_dict
    from trainyard.review.policy_delta import default_evaluator

    evaluator = default_evaluator()
    reviews = []
    for serial in ("1", "0"):
        monkeypatch.setenv("TRAINYARD_SERIAL", serial)
        reviews.append(json.dumps(review_to_dict(review_against_revision("demo", "HEAD", project, evaluator=evaluator)),
                                  sort_keys=True, default=str))
    assert reviews[0] == reviews[1]
    assert json.loads(reviews[0])["changes"] and "policy" in json.loads(reviews[0])


def test_unknown_revision_is_a_clear_error_with_exit_code_2(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RevisionError, match="unknown revision 'no-such-rev'"):
        review_against_revision("demo", "no-such-rev", project)
    monkeypatch.chdir(project)
    assert main(["diff", "demo", "--base", "no-such-rev"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown revision 'no-such-rev'") and "Traceback" not in err
    assert main(["diff", "demo", "--base", "--upload-pack=touch /tmp/x"]) == 2


def test_a_stack_that_does_not_load_at_the_revision_is_a_clear_error(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    stack_file = project / "stacks" / "Pulumi.demo.yaml"
    good = stack_file.read_text()
    stack_file.write_text(good.replace("nodes: 2", "nodes: -1"))
    git(project, "commit", "--quiet", "-am", "broken")
    stack_file.write_text(good)
    monkeypatch.chdir(project)
    assert main(["diff", "demo", "--base", "HEAD"]) == 2
    assert "stacks/Pulumi.demo.yaml at HEAD does not load" in capsys.readouterr().err
    assert len(worktrees(project)) == 1


def test_cli_prints_markdown_text_or_json(project: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (project / "stacks" / "Pulumi.demo.yaml").write_text(demo_stack(tenants=(("team-a", 4), ("team-b", 8))))
    monkeypatch.chdir(project)
    assert main(["diff", "demo", "--base", "HEAD", "--no-policy"]) == 0
    markdown = capsys.readouterr().out
    assert markdown.startswith("<!-- trainyard-diff:demo -->\n## Trainyard review: demo: HEAD (")
    assert "- `team-a` a100 nominal quota 8 -> 4 (-4)" in markdown
    assert main(["diff", "demo", "--base", "HEAD", "--format", "text", "--no-policy"]) == 0
    assert "  - team-a a100 nominal quota 8 -> 4 (-4)" in capsys.readouterr().out
    out = project / "review.json"
    assert main(["diff", "demo", "--base", "HEAD", "--format", "json", "--out", str(out), "--no-policy"]) == 0
    assert json.loads(out.read_text())["counts"]["changed"] >= 2


def test_promotion_review_compares_two_stacks_of_the_tree(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    staging = demo_stack(nodes=3, tenants=(("team-a", 8), ("team-b", 8), ("team-c", 8)))
    (project / "stacks" / "Pulumi.staging.yaml").write_text(staging.replace("environment: demo", "environment: staging"))
    monkeypatch.chdir(project)
    assert main(["diff", "staging", "--against", "demo", "--no-policy"]) == 0
    markdown = capsys.readouterr().out
    assert "## Trainyard review: staging against demo" in markdown
    assert "- tenant `team-c` added with nominal GPU quota a100 8" in markdown
    assert "base: demo · head: staging" in markdown


def test_diff_needs_a_base_or_another_stack(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["diff", "prod"])
    assert exit_info.value.code == 2
    assert "one of the arguments --base --against is required" in capsys.readouterr().err
