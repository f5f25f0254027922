"""Trainer's distributed data cache: what a stack with ``data_cache.enabled`` declares besides the chart.

The LeaderWorkerSet controller comes with the Trainer chart (``trainer_values``: its LWS subchart,
image pinned); its CRD is declared by Trainyard (``catalog`` lws, read from the chart's ``crds/``
directory and verified by blob SHA). This module adds the rest:

- in every tenant namespace: the initializer's ServiceAccount (a token mounted: it calls the API),
  a RoleBinding to the chart's ClusterRole ``kubeflow-trainer-cache-initializer``, a Role and
  RoleBinding to ``get`` TrainJobs (the initializer reads its TrainJob for the owner reference; the
  v2.3.0 ClusterRole lacks that verb, so without it the initializer logs a 403 and exits 0 with no
  cache), the ``trainyard-data-cache`` ConfigMap (``IAM_ROLE``), and a NetworkPolicy letting the
  initializer pods reach the kube-apiserver;
- a MutatingAdmissionPolicy and its binding for the cache pods (LeaderWorkerSet pods in tenant
  namespaces): the initializer creates them with no securityContext, which Pod Security
  "restricted" refuses, so the policy sets the restricted fields; with ``tenant-secret``
  credentials it also gives them the tenant's object-store Secret with ``envFrom``;
- the cache runtime's wiring (``wire_runtime``): ``CACHE_IMAGE`` pinned by the image lock, the
  cache cluster's size and resources, ``envFrom`` the ConfigMap.

The concern itself (``build``) is assembled in ``manifests/data_cache_concern.py``: the pod policy
matches the cache image the reviewed runtime names, so it reads the runtime through
``manifests/runtimes.py``, which in turn wires the runtime with ``wire_runtime`` from here.

Ref: kubeflow/trainer v2.3.0 pkg/initializers/dataset/cache.py (what the initializer creates and reads),
charts/kubeflow-trainer/templates/data-cache/cluster-role.yaml, manifests/overlays/data-cache/namespace-rbac/;
https://kubernetes.io/docs/reference/access-authn-authz/mutating-admission-policy/
"""

from __future__ import annotations

from typing import Any

from trainyard import catalog
from trainyard.config.data_cache import CACHE_RUNTIME, LWS_FOR_TRAINER
from trainyard.config.model import PlatformConfig, Tenant
from trainyard.manifests.meta import OBJECT_STORE_SECRET, TENANT_LABEL, Manifest, metadata
from trainyard.supply.lock import ImageLock
from trainyard.supply.reference import ImageRef, mirrored

# Names fixed by upstream: the runtime's serviceAccountName and the chart's ClusterRole.
# Ref: charts/kubeflow-trainer/files/runtimes/torch-distributed-with-cache.yaml, templates/data-cache/cluster-role.yaml
INITIALIZER_ACCOUNT = "kubeflow-trainer-cache-initializer"
CHART_CLUSTER_ROLE = "kubeflow-trainer-cache-initializer"
TRAINJOB_READER = "trainyard-data-cache-trainjob-reader"
CONFIGMAP = "trainyard-data-cache"
API_SERVER_POLICY = "allow-data-cache-api-server"
INITIALIZER_LABEL = "trainyard.dev/data-cache-initializer"
POLICY_NAME = "trainyard-data-cache-pods"
# Every pod of a LeaderWorkerSet carries this label (the LWS name). Ref: kubernetes-sigs/lws v0.8.0
# api/leaderworkerset/v1/leaderworkerset_types.go (SetNameLabelKey).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
# Environment variables of the runtime that name an image (the supply chain lists and locks them too).
IMAGE_ENV = ("CACHE_IMAGE",)
ADMISSION_API = "admissionregistration.k8s.io/v1"
RBAC_API = "rbac.authorization.k8s.io/v1"


def lws_version(config: PlatformConfig) -> str:
    """The LWS release the stack's Trainer chart brings as its subchart."""
    return LWS_FOR_TRAINER[config.versions.trainer]


def lws_image(config: PlatformConfig, lock: ImageLock) -> ImageRef:
    image = catalog.release("lws", lws_version(config)).image
    assert image is not None  # the catalog entry pins it
    return lock.pin(mirrored(ImageRef(image.registry, image.repository, image.tag), config.images.registry_mirror))


