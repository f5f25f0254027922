"""Every rule flags at least one manifest and passes one (prod stack, one change at a time)."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tests.conftest import needs_crds, rendered, stack
from tests.policy.cases import GOOD_IMAGE, GPU, TENANT_NS, container, pod, trainjob, with_change
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.gpu_operator import PSA_EXCEPTION_ANNOTATION
from trainyard.manifests.meta import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, TENANT_LABEL
from trainyard.policy import RULE_IDS, RULES_BY_ID, Context
from trainyard.policy.engine import run_rules

Objects = Sequence[dict[str, Any]]
Case = Callable[[list[dict[str, Any]]], tuple[Objects, Objects]]  # platform objects -> (flagged, passing)


def _without(objects: list[dict[str, Any]], kind: str, namespace: str) -> list[dict[str, Any]]:
    return [o for o in objects if not (o["kind"] == kind and o["metadata"].get("namespace") == namespace)]


def _replace(objects: list[dict[str, Any]], kind: str, name: str,
             change: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    out = copy.deepcopy(objects)
    for obj in out:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            change(obj)
    return out


def _tenant_namespace(name: str, psa: str | None = "restricted") -> dict[str, Any]:
    labels = {TENANT_LABEL: name, **({"pod-security.kubernetes.io/enforce": psa} if psa else {})}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _service(service_type: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mlflow", "namespace": "mlflow"},
            "spec": {"type": service_type, "ports": [{"port": 5000}], "selector": {"app": "mlflow"}}}


def _egress_policy(peer: dict[str, Any] | None) -> dict[str, Any]:
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": 443}]}
    if peer is not None:
        rule["to"] = [peer]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "web", "namespace": TENANT_NS},
            "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [rule]}}


def _flavors_over_capacity(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def grow(cq: dict[str, Any]) -> None:
        cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 1000
    return _replace(objects, "ClusterQueue", "llm-pretrain", grow)


def _crd(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == "CustomResourceDefinition")


def _cache_initializer_binding(kind: str) -> dict[str, Any]:
    """Upstream's cache-initializer ClusterRole bound by hand (prod has the data cache off)."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
            "metadata": {"name": "kubeflow-trainer-cache-initializer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "kubeflow-trainer-cache-initializer"},
            "subjects": [{"kind": "ServiceAccount", "name": "kubeflow-trainer-cache-initializer", "namespace": TENANT_NS}]}


