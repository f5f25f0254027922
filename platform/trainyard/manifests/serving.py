"""Serving: KServe v0.20 in Standard mode, the approved ClusterServingRuntimes, and each tenant's serving access.

Platform level:

- the ``kserve`` namespace (restricted), its network policies, and the ``kserve-resources`` chart with
  Trainyard's values (below). The ``kserve-crd`` chart is not installed: Trainyard declares the CRDs;
  ``kserve-runtime-configs`` is not installed either: only the reviewed runtimes are.
- the ClusterServingRuntimes the stack approves, from the reviewed files in ``serving-runtimes/``.

Per tenant namespace:

- ServiceAccount ``kserve-predictor``, listing Secret ``trainyard-serving-s3``: the tenant's read-only
  identity on its own model bucket. KServe's credential builder walks the ServiceAccount's
  ``secrets``, recognises an S3 Secret by its secret-key entry (``AWS_SECRET_ACCESS_KEY``, the chart's
  ``storage.s3.secretAccessKeyName``) and turns the *Secret's* ``serving.kserve.io/s3-*`` annotations
  into the storage initializer's environment (ServiceAccount annotations are read only for IRSA).
  Ref: pkg/credentials/service_account_credentials.go, pkg/credentials/s3/{s3_secret,utils}.go at v0.20.0.
- Role and RoleBinding ``trainyard-serving``: the tenant's groups manage InferenceServices.
- NetworkPolicies for predictor pods (selected by ``serving.kserve.io/inferenceservice``): egress to
  the object store, ingress from the namespaces the stack names. The general tenant allows
  (``manifests/network.py``) leave predictor pods out, so these are the only paths they have.

KServe chart values (kserve-resources v0.20.0 values.yaml):

- ``controller.deploymentMode: Standard``: the chart's default is still ``Knative`` (the code's default
  is Standard; ``RawDeployment`` is its legacy alias: pkg/constants/constants.go ParseDeploymentMode).
- ``controller.gateway.disableIngressCreation``: true unless ``serving.exposure.ingress_creation``;
  ``disableIstioVirtualHost``: there is no Istio.
- every image (controller, rbac proxy, storage initializer, agent, router) from the mirror, pinned by the
  image lock's digest where it has one, pull policy IfNotPresent (the chart's controller default is Always).
  The chart composes ``<image>:<tag>`` for each (files/kserve/deployment-patch.yaml:61 the controller,
  files/common/configmap-patch.yaml:9, :17, :27, :94, :103 agent, batcher, router, logger and storage
  initializer in ``inferenceservice-config``, files/common/storagecontainer-patch.yaml:7 the default
  ClusterStorageContainer), so the tag is ``<tag>@<digest>``; ``rbacProxyImage`` is one string
  (deployment-patch.yaml:51), the whole pinned reference.
- ``storage.containerSecurityContext`` adds seccomp ``RuntimeDefault``: the storage initializer runs
  in tenant namespaces, which enforce the restricted Pod Security Standard.
- ``security.autoMountServiceAccountToken: false``: predictor pods need no API credentials.
- ``localmodel.enabled: false`` (node agents with hostPath caches are not part of this platform).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from trainyard import catalog
from trainyard.config.model import PlatformConfig, Tenant
from trainyard.config.serving import Serving
from trainyard.manifests import object_store
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.concern import Concern
from trainyard.manifests.installs import pinned_chart, pinned_image, system_namespace
from trainyard.manifests.meta import (
    APPROVED_RUNTIME_LABEL,
    INFERENCE_SERVICE_POD_LABEL,
    MANAGED_BY,
    TENANT_LABEL,
    Manifest,
    metadata,
)
from trainyard.manifests.network import (
    controller_policies,
    egress_to,
    namespace_selector,
    network_policy,
    object_store_allow,
    tcp_ports,
)
from trainyard.manifests.runtimes import RuntimeFileError, pin_images, read_runtime_file
from trainyard.manifests.tenants import role_binding_for
from trainyard.supply.lock import ImageLock

COMPONENT = "kserve"
SERVICE_ACCOUNT = "kserve-predictor"
S3_SECRET = "trainyard-serving-s3"  # noqa: S105 - a Secret name
ROLE = "trainyard-serving"
# The Secret keys KServe reads the static S3 keys from: the chart's storage.s3.{accessKeyIdName,secretAccessKeyName},
# set explicitly below (KServe's code default would be awsAccessKeyID / awsSecretAccessKey).
ACCESS_KEY_ID_KEY = "AWS_ACCESS_KEY_ID"
SECRET_ACCESS_KEY_KEY = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 - a key name, not a secret
# Ref: pkg/credentials/s3/s3_secret.go (InferenceServiceS3Secret*Annotation) at v0.20.0.
S3_ENDPOINT_ANNOTATION = "serving.kserve.io/s3-endpoint"
S3_USE_HTTPS_ANNOTATION = "serving.kserve.io/s3-usehttps"
S3_REGION_ANNOTATION = "serving.kserve.io/s3-region"
S3_VERIFY_SSL_ANNOTATION = "serving.kserve.io/s3-verifyssl"
# Ref: pkg/constants/constants.go NetworkVisibility / ClusterLocalVisibility.
VISIBILITY_LABEL = "networking.kserve.io/visibility"
CLUSTER_LOCAL = "cluster-local"


def enabled(config: PlatformConfig) -> Serving:
    if config.serving is None:
        raise ValueError("the stack has no serving section")
    return config.serving


def model_bucket(config: PlatformConfig, tenant: Tenant) -> str:
    return object_store.bucket_name(config, tenant, "models")


def read_only_identity(config: PlatformConfig, tenant: Tenant) -> object_store.Identity:
    """The tenant's read-only identity for its models bucket; the object-store concern provisions it."""
    return object_store.serving_identity(config, tenant)


