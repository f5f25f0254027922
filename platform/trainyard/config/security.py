"""Security settings of a stack: what tenants' pods may reach, what admission allows, how strict policy is.

Isolation is the default and needs no settings: every tenant namespace denies all ingress and
egress except DNS and traffic inside the namespace. What a stack adds here are the *exceptions*
(the object store, MLflow, an egress proxy or a CIDR allowlist), each one explicit and reviewed,
and the per-stack severity of policy rules.

Cross-references to tenants (``admission.training_runtime_tenants``) are checked by the policy
rule ``security-references-exist`` rather than here: this model does not see the tenant list.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from trainyard.config.base import Labels, Model, Name
from trainyard.policy_ids import RULE_IDS

# namespace (DNS-1123 label) / Service name (DNS-1035 label), each at most 63.
# Ref: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#rfc-1035-label-names
_SERVICE_REF = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
# The widest network an allowlist entry may name: a /8 is already 16 million addresses.
MIN_PREFIX = {4: 8, 6: 16}
_NEVER_ALLOWED = tuple(ipaddress.ip_network(n) for n in (
    "169.254.0.0/16", "127.0.0.0/8", "224.0.0.0/4", "fe80::/10", "::1/128", "ff00::/8", "::ffff:0:0/96",
))

PolicyLevel = Literal["mandatory", "advisory", "disabled"]


def _cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a CIDR block ({exc})") from None
    if network.prefixlen == 0:
        # The whole internet is not an allowlist; name an egress proxy instead.
        raise ValueError(f"{value!r} allows every address; list the networks tenants need, or use egress_proxy")
    if network.prefixlen < MIN_PREFIX[network.version]:
        raise ValueError(f"{value!r} is wider than /{MIN_PREFIX[network.version]}: not an allowlist; "
                         "list the networks tenants need, or use egress_proxy")
    if any(network.overlaps(special) for special in _NEVER_ALLOWED if special.version == network.version):
        # 169.254.169.254 is the cloud instance metadata service: node credentials for any pod that reaches it.
        raise ValueError(f"{value!r} is a link-local, loopback, multicast or unspecified network, never a service "
                         "tenants need (169.254.169.254 is the cloud metadata endpoint)")
    return value


def _service_ref(value: str) -> str:
    if not _SERVICE_REF.match(value):
        raise ValueError(f"{value!r} is not namespace/name")
    return value


Cidr = Annotated[str, AfterValidator(_cidr)]
Port = Annotated[int, Field(ge=1, le=65535)]
ServiceRef = Annotated[str, AfterValidator(_service_ref)]


class Endpoint(Model):
    """Where tenants' pods may connect: pods in a namespace (by labels) or external CIDR blocks, on some TCP ports.

    NetworkPolicies select pods, not Services, and see the pod port after the Service's
    translation: ``ports`` are the pods' (target) ports.
    Ref: https://kubernetes.io/docs/concepts/services-networking/network-policies/
    """

    namespace: Name | None = Field(default=None, description="Namespace of the serving pods (in-cluster service).")
    pod_labels: Labels = Field(default_factory=dict,
                               description="Labels of the serving pods; empty = every pod of the namespace.")
    cidrs: tuple[Cidr, ...] = Field(default=(), description="External networks (an S3 endpoint outside the cluster).")
    ports: tuple[Port, ...] = Field(min_length=1, description="TCP ports of the serving pods or hosts.")

    @model_validator(mode="after")
    def _one_kind(self) -> Endpoint:
        if (self.namespace is None) == (not self.cidrs):
            raise ValueError("set either namespace (an in-cluster service) or cidrs (external networks), not both")
        if self.cidrs and self.pod_labels:
            raise ValueError("pod_labels only apply with namespace")
        return self


class Dns(Model):
    """The cluster DNS pods every tenant pod may query (UDP and TCP)."""

    namespace: Name = "kube-system"
    pod_labels: Labels = Field(default_factory=lambda: {"k8s-app": "kube-dns"})
    ports: tuple[Port, ...] = (53,)


class Network(Model):
    """The exceptions to default-deny in tenant namespaces, and who may call the controllers' webhooks."""

    dns: Dns = Dns()
    object_store: Endpoint | None = Field(default=None, description="Datasets, checkpoints and models (S3 API).")
    mlflow: Endpoint | None = Field(default=None, description="MLflow tracking server and model registry.")
    egress_proxy: Endpoint | None = Field(
        default=None, description="The only way to the internet, when the stack names one (e.g. a pip/HF mirror proxy)."
    )
    egress_allowlist: tuple[Endpoint, ...] = Field(
        default=(), description="External networks tenants may reach directly (CIDR endpoints only)."
    )
    webhook_sources: tuple[Cidr, ...] = Field(
        default=(),
        description="Source networks of the kube-apiserver calling the controllers' webhooks; "
        "empty = any source, on the webhook ports only.",
    )
    metrics_from: tuple[Name, ...] = Field(
        default=(), description="Namespaces (e.g. monitoring) allowed to scrape the controllers' metrics port."
    )

    @field_validator("egress_allowlist")
    @classmethod
    def _external_only(cls, value: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
        for endpoint in value:
            if endpoint.namespace is not None:
                raise ValueError("egress_allowlist holds external networks (cidrs); in-cluster services have their own keys")
        return value


class Admission(Model):
    """ValidatingAdmissionPolicies that hold tenants to the reviewed rules at run time."""

    enabled: bool = True
    training_runtime_tenants: tuple[Name, ...] = Field(
        default=(), description="Tenants allowed to create namespaced TrainingRuntimes (and use them in TrainJobs)."
    )


class PolicySettings(Model):
    """Per-stack severity of policy rules: mandatory fails ``check`` and ``preview``; advisory only reports."""

    severity: dict[str, PolicyLevel] = Field(
        default_factory=dict, description="Rule id -> mandatory | advisory | disabled (see docs/policy.md)."
    )

    @field_validator("severity")
    @classmethod
    def _known_rules(cls, value: dict[str, PolicyLevel]) -> dict[str, PolicyLevel]:
        unknown = sorted(set(value) - RULE_IDS)
        if unknown:
            raise ValueError(f"unknown policy rules: {', '.join(unknown)} (see docs/policy.md for the rule ids)")
        return value


class Security(Model):
    network: Network = Network()
    admission: Admission = Admission()
    exposed_services: tuple[ServiceRef, ...] = Field(
        default=(), description="Services (namespace/name) allowed to be of type LoadBalancer or NodePort."
    )
    policy: PolicySettings = PolicySettings()
