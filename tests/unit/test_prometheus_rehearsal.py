"""The rehearsal's monitoring (``rehearsal/prometheus_images.py``, ``rehearsal/prometheus_install.py``): which images,
under which names, and what the site install applies, without a cluster.

The images built from the real binaries and pushed to a real registry: tests/registry/test_monitoring_images.py; the
install on a real node: tests/node/platform/test_monitoring.py.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.unit.test_factory import tiny_elf
from trainyard.config import validate_platform
from trainyard.config.model import PlatformConfig
from trainyard.project import open_stack
from trainyard.rehearsal import prometheus_images, prometheus_install
from trainyard.rehearsal.images import ImageError
from trainyard.rehearsal.settings import REAL_NODE_LABELS, ClusterError
from trainyard.rehearsal.stack import InCluster, read_platform, rehearsal_platform

MONITORING: dict[str, Any] = {"monitoring": {"enabled": True}, "security": {"network": {"metrics_from": ["monitoring"]}}}
DEFAULTS_GO = '''package operator

var (
	DefaultPrometheusVersion = PrometheusCompatibilityMatrix[len(PrometheusCompatibilityMatrix)-1]
	PrometheusCompatibilityMatrix = []string{
		"v2.45.0",
		// The v3.13 is a long-term support release.
		"v3.13.0",
		"%s",
	}
)
'''
OPERATOR_IMAGE = "trainyard.local/mirror/prometheus-operator/prometheus-operator:v0.93.0@sha256:" + "a" * 64
RELOADER_IMAGE = "trainyard.local/mirror/prometheus-operator/prometheus-config-reloader:v0.93.0@sha256:" + "b" * 64
PROMETHEUS_IMAGE = "trainyard.local/mirror/prometheus/prometheus:v3.13.1@sha256:" + "c" * 64


def _config(tmp_path: Path, overrides: dict[str, Any] | None = None, real_nodes: bool = True) -> PlatformConfig:
    stack = open_stack("local", ROOT)
    platform = rehearsal_platform(read_platform(stack.path), overrides if overrides is not None else MONITORING,
                                  InCluster(("kueue", "jobset", "trainer"), tmp_path / "lock.yaml") if real_nodes else None)
    return validate_platform(platform, "test")


def _tools(directory: Path, default: str = "v3.13.1", operator_version: str = "v0.93.0",
           prometheus_module: str = "github.com/prometheus/prometheus@v0.316.0") -> Path:
    """A tools directory as tools/build.sh leaves it for the three images (binaries that cannot run: tiny ELFs)."""
    (directory / "bin").mkdir(parents=True)
    for name in ("prometheus-operator", "prometheus-config-reloader", "prometheus", "promtool"):
        (directory / "bin" / name).write_bytes(tiny_elf(payload=name.encode()))
    share = directory / "share" / "prometheus-operator"
    (share / "pkg" / "operator").mkdir(parents=True)
    (share / "VERSION").write_text(operator_version + "\n")
    (share / "pkg" / "operator" / "defaults.go").write_text(DEFAULTS_GO % default)
    (directory / "share" / "prometheus").mkdir(parents=True)
    (directory / "share" / "prometheus" / "VERSION").write_text(prometheus_module + "\n")
    return directory


def test_the_images_are_named_as_the_operators_manifests_and_defaults_name_them(tmp_path: Path) -> None:
    tools = _tools(tmp_path / "tools")
    assert prometheus_images.default_prometheus_version(tools) == "v3.13.1"  # the matrix's last entry
    names = {role: str(ref) for role, ref in prometheus_images.targets(_config(tmp_path), tools).items()}
    assert names == {"operator": "trainyard.local/mirror/prometheus-operator/prometheus-operator:v0.93.0",
                     "config-reloader": "trainyard.local/mirror/prometheus-operator/prometheus-config-reloader:v0.93.0",
                     "prometheus": "trainyard.local/mirror/prometheus/prometheus:v3.13.1"}


def test_a_stack_without_a_mirror_gets_no_image_under_upstreams_name(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match=r"no images.registry_mirror"):
        prometheus_images.targets(_config(tmp_path, real_nodes=False), _tools(tmp_path / "tools"))


def test_only_the_recorded_stand_in_is_built_for_the_operators_default(tmp_path: Path) -> None:
    assert prometheus_images.stand_in_for(_tools(tmp_path / "a")) == ("v3.13.1", prometheus_images.STAND_INS["v3.13.1"])
    with pytest.raises(ImageError, match=r"no Prometheus build stands in for quay.io/prometheus/prometheus:v3.14.0"):
        prometheus_images.stand_in_for(_tools(tmp_path / "b", default="v3.14.0"))
    (tmp_path / "c").mkdir()
    with pytest.raises(ImageError, match=r"defaults.go not found: run `tools/build.sh prometheus-operator`"):
        prometheus_images.default_prometheus_version(tmp_path / "c")


def test_binaries_of_another_version_or_not_static_are_refused(tmp_path: Path) -> None:
    config = _config(tmp_path)
    with pytest.raises(ImageError, match=r"was built from v0.92.0, but the image recipe expects v0.93.0"):
        prometheus_images.build(config, _tools(tmp_path / "a", operator_version="v0.92.0"), tmp_path / "cache")
    with pytest.raises(ImageError, match=r"built from github.com/prometheus/prometheus@v0.313.1, but the image recipe "
                                         r"expects github.com/prometheus/prometheus@v0.316.0"):
        prometheus_images.build(config, _tools(tmp_path / "b", prometheus_module="github.com/prometheus/prometheus@v0.313.1"),
                                tmp_path / "cache")
    tools = _tools(tmp_path / "c")
    (tools / "bin" / "prometheus-config-reloader").write_bytes(tiny_elf(interpreter=True))
    with pytest.raises(ImageError, match=r"prometheus-config-reloader is not a static x86-64 ELF"):
        prometheus_images.build(config, tools, tmp_path / "cache")
    (tools / "bin" / "prometheus-config-reloader").unlink()
    with pytest.raises(ImageError, match=r"prometheus-config-reloader not found: build it with "
                                         r"`tools/build.sh prometheus-operator`"):
        prometheus_images.build(config, tools, tmp_path / "cache")


def test_the_prometheus_image_is_laid_out_as_upstreams_dockerfile_and_says_what_it_stands_in_for() -> None:
    stand_in = prometheus_images.STAND_INS["v3.13.1"]
    layer = prometheus_images.prometheus_layer(b"p", b"t", b"yml", b"L", b"N", stand_in)
    entries = {e.path: e for e in layer.entries}
    assert {"bin/prometheus", "bin/promtool", "etc/prometheus/prometheus.yml", "LICENSE", "NOTICE"} <= set(entries)
    # RUN chown -R nobody:nobody /etc/prometheus /prometheus && chmod g+w /prometheus
    assert (entries["prometheus"].uid, entries["prometheus"].gid, entries["prometheus"].mode) == (65534, 65534, 0o775)
    assert entries["etc/prometheus/prometheus.yml"].uid == 65534 and entries["bin/prometheus"].uid == 0
    upstream = prometheus_images.ImageRef("quay.io", "prometheus/prometheus", "v3.13.1")
    config = prometheus_images._config("/bin/prometheus", upstream, "m", stand_in.version,
                                       cmd=("--config.file=/etc/prometheus/prometheus.yml",), workdir="/prometheus",
                                       ports=("9090/tcp",), volumes=("/prometheus",), stands_in=True)
    assert config["User"] == "65534" and config["Entrypoint"] == ["/bin/prometheus"]  # numeric: runAsNonRoot checks it
    assert config["Labels"] == {"org.opencontainers.image.version": "3.16.0", "dev.trainyard.built-from": "m",
                                "dev.trainyard.upstream-image": "quay.io/prometheus/prometheus:v3.13.1",
                                "dev.trainyard.stands-in-for": "quay.io/prometheus/prometheus:v3.13.1"}


def test_build_sh_builds_the_operator_the_stack_pins_and_the_stand_in_from_promtools_module() -> None:
    script = (ROOT / "tools" / "build.sh").read_text()
    config = open_stack("local", ROOT).config
    assert f"PROMETHEUS_OPERATOR_VERSION=v{config.versions.prometheus_operator}\n" in script
    stand_in = prometheus_images.STAND_INS["v3.13.1"]
    assert f"PROMETHEUS_MODULE_VERSION={stand_in.module_version}\n" in script
    assert f"PROMTOOL_VERSION={stand_in.version} " in script
    for wrapper in ("promtool", "prometheus"):  # one module version: the two share Go's build cache
        go_mod = (ROOT / "tools" / wrapper / "go.mod").read_text()
        assert re.search(rf"^\s+github.com/prometheus/prometheus {stand_in.module_version}\b", go_mod, re.M), wrapper


# ---------------------------------------------------------------------------------------------- the install


def _bundle() -> list[dict[str, Any]]:
    """The shape of bundle.yaml: CRDs, the operator's RBAC, ServiceAccount, Deployment and Service in default."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"annotations": {"operator.prometheus.io/version": "0.93.0"}}, "spec": {"group": "monitoring.coreos.com"}}
    crds = [copy.deepcopy({**crd, "metadata": {**crd["metadata"], "name": f"{p}.monitoring.coreos.com"}})
            for p in ("prometheuses", "servicemonitors", "podmonitors", "prometheusrules", "probes")]
    labels = {"app.kubernetes.io/name": "prometheus-operator"}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "prometheus-operator", "namespace": "default", "labels": dict(labels)},
                  "spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": [{
                      "name": "prometheus-operator", "image": "quay.io/prometheus-operator/prometheus-operator:v0.93.0",
                      "args": ["--kubelet-service=kube-system/kubelet",
                               "--prometheus-config-reloader=quay.io/prometheus-operator/prometheus-config-reloader:v0.93.0",
                               "--kubelet-endpoints=true"]}]}}}}
    return [*crds, {"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "prometheus-operator", "namespace": "default", "labels": dict(labels)}},
            deployment]


def test_monitoring_is_installed_only_in_a_rehearsal_with_real_nodes_of_a_stack_that_declares_it(tmp_path: Path) -> None:
    assert prometheus_install.wanted(_config(tmp_path), real_nodes=True)
    assert not prometheus_install.wanted(_config(tmp_path, real_nodes=False), real_nodes=False)
    assert not prometheus_install.wanted(_config(tmp_path, overrides={}), real_nodes=True)  # local: monitoring off


def test_the_operator_runs_the_mirrors_images_by_digest_on_the_system_nodes(tmp_path: Path) -> None:
    bundle = _bundle()
    objects = prometheus_install.operator_objects(_config(tmp_path), bundle, OPERATOR_IMAGE, RELOADER_IMAGE)
    assert [o["kind"] for o in objects] == ["ServiceAccount", "Deployment"]  # no CRD: those go their own way
    pod = objects[1]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == OPERATOR_IMAGE
    assert container["args"] == ["--kubelet-service=kube-system/kubelet",
                                 f"--prometheus-config-reloader={RELOADER_IMAGE}", "--kubelet-endpoints=true",
                                 "--config-reloader-cpu-request=0", "--config-reloader-cpu-limit=0"]
    assert container["resources"]["requests"]["cpu"] == "0"  # the rehearsal node's CPU is all the charts'
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", **REAL_NODE_LABELS}
    assert all(o["metadata"]["labels"]["trainyard.dev/rehearsal"] == "monitoring" for o in objects)
    assert bundle == _bundle()  # upstream's objects are not edited in place
    broken = copy.deepcopy(bundle)
    broken[-1]["spec"]["template"]["spec"]["containers"][0]["args"].pop(1)
    with pytest.raises(ClusterError, match="0 --prometheus-config-reloader= arguments"):
        prometheus_install.operator_objects(_config(tmp_path), broken, OPERATOR_IMAGE, RELOADER_IMAGE)


def test_the_bundles_crds_that_the_stack_declares_are_left_to_the_stack_and_must_be_the_same(tmp_path: Path) -> None:
    bundle = _bundle()
    declared = {o["metadata"]["name"]: copy.deepcopy(o) for o in bundle[1:4]}
    applied = prometheus_install.crds_to_apply(bundle, declared)
    assert [c["metadata"]["name"] for c in applied] == ["prometheuses.monitoring.coreos.com",
                                                        "probes.monitoring.coreos.com"]
    assert len(prometheus_install.crds_to_apply(bundle, {})) == 5  # monitoring.declare_crds: false
    declared["servicemonitors.monitoring.coreos.com"]["metadata"]["annotations"]["operator.prometheus.io/version"] = "0.92.0"
    with pytest.raises(ClusterError, match=r"CRD servicemonitors.monitoring.coreos.com: the stack declares another "
                                           r"document .*'0.92.0' vs '0.93.0'"):
        prometheus_install.crds_to_apply(bundle, declared)


def test_the_prometheus_is_the_one_the_monitoring_concern_expects(tmp_path: Path) -> None:
    config = _config(tmp_path, {**MONITORING, "monitoring": {"enabled": True, "prometheus": {
        "namespace": "observability", "service_account": "scraper", "match_labels": {"release": "site"}}},
        "security": {"network": {"metrics_from": ["observability"]}}})
    namespace, account, prometheus = prometheus_install.prometheus_objects(config, PROMETHEUS_IMAGE)
    assert namespace["metadata"]["name"] == "observability"
    assert (account["kind"], account["metadata"]["name"], account["metadata"]["namespace"]) == \
        ("ServiceAccount", "scraper", "observability")
    spec = prometheus["spec"]
    assert prometheus["metadata"]["namespace"] == "observability" and spec["serviceAccountName"] == "scraper"
    assert spec["image"] == PROMETHEUS_IMAGE
    for kind in ("serviceMonitor", "podMonitor", "rule"):
        assert spec[f"{kind}Selector"] == {"matchLabels": {"release": "site"}}
        assert spec[f"{kind}NamespaceSelector"] == {}  # every namespace: ServiceMonitors live in the controllers'
    assert spec["nodeSelector"] == REAL_NODE_LABELS
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] == 65534
    assert "cpu" not in spec["resources"]["requests"]
    # Without match_labels the selectors select everything ({}); an absent selector would select nothing.
    default = prometheus_install.prometheus_objects(_config(tmp_path), PROMETHEUS_IMAGE)[2]["spec"]
    assert default["serviceMonitorSelector"] == {} and default["ruleSelector"] == {}
    assert default["serviceAccountName"] == "prometheus-k8s"


