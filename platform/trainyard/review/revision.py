"""A stack as it was at a git revision, read from a temporary worktree.

The stack file and runtimes come from the revision; the code that loads and renders them is
the work tree's (the one running), so a review compares configurations, never two versions
of the builders. The worktree is removed afterwards, also when loading fails.

Ref: https://git-scm.com/docs/git-worktree (``add --detach``, ``remove --force``, ``prune``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trainyard.config.load import stack_path


class RevisionError(Exception):
    """A revision that cannot be read: not a git repository, unknown revision, git failing."""


@dataclass(frozen=True)
class Revision:
    """A resolved revision: what the user typed and the commit it names."""

    name: str
    commit: str

    @property
    def label(self) -> str:
        short = self.commit[:10]
        return short if self.name.startswith(short) or self.name == self.commit else f"{self.name} ({short})"


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False)  # noqa: S603, S607
    except FileNotFoundError:
        raise RevisionError("git is not installed; --base needs git") from None


def repository_root(root: Path) -> Path:
    done = _git(root, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise RevisionError(f"{root} is not inside a git repository; --base needs one (use --against to compare stacks)")
    return Path(done.stdout.strip()).resolve()


def resolve(root: Path, rev: str) -> Revision:
    # Never an option to git (--upload-pack=... runs a program), never a control character (NUL
    # cannot even be passed to a process); --end-of-options below keeps the rest a revision.
    if not isinstance(rev, str) or not rev.strip() or rev.startswith("-") or any(ord(ch) < 32 or ord(ch) == 127 for ch in rev):
        raise RevisionError(f"--base {rev!r} is not a revision (a branch, tag or commit, e.g. origin/main)")
    done = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    if done.returncode != 0:
        raise RevisionError(f"unknown revision {rev!r} (--base): git cannot find a commit by that name in {root}")
    return Revision(rev, done.stdout.strip())


def relative_stack_path(stack: str, root: Path, repo: Path) -> Path:
    """Where the stack file lies inside the repository, whether given by name or by path."""
    path = stack_path(stack, root)
    absolute = (path if path.is_absolute() else Path.cwd() / path).resolve()
    try:
        return absolute.relative_to(repo)
    except ValueError:
        raise RevisionError(f"stack file {path} is outside the git repository {repo}") from None


@contextmanager
def worktree(root: Path, revision: Revision) -> Iterator[Path]:
    """A detached worktree of ``revision``; yields the repository root inside it, removes it on exit."""
    repo = repository_root(root)
    parent = Path(tempfile.mkdtemp(prefix="trainyard-diff-"))
    tree = parent / "tree"
    try:
        done = _git(repo, "worktree", "add", "--detach", "--quiet", str(tree), revision.commit)
        if done.returncode != 0:
            raise RevisionError(f"git worktree add failed for {revision.name}: {done.stderr.strip()}")
        yield tree
    finally:
        removed = not tree.exists() or _git(repo, "worktree", "remove", "--force", str(tree)).returncode == 0
        shutil.rmtree(parent, ignore_errors=True)
        if not removed:
            _git(repo, "worktree", "prune")  # forget the worktree whose directory was just deleted
