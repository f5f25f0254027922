"""The rule catalogue: every rule, in the order reports list them."""

from __future__ import annotations

from trainyard.policy import (
    data_cache,
    exposure,
    lineage,
    mlflow,
    object_store,
    queueing,
    serving,
    stackwide,
    supply,
    tenancy,
    trainjobs,
    workloads,
)
from trainyard.policy.model import Rule
from trainyard.policy_ids import RULE_IDS

__all__ = ["RULES", "RULES_BY_ID", "RULE_IDS"]  # RULE_IDS is re-exported (trainyard.policy.RULE_IDS)

RULES: tuple[Rule, ...] = (*workloads.RULES, *trainjobs.RULES, *lineage.RULES, *mlflow.RULES, *tenancy.RULES,
                           *data_cache.RULES, *exposure.RULES, *serving.RULES, *queueing.RULES, *object_store.RULES,
                           *stackwide.RULES, *supply.RULES)
RULES_BY_ID = {rule.id: rule for rule in RULES}

# RULE_IDS lives in trainyard.policy_ids so that config can validate severity overrides without
# importing the rules; the two must name exactly the same rules.
if set(RULES_BY_ID) != RULE_IDS:
    raise RuntimeError(
        "trainyard.policy_ids.RULE_IDS does not match the rule catalogue: rules missing from it: "
        f"{sorted(set(RULES_BY_ID) - RULE_IDS)}; ids that are no rule: {sorted(RULE_IDS - set(RULES_BY_ID))}"
    )
