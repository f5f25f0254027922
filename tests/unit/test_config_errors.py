"""Bad stack input gives file, field path and reason, exit 2, and never a traceback."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from trainyard.cli import main
from trainyard.config import ConfigError, validate_platform
from trainyard.config.load import parse_stack_text

BROKEN = ROOT / "tests" / "fixtures" / "broken-stacks"
LOCAL = ROOT / "stacks" / "Pulumi.local.yaml"


def local_platform() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(LOCAL.read_text())["config"]["trainyard:platform"]
    return copy.deepcopy(data)


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        validate_platform(data, "stacks/Pulumi.test.yaml")
    return [f"{p.path}: {p.reason}" for p in caught.value.problems]


@pytest.mark.parametrize(
    ("fixture", "path", "reason"),
    [
        ("unknown-field", "trainyard:platform.gpu_pools[0].gpu_per_node", "unknown field"),
        ("quota-over-capacity", "trainyard:platform.gpu_pools[0]", "add up to 16, but the pool has 8 GPUs"),
        ("missing-flavor", "trainyard:platform.tenants[1].quotas[1].flavor", "'fake-h100' is not a GPU or CPU pool"),
        ("invalid-name", "trainyard:platform.tenants[1].name", "not a valid DNS-1123 label"),
        ("topology-label-missing", "trainyard:platform.topology.levels[1].node_label", "not carried by GPU pool"),
    ],
)
def test_broken_stack_exits_2_with_file_field_and_reason(
    fixture: str, path: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    file = BROKEN / f"Pulumi.{fixture}.yaml"
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = next(line for line in err.splitlines() if path in line)
    assert f"Pulumi.{fixture}.yaml:" in line
    assert reason in line


def test_error_names_the_line_of_the_field() -> None:
    text = LOCAL.read_text().replace("      - name: team-b\n", "      - name: Team_B\n", 1)
    with pytest.raises(ConfigError) as caught:
        parse_stack_text(text, "x.yaml")
    (problem,) = caught.value.problems
    assert problem.line is not None
    assert text.splitlines()[problem.line - 1].strip() == "- name: Team_B"


def test_cohort_must_exist() -> None:
    data = local_platform()
    data["tenants"][0]["cohort"] = "nowhere"
    assert problems_of(data) == ["trainyard:platform.tenants[0].cohort: cohort 'nowhere' is not defined in cohorts"]


def test_borrowing_needs_a_cohort() -> None:
    data = local_platform()
    data["tenants"][0].pop("cohort")
    assert any("tenants[0].quotas[0].borrowing_limit" in p and "without a cohort cannot borrow" in p
               for p in problems_of(data))


def test_overcommit_is_allowed_only_when_the_stack_says_so() -> None:
    data = local_platform()
    data["tenants"][0]["quotas"][0]["gpus"] = 12
    assert any("add up to 20" in p for p in problems_of(data))
    data["allow_overcommit"] = True
    validate_platform(data, "x.yaml")


def test_lending_limit_cannot_exceed_nominal() -> None:
    data = local_platform()
    data["tenants"][0]["quotas"][0]["lending_limit"] = 9
    assert any("tenants[0].quotas[0]" in p and "exceeds the nominal quota" in p for p in problems_of(data))


def test_priority_class_must_be_defined() -> None:
    data = local_platform()
    data["tenants"][1]["priority_classes"] = ["urgent"]
    data["tenants"][1].pop("default_priority_class")
    assert problems_of(data) == [
        "trainyard:platform.tenants[1].priority_classes[0]: priority class 'urgent' is not defined in priority_classes"
    ]


def test_hostname_must_be_the_lowest_topology_level() -> None:
    data = local_platform()
    levels = data["topology"]["levels"]
    data["topology"]["levels"] = [levels[2], levels[0], levels[1]]
    assert any("kubernetes.io/hostname can only be the last" in p for p in problems_of(data))


def test_quantities_are_checked() -> None:
    data = local_platform()
    data["gpu_pools"][0]["memory_per_node"] = "256 gigs"
    assert any("gpu_pools[0].memory_per_node" in p and "not a Kubernetes quantity" in p for p in problems_of(data))


def test_unknown_component_version_names_the_known_ones() -> None:
    data = local_platform()
    data["versions"] = {"kueue": "0.9.0"}
    assert any("kueue 0.9.0 is not in the catalog (known: 0.19.2)" in p for p in problems_of(data))


def test_config_is_frozen() -> None:
    config = validate_platform(local_platform(), "x.yaml")
    with pytest.raises(Exception, match="frozen"):
        config.environment = "other"  # type: ignore[misc]


def test_missing_stack_file_is_a_clean_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["validate", str(tmp_path / "Pulumi.nope.yaml")]) == 2
    assert "no such stack file" in capsys.readouterr().err


def test_invalid_yaml_names_the_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  trainyard:platform:\n    environment: [unclosed\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not valid YAML" in err and "Pulumi.bad.yaml:" in err


def test_a_removed_field_says_why_it_went_and_what_to_do() -> None:
    data = local_platform()
    data["tenants"][1]["storage"] = {"requests": "1Ti"}
    (problem,) = problems_of(data)
    assert problem.startswith("trainyard:platform.tenants[1].storage: removed: the tenant ResourceQuota no longer "
                              "limits PVC storage")
    assert "Delete this field" in problem
    data["tenants"][1]["storage_quota"] = {"requests": "1Ti"}  # an unknown field is still called one
    assert any(p.startswith("trainyard:platform.tenants[1].storage_quota: unknown field") for p in problems_of(data))


@pytest.mark.parametrize(("charts", "reason"), [
    ({"mirror": "https://registry.example.com/charts"}, "is not an OCI chart mirror: oci://HOST[:PORT][/PATH]"),
    ({"mirror": "oci://registry.example.com/charts/"}, "no trailing '/'"),
    ({"mirror": "oci://registry.example.com/charts", "plain_http": True},
     "plain_http is allowed only for a loopback mirror"),
    ({"plain_http": True}, "plain_http and ca_file need mirror"),
    ({"mirror": "oci://127.0.0.1:5000/charts", "plain_http": True, "ca_file": "ca.pem"}, "exclude each other"),
])
def test_a_chart_mirror_that_is_not_an_oci_mirror_or_would_go_unauthenticated_is_refused(
        charts: dict[str, Any], reason: str) -> None:
    data = local_platform()
    data["charts"] = charts
    (problem,) = problems_of(data)
    assert problem.startswith("trainyard:platform.charts: ") and reason in problem, problem


def test_a_loopback_chart_mirror_may_use_plain_http() -> None:
    data = local_platform()
    for host in ("127.0.0.1:5000", "localhost", "[::1]:5000"):
        data["charts"] = {"mirror": f"oci://{host}/charts", "plain_http": True}
        config = validate_platform(data, "stacks/Pulumi.test.yaml")
        assert config.charts.mirror_host == host and config.charts.mirror_path == "charts"