SECURE = {"allowPrivilegeEscalation": False, "runAsNonRoot": True}
def isvc(runtime: str = "vllm-openai", uri: str = f"s3://{TENANT_NS}-models/mlflow/1/run/artifacts/model",
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An InferenceService in the tenant namespace; the defaults pass every serving rule."""
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": TENANT_NS,
                         "labels": {"networking.kserve.io/visibility": "cluster-local"} if labels is None else labels},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "vLLM"}, "runtime": runtime, "storageUri": uri}}}}


def _launcher_first(runtime: dict[str, Any]) -> dict[str, Any]:
    """The runtime with its replicated jobs in the order JobSet refuses: the launcher (which depends on node) first."""
    out = copy.deepcopy(runtime)
    out["spec"]["template"]["spec"]["replicatedJobs"].reverse()
    return out


CASES: dict[str, Case] = {
    "image-approved-registry": lambda _: ([pod(container(image="docker.io/library/python@sha256:" + "b" * 64))], [pod()]),
    "image-pinned-digest": lambda _: ([pod(container(image="registry.trainyard.internal/pytorch/pytorch:2.7"))], [pod()]),
    "no-privileged-container": lambda _: ([pod(container(securityContext={**SECURE, "privileged": True}))], [pod()]),
    "no-host-namespaces": lambda _: ([pod(hostNetwork=True)], [pod(hostNetwork=False)]),
    "no-host-path": lambda _: ([pod(volumes=[{"name": "nvme", "hostPath": {"path": "/mnt/nvme"}}])],
                               [pod(volumes=[{"name": "scratch", "emptyDir": {}}])]),
    "no-run-as-root": lambda _: ([pod(container(securityContext={**SECURE, "runAsUser": 0}))], [pod()]),
    "no-privilege-escalation": lambda _: ([pod(container(securityContext={"runAsNonRoot": True}))], [pod()]),
    "no-added-capabilities": lambda _: (
        [pod(container(securityContext={**SECURE, "capabilities": {"add": ["SYS_ADMIN"]}}))],
        [pod(container(securityContext={**SECURE, "capabilities": {"add": ["NET_BIND_SERVICE"]}}))]),
    "gpu-container-limits": lambda _: ([pod(container(resources={"requests": {GPU: 8}}))],
                                       [pod(container(resources={"limits": {GPU: 8, "memory": "100Gi"}}))]),
    "no-plaintext-secrets": lambda _: (
        [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "namespace": TENANT_NS},
          "stringData": {"AWS_SECRET_ACCESS_KEY": "hunter2"}}],
        [pod(container(env=[{"name": "AWS_SECRET_ACCESS_KEY",
                             "valueFrom": {"secretKeyRef": {"name": "s3", "key": "secret"}}}]))]),
    "mlflow-auth-on": lambda _: (
        [pod(container(command=["mlflow"], args=["server", "--host=0.0.0.0"]))],
        [pod(container(command=["mlflow"], args=["server", "--host=0.0.0.0", "--app-name=basic-auth"]))]),
    "no-inline-mlflow-credentials": lambda _: (
        [with_change(trainjob(), "spec.trainer.env", [{"name": "MLFLOW_TRACKING_PASSWORD", "value": "x"}]),
         with_change(trainjob(), "spec.trainer.env", [{"name": "MLFLOW_TRACKING_URI",
                                                       "value": "http://eval:pw@mlflow.mlflow.svc"}]),
         with_change(trainjob(), "spec.trainer.env", [{"name": "MLFLOW_TRACKING_USERNAME", "valueFrom": {
             "secretKeyRef": {"name": "borrowed", "key": "user"}}}])],
        [with_change(trainjob(), "spec.trainer.env", [{"name": "MLFLOW_EXPERIMENT_NAME", "value": "sft"}])]),
    # prod approves no dataset yet: a TrainJob may initialise from none (tests/policy/test_lineage.py: approved ones).
    "trainjob-approved-inputs": lambda _: (
        [with_change(trainjob(), "spec.initializer", {"dataset": {"storageUri": "s3://llm-research-datasets/x.jsonl"}})],
        [trainjob()]),
    "trainjob-approved-runtime": lambda _: ([with_change(trainjob(), "spec.runtimeRef.name", "my-own-runtime")], [trainjob()]),
    "trainjob-queue-label": lambda objs: ([*objs, trainjob({PRIORITY_CLASS_LABEL: "standard"})], [*objs, trainjob()]),
    "trainjob-priority-class": lambda _: ([trainjob({QUEUE_NAME_LABEL: "default", PRIORITY_CLASS_LABEL: "critical"})],
                                          [trainjob()]),
    # 16 GPUs a node on 8-GPU nodes; 8 (a limit alone) is completed and fits.
    "trainjob-resources": lambda objs: (
        [*objs, with_change(trainjob(), "spec.trainer.resourcesPerNode", {"limits": {GPU: 16}})], [*objs, trainjob()]),
    "isvc-approved-runtime": lambda _: ([isvc(runtime="kserve-vllmserver")], [isvc()]),
    "isvc-own-model-bucket": lambda _: ([isvc(uri="s3://search-ranking-models/m/1")], [isvc()]),
    "isvc-no-public-exposure": lambda _: ([isvc(labels={})], [isvc()]),
    "serving-runtime-allowed": lambda _: (
        [{"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
          "metadata": {"name": "vllm-openai", "namespace": TENANT_NS}, "spec": {}}],
        [{"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
          "metadata": {"name": "vllm-openai", "namespace": "platform-sandbox"}, "spec": {}}]),
    "training-runtime-allowed": lambda _: (
        [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
          "metadata": {"name": "mine", "namespace": TENANT_NS}, "spec": {}}],
        [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
          "metadata": {"name": "mine", "namespace": "platform-sandbox"}, "spec": {}}]),
    "runtime-claim-retention": lambda _: (
        [_runtime_with_claims({"templates": [{"metadata": {"name": "initializer"}}]})],
        [_runtime_with_claims({"retentionPolicy": {"whenDeleted": "Delete"},
                               "templates": [{"metadata": {"name": "initializer"}}]})]),
    "runtime-depends-on-earlier-jobs": lambda objs: (
        [_launcher_first(next(o for o in objs if o["kind"] == "ClusterTrainingRuntime"
                              and o["metadata"]["name"] == "deepspeed-mpi"))],
        [o for o in objs if o["kind"] == "ClusterTrainingRuntime"]),
    "runtime-pods-request-resources": lambda _: (
        [_runtime_with_container({"limits": {"nvidia.com/gpu": 1}}), _runtime_with_container({})],
        [_runtime_with_container({"requests": {"cpu": "1", "memory": "4Gi"}}),
         _runtime_with_container({"limits": {"cpu": "1", "memory": "4Gi"}})]),
    "tenant-default-deny": lambda objs: (_without(objs, "NetworkPolicy", TENANT_NS), objs),
    "tenant-local-queue": lambda objs: (_without(objs, "LocalQueue", TENANT_NS), objs),
    "tenant-resource-quota": lambda objs: (_without(objs, "ResourceQuota", TENANT_NS), objs),
    "tenant-psa-restricted": lambda objs: ([*objs, _tenant_namespace("new-team", psa="baseline")],
                                           [*objs, _tenant_namespace("new-team")]),
    "psa-no-weaker-level": lambda objs: ([_tenant_namespace("x", psa="privileged")],
                                         [_tenant_namespace("x"), _namespace_named(objs, "gpu-operator")]),
    "psa-exception-exclusive": lambda objs: (
        [*objs, _claiming_exception("x"), with_change(pod(), "metadata.namespace", "gpu-operator")], objs),
    "tenant-policy-params": lambda objs: (_params_tampered(objs), objs),
    "data-cache-rbac-scoped": lambda objs: ([*objs, _cache_initializer_binding("ClusterRoleBinding")], objs),
    "no-exposed-services": lambda _: ([_service("LoadBalancer")], [_service("ClusterIP")]),
    "netpol-no-internet-egress": lambda _: ([_egress_policy({"ipBlock": {"cidr": "0.0.0.0/0"}})],
                                            [_egress_policy({"ipBlock": {"cidr": "10.20.0.0/16"}})]),
    "kueue-api-version": lambda objs: (
        [with_change(next(o for o in objs if o["kind"] == "LocalQueue"), "apiVersion", "kueue.x-k8s.io/v1beta1")],
        [next(o for o in objs if o["kind"] == "LocalQueue")]),
    "local-queue-cluster-queue": lambda objs: (
        _replace(objs, "ClusterQueue", "llm-research", lambda cq: cq["metadata"].update(name="renamed")), objs),
    "flavor-topology-exists": lambda objs: ([o for o in objs if o["kind"] != "Topology"], objs),
    "quota-fits-capacity": lambda objs: (_flavors_over_capacity(objs), objs),
    "data-protected": lambda objs: ([_crd(objs)], [_crd(objs)]),  # protection differs, see _context
    "security-references-exist": lambda objs: (objs, objs),  # the config differs, see _context
    "object-store-tenant-credentials": lambda objs: (
        [o for o in objs if not (o["kind"] == "Secret" and o["metadata"]["name"] == "trainyard-object-store"
                                 and o["metadata"].get("namespace") == TENANT_NS)], objs),
    "object-store-no-public-buckets": lambda _: (
        [_identities_file({"name": "anonymous", "actions": ["Read"]})],
        [_identities_file({"name": "tenant-x", "actions": ["Read:x-datasets"]})]),
    "no-inline-object-store-keys": lambda _: (
        [trainjob(initializer={"dataset": {"storageUri": "s3://b/d", "env": [{"name": "S3_KEY",
                                                                                "value": "AKIAIOSFODNN7EXAMPLE"}]}})],
        [trainjob(initializer={"dataset": {"storageUri": "s3://b/d"}})]),
    "images-in-bom": lambda objs: ([*objs, _deployment("quay.io/someone/exporter:v1")], objs),
    "chart-images-known": lambda objs: (objs, objs),  # the releases differ, see _context
    "charts-from-mirror": lambda objs: (objs, objs),  # the stack's charts.mirror differs, see _context
}


def _params_tampered(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tenant's params granting a dataset the stack does not approve."""
    return _replace(objs, "TenantPolicy", "trainyard-policy", lambda params: params["data"].update(
        {"dataset.x.name": "x"}) if params["metadata"]["namespace"] == TENANT_NS else None)


def _role(rule: dict[str, Any], resource_names: list[str] | None = None) -> dict[str, Any]:
    if resource_names:
        rule["resourceNames"] = resource_names
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "writer", "namespace": TENANT_NS}, "rules": [rule]}


