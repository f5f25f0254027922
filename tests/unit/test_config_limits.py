"""Stack validation refuses what the API server would refuse later and what would silently weaken security."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_config_errors import LOCAL, local_platform, problems_of
from trainyard.cli import main
from trainyard.config import ConfigError, validate_platform
from trainyard.config.load import parse_stack_text


def set_at(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = data
    for part in parents:
        node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
    node[last] = value
    return data


@pytest.mark.parametrize(("path", "value", "field", "reason"), [
    # Integers the API server holds as int32, and quantities beyond int64.
    ("priority_classes.0.value", 2**31, "priority_classes[0].value", "less than or equal to 2147483647"),
    ("kueue.preemption.borrow_within_cohort.max_priority_threshold", -(2**31) - 1,
     "max_priority_threshold", "greater than or equal to -2147483648"),
    ("tenants.0.quotas.0.gpus", 2**31, "tenants[0].quotas[0].gpus", "less than or equal to 2147483647"),
    ("gpu_pools.0.memory_per_node", "9000000Ei", "gpu_pools[0].memory_per_node", "out of range"),
    ("priority_classes.0.description", "x" * 2049, "priority_classes[0].description", "at most 2048 characters"),
    ("gpu_pools.0.node_labels", {f"k{i}": "v" for i in range(9)}, "gpu_pools[0].node_labels", "at most 8 items"),
    ("gpu_pools.0.node_labels", {f"{'a' * 254}/k": "v"}, "gpu_pools[0].node_labels", "not a valid label key"),
    ("gpu_pools.0.gpu_product", "NVIDIA A100", "gpu_pools[0].gpu_product", "not a valid label value"),
    ("gpu_pools.0.nodes", 20_000, "gpu_pools[0].nodes", "a fake pool has at most 10000 nodes"),
    # Booleans are not numbers, numbers are not booleans, strings are neither.
    ("tenants.0.quotas.0.gpus", True, "tenants[0].quotas[0].gpus", "valid integer"),
    ("tenants.0.quotas.0.gpus", "4", "tenants[0].quotas[0].gpus", "valid integer"),
    ("tenants.0.quotas.0.gpus", 4.0, "tenants[0].quotas[0].gpus", "valid integer"),
    ("gpu_pools.0.fake", "yes", "gpu_pools[0].fake", "valid boolean"),
    ("allow_overcommit", 1, "allow_overcommit", "valid boolean"),
    # Empty names and subjects, reserved groups.
    ("cluster.context", "", "cluster.context", "at least 1 character"),
    ("tenants.0.groups", [""], "tenants[0].groups[0]", "at least 1 character"),
    ("tenants.0.groups", ["system:authenticated"], "tenants[0].groups[0]", "Kubernetes system group"),
    ("tenants.0.groups", [" team-a"], "tenants[0].groups[0]", "should match pattern"),
    ("tenants.0.groups", ["team-a", "team-a"], "tenants[0]", "groups: names must be unique"),
    # Tenants inside system namespaces.
    ("tenants.0.namespace", "kube-system", "tenants[0].namespace", "is a system namespace"),
    ("tenants.0.namespace", "kueue-system", "tenants[0].namespace", "is a system namespace"),
    ("tenants.0.name", "default", "tenants[0].name", "is a system namespace"),
    ("tenants.0.namespace", "mlflow", "tenants[0].namespace", "is a system namespace"),
    # Approved registries that would approve any image.
    ("runtimes.approved_registries", [""], "approved_registries[0]", "is not an image prefix"),
    ("runtimes.approved_registries", ["/"], "approved_registries[0]", "is not an image prefix"),
    ("runtimes.approved_registries", ["docker.io/"], "approved_registries[0]", "public registry docker.io"),
    ("runtimes.approved_registries", ["docker.io"], "approved_registries[0]", "is not an image prefix"),
    ("runtimes.approved_registries", ["registry.example.com"], "approved_registries[0]", "registry.example.com.evil.io"),
    ("runtimes.approved_registries", ["registry.example.com/ml"], "approved_registries[0]", "is not an image prefix"),
    ("runtimes.approved_registries", ["registry.example.com/*"], "approved_registries[0]", "wildcards never match"),
    ("runtimes.approved_registries", ["library/"], "approved_registries[0]", "not a registry host"),
    ("images.registry_mirror", "ghcr.io/", "images.registry_mirror", "public registry ghcr.io"),
    ("runtimes.directory", "../elsewhere", "runtimes.directory", "inside the project"),
    # Networks that are not a narrow allowlist.
    ("security.network.egress_allowlist", [{"cidrs": ["0.0.0.0/1"], "ports": [443]}], "egress_allowlist[0].cidrs[0]",
     "wider than /8"),
    ("security.network.egress_allowlist", [{"cidrs": ["::/0"], "ports": [443]}], "egress_allowlist[0].cidrs[0]",
     "allows every address"),
    ("security.network.egress_allowlist", [{"cidrs": ["169.254.169.254/32"], "ports": [80]}],
     "egress_allowlist[0].cidrs[0]", "cloud metadata"),
    ("security.network.webhook_sources", ["127.0.0.0/8"], "webhook_sources[0]", "loopback"),
    ("security.exposed_services", ["mlflow/mlflow.server"], "exposed_services[0]", "not namespace/name"),
])
def test_refused_values_name_the_field_and_the_reason(path: str, value: Any, field: str, reason: str) -> None:
    problems = problems_of(set_at(local_platform(), path, value))
    assert any(field in p and reason in p for p in problems), problems


@pytest.mark.parametrize("registry", ["nvcr.io/nvidia/", "registry.example.com/", "registry.example.com:5000/ml/",
                                      "localhost:5000/", "docker.io/myorg/"])
def test_narrow_registry_prefixes_are_accepted(registry: str) -> None:
    data = local_platform()
    data["runtimes"]["approved_registries"] = [registry]
    assert validate_platform(data, "x.yaml").runtimes.approved_registries == (registry,)


def yaml_problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_stack_text(text, "x.yaml")
    return [f"{p.line}: {p.path}: {p.reason}" for p in caught.value.problems]


def test_a_duplicated_key_is_refused_at_its_line() -> None:
    text = LOCAL.read_text().replace("        gpus_per_node: 4\n", "        gpus_per_node: 4\n        gpus_per_node: 40\n", 1)
    (problem,) = yaml_problems(text)
    line = int(problem.split(":")[0])
    assert "duplicate key 'gpus_per_node'" in problem
    assert text.splitlines()[line - 1].strip() == "gpus_per_node: 40"


def test_aliases_that_expand_without_bound_are_refused() -> None:
    bomb = "".join(f"    a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 8))
    text = LOCAL.read_text().replace("    environment:", "    a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + bomb
                                     + "    environment:", 1)
    assert any("expands to more than" in p for p in yaml_problems(text))


def test_an_alias_inside_itself_is_refused() -> None:
    text = LOCAL.read_text().replace("    gpu_pools:\n", "    gpu_pools: &pools\n      - *pools\n", 1)
    assert any("refers to the node that contains it" in p for p in yaml_problems(text))


def test_an_unquoted_date_is_named_rather_than_turned_into_text() -> None:
    text = LOCAL.read_text().replace("        description: Default for training runs.", "        description: 2026-01-01")
    assert any("priority_classes[1].description" in p and "as a date" in p for p in yaml_problems(text))


def test_a_stack_file_that_is_not_utf8_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "Pulumi.bad.yaml"
    file.write_bytes(LOCAL.read_bytes().replace(b"team-a", b"team-\xff", 1))
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert "(file): not UTF-8 text" in err and "Traceback" not in err
