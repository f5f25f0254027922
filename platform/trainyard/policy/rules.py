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

RULES: tuple[Rule, ...] = (*workloads.RULES, *trainjobs.RULES, *lineage.RULES, *mlflow.RULES, *tenancy.RULES,
                           *data_cache.RULES, *exposure.RULES, *serving.RULES, *queueing.RULES, *object_store.RULES,
                           *stackwide.RULES, *supply.RULES)
RULE_IDS = frozenset(rule.id for rule in RULES)
RULES_BY_ID = {rule.id: rule for rule in RULES}
