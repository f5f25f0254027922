"""Policy: one set of rules over manifests, run at pull-request review, in ``pulumi preview`` and (the
subset that concerns what tenants submit) by the API server's admission policies.

- ``model``: Rule, Finding, Context; ``pods``: where pods hide in each workload kind.
- ``workloads``, ``trainjobs``, ``tenancy``, ``exposure``, ``queueing``, ``stackwide``: the rules.
- ``engine.evaluate``: all rules over a rendered stack plus extra manifests (``trainyard check``, ``diff``).
- ``crossguard``: what the CrossGuard pack in ``policies/`` needs besides the rules (config, manifests
  from resource properties, enforcement levels).

See docs/policy.md for the rules and how the three enforcement points relate.
"""

from trainyard.policy.engine import evaluate
from trainyard.policy.model import Context, Finding, Rule
from trainyard.policy.rules import RULE_IDS, RULES, RULES_BY_ID

__all__ = ["RULES", "RULES_BY_ID", "RULE_IDS", "Context", "Finding", "Rule", "evaluate"]
