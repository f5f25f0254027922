"""Rules on what runs: images, pod security, GPU limits and secrets in workloads.

They apply to every kind that carries pods (see ``pods.POD_SPEC_PATHS``): the platform's own
runtimes and, in pull requests, tenants' TrainJobs. The security rules match the Pod Security
Standard "restricted" that tenant namespaces enforce, so a violation found here is one the API
server would reject later, found at review time instead.

Ref: https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from trainyard import catalog
from trainyard.manifests import generated
from trainyard.manifests.meta import NON_SECRET_KEYS, Manifest
from trainyard.manifests.runtimes import DIGEST, image_allowed
from trainyard.policy.model import Context, object_rule
from trainyard.policy.pods import as_dict, as_list, containers, env_lists, pod_specs

# The one capability "restricted" lets a container add.
ALLOWED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SECRET_NAME = re.compile(r"(password|passwd|secret|token|credential|private[-_]?key|access[-_]?key|api[-_]?key)",
                         re.IGNORECASE)
# Values that stand for something filled in at deploy time (render's "<redacted>", "<generated>").
PLACEHOLDER = re.compile(r"^<[^<>]*>$")
# Secret keys whose values are names and addresses, not secrets (a Secret such as trainyard-mlflow
# carries the user name and the URI next to the password). Their values may be literal unless
# they embed credentials (scheme://user:password@host).
NON_SECRET_KEY = re.compile(r"(^|_)(username|user|uri|url|endpoint|region|host|port|dbname|database)$", re.IGNORECASE)
EMBEDDED_CREDENTIALS = re.compile(r"://[^/@:\s]+:[^/@\s]+@")


def _images(obj: Manifest) -> Iterator[tuple[str, str]]:
    for c in containers(obj):
        image = c.container.get("image")
        if isinstance(image, str):
            yield f"{c.path}.image", image


@object_rule("image-approved-registry", "Images come from an approved registry.",
             "Mirror the image into an approved registry (runtimes.approved_registries) and reference it there.",
             admission="trainyard-trainjob-image, trainyard-pod-images, trainyard-isvc-images")
def image_approved_registry(obj: Manifest, ctx: Context) -> Iterator[str]:
    registries = ctx.config.runtimes.approved_registries
    for path, image in _images(obj):
        if not image_allowed(image, registries):
            yield f"{path}: {image!r} is not from an approved registry ({', '.join(registries)})"


@object_rule("image-pinned-digest", "Images are pinned by digest, so what was reviewed is what runs.",
             "Reference the image as registry/name@sha256:<digest> (a tag can be moved after review).",
             admission="trainyard-isvc-images")
def image_pinned_digest(obj: Manifest, ctx: Context) -> Iterator[str]:
    for path, image in _images(obj):
        if not DIGEST.search(image):
            yield f"{path}: {image!r} is not pinned by digest (@sha256:...)"


@object_rule("no-privileged-container", "No container runs privileged.",
             "Remove securityContext.privileged; a training container needs no host access.")
def no_privileged_container(obj: Manifest, ctx: Context) -> Iterator[str]:
    for c in containers(obj):
        if c.security_context.get("privileged") is True:
            yield f"{c.path}.securityContext.privileged is true"


@object_rule("no-host-namespaces", "No pod shares the node's network, PID or IPC namespace.",
             "Remove hostNetwork/hostPID/hostIPC; pods of a job reach each other through the JobSet headless service.")
def no_host_namespaces(obj: Manifest, ctx: Context) -> Iterator[str]:
    for pod in pod_specs(obj):
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            if pod.spec.get(field) is True:
                yield f"{pod.path}.{field} is true"


@object_rule("no-host-path", "No pod mounts a hostPath volume.",
             "Use an emptyDir (medium: Memory for /dev/shm), a PVC, or the object store instead of node paths.")
def no_host_path(obj: Manifest, ctx: Context) -> Iterator[str]:
    for pod in pod_specs(obj):
        for i, volume in enumerate(as_list(pod.spec.get("volumes"))):
            if "hostPath" in as_dict(volume):
                yield f"{pod.path}.volumes[{i}] ({as_dict(volume).get('name')}) is a hostPath volume"


@object_rule("no-run-as-root", "Containers run as a non-root user.",
             "Set securityContext.runAsNonRoot: true and a non-zero runAsUser (pod or container level).")
def no_run_as_root(obj: Manifest, ctx: Context) -> Iterator[str]:
    for c in containers(obj):
        if c.effective("runAsUser") == 0:
            yield f"{c.path} runs as user 0 (root)"
        elif c.effective("runAsNonRoot") is False or (not c.pod.partial and c.effective("runAsNonRoot") is not True):
            yield f"{c.path} does not set runAsNonRoot: true (pod or container securityContext)"


@object_rule("no-privilege-escalation", "Containers forbid privilege escalation.",
             "Set securityContext.allowPrivilegeEscalation: false on every container.")
def no_privilege_escalation(obj: Manifest, ctx: Context) -> Iterator[str]:
    for c in containers(obj):
        value = c.security_context.get("allowPrivilegeEscalation")
        if value is True or (not c.pod.partial and value is not False):
            yield f"{c.path}.securityContext.allowPrivilegeEscalation is {'true' if value else 'not set to false'}"


@object_rule("no-added-capabilities", "Containers add no Linux capabilities (NET_BIND_SERVICE aside).",
             "Remove capabilities.add and keep capabilities.drop: [ALL].")
def no_added_capabilities(obj: Manifest, ctx: Context) -> Iterator[str]:
    for c in containers(obj):
        added = [str(cap) for cap in as_list(as_dict(c.security_context.get("capabilities")).get("add"))]
        extra = [cap for cap in added if cap not in ALLOWED_CAPABILITIES]
        if extra:
            yield f"{c.path}.securityContext.capabilities.add: {', '.join(extra)}"


@object_rule("gpu-container-limits", "Containers that use GPUs set GPU and memory limits.",
             f"Set resources.limits for {catalog.GPU_RESOURCE} and memory.",
             severity="advisory")
def gpu_container_limits(obj: Manifest, ctx: Context) -> Iterator[str]:
    for c in containers(obj):
        if c.path == "spec.trainer":
            # resourcesPerNode is completed at admission with the runtime's limits (trainyard-trainjob-resources),
            # and a runtime limits memory; rule trainjob-resources reviews it as completed.
            continue
        resources = as_dict(c.container.get("resources"))
        requests, limits = as_dict(resources.get("requests")), as_dict(resources.get("limits"))
        if catalog.GPU_RESOURCE not in requests and catalog.GPU_RESOURCE not in limits:
            continue
        missing = [name for name in (catalog.GPU_RESOURCE, "memory") if name not in limits]
        if missing:
            yield f"{c.path} uses GPUs but sets no limit for {', '.join(missing)}"


@object_rule("no-plaintext-secrets", "Manifests carry no plaintext secret values.",
             "Reference a Secret (env valueFrom.secretKeyRef, initializer secretRef); Secret values enter at "
             "deploy time as Pulumi secrets, never in reviewed YAML.")
def no_plaintext_secrets(obj: Manifest, ctx: Context) -> Iterator[str]:
    if obj.get("kind") == "Secret":
        public = set(str(as_dict(as_dict(obj.get("metadata")).get("annotations")).get(NON_SECRET_KEYS, "")).split(","))
        for field in ("data", "stringData"):
            for key, value in as_dict(obj.get(field)).items():
                if not isinstance(value, str) or not value or _deploy_time_value(value) or key in public:
                    continue
                if not NON_SECRET_KEY.search(str(key)) or EMBEDDED_CREDENTIALS.search(value):
                    yield f"{field}.{key} holds a literal value"
    for path, env in env_lists(obj):
        for i, item in enumerate(env):
            var = as_dict(item)
            name, value = str(var.get("name", "")), var.get("value")
            if SECRET_NAME.search(name) and isinstance(value, str) and value and not _deploy_time_value(value):
                yield f"{path}[{i}] ({name}) has a literal value"


def _deploy_time_value(value: str) -> bool:
    """A render placeholder (``<redacted>``), or a value whose secret part is generated at deploy time
    (it holds a ``${generated:...}`` placeholder: alone, or inside a URI or a config file)."""
    return bool(PLACEHOLDER.match(value)) or any(True for _ in generated.names_in(value))


RULES = (image_approved_registry, image_pinned_digest, no_privileged_container, no_host_namespaces, no_host_path,
         no_run_as_root, no_privilege_escalation, no_added_capabilities, gpu_container_limits, no_plaintext_secrets)
