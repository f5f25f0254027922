"""``system_pods``: the platform's controller pods placed on a site's system nodes, chart by chart.

The rendered values are checked against what each chart does with them in tests/charts (helm template); here:
the stack setting becomes each covered chart's own keys, and a stack without it renders exactly as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainyard.config import ConfigError, validate_platform
from trainyard.manifests import installs, placement
from trainyard.project import open_stack
from trainyard.rehearsal.settings import REAL_NODE_LABELS
from trainyard.rehearsal.stack import EXTERNAL, REHEARSAL_MIRROR, InCluster, read_platform, rehearsal_platform


def _with_system_pods(stack: str, system_pods: dict[str, Any]) -> Any:
    platform = read_platform(open_stack(stack).path)
    return validate_platform({**platform, "system_pods": system_pods}, f"{stack} + system_pods")


def _release_values(config: Any) -> dict[str, dict[str, Any]]:
    return {release.component: release.values for release in installs.releases(config)}


def test_controllers_land_on_the_system_nodes_of_the_stack() -> None:
    config = _with_system_pods("prod", {"node_selector": {"node-role.kubernetes.io/system": ""},
                                        "tolerations": [{"key": "dedicated", "value": "system", "effect": "NoSchedule"}]})
    values = _release_values(config)
    toleration = [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}]
    assert values["kueue"]["controllerManager"]["nodeSelector"] == {"node-role.kubernetes.io/system": ""}
    assert values["kueue"]["controllerManager"]["tolerations"] == toleration
    # placement merges into the chart values Trainyard sets already (the image stays)
    assert values["kueue"]["controllerManager"]["manager"]["image"]["repository"].endswith("kueue/kueue")
    assert values["jobset"]["controller"] == {"nodeSelector": {"node-role.kubernetes.io/system": ""},
                                              "tolerations": toleration}
    assert values["trainer"]["manager"] == {"nodeSelector": {"node-role.kubernetes.io/system": ""},
                                            "tolerations": toleration}


def test_controller_resources_are_each_charts_own_keys_over_its_defaults() -> None:
    config = _with_system_pods("staging", {"node_selector": {"trainyard.dev/pool": "system"}, "resources": {
        "kueue": {"requests": {"cpu": "100m"}}, "jobset": {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}},
        "trainer": {"requests": {"cpu": "50m", "memory": "128Mi"}}, "kserve": {"limits": {"cpu": "1"}},
        "seaweedfs": {"requests": {"cpu": "100m", "memory": "256Mi"}}, "cnpg": {"requests": {"cpu": "100m"}},
        "cert-manager": {"requests": {"cpu": "10m"}}}})
    assert placement.chart_values(config, "kueue")["controllerManager"]["manager"]["resources"] == {
        "requests": {"cpu": "100m"}}  # the chart's limits (2 CPU, 512Mi) and memory request stay: Helm merges
    assert placement.chart_values(config, "jobset")["controller"]["resources"] == {
        "requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}}
    assert placement.chart_values(config, "trainer")["manager"]["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"}}
    assert placement.chart_values(config, "kserve")["kserve"]["controller"]["resources"] == {"limits": {"cpu": "1"}}
    assert placement.chart_values(config, "seaweedfs")["allInOne"]["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"}}  # a map, not YAML text: the chart renders it with toYaml
    assert placement.chart_values(config, "cnpg")["resources"] == {"requests": {"cpu": "100m"}}
    manager = placement.chart_values(config, "cert-manager")
    assert manager["resources"] == manager["webhook"]["resources"] == manager["cainjector"]["resources"] == {
        "requests": {"cpu": "10m"}}
    # merged into what Trainyard sets on the chart already (the image, the node selector)
    values = _release_values(config)
    assert values["kueue"]["controllerManager"]["manager"]["resources"] == {"requests": {"cpu": "100m"}}
    assert values["kueue"]["controllerManager"]["nodeSelector"] == {"trainyard.dev/pool": "system"}


def test_a_controller_request_above_its_limit_or_an_unknown_chart_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"system_pods\.resources\.kueue\.requests\.cpu.*2 is above limits\.cpu 500m"):
        _with_system_pods("local", {"resources": {"kueue": {"requests": {"cpu": "2"}, "limits": {"cpu": "500m"}}}})
    with pytest.raises(ConfigError, match=r"system_pods\.resources\.mlflow"):
        _with_system_pods("local", {"resources": {"mlflow": {"requests": {"cpu": "1"}}}})
    with pytest.raises(ConfigError, match=r"system_pods\.resources\.kueue\.requests\.gpu"):
        _with_system_pods("local", {"resources": {"kueue": {"requests": {"gpu": "1"}}}})


def test_a_toleration_without_a_value_tolerates_any_value() -> None:
    config = _with_system_pods("local", {"tolerations": [{"key": "system-only", "effect": "NoExecute"}]})
    assert placement.tolerations(config) == [{"key": "system-only", "operator": "Exists", "effect": "NoExecute"}]
    assert "nodeSelector" not in _release_values(config)["jobset"].get("controller", {})


def test_a_stack_without_system_pods_renders_its_charts_as_before() -> None:
    platform = read_platform(open_stack("local").path)
    config = validate_platform({key: value for key, value in platform.items() if key != "system_pods"}, "local")
    assert not config.system_pods.node_selector and not config.system_pods.tolerations
    assert not config.system_pods.resources
    for release in installs.releases(config):
        assert placement.chart_values(config, release.component) == {}
        assert placement.placed(config, release.component, {"a": 1}) == {"a": 1}


def test_a_bad_node_selector_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"system_pods\.node_selector"):
        _with_system_pods("local", {"node_selector": {"not a label key!": "x"}})


def test_with_real_nodes_the_rehearsal_installs_the_charts_of_the_controllers_it_runs_as_pods(tmp_path: Path) -> None:
    lock = tmp_path / "images.lock.yaml"
    platform = rehearsal_platform(read_platform(open_stack("local").path), None,
                                  InCluster(("kueue", "jobset", "trainer"), lock))
    config = validate_platform(platform, "local (rehearsal overlay, real nodes)")
    assert set(config.rehearsal.external_controllers) == set(EXTERNAL) - {"kueue", "jobset", "trainer"}
    assert config.images.registry_mirror == REHEARSAL_MIRROR
    assert config.images.lock_file == str(lock)
    assert dict(config.system_pods.node_selector) == REAL_NODE_LABELS
    assert config.charts.mirror == "oci://127.0.0.1:25000/charts" and config.charts.plain_http
    releases = {r.component: r for r in installs.releases(config)}
    assert not any(releases[c].external for c in ("kueue", "jobset", "trainer"))
    kueue_image = releases["kueue"].values["controllerManager"]["manager"]["image"]["repository"]
    assert kueue_image == "trainyard.local/mirror/kueue/kueue"  # <mirror><upstream repository>
    assert releases["kueue"].values["controllerManager"]["nodeSelector"] == REAL_NODE_LABELS
    # The rehearsal's mirror is approved like a site's (under its approved registry): KServe's pod mutator puts the
    # storage initializer, from the mirror, into every predictor pod, which trainyard-pod-images checks.
    assert config.runtimes.approved_registries == ("registry.trainyard.internal/", REHEARSAL_MIRROR)


def test_without_real_nodes_every_chart_controller_stays_external() -> None:
    platform = rehearsal_platform(read_platform(open_stack("local").path))
    assert platform["rehearsal"]["external_controllers"] == EXTERNAL
    # no placement without real nodes (nothing of the controllers runs in the cluster); the stack's own resources stay
    assert platform.get("system_pods", {}).keys() <= {"resources"}


def test_only_chart_controllers_can_run_in_the_cluster(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a chart controller: kwok"):
        InCluster(("kwok",), tmp_path / "lock")


def test_a_machine_that_cannot_run_the_real_node_is_told_what_is_missing_and_nothing_starts(tmp_path: Path) -> None:
    from trainyard.rehearsal.prerequisites import PrerequisiteError
    from trainyard.rehearsal.session import Rehearsal
    from trainyard.rehearsal.settings import Ports, Settings

    settings = Settings(tools_dir=tmp_path / "no-tools", state_dir=tmp_path / "cluster", ports=Ports())
    session = Rehearsal(open_stack("local"), settings, env={}, real_nodes=True)
    with pytest.raises(PrerequisiteError, match=r"kubelet: not built"):
        session.up()
    assert not list((tmp_path / "cluster").glob("run/*.pid"))  # not even etcd


def test_the_lab_images_are_refused_without_real_nodes_naming_the_command(tmp_path: Path) -> None:
    from trainyard.rehearsal.session import Rehearsal
    from trainyard.rehearsal.settings import ClusterError, Ports, Settings

    settings = Settings(tools_dir=tmp_path / "no-tools", state_dir=tmp_path / "cluster", ports=Ports())
    session = Rehearsal(open_stack("local"), settings, env={}, real_nodes=False)
    with pytest.raises(ClusterError, match=r"trainyard cluster up local --real-nodes"):
        list(session.push_lab_images())


def test_the_lab_images_are_the_runtimes_image_trainers_initializers_and_the_serving_image(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `trainyard cluster lab-images` asks of the mirror: the three on-request image sets, nothing else."""
    from trainyard.rehearsal import factory, mirror
    from trainyard.rehearsal.session import Rehearsal
    from trainyard.rehearsal.settings import Ports, Settings

    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(mirror, "push_images", lambda stack, config, in_cluster, tools, components: iter(
        asked.append(tuple(components)) or ["pushed"]))
    settings = Settings(tools_dir=tmp_path / "no-tools", state_dir=tmp_path / "cluster", ports=Ports())
    session = Rehearsal(open_stack("local"), settings, env={}, real_nodes=True)
    assert list(session.push_lab_images()) == ["pushed"]
    assert asked == [(factory.LAB, factory.INITIALIZERS, factory.SERVING)] == [
        ("lora-peft", "trainer-initializers", "peft-cpu")]