def trainer_values(config: PlatformConfig, lock: ImageLock) -> dict[str, Any]:
    """What the Trainer chart needs for the cache: ``dataCache.enabled`` and the LWS subchart's image.

    ``dataCache.enabled`` renders the ClusterRole and brings the LWS subchart: the dependency's
    condition is ``dataCache.enabled,dataCache.lws.install`` and Helm takes the first path that
    holds a bool, so ``dataCache.lws.install`` is never consulted (and is not set here).
    ``dataCache.cacheImage`` is read only by the chart's own runtime template, which Trainyard does
    not install: the reviewed runtime names the image instead.
    Ref: helm v3.22.0 pkg/chartutil/dependencies.go processDependencyConditions; lws chart
    templates/manager/deployment.yaml (image.manager.repository:tag, default tag main, pullPolicy Always).
    """
    if not config.data_cache.enabled:
        return {}
    image = lws_image(config, lock)
    return {"dataCache": {"enabled": True},
            "lws": {"image": {"manager": {"repository": image.name, "tag": image.tag_with_digest,
                                          "pullPolicy": "IfNotPresent"}}}}


def wire_runtime(config: PlatformConfig, runtime: Manifest, lock: ImageLock) -> None:
    """Stack settings on the cache runtime's dataset-initializer: pinned CACHE_IMAGE, cluster size, the ConfigMap."""
    if runtime["metadata"]["name"] != CACHE_RUNTIME:
        return
    cluster = config.data_cache.cluster
    settings = {"CLUSTER_SIZE": str(cluster.size), "HEAD_CPU": str(cluster.head_cpu),
                "HEAD_MEM": str(cluster.head_memory), "WORKER_CPU": str(cluster.worker_cpu),
                "WORKER_MEM": str(cluster.worker_memory)}
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        if job["name"] != "dataset-initializer":
            continue
        for container in job["template"]["spec"]["template"]["spec"]["containers"]:
            env = [e for e in container.get("env") or [] if e["name"] not in settings]
            for entry in env:
                if entry["name"] in IMAGE_ENV and "value" in entry:
                    entry["value"] = str(lock.pin(ImageRef.parse(entry["value"])))
            container["env"] = [*env, *({"name": k, "value": v} for k, v in settings.items())]
            container["envFrom"] = [*(container.get("envFrom") or []), {"configMapRef": {"name": CONFIGMAP}}]


def runtime_image_env(runtime: Manifest) -> list[str]:
    """The images a runtime names in environment variables (``IMAGE_ENV``), as written."""
    out = []
    for job in runtime.get("spec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", []) or []:
        pod = job.get("template", {}).get("spec", {}).get("template", {}).get("spec", {}) or {}
        for container in (pod.get("containers") or []) + (pod.get("initContainers") or []):
            out += [e["value"] for e in container.get("env") or [] if e.get("name") in IMAGE_ENV and "value" in e]
    return out


def _labels(tenant: Tenant) -> dict[str, str]:
    return {TENANT_LABEL: tenant.name}


def tenant_objects(config: PlatformConfig, tenant: Tenant) -> tuple[Manifest, ...]:
    """What the cache initializer needs in one tenant namespace."""
    ns, labels = tenant.namespace_name, _labels(tenant)
    credentials = config.data_cache.credentials
    role = credentials.tenant_roles.get(tenant.name, "") if credentials else ""
    api = config.data_cache.api_server
    assert api is not None  # validate_data_cache requires it when enabled
    return (
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": metadata(INITIALIZER_ACCOUNT, namespace=ns, labels=labels),
         # Reviewed exception: this account calls the API (docs/components/data-cache.md, "RBAC").
         "automountServiceAccountToken": True},
        {"apiVersion": RBAC_API, "kind": "RoleBinding",
         "metadata": metadata(INITIALIZER_ACCOUNT, namespace=ns, labels=labels),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CHART_CLUSTER_ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": INITIALIZER_ACCOUNT, "namespace": ns}]},
        {"apiVersion": RBAC_API, "kind": "Role", "metadata": metadata(TRAINJOB_READER, namespace=ns, labels=labels),
         "rules": [{"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get"]}]},
        {"apiVersion": RBAC_API, "kind": "RoleBinding",
         "metadata": metadata(TRAINJOB_READER, namespace=ns, labels=labels),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TRAINJOB_READER},
         "subjects": [{"kind": "ServiceAccount", "name": INITIALIZER_ACCOUNT, "namespace": ns}]},
        # The initializer reads IAM_ROLE (a required field of CacheDatasetInitializer); empty with tenant-secret.
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(CONFIGMAP, namespace=ns, labels=labels),
         "data": {"IAM_ROLE": role}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": metadata(API_SERVER_POLICY, namespace=ns, labels=labels),
         "spec": {"podSelector": {"matchLabels": {INITIALIZER_LABEL: "true"}}, "policyTypes": ["Egress"],
                  "egress": [{"to": [{"ipBlock": {"cidr": cidr}} for cidr in api.cidrs],
                              "ports": [{"protocol": "TCP", "port": port} for port in api.ports]}]}},
    )


