"""The CrossGuard pack: one policy per rule, fed by resources as Pulumi registers them.

The wrappers are called directly with constructed arguments; the pack's ``__main__`` starts a
gRPC server and is never imported here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from tests.conftest import ROOT, STACKS, needs_crds, rendered, stack
from tests.policy.cases import trainjob
from trainyard.components.kubernetes_object import logical_name, type_token
from trainyard.manifests.lifecycle import holds_data
from trainyard.policy import RULES
from trainyard.policy.crossguard import PackConfigError, manifest_from, platform_config_from_environment

sys.path.insert(0, str(ROOT / "policies"))
import trainyard_pack


def pulumi_config(name: str) -> str:
    """PULUMI_CONFIG as the engine sets it for a policy pack: object values JSON-encoded."""
    doc = yaml.safe_load(stack(name).path.read_text(encoding="utf-8"))
    return json.dumps({"trainyard:platform": json.dumps(doc["config"]["trainyard:platform"])})


@pytest.fixture(params=STACKS)
def on_stack(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("PULUMI_CONFIG", pulumi_config(request.param))
    trainyard_pack._config_of.cache_clear()
    yield request.param
    trainyard_pack._config_of.cache_clear()


@pytest.fixture
def on_prod(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PULUMI_CONFIG", pulumi_config("prod"))
    trainyard_pack._config_of.cache_clear()
    yield
    trainyard_pack._config_of.cache_clear()


def options(protect: bool = False) -> PolicyResourceOptions:
    return PolicyResourceOptions(protect, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def urn(obj: dict[str, Any]) -> str:
    return f"urn:pulumi:prod::trainyard::{type_token(obj)}::{logical_name(obj)}"


def resource_args(obj: dict[str, Any], protect: bool = False) -> ResourceValidationArgs:
    return ResourceValidationArgs(type_token(obj), obj, urn(obj), logical_name(obj), options(protect), None)


def as_resources(objects: Any, protect_data: bool) -> list[PolicyResource]:
    return [PolicyResource(type_token(o), o, urn(o), logical_name(o), options(protect_data and holds_data(o)),
                           None, None, [], {}) for o in objects]


def policies() -> dict[str, Any]:
    return {p.name: p for p in trainyard_pack.policies()}


def test_every_rule_is_one_policy_with_its_description_hint_and_stack_level(on_stack: str) -> None:
    config = stack(on_stack).config
    by_name = policies()
    assert list(by_name) == [r.id for r in RULES]
    for rule in RULES:
        policy = by_name[rule.id]
        assert isinstance(policy, ResourceValidationPolicy if rule.check_object else StackValidationPolicy)
        assert (policy.description, policy.remediation_steps) == (rule.description, rule.hint)
        level = config.security.policy.severity.get(rule.id, rule.severity)
        assert policy.enforcement_level == trainyard_pack.LEVELS[level]
    if on_stack == "local":
        assert by_name["data-protected"].enforcement_level == EnforcementLevel.DISABLED


@needs_crds
def run_every_policy(objects: Any) -> list[tuple[str, str, str | None]]:
    """(policy, message, urn) of every report of every policy of the pack over ``objects``, as prod declares them."""
    reports: list[tuple[str, str, str | None]] = []
    for name, policy in policies().items():
        def report(message: str, at: str | None = None, name: str = name) -> None:
            reports.append((name, message, at))
        if isinstance(policy, ResourceValidationPolicy):
            for obj in objects:
                policy.validate(resource_args(obj, protect=holds_data(obj)), report)
        else:
            policy.validate(StackValidationArgs(as_resources(objects, protect_data=True)), report)
    return reports


def test_the_pack_finds_nothing_on_the_prod_resources(on_prod: None) -> None:
    assert run_every_policy(rendered("prod").all_objects) == []


@needs_crds
def test_the_pack_judges_generated_values_as_their_placeholders_and_a_hand_edit_as_it_is(on_prod: None) -> None:
    from trainyard.components.generated import generate
    from trainyard.manifests.generated import names_in, substitute

    objects = list(rendered("prod").all_objects)
    values = {n: generate(20, "access-key") for o in objects for n in names_in(o)}
    deployed = [substitute(o, values) for o in objects]  # what the engine hands the pack
    assert run_every_policy(deployed) == []
    reports: list[tuple[str, str]] = []
    secret = next(o for o in deployed if o["kind"] == "Secret" and o["metadata"]["name"] == "trainyard-object-store")
    secret["stringData"]["AWS_SECRET_ACCESS_KEY"] = "pasted-by-hand-not-generated!"
    policies()["no-plaintext-secrets"].validate(resource_args(secret), lambda m, u=None: reports.append(("x", m)))
    assert len(reports) == 1 and "AWS_SECRET_ACCESS_KEY" in reports[0][1]


def test_a_resource_policy_reports_each_message_with_the_hint(on_prod: None) -> None:
    bad = trainjob()
    bad["spec"]["trainer"]["image"] = "docker.io/pytorch/pytorch:latest"
    reports: list[str] = []
    policies()["image-approved-registry"].validate(resource_args(bad), lambda m, u=None: reports.append(m))
    assert len(reports) == 1
    assert "not from an approved registry" in reports[0] and "\nHint: Mirror the image" in reports[0]


@needs_crds
def test_data_protection_is_read_from_the_resource_protect_option(on_prod: None) -> None:
    crd = rendered("prod").crds[0]
    policy = policies()["data-protected"]
    reports: list[str] = []
    policy.validate(resource_args(crd, protect=True), lambda m, u=None: reports.append(m))
    assert reports == []
    policy.validate(resource_args(crd, protect=False), lambda m, u=None: reports.append(m))
    assert len(reports) == 1


@needs_crds
def test_a_stack_policy_reports_against_the_offending_resource_urn(on_prod: None) -> None:
    job = trainjob(labels={})
    resources = as_resources([*rendered("prod").all_objects, job], protect_data=True)
    reports: list[tuple[str, str | None]] = []
    policies()["trainjob-queue-label"].validate(StackValidationArgs(resources), lambda m, u=None: reports.append((m, u)))
    assert [u for _, u in reports] == [urn(job)]


def test_providers_and_charts_are_not_manifests() -> None:
    assert manifest_from("pulumi:providers:kubernetes", {"context": "x"}) is None
    assert manifest_from("kubernetes:helm.sh/v4:Chart", {"chart": "kueue"}) is None
    assert manifest_from("random:index/randomPassword:RandomPassword", {}) is None
    assert manifest_from("kubernetes:core/v1:Namespace", {"metadata": {"name": "a"}}) == {
        "metadata": {"name": "a"}, "kind": "Namespace", "apiVersion": "v1"}


def test_the_stack_config_comes_from_the_engine_or_the_stack_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert platform_config_from_environment({"PULUMI_CONFIG": pulumi_config("staging")}).environment == "staging"
    assert platform_config_from_environment({"PULUMI_STACK": "local"}, ROOT).environment == "local"
    with pytest.raises(PackConfigError):
        platform_config_from_environment({})


def test_the_pack_entry_point_is_three_lines_over_the_wrappers() -> None:
    lines = (ROOT / "policies" / "__main__.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 3 and "trainyard_pack" in lines[0]
    pack = yaml.safe_load((ROOT / "policies" / "PulumiPolicy.yaml").read_text(encoding="utf-8"))
    assert pack["runtime"]["name"] == "python"


def test_without_engine_config_the_pack_loads_the_stack_named_in_the_urn(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pack started as a binary analyzer gets no PULUMI_CONFIG; the URN still names the stack.
    monkeypatch.delenv("PULUMI_CONFIG", raising=False)
    monkeypatch.delenv("PULUMI_STACK", raising=False)
    trainyard_pack._config_of.cache_clear()
    try:
        config = trainyard_pack.stack_config("urn:pulumi:local::trainyard::kubernetes:core/v1:Namespace::team-a")
    finally:
        trainyard_pack._config_of.cache_clear()
    assert config.environment == "local"
