"""``review.beside``: work in a forked child, with the contract of a plain call."""

from __future__ import annotations

import os
import threading

import pytest

from trainyard.review.beside import Beside


def test_the_work_runs_in_a_child_and_its_result_comes_back() -> None:
    parent = os.getpid()
    work = Beside(lambda: {"pid": os.getpid(), "data": list(range(100_000))})
    value = work.result()
    assert value["pid"] != parent and value["data"][-1] == 99_999


def test_work_that_raises_is_redone_here_so_the_error_and_its_effects_are_a_plain_calls() -> None:
    runs: list[int] = []

    def failing() -> None:
        runs.append(os.getpid())
        raise ValueError("the base does not load")

    work = Beside(failing)
    with pytest.raises(ValueError, match="the base does not load"):
        work.result()
    assert runs == [os.getpid()]  # the child's run left no trace here; the parent's run raised


def test_a_result_that_does_not_pickle_is_redone_here() -> None:
    def unpicklable() -> threading.Lock:
        return threading.Lock()

    value = Beside(unpicklable).result()
    assert isinstance(value, type(threading.Lock()))


def test_serial_setting_runs_the_work_here_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_SERIAL", "1")
    calls: list[int] = []
    work = Beside(lambda: calls.append(os.getpid()) or "done")
    assert calls == []
    assert work.result() == "done" and calls == [os.getpid()]


def test_discard_waits_for_the_child() -> None:
    work = Beside(lambda: "unused")
    pid = work._pid
    assert pid is not None
    work.discard()
    with pytest.raises(ChildProcessError):  # reaped: no such child any more (other tests' children do not count)
        os.waitpid(pid, os.WNOHANG)
