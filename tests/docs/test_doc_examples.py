"""Every command and manifest example in README.md and docs/**/*.md does what its doc says (docs/doc-examples.md)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, needs_crds
from tests.docs.doc_examples import Example, MarkerError, doc_files, examples_of

EXAMPLES = [example for doc in doc_files(ROOT) for example in examples_of(doc, ROOT)]


def run_example(example: Example, workdir: Path) -> subprocess.CompletedProcess[str]:
    """A command as a user types it in a fresh directory (stack names resolve to this repository); a manifest
    through ``trainyard check STACK FILE``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "platform"), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    (workdir / ".venv").symlink_to(Path(sys.executable).parent.parent)
    if example.kind == "manifest":
        manifest = workdir / "example.yaml"
        manifest.write_text(example.text, encoding="utf-8")
        command = f"trainyard check {shlex.quote(str(example.stack))} {manifest}"
    else:
        command = example.text.split(" # ")[0].strip()
    return subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


def test_the_docs_have_examples_of_both_kinds() -> None:
    assert {e.kind for e in EXAMPLES} == {"command", "manifest"}
    assert any(e.doc.as_posix() == "docs/lab.md" and e.stack == "staging" for e in EXAMPLES)


@needs_crds
@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.where}:{e.text.splitlines()[0][:60]}" for e in EXAMPLES])
def test_doc_example(example: Example, tmp_path: Path) -> None:
    done = run_example(example, tmp_path)
    assert done.returncode == example.exit_code, (
        f"{example.where}: expected exit {example.exit_code}, got {done.returncode}\n"
        f"{done.stdout[-3000:]}{done.stderr[-2000:]}")


def test_a_manifest_without_a_marker_is_refused(tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "x.md"
    doc.parent.mkdir()
    doc.write_text("Text.\n\n```yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n```\n")
    with pytest.raises(MarkerError, match=r"docs/x.md:3: a Kubernetes manifest needs"):
        examples_of(doc, tmp_path)


def test_markers_set_the_stack_and_the_exit_code_and_skip(tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    doc.write_text("<!-- doc-test: check prod exit 1 -->\n```yaml\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\n```\n\n"
                   "<!-- doc-test: exit 2 (bad input) -->\n```bash\ntrainyard validate nope  # comment\npulumi up\n```\n\n"
                   "<!-- doc-test: skip needs a registry -->\n```bash\ntrainyard images lock prod\n```\n\n"
                   "```sh\ntrainyard not-run\n```\n")
    manifest, command = examples_of(doc, tmp_path)
    assert (manifest.kind, manifest.stack, manifest.exit_code) == ("manifest", "prod", 1)
    assert (command.kind, command.text, command.exit_code) == ("command", "trainyard validate nope  # comment", 2)
