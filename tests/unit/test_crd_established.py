"""Reading a CRD's Established condition while the API server is still filling its status
(``trainyard.rehearsal.controllers.established``): every state is an answer (False until served), never a TypeError
that ends the wait instead of another poll (the node tier's barman-cloud CRD, 2026-12-07)."""

from __future__ import annotations

import pytest

from trainyard.rehearsal.controllers import established


@pytest.mark.parametrize("crd", [
    {},
    {"status": None},
    {"status": {}},
    {"status": {"conditions": None, "acceptedNames": {"kind": ""}}},
    {"status": {"conditions": [{"type": "NamesAccepted", "status": "True"}]}},
    {"status": {"conditions": [{"type": "Established", "status": "False"}]}},
])
def test_a_crd_not_yet_established_is_not(crd: dict) -> None:
    assert established(crd) is False


def test_an_established_crd_is() -> None:
    assert established({"status": {"conditions": [{"type": "NamesAccepted", "status": "True"},
                                                  {"type": "Established", "status": "True"}]}}) is True
