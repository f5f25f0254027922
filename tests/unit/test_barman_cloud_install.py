"""The barman-cloud plugin as the rehearsal installs it (rehearsal/barman_cloud_install.py): upstream's manifest with
the mirror's images and the stack's placement, the CRD before `pulumi up`, and the stack's NetworkPolicy for it."""

from __future__ import annotations

import base64
import copy
import os
from pathlib import Path
from typing import Any

import pytest

from tests.mlflow_overrides import MLFLOW_WITH_BACKUPS
from trainyard import catalog
from trainyard.config import validate_platform
from trainyard.manifests import mlflow
from trainyard.project import open_stack
from trainyard.rehearsal import barman_cloud_install as install
from trainyard.rehearsal.settings import ClusterError
from trainyard.rehearsal.stack import InCluster, read_platform, rehearsal_platform

PLUGIN = "trainyard.local/mirror/cloudnative-pg/plugin-barman-cloud:v0.15.0@sha256:" + "a" * 64
SIDECAR = "trainyard.local/mirror/cloudnative-pg/plugin-barman-cloud-sidecar:v0.15.0@sha256:" + "b" * 64
UPSTREAM_SIDECAR = b"ghcr.io/cloudnative-pg/plugin-barman-cloud-sidecar-testing:main\n"
BACKUPS = MLFLOW_WITH_BACKUPS


def upstream_like() -> list[dict[str, Any]]:
    """The layout of upstream's manifest.yaml (v0.14.0, v0.15.0): the parts the install rewrites or relies on."""
    return [
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
         "metadata": {"name": install.CRD_NAME}, "spec": {"group": "barmancloud.cnpg.io"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "plugin-barman-cloud", "namespace": "cnpg-system"}},
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": "plugin-barman-cloud-8tfddg42gf", "namespace": "cnpg-system"},
         "data": {"SIDECAR_IMAGE": base64.b64encode(UPSTREAM_SIDECAR).decode()}, "type": "Opaque"},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "barman-cloud", "namespace": "cnpg-system",
                                                                      "labels": {"app": "barman-cloud"}},
         "spec": {"template": {"metadata": {"labels": {"app": "barman-cloud"}}, "spec": {
             "containers": [{"name": "barman-cloud", "image": "ghcr.io/cloudnative-pg/plugin-barman-cloud-testing:main",
                             "args": ["operator", "--server-address=:9090"],
                             "env": [{"name": "SIDECAR_IMAGE", "valueFrom": {"secretKeyRef": {
                                 "key": "SIDECAR_IMAGE", "name": "plugin-barman-cloud-8tfddg42gf"}}}]}]}}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
         "metadata": {"name": "barman-cloud-server", "namespace": "cnpg-system"},
         "spec": {"commonName": "barman-cloud", "dnsNames": ["barman-cloud"], "secretName": "barman-cloud-server-tls",
                  "usages": ["server auth"], "issuerRef": {"name": "selfsigned-issuer", "kind": "Issuer"}}},
    ]


