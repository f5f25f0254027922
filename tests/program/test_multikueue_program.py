"""A MultiKueue manager under the SDK's mocks: the worker's kubeconfig enters only as a Pulumi secret.

The rendered Secret names where the kubeconfig comes from; the component registers the value
read from the stack's Pulumi config secret, marked secret, and everything else exactly as rendered.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from pulumi.runtime import rpc

from tests.conftest import ROOT, needs_crds
from tests.program.test_program import Mocks, Registered
from trainyard.components import Platform
from trainyard.project import open_stack

MANAGER = ROOT / "tests" / "fixtures" / "multikueue" / "Pulumi.manager.yaml"
KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\n# test kubeconfig of worker-1\n"


@needs_crds
def test_manager_registers_the_worker_kubeconfig_from_the_pulumi_secret() -> None:
    stack = open_stack(str(MANAGER), ROOT)
    rendered = stack.render()
    registered = Registered()
    pulumi.runtime.set_mocks(Mocks(registered), project="trainyard", stack="mk-manager", preview=False)
    pulumi.runtime.set_all_config({"trainyard:worker1Kubeconfig": KUBECONFIG}, ["trainyard:worker1Kubeconfig"])

    @pulumi.runtime.test
    def program() -> None:
        Platform("trainyard", stack.config, root=ROOT, stack_dir=MANAGER.parent, rendered=rendered)

    program()
    secret: dict[str, Any] = next(r.inputs for r in registered.resources if r.typ == "kubernetes:core/v1:Secret")
    # The value arrives wrapped as a Pulumi secret (the SDK's secret signature), so state and logs keep it encrypted.
    assert secret["stringData"] == {rpc._special_sig_key: rpc._special_secret_sig, "value": {"kubeconfig": KUBECONFIG}}
    kinds = sorted(r.typ.rsplit(":", 1)[-1] for r in registered.resources if r.typ.startswith("kubernetes:kueue"))
    assert kinds.count("MultiKueueCluster") == 1 and "AdmissionCheck" in kinds and "MultiKueueConfig" in kinds
    assert "<deploy-time:" not in str(secret)


def test_a_missing_kubeconfig_file_is_a_clean_deploy_error() -> None:
    from trainyard.components.multikueue import kubeconfig_value
    from trainyard.config.multikueue import KubeconfigSource

    with pytest.raises(pulumi.RunError, match=r"multikueue kubeconfig file .*no-such\.kubeconfig: cannot read"):
        kubeconfig_value(KubeconfigSource(file="no-such.kubeconfig"), ROOT)
