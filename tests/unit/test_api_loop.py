"""The loop of the rehearsal's host processes (rehearsal/api_loop.py): every line a pass returns is logged, a pass that
fails with a retried error is logged and tried again, another error stops the process, and a stop ends the loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.rehearsal.api_client import ApiError
from trainyard.rehearsal.api_loop import missing_pki, run_passes


def test_passes_are_logged_a_retried_failure_is_tried_again_and_stop_ends_the_loop() -> None:
    unreachable = ApiError("GET", "/api/v1/persistentvolumeclaims", 0, "unreachable")
    outcomes: list[list[str] | Exception] = [["volume pvc-1: made"], unreachable, [], ["volume pvc-1: deleted"]]
    logged: list[str] = []

    def pass_once() -> list[str]:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    run_passes(pass_once, 0, lambda: not outcomes, logged.append, (ApiError,))
    assert logged == ["volume pvc-1: made",
                      "pass failed, next in 0s: GET /api/v1/persistentvolumeclaims: 0 unreachable",
                      "volume pvc-1: deleted"]


def test_an_error_that_is_not_retried_ends_the_process() -> None:
    def pass_once() -> list[str]:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        run_passes(pass_once, 0, lambda: False, print, (ApiError,))


def test_missing_pki_names_the_files(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("")
    assert missing_pki(tmp_path, "local-provisioner") == [str(tmp_path / "local-provisioner.crt"),
                                                          str(tmp_path / "local-provisioner.key")]
