"""Property: the other inputs users hand ``trainyard`` never end in a traceback either.

- manifest files given to ``trainyard check STACK [-n NS] FILE...`` (the option before or after
  the files): mutated fixture manifests, odd YAML, bytes;
- ``trainyard diff --base REV`` with revisions that do not exist, tags, tree-ishes, empty or
  option-looking strings (``--upload-pack=...`` must never reach git as an option);
- ``trainyard preview-comment`` event logs and digests: truncated lines, wrong types, huge lines.
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ROOT, needs_crds
from tests.properties.cli_run import assert_clean, run
from tests.properties.test_stack_input import SCALARS, VALUES, container_at, document_paths
from tests.review.conftest import demo_stack, git

BAD = sorted((ROOT / "tests" / "fixtures" / "bad-manifests").glob("*.yaml"))
PREVIEW = ROOT / "tests" / "fixtures" / "preview"
MANIFESTS = [list(yaml.safe_load_all(path.read_text())) for path in BAD]


@st.composite
def mutated_manifests(draw: st.DrawFn) -> str | bytes:
    docs = copy.deepcopy(draw(st.sampled_from(MANIFESTS)))
    doc = docs[0]
    edit = draw(st.sampled_from(["set", "set", "delete", "text", "bytes", "alias", "non-mapping"]))
    if edit in ("set", "delete"):
        path = draw(st.sampled_from([p for p in document_paths(doc) if p]))
        parent = container_at(doc, path[:-1])
        if edit == "set":
            parent[path[-1]] = draw(VALUES)
        else:
            del parent[path[-1]]
    text = yaml.safe_dump_all(docs, allow_unicode=True, sort_keys=False)
    if edit == "text":
        at = draw(st.integers(min_value=0, max_value=len(text)))
        return text[:at] + draw(st.sampled_from(["\t", "---\n", ": :", "&a *a", "[", "\n- x\n", "!!binary ###"])) + text[at:]
    if edit == "bytes":
        at = draw(st.integers(min_value=0, max_value=len(text)))
        return text[:at].encode() + draw(st.binary(min_size=1, max_size=6)) + text[at:].encode()
    if edit == "alias":
        return "a: &a [x, x, x, x, x, x, x, x]\n" + "".join(
            f"a{i}: &a{i} [{', '.join(['*a' if i == 1 else f'*a{i - 1}'] * 8)}]\n" for i in range(1, 9))
    if edit == "non-mapping":
        return draw(st.sampled_from(["[]\n", "42\n", "---\n- a\n", "kind: [x]\napiVersion: 1\nmetadata: {name: 5}\n",
                                     "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: [x]}\n",
                                     "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {1: 2}\n"]))
    return text


@needs_crds
@given(content=mutated_manifests(), option_after=st.booleans(), namespace=st.sampled_from([None, "assistant", "x"]))
def test_check_never_raises_on_odd_manifest_files(content: str | bytes, option_after: bool, namespace: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="trainyard-prop-") as tmp:
        file = Path(tmp) / "pr.yaml"
        file.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
        option = ["-n", namespace] if namespace else []
        argv = ["check", "prod", str(file), *option] if option_after else ["check", "prod", *option, str(file)]
        outcome = run(argv)
        assert_clean(outcome, (0, 1, 2))
        if outcome.code == 2:
            assert "pr.yaml" in outcome.err


@needs_crds
def test_namespace_option_may_follow_the_files() -> None:
    job = (ROOT / "tests" / "fixtures" / "bad-manifests" / "trainjob-priority-class--critical-not-allowed.yaml")
    text = job.read_text().replace("  namespace: llm-research\n", "")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "job.yaml").write_text(text)
        before = run(["check", "prod", "-n", "llm-research", str(Path(tmp) / "job.yaml")])
        after = run(["check", "prod", str(Path(tmp) / "job.yaml"), "-n", "llm-research"])
    assert before.code == after.code == 1
    assert before.out == after.out
    assert "TrainJob/llm-research/llama-sft" in after.out


# --- diff --base ---------------------------------------------------------------------------

ODD_REVISIONS = st.one_of(st.sampled_from([
    "", " ", "-", "--", "--upload-pack=touch PWNED", "--output=PWNED", "-oPWNED", "--exec=touch PWNED",
    "HEAD", "HEAD~1", "HEAD~999", "HEAD^{tree}", "HEAD:stacks", "HEAD:stacks/Pulumi.demo.yaml", "v1", "v1^{}",
    "refs/tags/v1", "main..HEAD", "@{-1}", "@", "no-such-rev", "a" * 300, "\x00", "HEAD\n--upload-pack=x",
    "ünï", ":/demo", "HEAD@{yesterday}", "$(touch PWNED)", "`touch PWNED`",
]), st.text(max_size=20))


@pytest.fixture(scope="module")
def demo_repo() -> Iterator[Path]:
    """A git project with a demo stack, two commits and a tag."""
    with tempfile.TemporaryDirectory(prefix="trainyard-prop-repo-") as tmp:
        root = Path(tmp) / "repo"
        (root / "stacks").mkdir(parents=True)
        (root / "runtimes").mkdir()
        shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
        shutil.copy(ROOT / "runtimes" / "torch-distributed.yaml", root / "runtimes" / "torch-distributed.yaml")
        # The runtime's image is pinned by the lock (images.lock_file, relative to the project root).
        shutil.copy(ROOT / "images.lock.yaml", root / "images.lock.yaml")
        (root / "stacks" / "Pulumi.demo.yaml").write_text(demo_stack())
        git(root, "init", "--quiet", "--initial-branch=main")
        git(root, "add", ".")
        git(root, "commit", "--quiet", "-m", "demo")
        git(root, "tag", "v1")
        (root / "stacks" / "Pulumi.demo.yaml").write_text(demo_stack(nodes=3, tenants=(("team-a", 16), ("team-b", 8))))
        git(root, "commit", "--quiet", "-am", "more GPUs")
        yield root


@needs_crds
@given(revision=ODD_REVISIONS)
def test_diff_never_raises_and_never_passes_an_option_to_git(demo_repo: Path, revision: str) -> None:
    with contextlib.chdir(demo_repo):
        outcome = run(["diff", "demo", f"--base={revision}", "--no-policy"])
    assert_clean(outcome, located=False)
    if outcome.code == 2:
        assert "--base" in outcome.err or "revision" in outcome.err, outcome.err
    assert not list(demo_repo.rglob("PWNED")) and not list(Path.cwd().glob("PWNED"))
    worktrees = git(demo_repo, "worktree", "list", "--porcelain").count("worktree ")
    assert worktrees == 1


# --- preview-comment -----------------------------------------------------------------------

LOGS = {path.name: path.read_text() for path in sorted(PREVIEW.glob("*"))}


def _json_paths(value: Any) -> list[tuple[str | int, ...]]:
    return [p for p in document_paths(value) if p]


@st.composite
def mutated_previews(draw: st.DrawFn) -> str | bytes:
    name = draw(st.sampled_from(sorted(LOGS)))
    text = LOGS[name]
    edit = draw(st.sampled_from(["value", "value", "truncate", "huge-line", "bytes", "wrong-top", "numbers"]))
    if edit == "truncate":
        return text[:draw(st.integers(min_value=0, max_value=len(text)))]
    if edit == "bytes":
        at = draw(st.integers(min_value=0, max_value=len(text)))
        return text[:at].encode() + draw(st.binary(min_size=1, max_size=6)) + text[at:].encode()
    if edit == "huge-line":
        return text + json.dumps({"sequence": 99, "diagnosticEvent": {"severity": "warning", "message": "x" * 3_000_000}})
    if edit == "wrong-top":
        return draw(st.sampled_from(["[1, 2]", "[]", "null", "\"x\"", "{}", "{\"steps\": 5}", "{\"sequence\": \"x\"}\n",
                                     "{\"sequence\": 1e999}\n", "{\"sequence\": 1" + "0" * 5000 + "}\n"]))
    lines = [line for line in text.splitlines() if line.strip()]
    if name.endswith(".jsonl"):
        index = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        docs = [json.loads(lines[index])]
    else:
        docs = [json.loads(text)]
    doc = docs[0]
    path = draw(st.sampled_from(_json_paths(doc) or [()]))
    if path:
        parent = container_at(doc, path[:-1])
        parent[path[-1]] = draw(SCALARS if edit == "numbers" else VALUES)
    dumped = json.dumps(doc, allow_nan=True)
    if name.endswith(".jsonl"):
        lines[index] = dumped
        return "\n".join(lines) + "\n"
    return dumped


@given(content=mutated_previews(), with_events=st.booleans())
def test_preview_comment_never_raises_on_odd_logs(content: str | bytes, with_events: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="trainyard-prop-") as tmp:
        file = Path(tmp) / "preview.json"
        file.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
        argv = ["preview-comment", str(file)]
        if with_events:
            argv += ["--events", str(file)]
        outcome = run(argv)
    assert_clean(outcome, located=False)
    if outcome.code == 2:
        assert "preview.json" in outcome.err


@needs_crds
@pytest.mark.parametrize(("edit", "field"), [
    (("metadata", "labels", "kueue.x-k8s.io/queue-name"), "metadata.labels.kueue.x-k8s.io/queue-name"),
    (("spec", "runtimeRef", "name"), "spec.runtimeRef.name"),
])
def test_an_extra_manifest_the_api_server_would_refuse_exits_2_naming_the_field(edit: tuple[str, ...], field: str) -> None:
    job = yaml.safe_load((ROOT / "tests" / "fixtures" / "bad-manifests" / "trainjob-queue-label--unknown-queue.yaml").read_text())
    container_at(job, edit[:-1])[edit[-1]] = ["not", "a", "string"]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "job.yaml").write_text(yaml.safe_dump(job))
        outcome = run(["check", "prod", str(Path(tmp) / "job.yaml")])
    assert outcome.code == 2
    assert f"job.yaml (document 1): {field}: " in outcome.err and "the API server would refuse it" in outcome.err