def pod_policy(config: PlatformConfig, cache_image: str) -> tuple[Manifest, Manifest]:
    """The MutatingAdmissionPolicy (and its binding) that makes the cache pods restricted and gives them credentials.

    It matches pod CREATEs in tenant namespaces whose pod carries the LeaderWorkerSet name label
    and runs one container of ``cache_image`` (exactly what the cache runtime passes as
    CACHE_IMAGE), and adds, as JSON patches, the Pod Security "restricted" fields and, with
    ``tenant-secret``, ``envFrom`` the tenant's object-store Secret. Not an ApplyConfiguration:
    the API server refuses one that sets atomic lists (``capabilities.drop``, ``envFrom``), as the
    cluster tier found. Pod Security admission validates the pod after mutation.
    Ref: https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted
    """
    cache = config.data_cache
    patches = [
        "JSONPatch{op: 'add', path: '/spec/securityContext', value: Object.spec.securityContext{runAsNonRoot: true, "
        f"runAsUser: {cache.run_as_user}, "
        "seccompProfile: Object.spec.securityContext.seccompProfile{type: 'RuntimeDefault'}}}",
        "JSONPatch{op: 'add', path: '/spec/containers/0/securityContext', value: "
        "Object.spec.containers.securityContext{allowPrivilegeEscalation: false, "
        "capabilities: Object.spec.containers.securityContext.capabilities{drop: ['ALL']}}}",
    ]
    if cache.credentials is not None and cache.credentials.mode == "tenant-secret":
        # Two operations, not one whose value is a list of objects: kube-apiserver 1.36.3 panics converting
        # such a list (cel-go baseList.ConvertToNative: *structpb.Struct is not assignable to *structpb.Value).
        patches += ["JSONPatch{op: 'add', path: '/spec/containers/0/envFrom', value: []}",
                    "JSONPatch{op: 'add', path: '/spec/containers/0/envFrom/-', value: Object.spec.containers.envFrom{"
                    f"secretRef: Object.spec.containers.envFrom.secretRef{{name: '{OBJECT_STORE_SECRET}'}}}}}}"]
    expression = "[" + ", ".join(patches) + "]"
    policy = {
        "apiVersion": ADMISSION_API, "kind": "MutatingAdmissionPolicy",
        "metadata": metadata(POLICY_NAME),
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                    "resources": ["pods"]}]},
            "matchConditions": [
                {"name": "leaderworkerset-pod",
                 "expression": f"has(object.metadata.labels) && '{LWS_NAME_LABEL}' in object.metadata.labels"},
                # Upstream's head and worker templates have one container each (the patches address it by index).
                {"name": "one-data-cache-container",
                 "expression": f"size(object.spec.containers) == 1 && object.spec.containers[0].image == '{cache_image}'"},
            ],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
        },
    }
    binding = {
        "apiVersion": ADMISSION_API, "kind": "MutatingAdmissionPolicyBinding",
        "metadata": metadata(POLICY_NAME),
        "spec": {"policyName": POLICY_NAME,
                 "matchResources": {"namespaceSelector": {"matchExpressions": [
                     {"key": TENANT_LABEL, "operator": "Exists"}]}}},
    }
    return policy, binding
