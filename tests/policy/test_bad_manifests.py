"""The bad-manifest corpus: each file is flagged by the rule it was written for, and the stacks by none.

Every file in tests/fixtures/bad-manifests/ starts with ``# flagged-by: <rule-id>`` and is
named ``<rule-id>--<what>.yaml``. It is checked as an extra manifest against the prod stack,
the way ``trainyard check prod FILE`` would check a pull request.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, STACKS, needs_crds, rendered, stack
from trainyard.policy import RULE_IDS, evaluate

BAD = ROOT / "tests" / "fixtures" / "bad-manifests"
FILES = sorted(BAD.glob("*.yaml"))
_FLAGGED_BY = re.compile(r"^# flagged-by: (\S+)$", re.MULTILINE)


def expected_rule(path: Path) -> str:
    match = _FLAGGED_BY.search(path.read_text(encoding="utf-8"))
    assert match, f"{path.name} has no '# flagged-by: <rule-id>' comment"
    return match.group(1)


def test_the_corpus_has_at_least_fifteen_files_each_naming_a_known_rule() -> None:
    assert len(FILES) >= 15
    for path in FILES:
        rule_id = expected_rule(path)
        assert rule_id in RULE_IDS, f"{path.name}: unknown rule {rule_id}"
        assert path.name.startswith(f"{rule_id}--"), f"{path.name} should be named {rule_id}--<what>.yaml"


@needs_crds
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_bad_manifest_is_flagged_by_its_rule(path: Path) -> None:
    config = stack("prod").config
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    baseline = set(evaluate(config, rendered("prod")))
    new = [f for f in evaluate(config, rendered("prod"), docs) if f not in baseline]
    assert expected_rule(path) in {f.rule_id for f in new}, [f"{f.rule_id}: {f.message}" for f in new]


@needs_crds
@pytest.mark.parametrize("name", STACKS)
def test_stack_has_no_findings_at_all(name: str) -> None:
    # Zero findings, advisory included: anything here would be a false positive on reviewed config.
    assert evaluate(stack(name).config, rendered(name)) == []
