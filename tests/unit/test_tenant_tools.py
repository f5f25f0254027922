"""What the tenant's own tools need from the platform: the SDK's version ConfigMap, startable SDK TrainJobs."""

from __future__ import annotations

import pytest

from tests.conftest import stack
from trainyard.manifests import admission, installs
from trainyard.rehearsal.controllers import trainer_public_objects
from trainyard.rehearsal.scenario import Job


def test_the_sdk_version_configmap_names_the_stacks_trainer_in_its_namespace_readable_by_everyone() -> None:
    config = stack("prod").config
    configmap, role, binding = installs.trainer_public(config)
    assert (configmap["metadata"]["name"], configmap["metadata"]["namespace"]) == ("kubeflow-trainer-public",
                                                                                   "kubeflow-system")
    assert configmap["data"] == {"kubeflow_trainer_version": f"v{config.versions.trainer}"}
    assert role["rules"][0]["resourceNames"] == ["kubeflow-trainer-public"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                    "name": "system:authenticated"}]


def test_the_rehearsal_installs_the_configmap_with_its_namespace_from_the_same_builder() -> None:
    config = stack("local").config
    namespace, *objects = trainer_public_objects(config)
    assert namespace["kind"] == "Namespace" and namespace["metadata"]["name"] == "kubeflow-system"
    assert objects == installs.trainer_public(config)


def test_the_initializer_env_policy_removes_only_empty_env_lists_of_new_trainjobs() -> None:
    policy, binding = admission.initializer_env_policy()
    assert policy["kind"] == "MutatingAdmissionPolicy"
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    expression = policy["spec"]["mutations"][0]["jsonPatch"]["expression"]
    for initializer in ("dataset", "model"):
        assert f"size(object.spec.initializer.{initializer}.env) == 0" in expression
        assert f'"/spec/initializer/{initializer}/env"' in expression
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["key"] == "trainyard.dev/tenant"


def test_the_policy_is_rendered_where_admission_is_on() -> None:
    kinds = {o["kind"] for o in admission.build(stack("prod").config).objects}
    assert {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} <= kinds


@pytest.mark.parametrize("uri", ["s3:/x", "https://bucket/x", "s3://"])
def test_a_scenario_job_names_its_dataset_by_s3_uri(uri: str) -> None:
    with pytest.raises(ValueError, match="dataset"):
        Job(name="j", tenant="t", dataset=uri)