def test_a_prometheus_is_ready_when_its_operator_says_available() -> None:
    meta = {"name": "k8s", "namespace": "monitoring"}
    assert prometheus_install.prometheus_problems(None) == ["Prometheus not found"]
    assert prometheus_install.prometheus_problems({"metadata": meta}) == \
        ["Prometheus monitoring/k8s: no Available condition yet"]
    degraded = {"metadata": meta, "status": {"conditions": [
        {"type": "Available", "status": "False", "reason": "NoPodReady", "message": "0/1 ready"}]}}
    assert prometheus_install.prometheus_problems(degraded) == ["Prometheus monitoring/k8s: NoPodReady: 0/1 ready"]
    ready = {"metadata": meta, "status": {"conditions": [{"type": "Available", "status": "True"}]}}
    assert prometheus_install.prometheus_problems(ready) == []


def test_a_missing_bundle_names_the_build_that_provides_it(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"bundle.yaml not found: run `tools/build.sh prometheus-operator`"):
        prometheus_install.upstream_objects(tmp_path)


def test_the_bundles_bare_equals_sign_is_read_as_kubernetes_reads_it(tmp_path: Path) -> None:
    share = tmp_path / "share" / "prometheus-operator"
    share.mkdir(parents=True)
    (share / "bundle.yaml").write_text("---\nkind: X\nenum:\n- '!='\n- =\n- =~\n---\n")
    assert prometheus_install.upstream_objects(tmp_path) == [{"kind": "X", "enum": ["!=", "=", "=~"]}]
