"""The ids of every policy rule, as plain data.

``config`` validates the rule ids a stack names in ``security.policy.severity`` against this set,
and may not import ``trainyard.policy`` (docs: ../shared/DESIGN.md, "config/ imports nothing from
policy/"). ``trainyard.policy.rules`` refuses to load unless its RULES have exactly these ids, so a
rule added, renamed or removed there must be added, renamed or removed here in the same change.

This module imports nothing from Trainyard.
"""

from __future__ import annotations

RULE_IDS: frozenset[str] = frozenset({
    # policy/workloads.py
    "image-approved-registry",
    "image-pinned-digest",
    "no-privileged-container",
    "no-host-namespaces",
    "no-host-path",
    "no-run-as-root",
    "no-privilege-escalation",
    "no-added-capabilities",
    "gpu-container-limits",
    "no-plaintext-secrets",
    # policy/trainjobs.py
    "trainjob-approved-runtime",
    "trainjob-queue-label",
    "trainjob-priority-class",
    "training-runtime-allowed",
    "runtime-claim-retention",
    "runtime-depends-on-earlier-jobs",
    "runtime-pods-request-resources",
    "trainjob-resources",
    # policy/lineage.py
    "trainjob-approved-inputs",
    # policy/mlflow.py
    "mlflow-auth-on",
    "no-inline-mlflow-credentials",
    # policy/tenancy.py
    "tenant-default-deny",
    "tenant-local-queue",
    "tenant-resource-quota",
    "tenant-psa-restricted",
    "psa-no-weaker-level",
    "psa-exception-exclusive",
    "tenant-policy-params",
    # policy/data_cache.py
    "data-cache-rbac-scoped",
    # policy/exposure.py
    "no-exposed-services",
    "netpol-no-internet-egress",
    # policy/serving.py
    "isvc-approved-runtime",
    "isvc-own-model-bucket",
    "isvc-no-public-exposure",
    "serving-runtime-allowed",
    # policy/queueing.py
    "kueue-api-version",
    "local-queue-cluster-queue",
    "flavor-topology-exists",
    "quota-fits-capacity",
    # policy/object_store.py
    "object-store-tenant-credentials",
    "object-store-no-public-buckets",
    "no-inline-object-store-keys",
    # policy/stackwide.py
    "data-protected",
    "security-references-exist",
    # policy/supply.py
    "images-in-bom",
    "chart-images-known",
    "charts-from-mirror",
})
