"""Model serving: KServe in Standard mode, cert-manager for its webhook, the approved serving runtimes.

What a stack decides here: which reviewed ClusterServingRuntimes are installed, whether Trainyard
installs cert-manager or one is already on the cluster, whether KServe creates Ingresses or
Gateway API routes for InferenceServices (off unless the stack says so), which tenants may expose
a model outside the cluster, and which namespaces may call the tenants' predictors.

Ref: https://kserve.github.io/website/docs/admin-guide/kubernetes-deployment
"""

from __future__ import annotations

from pydantic import Field, model_validator

from trainyard.config.base import Model, Name, ProjectPath, Text
from trainyard.config.security import Port


class CertManager(Model):
    """cert-manager issues the KServe webhook's serving certificate (KServe needs cert-manager >= 1.15)."""

    install: bool = Field(
        default=True,
        description="Install cert-manager (chart and CRDs, pinned in the catalog). false: the cluster already runs "
        "cert-manager >= 1.15 with its CRDs; Trainyard then declares neither.",
    )


class Exposure(Model):
    """Whether KServe makes InferenceServices reachable from outside the cluster.

    KServe's Standard mode creates an Ingress (or a Gateway API HTTPRoute) per InferenceService
    unless ingress creation is disabled. Off by default: predictors are reached in-cluster only.
    Ref: kserve-resources values kserve.controller.gateway.{disableIngressCreation,ingressGateway.*}
    """

    ingress_creation: bool = Field(default=False, description="Let KServe create an Ingress or HTTPRoute per "
                                   "InferenceService (that does not carry the cluster-local visibility label).")
    gateway_api: bool = Field(default=False, description="Use Gateway API HTTPRoutes instead of Ingresses.")
    ingress_class: Name = Field(default="nginx", description="IngressClass of the Ingresses KServe creates.")
    gateway: Text = Field(default="kserve/kserve-ingress-gateway",
                         description="namespace/name of the Gateway KServe's HTTPRoutes attach to (gateway_api).")
    domain: Text = Field(default="serving.trainyard.internal", description="Domain of the generated hosts.")
    public_tenants: tuple[Name, ...] = Field(
        default=(), description="Tenants whose InferenceServices may be exposed (no cluster-local visibility label); "
        "everyone else's must carry networking.kserve.io/visibility: cluster-local.")

    @model_validator(mode="after")
    def _exposure_needs_ingress(self) -> Exposure:
        if self.public_tenants and not self.ingress_creation:
            raise ValueError("public_tenants needs ingress_creation: true (nothing is exposed without it)")
        return self


class ServingNetwork(Model):
    """Who may call the tenants' predictors. Predictor pods reach the object store (and DNS) only."""

    callers: tuple[Name, ...] = Field(
        default=(), description="Namespaces whose pods may call predictors (e.g. an API gateway); empty = no caller "
        "outside the tenant's own namespace unless from_tenant_namespace.")
    from_tenant_namespace: bool = Field(
        default=True, description="Pods of the tenant's own namespace may call its predictors (notebooks, evaluation).")
    port: Port = Field(default=8080, description="The predictors' HTTP port (the approved runtimes serve 8080).")


class Serving(Model):
    """KServe v0.20 in Standard mode (no Knative, no Istio) and the approved ClusterServingRuntimes."""

    runtimes_directory: ProjectPath = Field(default="serving-runtimes",
                                    description="Directory of reviewed ClusterServingRuntime YAML, relative to the project.")
    approved_runtimes: tuple[Name, ...] = Field(min_length=1, description="ClusterServingRuntime names (file stems) to install.")
    cert_manager: CertManager = Field(default=CertManager(), description="cert-manager for KServe's webhook certificate.")
    exposure: Exposure = Field(default=Exposure(), description="Ingress/Gateway API creation and who may be exposed.")
    network: ServingNetwork = Field(default=ServingNetwork(), description="Who may call predictors.")
    s3_verify_ssl: bool = Field(default=True, description="Verify the object store's TLS certificate (https endpoints).")
    default_runtime: Name | None = Field(default=None, description="Runtime `trainyard promote` uses when none is given; "
                                         "default: the first approved runtime.")

    @model_validator(mode="after")
    def _default_is_approved(self) -> Serving:
        if self.default_runtime is not None and self.default_runtime not in self.approved_runtimes:
            raise ValueError(f"default_runtime {self.default_runtime!r} is not in approved_runtimes")
        return self
