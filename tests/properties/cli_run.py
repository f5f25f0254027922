"""Running ``trainyard`` in-process and stating what a clean outcome is."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

from trainyard.cli import main

# How every bad-input error locates itself: "FILE[:LINE]: FIELD.PATH: reason", or the
# part of the file that is wrong ("(yaml)", "(file)") when there is no field yet.
_LOCATED = re.compile(r"^\s*(error: )?\S+( \(document \d+\))?(:\d+)?: "
                      r"(trainyard:platform|\(yaml\)|\(file\)|\(document\)|config\b|[A-Za-z][^\n]*?: ).*$",
                      re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def run(argv: list[str]) -> Outcome:
    """``trainyard ARGV`` in this process; an exception escaping ``main`` fails the calling test."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_clean(outcome: Outcome, allowed: tuple[int, ...] = (0, 2), *, located: bool = True) -> None:
    """Exit 0 (or another allowed code), or exit 2 with one ``error:`` that says where and why."""
    assert outcome.code in allowed, (outcome.code, outcome.err[-2000:])
    assert "Traceback" not in outcome.err
    if outcome.code == 2:
        assert outcome.err.startswith(("error: ", "usage: ")), outcome.err[:500]
        if located and outcome.err.startswith("error: "):
            assert _LOCATED.search(outcome.err), f"error names no file and field:\n{outcome.err[:1000]}"
