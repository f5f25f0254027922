"""Policy results that changed: violations a change introduces and violations it fixes.

The rules live in ``trainyard.policy`` (``evaluate(config, rendered) -> list[Finding]``). That
package is optional here: where it is absent, a review simply has no policy section. Tests
and other callers pass their own evaluator instead of the default one.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trainyard.config.model import PlatformConfig
from trainyard.manifests import RenderedPlatform


class FindingLike(Protocol):
    """What a review reads of a policy finding."""

    @property
    def rule_id(self) -> str: ...
    @property
    def severity(self) -> Any: ...
    @property
    def object_id(self) -> str: ...
    @property
    def message(self) -> str: ...


Evaluator = Callable[[PlatformConfig, RenderedPlatform], Sequence[FindingLike]]


@dataclass(frozen=True, order=True)
class PolicyResult:
    rule_id: str
    severity: str
    object_id: str
    message: str
    hint: str = ""


@dataclass(frozen=True)
class PolicyDelta:
    new: tuple[PolicyResult, ...]
    fixed: tuple[PolicyResult, ...]
    unchanged: int

    @property
    def changed(self) -> bool:
        return bool(self.new or self.fixed)


def default_evaluator() -> Evaluator | None:
    """``trainyard.policy.evaluate`` when the policy package is installed, else None."""
    try:
        module = importlib.import_module("trainyard.policy")
    except ModuleNotFoundError as exc:
        if exc.name in ("trainyard.policy",):
            return None
        raise
    evaluate = getattr(module, "evaluate", None)
    return evaluate if callable(evaluate) else None


def _severity(value: Any) -> str:
    return str(getattr(value, "value", value))


def as_result(finding: FindingLike) -> PolicyResult:
    return PolicyResult(str(finding.rule_id), _severity(finding.severity), str(finding.object_id),
                        str(finding.message), str(getattr(finding, "hint", "") or ""))


def _identity(result: PolicyResult) -> tuple[str, str, str]:
    return (result.rule_id, result.object_id, result.message)


def policy_delta(base: Sequence[FindingLike], head: Sequence[FindingLike]) -> PolicyDelta:
    """Findings only in ``head`` are new, only in ``base`` fixed; counted as multisets, sorted."""
    before = [as_result(f) for f in base]
    after = [as_result(f) for f in head]
    before_ids, after_ids = Counter(map(_identity, before)), Counter(map(_identity, after))
    new_ids, fixed_ids = after_ids - before_ids, before_ids - after_ids
    new = _take(after, new_ids)
    fixed = _take(before, fixed_ids)
    return PolicyDelta(tuple(sorted(new)), tuple(sorted(fixed)), sum((after_ids & before_ids).values()))


def _take(results: list[PolicyResult], wanted: Counter[tuple[str, str, str]]) -> list[PolicyResult]:
    remaining = Counter(wanted)
    out = []
    for result in sorted(results):
        if remaining[_identity(result)] > 0:
            remaining[_identity(result)] -= 1
            out.append(result)
    return out