# ---------------------------------------------------------------- install


def release_of(config: PlatformConfig) -> catalog.Release:
    return catalog.release("kserve", config.versions.kserve)


def _image(config: PlatformConfig, image: catalog.Image, lock: ImageLock) -> tuple[str, str]:
    """(registry/repository, tag) as the KServe chart takes its images: the tag ``<tag>@<digest>`` where the lock
    has the digest."""
    pinned = pinned_image(config, image, lock)
    return pinned.name, pinned.tag_with_digest


def chart_values(config: PlatformConfig, lock: ImageLock | None = None) -> dict[str, Any]:
    serving = enabled(config)
    pins = lock if lock is not None else ImageLock()
    pinned = release_of(config)
    controller, controller_tag = _image(config, pinned.installed()[2], pins)
    images = {name: _image(config, image, pins) for name, image in pinned.images}
    exposure = serving.exposure
    return {"kserve": {
        "version": pinned.tag,
        "controller": {
            "deploymentMode": "Standard",
            "image": controller,
            "tag": controller_tag,
            "imagePullPolicy": "IfNotPresent",
            "rbacProxyImage": ":".join(images["rbac-proxy"]),
            "gateway": {
                "domain": exposure.domain,
                "disableIngressCreation": not exposure.ingress_creation,
                "disableIstioVirtualHost": True,
                "ingressGateway": {
                    "enableGatewayApi": exposure.gateway_api,
                    "kserveGateway": exposure.gateway,
                    "className": exposure.ingress_class,
                },
            },
        },
        "storage": {
            "image": images["storage-initializer"][0],
            "tag": images["storage-initializer"][1],
            "containerSecurityContext": {
                "allowPrivilegeEscalation": False,
                "privileged": False,
                "runAsNonRoot": True,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "s3": {"accessKeyIdName": ACCESS_KEY_ID_KEY, "secretAccessKeyName": SECRET_ACCESS_KEY_KEY},
        },
        "agent": {"image": images["agent"][0], "tag": images["agent"][1]},
        "router": {"image": images["router"][0], "tag": images["router"][1], "imagePullPolicy": "IfNotPresent"},
        "security": {"autoMountServiceAccountToken": False},
        "localmodel": {"enabled": False},
    }}


def chart_release(config: PlatformConfig, lock: ImageLock | None = None) -> ChartRelease:
    return pinned_chart(config, release_of(config), COMPONENT, chart_values(config, lock))


# ---------------------------------------------------------------- runtimes


def runtime_containers(runtime: Manifest) -> list[tuple[str, dict[str, Any]]]:
    spec = runtime.get("spec") or {}
    return [(f"spec.{key}[{i}]", c) for key in ("initContainers", "containers")
            for i, c in enumerate(spec.get(key) or []) if isinstance(c, dict)]


def load_serving_runtime(path: Path, config: PlatformConfig, lock: ImageLock | None = None) -> Manifest:
    """A reviewed ClusterServingRuntime file, with every image pinned by digest as a training runtime's are
    (``runtimes.pin_images``: the file's own, else the lock's); RuntimeFileError names the file, field and reason."""
    shown = str(path)
    doc = read_runtime_file(path, config.serving.runtimes_directory if config.serving else "serving runtimes")
    if not isinstance(doc, dict) or doc.get("kind") != "ClusterServingRuntime":
        raise RuntimeFileError(shown, "kind", "must be ClusterServingRuntime")
    if doc.get("apiVersion") != catalog.KSERVE_RUNTIME_API:
        raise RuntimeFileError(shown, "apiVersion", f"must be {catalog.KSERVE_RUNTIME_API}")
    if (doc.get("metadata") or {}).get("name") != path.stem:
        raise RuntimeFileError(shown, "metadata.name", f"must equal the file name {path.stem!r}")
    containers = runtime_containers(doc)
    if not containers:
        raise RuntimeFileError(shown, "spec.containers", "defines no containers")
    pin_images(shown, containers, config, lock if lock is not None else ImageLock())
    return doc


def approved_serving_runtime(source: Manifest) -> Manifest:
    runtime = copy.deepcopy(source)
    meta = runtime.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **MANAGED_BY, APPROVED_RUNTIME_LABEL: "true"}
    return runtime