def _params_writer(verbs: list[str], resource_names: list[str] | None = None,
                   groups: tuple[str, ...] = ("trainyard.dev",), resources: tuple[str, ...] = ("tenantpolicies",),
                   ) -> dict[str, Any]:
    return _role({"apiGroups": list(groups), "resources": list(resources), "verbs": verbs}, resource_names)


def _findings(rule_id: str, objects: Objects) -> list[str]:
    return [f.message for f in run_rules([RULES_BY_ID[rule_id]], objects, _context(rule_id, flagged=True))]


@needs_crds
def test_tenant_policy_params_are_the_stacks_own_and_no_tenant_may_write_them() -> None:
    objs = list(rendered("prod").all_objects)
    missing = [o for o in objs if not (o["kind"] == "TenantPolicy" and o["metadata"]["name"] == "trainyard-policy"
                                       and o["metadata"]["namespace"] == TENANT_NS)]
    assert _findings("tenant-policy-params", missing) == [
        f"tenant namespace {TENANT_NS} has no TenantPolicy trainyard-policy: every parameterised admission policy "
        "refuses requests there"]
    assert _findings("tenant-policy-params", _params_tampered(objs)) == [
        "data differs from what the stack's config renders, keys: dataset.x.name"]
    # A ConfigMap of that name is no params: the policies read the TenantPolicy alone.
    as_config_map = [{**o, "apiVersion": "v1", "kind": "ConfigMap"} if o["kind"] == "TenantPolicy"
                     and o["metadata"]["namespace"] == TENANT_NS else o for o in objs]
    assert len(_findings("tenant-policy-params", as_config_map)) == 1
    assert _findings("tenant-policy-params", [*objs, _params_writer(["get", "patch"])]) == [
        f"lets its subjects write tenantpolicies in tenant namespace {TENANT_NS}, among them the admission params "
        "trainyard-policy"]
    assert len(_findings("tenant-policy-params", [*objs, _params_writer(["*"], ["trainyard-policy"])])) == 1
    assert len(_findings("tenant-policy-params", [*objs, _params_writer(["update"], groups=("*",),
                                                                        resources=("*",))])) == 1
    assert _findings("tenant-policy-params", [*objs, _params_writer(["get", "list", "watch"]),
                                              _params_writer(["update"], ["other"]),
                                              _params_writer(["update"], groups=("",), resources=("configmaps",))]) == []


