"""JSONPatch for the cel-python runs of MutatingAdmissionPolicies (tests/policy).

cel-python has no ``JSONPatch`` type (a Kubernetes addition to CEL): a patch expression is read with each
``JSONPatch{op: ..}`` as the map ``{"op": ..}``, which has the same fields, and the patches it returns are
applied here (RFC 6902 ``add`` and ``remove``; RFC 6901 path escaping). The cluster tier runs the policies
themselves on a real API server.
"""

from __future__ import annotations

import copy
import re
from typing import Any


def as_maps(expression: str) -> str:
    """The patch expression with every ``JSONPatch{...}`` literal written as a CEL map literal."""
    expression = re.sub(r"JSONPatch\{op: ", '{"op": ', expression)
    return expression.replace(", path: ", ', "path": ').replace(", value: ", ', "value": ')


def applied(obj: dict[str, Any], patches: list[dict[str, Any]], adds_only: bool = False) -> dict[str, Any]:
    """A copy of ``obj`` with ``patches`` applied in order; ``adds_only``: an add never replaces a value."""
    out = copy.deepcopy(obj)
    for patch in patches:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in patch["path"].split("/")[1:]]
        target = out
        for part in parents:
            target = target[part]
        if patch["op"] == "add":
            assert not (adds_only and last in target), f"add over an existing {patch['path']}"
            target[last] = patch["value"]
        else:
            assert patch["op"] == "remove" and not adds_only, patch
            del target[last]
    return out