def serving_runtimes(config: PlatformConfig, root: Path, lock: ImageLock | None = None) -> list[Manifest]:
    serving = enabled(config)
    directory = root / serving.runtimes_directory
    return [approved_serving_runtime(load_serving_runtime(directory / f"{name}.yaml", config, lock))
            for name in serving.approved_runtimes]


# ---------------------------------------------------------------- per tenant


def _split_endpoint(url: str) -> tuple[str, str]:
    """(host[:port], "1"|"0") from an endpoint URL; KServe wants the host in s3-endpoint and https apart."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, "1"
    return rest.rstrip("/"), "1" if scheme.lower() == "https" else "0"


def s3_secret(config: PlatformConfig, tenant: Tenant) -> Manifest:
    serving = enabled(config)
    identity = read_only_identity(config, tenant)
    endpoint, use_https = _split_endpoint(object_store.endpoint_url(config))
    annotations = {
        S3_ENDPOINT_ANNOTATION: endpoint,
        S3_USE_HTTPS_ANNOTATION: use_https,
        S3_REGION_ANNOTATION: object_store.region(config),
        S3_VERIFY_SSL_ANNOTATION: "1" if serving.s3_verify_ssl else "0",
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(S3_SECRET, namespace=tenant.namespace_name, labels={TENANT_LABEL: tenant.name},
                             annotations=annotations),
        "type": "Opaque",
        "stringData": {
            ACCESS_KEY_ID_KEY: identity.access_key.placeholder,
            SECRET_ACCESS_KEY_KEY: identity.secret_key.placeholder,
        },
    }


def service_account(tenant: Tenant) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(SERVICE_ACCOUNT, namespace=tenant.namespace_name, labels={TENANT_LABEL: tenant.name}),
        # KServe reads the storage credentials from the Secrets listed here (CreateSecretVolumeAndEnvFromServiceAccount).
        "secrets": [{"name": S3_SECRET}],
        "automountServiceAccountToken": False,
    }


def role(tenant: Tenant) -> Manifest:
    read = ["get", "list", "watch"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(ROLE, namespace=tenant.namespace_name, labels={TENANT_LABEL: tenant.name}),
        "rules": [
            {"apiGroups": ["serving.kserve.io"], "resources": ["inferenceservices"],
             "verbs": [*read, "create", "update", "patch", "delete"]},
            {"apiGroups": ["serving.kserve.io"], "resources": ["inferenceservices/status"], "verbs": ["get"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": read},
            {"apiGroups": [""], "resources": ["services"], "verbs": read},
        ],
    }


PREDICTOR_PODS = {"matchExpressions": [{"key": INFERENCE_SERVICE_POD_LABEL, "operator": "Exists"}]}


def predictor_policies(config: PlatformConfig, tenant: Tenant) -> list[Manifest]:
    serving = enabled(config)
    ns, labels = tenant.namespace_name, {TENANT_LABEL: tenant.name}
    out: list[Manifest] = []
    store = object_store_allow(config)
    if store is not None:
        out.append(egress_to("allow-predictors-object-store", ns, labels, [store], PREDICTOR_PODS))
    callers: list[dict[str, Any]] = [{"namespaceSelector": namespace_selector(n)} for n in serving.network.callers]
    if serving.network.from_tenant_namespace:
        callers.insert(0, {"podSelector": {}})
    if callers:
        out.append(network_policy("allow-predictors-callers", ns, labels, {
            "podSelector": PREDICTOR_PODS,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": callers, "ports": tcp_ports((serving.network.port,))}],
        }))
    return out


def tenant_objects(config: PlatformConfig, tenant: Tenant) -> tuple[Manifest, ...]:
    return (s3_secret(config, tenant), service_account(tenant), role(tenant), role_binding_for(tenant, ROLE),
            *predictor_policies(config, tenant))


def build(config: PlatformConfig, root: Path, lock: ImageLock | None = None) -> Concern:
    """Serving: KServe's namespace and chart, the approved ClusterServingRuntimes, each tenant's serving access."""
    if config.serving is None:
        return Concern("serving")
    release = chart_release(config, lock)
    objects: list[Manifest] = []
    if not release.external:
        objects += [system_namespace(release.namespace, COMPONENT), *controller_policies(config, release.namespace, COMPONENT)]
    objects += serving_runtimes(config, root, lock)
    return Concern("serving", objects=tuple(objects), releases=(release,),
                   tenant_objects={t.name: tenant_objects(config, t) for t in config.tenants})