def _runtime_with_claims(policy: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime", "metadata": {"name": "r"},
            "spec": {"template": {"spec": {"volumeClaimPolicies": [policy], "replicatedJobs": []}}}}


def _runtime_with_container(resources: dict[str, Any]) -> dict[str, Any]:
    job = {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
        {"name": "node", "image": "registry.trainyard.internal/x@sha256:" + "a" * 64, "resources": resources}]}}}}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime", "metadata": {"name": "r"},
            "spec": {"template": {"spec": {"replicatedJobs": [job]}}}}


def _identities_file(identity: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ids", "namespace": "object-store"},
            "stringData": {"seaweedfs_s3_config": json.dumps({"identities": [identity]})}}


def _deployment(image: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "exporter", "namespace": "kueue-system"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": {
                "metadata": {"labels": {"app": "x"}}, "spec": {"containers": [container(image=image)]}}}}


UNRENDERED_CHART = ChartRelease("exporter", "exporter", "oci://example.com/charts/exporter", "1.0.0", "monitoring")
def _namespace_named(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == "Namespace" and o["metadata"]["name"] == name)


def _claiming_exception(name: str) -> dict[str, Any]:
    """A namespace that copies the GPU operator's exception annotation without being granted it."""
    namespace = _tenant_namespace(name, psa="privileged")
    namespace["metadata"]["annotations"] = {PSA_EXCEPTION_ANNOTATION: "needs host access"}
    return namespace


def _context(rule_id: str, flagged: bool) -> Context:  # noqa: PLR0911 - one case per rule
    config = stack("prod").config
    if rule_id == "data-protected":
        return Context(config, protection=lambda _: not flagged)
    if rule_id == "mlflow-auth-on" and flagged:
        return Context(config.model_copy(update={"mlflow": config.mlflow.model_copy(update={"auth": False})}))
    if rule_id == "security-references-exist" and flagged:
        admission = config.security.admission.model_copy(update={"training_runtime_tenants": ("no-such-team",)})
        security = config.security.model_copy(update={"admission": admission})
        return Context(config.model_copy(update={"security": security}))
    if rule_id == "images-in-bom":
        return Context(config, protection=lambda _: True, releases=rendered("prod").releases)
    if rule_id == "chart-images-known":
        return Context(config, releases=rendered("prod").releases + ((UNRENDERED_CHART,) if flagged else ()))
    if rule_id == "charts-from-mirror":
        # prod names its chart mirror; without it, its images come from the mirror and its charts from upstream.
        charts = config.charts.model_copy(update={"mirror": None}) if flagged else config.charts
        return Context(config.model_copy(update={"charts": charts}), releases=rendered("prod").releases)
    return Context(config)


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == RULE_IDS


