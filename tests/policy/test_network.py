"""NetworkPolicies: default deny per tenant, the reviewed exceptions, webhooks reachable, strict schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import STACKS, needs_crds, rendered, stack
from trainyard.config import ConfigError, validate_platform
from trainyard.manifests import network
from trainyard.schemas import Validator


def policies(objects: Any, namespace: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects
            if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == namespace}


@needs_crds
@pytest.mark.parametrize("name", STACKS)
def test_network_policies_validate_against_the_strict_kubernetes_schema(name: str, crds: Path) -> None:
    validator = Validator(crds)
    objects = [o for o in rendered(name).objects if o["kind"] == "NetworkPolicy"]
    assert objects
    assert [str(e) for o in objects for e in validator.errors(o)] == []


def test_every_tenant_namespace_denies_everything_then_opens_dns_and_its_own_namespace() -> None:
    config = stack("prod").config
    for tenant in config.tenants:
        by_name = {p["metadata"]["name"]: p for p in network.tenant_policies(config, tenant)}
        assert by_name["default-deny"]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        dns = by_name["allow-dns"]["spec"]["egress"][0]
        assert dns["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                              "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
        assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
        same = by_name["allow-same-namespace"]["spec"]
        assert same["ingress"] == [{"from": [{"podSelector": {}}]}] and same["egress"] == [{"to": [{"podSelector": {}}]}]


def test_egress_goes_to_the_object_store_and_mlflow_named_in_the_stack_only() -> None:
    config = stack("prod").config
    by_name = {p["metadata"]["name"]: p for p in network.tenant_policies(config, config.tenants[0])}
    assert set(by_name) == {"default-deny", "allow-dns", "allow-same-namespace", "allow-object-store", "allow-mlflow"}
    store = by_name["allow-object-store"]["spec"]["egress"]
    # Derived from the backend (prod: the MinIO Tenant's pods), not written by hand.
    assert store == [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "object-store"}},
                              "podSelector": {"matchLabels": {"v1.min.io/tenant": "trainyard"}}}],
                      "ports": [{"protocol": "TCP", "port": 9000}]}]


def test_there_is_no_internet_egress_unless_the_stack_names_a_proxy_or_cidrs() -> None:
    prod, staging = stack("prod").config, stack("staging").config
    assert not any("proxy" in n or "allowlist" in n for n in policies(rendered_objects(prod), "llm-research"))
    staging_names = {p["metadata"]["name"] for p in network.tenant_policies(staging, staging.tenants[0])}
    assert "allow-egress-proxy" in staging_names
    raw = stack_raw("prod")
    raw["security"]["network"]["egress_allowlist"] = [{"cidrs": ["198.51.100.0/24"], "ports": [443]}]
    with_cidrs = validate_platform(raw, "test")
    allow = {p["metadata"]["name"]: p for p in network.tenant_policies(with_cidrs, with_cidrs.tenants[0])}
    assert allow["allow-egress-allowlist"]["spec"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "198.51.100.0/24"}}], "ports": [{"protocol": "TCP", "port": 443}]}]


def test_the_api_server_reaches_the_webhooks_in_each_controller_namespace() -> None:
    config = stack("prod").config
    for namespace, component in (("kueue-system", "kueue"), ("jobset-system", "jobset"), ("kubeflow-system", "trainer")):
        by_name = {p["metadata"]["name"]: p for p in network.controller_policies(config, namespace, component)}
        assert by_name["default-deny-ingress"]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
        webhook = by_name["allow-webhooks"]["spec"]["ingress"][0]
        assert "from" not in webhook  # no webhook_sources: any source, webhook ports only
        assert {p["port"] for p in webhook["ports"]} == set(network.WEBHOOK_PORTS[component])
        assert by_name["allow-webhooks"]["metadata"]["labels"]["trainyard.dev/component"] == component


@needs_crds
def test_controller_namespaces_get_policies_only_where_the_controller_is_installed() -> None:
    namespaces = {o["metadata"]["namespace"] for o in rendered("local").objects if o["kind"] == "NetworkPolicy"}
    # local runs every controller externally; the object store namespace admits S3 from tenants only
    assert namespaces == {"team-a", "team-b", "object-store"}
    prod = {o["metadata"]["namespace"] for o in rendered("prod").objects if o["kind"] == "NetworkPolicy"}
    assert {"kueue-system", "jobset-system", "kubeflow-system"} <= prod


@pytest.mark.parametrize(("change", "reason"), [
    ({"egress_allowlist": [{"cidrs": ["0.0.0.0/0"], "ports": [443]}]}, "allows every address"),
    ({"mlflow": {"namespace": "mlflow", "cidrs": ["10.0.0.0/8"], "ports": [5000]}}, "not both"),
    ({"egress_allowlist": [{"namespace": "web", "ports": [443]}]}, "external networks"),
    ({"object_store": {"cidrs": ["10.0.0.1/8"], "ports": [443]}}, "not a CIDR block"),
])
def test_bad_network_settings_name_the_field_and_the_reason(change: dict[str, Any], reason: str) -> None:
    raw = stack_raw("prod")
    raw["security"]["network"].update(change)
    with pytest.raises(ConfigError) as exc:
        validate_platform(raw, "Pulumi.test.yaml")
    assert any(p.path.startswith("trainyard:platform.security.network") and reason in p.reason
               for p in exc.value.problems), exc.value


def test_an_unknown_rule_in_severity_overrides_is_a_config_error() -> None:
    raw = stack_raw("prod")
    raw["security"]["policy"] = {"severity": {"no-such-rule": "advisory"}}
    with pytest.raises(ConfigError) as exc:
        validate_platform(raw, "Pulumi.test.yaml")
    assert exc.value.problems[0].path == "trainyard:platform.security.policy.severity"
    assert "no-such-rule" in exc.value.problems[0].reason


def stack_raw(name: str) -> dict[str, Any]:
    import yaml

    doc = yaml.safe_load(stack(name).path.read_text(encoding="utf-8"))
    platform: dict[str, Any] = doc["config"]["trainyard:platform"]
    return platform


def rendered_objects(config: Any) -> list[dict[str, Any]]:
    return list(network.build(config).all_objects)