def _sidecar_image(objects: list[dict[str, Any]]) -> str:
    """The sidecar image the plugin injects, as ``plugin_objects`` wrote it into the Deployment's Secret."""
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    ref = next(e["valueFrom"]["secretKeyRef"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
               if e["name"] == install.SIDECAR_KEY)
    secret = next(o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == ref["name"])
    return base64.b64decode(secret["data"][ref["key"]]).decode().strip()


def config(overrides: dict[str, Any], tmp_path: Path, controllers: tuple[str, ...] = ("cnpg", "kserve")) -> Any:
    stack = open_stack("local")
    return validate_platform(rehearsal_platform(read_platform(stack.path), overrides, InCluster(controllers, tmp_path / "l")),
                             "test")


def test_wanted_only_with_real_nodes_backups_on_and_cloudnative_pg_installed(tmp_path: Path) -> None:
    with_backups = config(BACKUPS, tmp_path)
    assert install.wanted(with_backups, real_nodes=True)
    assert not install.wanted(with_backups, real_nodes=False)
    off = copy.deepcopy(BACKUPS)
    off["mlflow"]["backup"]["enabled"] = False
    assert not install.wanted(config(off, tmp_path), real_nodes=True)
    assert not install.wanted(config({}, tmp_path), real_nodes=True)  # the local stack declares no MLflow


def test_the_plugin_gets_the_mirror_images_and_the_stack_placement(tmp_path: Path) -> None:
    objects = install.plugin_objects(config(BACKUPS, tmp_path), upstream_like(), PLUGIN, SIDECAR)
    assert all(o["kind"] != "CustomResourceDefinition" for o in objects)  # the CRD is applied on its own, first
    # The operator's namespace first: a site installs the plugin before the stack's `pulumi up` adopts it.
    assert objects[0] == {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": "cnpg-system", "labels": install.LABEL}}
    assert all(o["metadata"]["labels"]["trainyard.dev/rehearsal"] == "backups" for o in objects)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == PLUGIN
    assert _sidecar_image(objects) == SIDECAR
    stack = config(BACKUPS, tmp_path)
    for key, value in stack.system_pods.node_selector.items():
        assert pod["nodeSelector"][key] == value
    # Upstream's objects are otherwise unchanged: the Certificate is the manifest's, for the stand-in to issue.
    assert [o for o in objects if o["kind"] == "Certificate"] == [
        {**o, "metadata": {**o["metadata"], "labels": install.LABEL}} for o in upstream_like() if o["kind"] == "Certificate"]
    assert install.crd(upstream_like())["metadata"]["name"] == install.CRD_NAME


def test_a_manifest_not_laid_out_as_upstreams_is_refused_by_name(tmp_path: Path) -> None:
    stack = config(BACKUPS, tmp_path)
    elsewhere = upstream_like()
    elsewhere[3]["metadata"]["namespace"] = "plugins"
    with pytest.raises(ClusterError, match="only finds plugins in its own namespace 'cnpg-system'"):
        install.plugin_objects(stack, elsewhere, PLUGIN, SIDECAR)
    no_secret = upstream_like()
    no_secret[3]["spec"]["template"]["spec"]["containers"][0]["env"] = []
    with pytest.raises(ClusterError, match="takes SIDECAR_IMAGE from 0 Secrets"):
        install.plugin_objects(stack, no_secret, PLUGIN, SIDECAR)
    with pytest.raises(ClusterError, match=r"0 CRDs named objectstores\.barmancloud\.cnpg\.io"):
        install.crd(upstream_like()[1:])
    with pytest.raises(ClusterError, match=r"tools/build\.sh barman-cloud"):
        install.upstream_objects(tmp_path)


def test_upstreams_manifest_is_laid_out_as_the_install_expects() -> None:
    tools = Path(os.environ.get("TRAINYARD_TOOLS_DIR", Path.home() / ".cache/trainyard/tools"))
    if not install.manifest_path(tools).is_file():
        pytest.skip(f"{install.manifest_path(tools)} not found: `tools/build.sh barman-cloud` copies it")
    upstream = install.upstream_objects(tools)
    assert install.namespace(upstream) == catalog.release("cnpg", "1.30.0").namespace
    objects = install.plugin_objects(open_stack("local").config, upstream, PLUGIN, SIDECAR)
    assert _sidecar_image(objects) == SIDECAR
    (service,) = [o for o in objects if o["kind"] == "Service"]
    # What the stack's NetworkPolicy opens is where the operator calls the plugin (its Service annotation and
    # selector: cloudnative-pg discovers plugins by them).
    assert service["metadata"]["annotations"]["cnpg.io/pluginPort"] == str(catalog.BARMAN_CLOUD_PLUGIN_PORT)
    assert service["metadata"]["labels"]["cnpg.io/pluginName"] == catalog.BARMAN_CLOUD_PLUGIN
    assert service["spec"]["selector"] == catalog.BARMAN_CLOUD_PLUGIN_POD_LABELS
    assert {c["metadata"]["name"] for c in objects if c["kind"] == "Certificate"} == {
        "barman-cloud-client", "barman-cloud-server"}


def test_the_stack_lets_the_operator_reach_the_plugin_only_with_backups_on(tmp_path: Path) -> None:
    def policies(overrides: dict[str, Any]) -> dict[str, Any]:
        concern = mlflow.build_operator(config(overrides, tmp_path))
        return {o["metadata"]["name"]: o for o in concern.objects if o["kind"] == "NetworkPolicy"}

    found = policies(BACKUPS)["allow-barman-cloud-plugin"]
    assert found["metadata"]["namespace"] == "cnpg-system"
    assert found["spec"]["podSelector"] == {"matchLabels": catalog.BARMAN_CLOUD_PLUGIN_POD_LABELS}
    assert found["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "cloudnative-pg"}}}], "ports": [{"protocol": "TCP", "port": 9090}]}]
    off = copy.deepcopy(BACKUPS)
    off["mlflow"]["backup"]["enabled"] = False
    assert "allow-barman-cloud-plugin" not in policies(off)
