"""The rehearsal's reads without a kubectl process (rehearsal/kube.py): on a real API server, every way a caller names a
resource reads what ``kubectl get`` reads, lists come back in kubectl's shape, an absent object is kubectl's NotFound,
and what the in-process reads cannot do (a kubeconfig they cannot use, a name discovery does not resolve) is still
answered by kubectl.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import BIN_DIR, Cluster, bare_api_server
from trainyard.rehearsal.kube import REDISCOVER_AFTER, Kube, KubeError, _reads, wait_until

pytestmark = pytest.mark.cluster

NOWHERE = Path("/nonexistent/kubectl")  # a Kube with this kubectl fails on any call that starts one

WIDGETS = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.trainyard.dev"},
           "spec": {"group": "example.trainyard.dev", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {"type": "object",
                                                                 "x-kubernetes-preserve-unknown-fields": True}}}]}}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with bare_api_server(tmp_path_factory, "kube-reads") as running:
        objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "reads"}},
                   *({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": f"cm-{n}", "namespace": "reads", "labels": {"parity": ("even", "odd")[n % 2]}},
                      "data": {"count": str(n)}} for n in range(3)),
                   {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "in-default", "namespace": "default"}},
                   WIDGETS]
        running.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(objects))
        running.wait_established(WIDGETS["metadata"]["name"])
        widget = {"apiVersion": "example.trainyard.dev/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "reads"}}
        wait_until("the widget kind to be served",
                   lambda: running.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(widget),
                                           check=False).returncode == 0, 60, interval=1)
        yield running


def kubectl_json(api: Cluster, *args: str) -> Any:
    return json.loads(api.kubectl("get", *args, "-o", "json").stdout)


def comparable(found: Any) -> Any:
    """Without what differs between two reads of unchanged objects: none of the objects' fields do."""
    return {**found, "metadata": {}} if found.get("kind") == "List" else found


@pytest.mark.parametrize(("resource", "namespace", "selector"), [
    ("configmaps", "reads", None), ("configmap", "reads", None), ("cm", "reads", None), ("ConfigMap", "reads", None),
    ("configmaps", "reads", "parity=even"), ("configmaps", "*", None), ("namespaces", None, None), ("ns", None, None),
    ("namespaces", "reads", None),  # a namespace given for a cluster-scoped resource is ignored, as kubectl does
    ("events", "*", None),  # core and events.k8s.io both serve "events": kubectl reads the core group's
    ("customresourcedefinitions.apiextensions.k8s.io", None, None), ("crd", None, None),
    ("widgets.example.trainyard.dev", "reads", None), ("widgets.v1.example.trainyard.dev", "reads", None),
    ("wd", "reads", None), ("widget", "*", None), ("configmaps", None, None),  # the context's namespace: default
])
def test_a_list_reads_what_kubectl_get_reads(api: Cluster, resource: str, namespace: str | None,
                                             selector: str | None) -> None:
    args = [resource, *(["--all-namespaces"] if namespace == "*" else ["-n", namespace] if namespace else []),
            *(["-l", selector] if selector else [])]
    reference = kubectl_json(api, *args)
    fast = Kube(NOWHERE, api.kubeconfig)
    assert comparable(fast.get(resource, namespace=namespace) if not selector else
                      {**reference, "items": fast.items(resource, namespace, selector)}) == comparable(reference)
    assert fast.items(resource, namespace, selector) == reference["items"]
    assert reference["items"] or resource == "events", "the comparison compared something"


def test_one_object_and_an_absent_one_read_as_kubectl_reads_them(api: Cluster) -> None:
    fast = Kube(NOWHERE, api.kubeconfig)
    assert fast.get("configmaps", "cm-1", "reads") == kubectl_json(api, "configmaps", "cm-1", "-n", "reads")
    assert fast.get("widgets.example.trainyard.dev", "w", "reads") == kubectl_json(api, "wd", "w", "-n", "reads")
    assert fast.exists("configmaps", "cm-1", "reads") and fast.exists("namespace", "reads")
    assert not fast.exists("configmaps", "absent", "reads") and not fast.exists("widget", "w", "default")
    reference = api.kubectl("get", "configmaps", "absent", "-n", "reads", check=False).stderr.strip()
    with pytest.raises(KubeError) as error:
        fast.get("configmaps", "absent", "reads")
    assert reference == 'Error from server (NotFound): configmaps "absent" not found'
    assert str(error.value).endswith(reference)


def test_what_the_reads_cannot_resolve_is_asked_of_kubectl(api: Cluster, tmp_path: Path) -> None:
    kubectl = BIN_DIR / "kubectl"
    # Not plain names: kubectl answers them (a Kube without a kubectl cannot).
    for resource in ("configmaps,namespaces", "configmap/cm-1", "nosuchthings"):
        with pytest.raises(FileNotFoundError, match="nonexistent"):
            Kube(NOWHERE, api.kubeconfig).items(resource, "reads")
    assert [i["kind"] for i in Kube(kubectl, api.kubeconfig).items("configmaps,namespaces", "reads")
            if i["metadata"]["name"] == "cm-1"] == ["ConfigMap"]
    with pytest.raises(KubeError, match=re.escape("doesn't have a resource type \"nosuchthings\"")):
        Kube(kubectl, api.kubeconfig).items("nosuchthings", "reads")

    # A kubeconfig the reads do not use (impersonation: kubectl's business): kubectl reads, with the same answer.
    config = yaml.safe_load(api.kubeconfig.read_text())
    config["users"][0]["user"]["as"] = "someone"
    config["users"][0]["user"]["as-groups"] = ["system:masters"]
    impersonating = tmp_path / "impersonating.kubeconfig"
    impersonating.write_text(yaml.safe_dump(config))
    assert _reads(impersonating) is None and _reads(api.kubeconfig) is not None
    with pytest.raises(FileNotFoundError, match="nonexistent"):
        Kube(NOWHERE, impersonating).items("configmaps", "reads")
    assert [c["metadata"]["name"] for c in Kube(kubectl, impersonating).items("configmaps", "reads")
            if c["metadata"]["name"].startswith("cm-")] == ["cm-0", "cm-1", "cm-2"]


def test_a_kind_served_after_the_first_read_is_read_without_kubectl(api: Cluster) -> None:
    fast = Kube(NOWHERE, api.kubeconfig)
    assert fast.items("configmaps", "reads")  # discovery made before the next CRD exists
    gadgets = {**WIDGETS, "metadata": {"name": "gadgets.example.trainyard.dev"},
               "spec": {**WIDGETS["spec"], "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"}}}
    api.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(gadgets))
    api.wait_established("gadgets.example.trainyard.dev")

    def read_without_kubectl() -> bool | None:
        try:
            return fast.items("gadgets", "*") == [] or None
        except FileNotFoundError:  # not in discovery yet (it lags Established on a loaded machine): kubectl was asked
            return None

    assert wait_until("gadgets to be read without kubectl", read_without_kubectl, 120, interval=REDISCOVER_AFTER)
