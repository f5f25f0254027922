"""Generated files in the repository match what the code generates (`make schema`)."""

from __future__ import annotations

import json

from tests.conftest import ROOT
from trainyard.config.model import PlatformConfig
from trainyard.config.reference import reference_markdown


def test_stacks_schema_json_is_current() -> None:
    committed = json.loads((ROOT / "stacks" / "schema.json").read_text())
    assert committed == PlatformConfig.model_json_schema(), "run `make schema`"


def test_stack_settings_reference_is_current() -> None:
    assert (ROOT / "docs" / "stack-config.md").read_text() == reference_markdown(), "run `make schema`"
