"""Work done beside the caller, on the other core: a forked child that hands back its result.

``trainyard diff --base REV`` prepares two sides that share nothing: the base (a git worktree,
its stack loaded, rendered and run through the policy rules) and the head (the same for the
work tree). Each takes about a third of the command's time on the 200-tenant stack, so the
base is prepared in a forked child while the parent prepares the head (docs/architecture.md,
"Diff: the base side is prepared beside the head").

The contract is that of a plain call, wherever the child cannot keep it:

- the result comes back pickled through a pipe; it must be plain data (no closures);
- where the work raises, or its result does not pickle, or the child dies, the work is run
  again here, in the calling process, so errors, tracebacks and side effects are exactly
  those of a serial run (errors are the rare path: a second run costs only there);
- where ``os.fork`` does not exist (Windows) or ``TRAINYARD_SERIAL=1`` is set, the work is
  simply run here when its result is asked for.

The child ends with ``os._exit``: it runs no ``atexit`` hook and flushes no buffer it inherited.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

SERIAL_SETTING = "TRAINYARD_SERIAL"


def forking_allowed() -> bool:
    return hasattr(os, "fork") and os.environ.get(SERIAL_SETTING, "").strip() in ("", "0")


class Beside(Generic[T]):
    """``work`` started now (in a child where allowed); ``result()`` waits for it, ``discard()`` drops it."""

    def __init__(self, work: Callable[[], T]) -> None:
        self._work = work
        self._pid: int | None = None
        self._read_fd: int | None = None
        if forking_allowed():
            self._start()

    def _start(self) -> None:
        read_fd, write_fd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: do the work, report, leave without running anything of the parent's
            os.close(read_fd)
            try:
                data = _report(self._work)
                with os.fdopen(write_fd, "wb") as out:
                    out.write(data)
            finally:
                os._exit(0)
        os.close(write_fd)
        self._pid, self._read_fd = pid, read_fd

    def _collect(self) -> bytes:
        if self._read_fd is None or self._pid is None:
            return b""
        with os.fdopen(self._read_fd, "rb") as pipe:
            data = pipe.read()
        os.waitpid(self._pid, 0)
        self._read_fd = self._pid = None
        return data

    def result(self) -> T:
        data = self._collect()
        if data:
            try:
                value: T = pickle.loads(data)  # noqa: S301 - our own child's bytes, through our own pipe
                return value
            except Exception:  # noqa: S110 - a result that does not unpickle: do the work here
                pass
        return self._work()

    def discard(self) -> None:
        """Wait for the child (it cleans up after itself, e.g. its worktree) and drop its result."""
        self._collect()


def _report(work: Callable[[], object]) -> bytes:
    """The pickled result, or nothing where the work raised or its result does not pickle (the parent redoes it)."""
    try:
        return pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:
        return b""
