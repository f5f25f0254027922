"""Policy: one set of rules over manifests, run at pull-request review, in ``pulumi preview`` and (the
subset that concerns what tenants submit) by the API server's admission policies.

- ``model``: Rule, Finding, Context; ``pods``: where pods hide in each workload kind.
- ``workloads``, ``trainjobs``, ``tenancy``, ``exposure``, ``queueing``, ``stackwide``: the rules.
- ``engine.evaluate``: all rules over a rendered stack plus extra manifests (``trainyard check``, ``diff``).
- ``crossguard``: what the CrossGuard pack in ``policies/`` needs besides the rules (config, manifests
  from resource properties, enforcement levels).

See docs/policy.md for the rules and how the three enforcement points relate.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainyard.policy.engine import evaluate
    from trainyard.policy.model import Context, Finding, Rule
    from trainyard.policy.rules import RULE_IDS, RULES, RULES_BY_ID

__all__ = ["RULES", "RULES_BY_ID", "RULE_IDS", "Context", "Finding", "Rule", "evaluate"]

# Resolved on first use (PEP 562): every `trainyard` command imports `trainyard.policy.cli` to
# register `check`, and only `check` and `diff` need the rules.
_HOMES = {"evaluate": "engine", "Context": "model", "Finding": "model", "Rule": "model",
          "RULE_IDS": "rules", "RULES": "rules", "RULES_BY_ID": "rules"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