@needs_crds
@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_flags_the_broken_manifest_and_passes_the_sound_one(rule_id: str) -> None:
    rule = RULES_BY_ID[rule_id]
    flagged, passing = CASES[rule_id](list(rendered("prod").all_objects))
    assert run_rules([rule], flagged, _context(rule_id, flagged=True)), f"{rule_id} missed its case"
    assert run_rules([rule], passing, _context(rule_id, flagged=False)) == []


def test_trainjob_runtime_patches_are_checked_for_what_they_set_only() -> None:
    patch = {"manager": "tenant", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "node", "securityContext": {"privileged": True}}],
            "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}}}}}]}}}}
    job = trainjob(runtimePatches=[patch])
    ctx = Context(stack("prod").config)
    object_rules = [rule for rule in RULES_BY_ID.values() if rule.check_object is not None]
    found = {f.rule_id for f in run_rules(object_rules, [job], ctx)}
    # Set by the patch: flagged. Left to the reviewed runtime (runAsNonRoot, escalation): not flagged.
    assert found == {"no-privileged-container", "no-host-path"}


def test_a_tenant_allowed_own_runtimes_may_reference_a_training_runtime() -> None:
    config = stack("prod").config
    admission = config.security.admission.model_copy(update={"training_runtime_tenants": ("llm-research",)})
    allowed = config.model_copy(update={"security": config.security.model_copy(update={"admission": admission})})
    job = with_change(trainjob(), "spec.runtimeRef", {"kind": "TrainingRuntime", "name": "mine"})
    rule = RULES_BY_ID["trainjob-approved-runtime"]
    assert run_rules([rule], [job], Context(config))
    assert run_rules([rule], [job], Context(allowed)) == []


def test_rules_tolerate_malformed_manifests() -> None:
    odd = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": TENANT_NS},
            "spec": {"containers": "not-a-list", "volumes": [None, 3]}},
           {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"},
            "spec": {"resourceGroups": [{"flavors": [{"name": "h100", "resources": [{"name": GPU,
                                                                                      "nominalQuota": "lots"}]}]}]}},
           {"apiVersion": "v1", "kind": "Pod", "metadata": None, "spec": None}]
    run_rules(list(RULES_BY_ID.values()), odd, Context(stack("prod").config))


def test_image_rules_cover_every_container_list_of_a_runtime() -> None:
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "r"},
               "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
                   "spec": {"securityContext": {"runAsNonRoot": True},
                            "initContainers": [container(image="quay.io/x/init:1")],
                            "containers": [container(image=GOOD_IMAGE)]}}}}}]}}}}
    found = run_rules([RULES_BY_ID["image-approved-registry"]], [runtime], Context(stack("prod").config))
    assert [f.message.split(":")[0] for f in found] == [
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.initContainers[0].image"]


@needs_crds
def test_images_in_bom_flags_a_chart_that_renders_another_image_than_trainyard_set() -> None:
    # The JobSet chart composes "<image.repository>:<image.tag>" and ignores an image.registry value:
    # values written for a chart with a registry key would pull "jobset/jobset" from Docker Hub.
    platform = rendered("prod")
    jobset = next(r for r in platform.releases if r.name == "jobset")
    broken = dataclasses.replace(jobset, values={"image": {"registry": "registry.trainyard.internal",
                                                           "repository": "mirror/jobset/jobset", "tag": "v0.12.0"}})
    releases = tuple(broken if r.name == "jobset" else r for r in platform.releases)
    ctx = Context(stack("prod").config, protection=lambda _: True, releases=releases)
    findings = run_rules([RULES_BY_ID["images-in-bom"]], list(platform.all_objects), ctx)
    assert [f.message for f in findings] == [
        "chart jobset (oci://registry.trainyard.internal/charts/jobset 0.12.0) renders image 'mirror/jobset/jobset:v0.12.0', "
        "which is not in the bill of materials"]


@needs_crds
def test_images_in_bom_ignores_manifests_the_stack_does_not_declare() -> None:
    ctx = Context(stack("prod").config, releases=rendered("prod").releases)  # protection None: not declared
    assert run_rules([RULES_BY_ID["images-in-bom"]], [_deployment("quay.io/someone/exporter:v1")], ctx) == []
