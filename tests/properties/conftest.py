"""Hypothesis profiles for the bad-input properties.

``ci`` (the default) is deterministic (``derandomize``: the same examples on every run, no
example database) and small enough for ``make test``. ``deep`` runs many more examples, still
deterministic, to hunt for new classes of failure:
``TRAINYARD_HYPOTHESIS_PROFILE=deep .venv/bin/pytest -q tests/properties`` (example count:
``TRAINYARD_HYPOTHESIS_EXAMPLES``, default 1500).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {"derandomize": True, "database": None, "deadline": None, "print_blob": False,
           "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]}
settings.register_profile("ci", max_examples=40, **_COMMON)
settings.register_profile("deep", max_examples=int(os.environ.get("TRAINYARD_HYPOTHESIS_EXAMPLES", "1500")), **_COMMON)
settings.load_profile(os.environ.get("TRAINYARD_HYPOTHESIS_PROFILE", "ci"))
