"""Kueue's CRDs as prod declares them, on a real kube-apiserver (issue 13: CRDs owned once).

On stacks that install the Kueue chart, the chart's CRD templates are dropped by Trainyard's
post-renderer (tests/charts proves it), so Trainyard's CRDs must carry what the chart's did:
the conversion webhook on the five CRDs whose v1beta1 and v1beta2 schemas differ. This
applies the prod render's Kueue CRDs to a private control plane (not the rehearsal's, whose
local stack keeps upstream's CRDs as they are) and shows that the API server accepts them,
serves v1beta2 (the storage version) without the webhook, and sends a v1beta1 read through
Kueue's conversion webhook service, which does not exist here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from tests.cluster.conftest import Cluster, private_cluster, tools_problem
from tests.conftest import rendered
from trainyard import catalog

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def crd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    problem = tools_problem("etcd", "kube-apiserver")  # no Pulumi engine needed
    if problem is not None:
        pytest.skip(problem)
    with private_cluster(tmp_path_factory.mktemp("crd-cluster"), with_fake_nodes=False) as running:
        yield running


def test_prods_kueue_crds_route_v1beta1_through_kueues_conversion_webhook(crd_cluster: Cluster) -> None:
    kueue_crds = [c for c in rendered("prod").crds if c["spec"]["group"] == "kueue.x-k8s.io"]
    crd_cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-",
                        stdin=yaml.safe_dump_all(kueue_crds))
    crd_cluster.wait_established(*[c["metadata"]["name"] for c in kueue_crds])
    converted = {f"{plural}.kueue.x-k8s.io" for plural in catalog.KUEUE_CONVERTED_CRDS}
    for crd in kueue_crds:
        live = crd_cluster.get_json("crd", crd["metadata"]["name"])
        strategy = live["spec"]["conversion"]["strategy"]
        assert strategy == ("Webhook" if crd["metadata"]["name"] in converted else "None"), crd["metadata"]["name"]

    queue = {"apiVersion": catalog.KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": "conversion-probe"},
             "spec": {"namespaceSelector": {}}}
    crd_cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(queue))
    assert crd_cluster.get_json("clusterqueues.v1beta2.kueue.x-k8s.io", "conversion-probe")["apiVersion"] == catalog.KUEUE_API
    old = crd_cluster.kubectl("get", "clusterqueues.v1beta1.kueue.x-k8s.io", "conversion-probe", check=False)
    assert old.returncode != 0
    assert 'conversion webhook for kueue.x-k8s.io/v1beta2, Kind=ClusterQueue failed' in old.stderr
    assert 'service "kueue-webhook-service" not found' in old.stderr
