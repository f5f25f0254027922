"""The data cache's MutatingAdmissionPolicy on a real kube-apiserver (1.36, Pod Security admission on).

Trainer's cache initializer creates the cache pods (a LeaderWorkerSet's head and workers) with no
securityContext, which Pod Security "restricted" in tenant namespaces refuses. This applies the
data-cache fixture's policy, binding and one tenant namespace to a private control plane and
creates such a pod exactly as upstream builds it (pkg/initializers/dataset/cache.py at v2.3.0:
image CACHE_IMAGE, command head, ports 50051/8080, no securityContext), server-side dry run: the
policy makes it restricted and gives it the tenant's object-store Secret, so it is admitted. The
same pod with another image is left alone and refused, which shows Pod Security is enforced here.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import Cluster, bare_api_server
from tests.conftest import ROOT, rendered
from trainyard.manifests import data_cache, data_cache_concern, image_lock
from trainyard.manifests.meta import OBJECT_STORE_SECRET
from trainyard.project import open_stack
from trainyard.rehearsal.kube import wait_until

pytestmark = pytest.mark.cluster

FIXTURE = str(ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.data-cache.yaml")
TENANT = "eval"


@pytest.fixture(scope="module")
def cache_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with bare_api_server(tmp_path_factory, "data-cache-cluster") as running:
        yield running


def cache_pod(image: str) -> dict[str, Any]:
    """A cache head pod as the LWS controller creates it from the initializer's leaderTemplate."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probe-cache-0", "namespace": TENANT,
                     "labels": {data_cache.LWS_NAME_LABEL: "probe-cache", "app": "probe-cache-head"}},
        "spec": {"serviceAccountName": "probe-cache",
                 "containers": [{"name": "head", "image": image, "command": ["head"], "args": ["0.0.0.0", "50051"],
                                 "env": [{"name": "METADATA_LOC", "value": "s3://eval-datasets/t/metadata.json"}],
                                 "ports": [{"containerPort": 50051, "name": "grpc"},
                                           {"containerPort": 8080, "name": "health"}]}]},
    }


def test_the_policy_makes_upstreams_cache_pods_restricted_and_gives_them_the_tenant_secret(cache_cluster: Cluster) -> None:
    platform = rendered(FIXTURE)
    policy, binding = platform.concern("data-cache").objects
    namespace = next(o for o in platform.tenant_objects(TENANT) if o["kind"] == "Namespace")
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "probe-cache", "namespace": TENANT}}
    cache_cluster.kubectl("apply", "--server-side", "--field-manager=trainyard", "-f", "-",
                          stdin=yaml.safe_dump_all([namespace, account, policy, binding]))
    config = open_stack(FIXTURE, ROOT).config
    image = data_cache_concern.cache_image(config, ROOT, image_lock(config, ROOT))

    refusals: list[str] = []

    def admitted() -> bool:
        done = cache_cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                     stdin=yaml.safe_dump(cache_pod(image)), check=False)
        refusals.append(done.stderr.strip())
        return done.returncode == 0

    # The API server loads a new policy asynchronously: wait until it takes effect.
    try:
        wait_until("the data-cache policy to admit a cache pod", partial(admitted), 60)
    except TimeoutError:
        pytest.fail(f"the cache pod is still refused: {refusals[-1]}")
    done = cache_cluster.kubectl("create", "--dry-run=server", "-o", "yaml", "-f", "-", stdin=yaml.safe_dump(cache_pod(image)))
    pod = yaml.safe_load(done.stdout)
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532,
                                              "seccompProfile": {"type": "RuntimeDefault"}}
    (head,) = pod["spec"]["containers"]
    assert head["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert head["envFrom"] == [{"secretRef": {"name": OBJECT_STORE_SECRET}}]
    assert head["env"] == cache_pod(image)["spec"]["containers"][0]["env"], "upstream's own env is kept"

    other = cache_cluster.kubectl("create", "--dry-run=server", "-f", "-",
                                  stdin=yaml.safe_dump(cache_pod("registry.trainyard.internal/other/image:v1")), check=False)
    assert other.returncode != 0
    assert 'violates PodSecurity "restricted' in other.stderr

