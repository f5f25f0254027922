"""The real JobSet, Trainer and Kueue controller managers, run as local processes against the rehearsal's API server.

What differs from an in-cluster install, and nothing else:

- **Configuration.** Kueue gets the very ``Configuration`` Trainyard renders for the stack
  (``manifests.kueue.controller_configuration``) with ``REHEARSAL_KUEUE_OVERLAY`` applied: loopback
  addresses, a certificate directory, no leader election, no internal certificate management, and
  the visibility API off (its server reads hard-coded ``/visibility`` certificates). JobSet and
  Trainer get the same kind of minimal file (they take no stack settings).
- **Webhooks**, registered the way controller-runtime's envtest does it
  (Ref: controller-runtime pkg/envtest/webhook.go, crd.go): each controller's own kustomization is
  rendered with ``kubectl kustomize``, every ``clientConfig.service`` becomes
  ``url: https://127.0.0.1:<port><path>`` with the rehearsal CA as ``caBundle``, and the Services
  are dropped. CRDs with a conversion webhook get the same treatment for ``/convert``.
- **Certificates**: one serving certificate for 127.0.0.1 from the cluster CA (``cluster.Pki``).

Order (Ref: ../shared/research/rehearsal.md section 2): CRDs, then JobSet (Trainer needs the JobSet
CRD and controller), Trainer, Kueue; each one's ``/readyz`` (which waits for its webhook server);
then the webhook configurations. Teardown is the reverse: webhook configurations (failurePolicy
Fail: left behind, they would refuse every Job and Pod) and conversion settings are removed
before any controller stops.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import shutil
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests import crds as crd_source
from trainyard.manifests import installs
from trainyard.manifests import kueue as kueue_manifests
from trainyard.rehearsal.health import http_ok
from trainyard.rehearsal.kube import Kube, Manifest, wait_until
from trainyard.rehearsal.processes import Processes, port_in_use
from trainyard.rehearsal.settings import HOST, ClusterError, Settings

FIELD_MANAGER = "trainyard-rehearsal"
# Every object the rehearsal itself registers carries this label, so teardown finds exactly those.
REHEARSAL_LABEL = "trainyard.dev/rehearsal"
# Kueue hard-codes its metrics certificate path when internal cert management is off and exits
# without it, even with metrics disabled (Ref: kueue v0.19.2 cmd/kueue/main.go:216-233, kueue#4385).
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def webhook_cert_dir(settings: Settings) -> Path:
    """tls.crt/tls.key (controller-runtime's names) of the 127.0.0.1 serving certificate."""
    return settings.state_dir / "webhook-certs"


def kueue_rehearsal_overlay(config: PlatformConfig, settings: Settings) -> dict[str, Any]:
    """The only keys the rehearsal changes in Kueue's rendered Configuration (each replaces the rendered value).

    Ref: kueue v0.19.2 apis/config/v1beta2/configuration_types.go.
    """
    ports = settings.ports
    return {
        # In-cluster, the pod's namespace (its service account's); here, the chart's namespace, which the
        # rehearsal creates (Ref: kueue v0.19.2 apis/config/v1beta2/defaults.go getOperatorNamespace).
        "namespace": kueue_namespace(config),
        # In-cluster these listen on every interface of the pod; here, loopback only.
        "health": {"healthProbeBindAddress": f"{HOST}:{ports.kueue_health}"},
        "metrics": {"bindAddress": f"{HOST}:{ports.kueue_metrics}"},
        "webhook": {"host": HOST, "port": ports.kueue_webhook, "certDir": str(webhook_cert_dir(settings))},
        # One replica; no Lease to compete for.
        "leaderElection": {"leaderElect": False},
        # Internal cert management issues certificates for <service>.<namespace>.svc into a Secret
        # and patches webhook configurations that point at that Service; none exist here.
        "internalCertManagement": {"enable": False},
        # The visibility API server (beta, on by default) reads /visibility/tls.{crt,key}
        # (Ref: pkg/visibility/server.go); the rehearsal does not serve it.
        "featureGates": {"VisibilityOnDemand": False},
    }


def kueue_namespace(config: PlatformConfig) -> str:
    """Where the rehearsal's Kueue runs: the chart's namespace, which Kueue's Configuration ``namespace`` defaults to."""
    return catalog.release("kueue", config.versions.kueue).namespace


def kueue_configuration(config: PlatformConfig, settings: Settings) -> dict[str, Any]:
    """Trainyard's rendered Kueue Configuration with the rehearsal overlay: one source, a few documented keys replaced."""
    rendered = copy.deepcopy(kueue_manifests.controller_configuration(config))
    overlay = kueue_rehearsal_overlay(config, settings)
    unknown_gates = set(rendered.get("featureGates", {})) & set(overlay["featureGates"])
    if unknown_gates:
        raise ClusterError(f"the rendered Kueue configuration already sets {', '.join(sorted(unknown_gates))}")
    overlay["featureGates"] = {**rendered.get("featureGates", {}), **overlay["featureGates"]}
    return {**rendered, **overlay}


def jobset_configuration(settings: Settings) -> dict[str, Any]:
    """Ref: jobset v0.12.0 api/config/v1alpha1/configuration_types.go."""
    ports = settings.ports
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "webhook": {"host": HOST, "port": ports.jobset_webhook, "certDir": str(webhook_cert_dir(settings))},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"{HOST}:{ports.jobset_health}"},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def trainer_configuration(settings: Settings) -> dict[str, Any]:
    """Ref: trainer v2.3.0 pkg/apis/config/v1alpha1/configuration_types.go (strict decoding; no leaderElection = off)."""
    ports = settings.ports
    return {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "webhook": {"host": HOST, "port": ports.trainer_webhook},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"{HOST}:{ports.trainer_health}"},
        "certManagement": {"enable": False},
    }


def trainer_public_objects(config: PlatformConfig) -> list[Manifest]:
    """What the Trainer chart would install for its clients (the SDK's version ConfigMap), with its namespace.

    The rehearsal installs Trainer, so it applies them: ``installs.trainer_public``, the one source.
    """
    objects = installs.trainer_public(config)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": objects[0]["metadata"]["namespace"], "labels": {REHEARSAL_LABEL: "controllers"}}}
    return [namespace, *objects]


@dataclass(frozen=True)
class WebhookSource:
    """One controller's webhook kustomization and how its objects are renamed and filtered."""

    directory: str  # relative to the tool's share dir
    prefix: str  # Kueue and JobSet both name theirs mutating-webhook-configuration (config/default adds a prefix)
    keep: tuple[str, ...] = ()  # substrings of webhook names to keep; empty = all


@dataclass(frozen=True)
class Controller:
    name: str
    binary: str
    config_file: str
    webhook_port: int
    health_port: int
    webhooks: tuple[WebhookSource, ...]
    conversion_crds: str | None = None  # kustomization whose CRDs declare a conversion webhook
    env: dict[str, str] = field(default_factory=dict)


def kueue_webhooks_to_keep(config: PlatformConfig) -> tuple[str, ...]:
    """Kueue's own objects plus the integrations the rendered configuration enables.

    Disabled integrations get no-op webhooks (Ref: pkg/controller/jobframework/setup.go); registering them
    would only put Kueue in the path of every Deployment, Pod, RayJob... with failurePolicy Fail.
    """
    frameworks = kueue_manifests.controller_configuration(config)["integrations"]["frameworks"]
    hooks = {"batch/job": ("mjob.", "vjob."), "jobset.x-k8s.io/jobset": ("jobset",),
             "trainer.kubeflow.org/trainjob": ("trainjob",)}
    kept = ["clusterqueue", "cohort", "resourceflavor", "workload"]
    for framework in frameworks:
        if framework not in hooks:
            raise ClusterError(f"the rehearsal does not know Kueue's webhooks for integration {framework!r}")
        kept += hooks[framework]
    return tuple(kept)


def controllers(config: PlatformConfig, settings: Settings) -> list[Controller]:
    """JobSet, Trainer, Kueue: in start order."""
    ports = settings.ports
    return [
        Controller("jobset", "jobset-controller", "jobset.yaml", ports.jobset_webhook, ports.jobset_health,
                   (WebhookSource("config/components/webhook", "jobset-"),)),
        # Trainer has no certDir setting: controller-runtime's default is $TMPDIR/k8s-webhook-server/serving-certs
        # (Ref: controller-runtime pkg/webhook/server.go).
        Controller("trainer", "trainer-controller-manager", "trainer.yaml", ports.trainer_webhook, ports.trainer_health,
                   (WebhookSource("manifests/base/webhook", ""),), env={"TMPDIR": str(settings.state_dir / "trainer-tmp")}),
        Controller("kueue", "kueue", "kueue.yaml", ports.kueue_webhook, ports.kueue_health,
                   (WebhookSource("config/components/webhook", "kueue-", kueue_webhooks_to_keep(config)),),
                   conversion_crds="config/components/crd"),
    ]


def host_controllers(config: PlatformConfig, settings: Settings) -> list[Controller]:
    """The controllers the rehearsal runs as local processes: those the stack marks external. Where the
    rehearsal has real nodes, their charts run them as pods instead (``stack.InCluster``) and none is started."""
    return [c for c in controllers(config, settings) if c.name in config.rehearsal.external_controllers]


def local_webhooks(documents: list[Manifest], source: WebhookSource, port: int, ca_bundle: str) -> list[Manifest]:
    """Webhook configurations of a kustomize render, pointed at 127.0.0.1:port (Services dropped)."""
    out = []
    for rendered in documents:
        if not rendered["kind"].endswith("WebhookConfiguration"):
            continue
        doc = copy.deepcopy(rendered)
        doc["metadata"]["name"] = source.prefix + doc["metadata"]["name"]
        doc["metadata"].setdefault("labels", {})[REHEARSAL_LABEL] = "webhooks"
        doc["metadata"].pop("annotations", None)  # cert-manager CA injection: not used here
        hooks = [w for w in doc["webhooks"] if not source.keep or any(k in w["name"] for k in source.keep)]
        for hook in hooks:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://{HOST}:{port}{path}", "caBundle": ca_bundle}
        doc["webhooks"] = hooks
        if hooks:
            out.append(doc)
    return out


def conversion_patches(documents: list[Manifest], port: int, ca_bundle: str) -> dict[str, Manifest]:
    """CRD name -> ``spec.conversion`` for every CRD the kustomization gives a conversion webhook."""
    out = {}
    for doc in documents:
        conversion = (doc.get("spec") or {}).get("conversion") or {}
        if doc.get("kind") == "CustomResourceDefinition" and conversion.get("webhook"):
            out[doc["metadata"]["name"]] = {
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"url": f"https://{HOST}:{port}/convert", "caBundle": ca_bundle},
                            "conversionReviewVersions": conversion["webhook"].get("conversionReviewVersions", ["v1"])},
            }
    return out


class Controllers:
    """Start, register and stop the three controller managers of one rehearsal cluster."""

    def __init__(self, settings: Settings, config: PlatformConfig, kube: Kube) -> None:
        self.settings = settings
        self.config = config
        self.kube = kube
        self.processes = Processes(settings)
        self.directory = settings.state_dir / "controllers"

    def check_versions(self) -> None:
        """The built controllers must be the versions the stack declares (tools/build.sh writes share/<tool>/VERSION)."""
        problems = []
        for component in ("kueue", "jobset", "trainer"):
            wanted = "v" + getattr(self.config.versions, component)
            try:
                built = (self.settings.share(component) / "VERSION").read_text().strip()
            except OSError:
                problems.append(f"{component} is not built (run `make tools`)")
                continue
            if built != wanted:
                problems.append(f"{component}: the stack declares {wanted}, tools/build.sh built {built}")
        if problems:
            raise ClusterError("the rehearsal cannot run the stack's controllers: " + "; ".join(problems))

    def install_crds(self) -> None:
        """The stack's own CRDs (the verified copies Pulumi applies too) before any controller starts."""
        from trainyard.manifests import crd_components

        objects = crd_source.load_crds(self.config, crd_components(self.config))
        self.kube.apply(objects, field_manager=FIELD_MANAGER)
        for obj in objects:
            name = obj["metadata"]["name"]
            wait_until(f"CRD {name} to be established", partial(self._established, name), 60)

    def _established(self, name: str) -> bool:
        return established(self.kube.get("customresourcedefinition", name))

    def up(self) -> None:
        if not host_controllers(self.config, self.settings):
            return
        self.check_versions()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._ensure_kueue_metrics_certs()
        trainer_certs = self.settings.state_dir / "trainer-tmp" / "k8s-webhook-server" / "serving-certs"
        for directory in (webhook_cert_dir(self.settings), trainer_certs):
            directory.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.settings.pki / "webhook.crt", directory / "tls.crt")
            shutil.copyfile(self.settings.pki / "webhook.key", directory / "tls.key")
            (directory / "tls.key").chmod(0o600)
        ca_bundle = base64.b64encode((self.settings.pki / "ca.crt").read_bytes()).decode()
        # The Kueue chart creates its namespace; Kueue reads Secrets there (a MultiKueue manager's worker
        # kubeconfigs: Ref: kueue v0.19.2 cmd/kueue/main.go, multikueue.SetupControllers(mgr, *cfg.Namespace, ...)).
        self.kube.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kueue_namespace(self.config)}}],
                        field_manager=FIELD_MANAGER)
        for controller in host_controllers(self.config, self.settings):
            self._start(controller)
        for controller in host_controllers(self.config, self.settings):
            self.register(controller, ca_bundle)
        if "trainer" in self.config.rehearsal.external_controllers:  # else the chart renders them
            self.kube.apply(trainer_public_objects(self.config), field_manager=FIELD_MANAGER)

    def _config_for(self, controller: Controller) -> dict[str, Any]:
        if controller.name == "kueue":
            return kueue_configuration(self.config, self.settings)
        if controller.name == "jobset":
            return jobset_configuration(self.settings)
        return trainer_configuration(self.settings)

    def _start(self, controller: Controller) -> None:
        path = self.directory / controller.config_file
        text = yaml.safe_dump(self._config_for(controller), sort_keys=False)
        digest = hashlib.sha256(text.encode()).hexdigest()
        stamp = self.directory / f"{controller.name}.sha256"
        if self.processes.running(controller.name) and stamp.exists() and stamp.read_text() != digest:
            print(f"    {controller.name}: configuration changed, restarting", flush=True)
            self.processes.stop(controller.name)
        path.write_text(text)
        stamp.write_text(digest)
        if not self.processes.running(controller.name):
            for port in (controller.webhook_port, controller.health_port):
                if port_in_use(port):
                    raise ClusterError(f"port {HOST}:{port} ({controller.name}) is in use by another process")
            self.processes.start(controller.name, [
                str(self.settings.binary(controller.binary)), "--config", str(path),
                "--kubeconfig", str(self.settings.kubeconfig)], env=controller.env)
        try:
            wait_until(f"{controller.name} /readyz", lambda: self.ready(controller) or self._died(controller), 120)
        except TimeoutError as exc:
            raise ClusterError(f"{exc}; see {self.settings.logs / (controller.name + '.log')}") from None
        if not self.processes.running(controller.name):
            raise ClusterError(f"{controller.name} exited; last lines of its log:\n{self.processes.log_tail(controller.name)}")

    def _died(self, controller: Controller) -> bool:
        return not self.processes.running(controller.name)

    def ready(self, controller: Controller) -> bool:
        return http_ok(f"http://{HOST}:{controller.health_port}/readyz", "ok")

    def register(self, controller: Controller, ca_bundle: str) -> None:
        share = self.settings.share(controller.name)
        objects: list[Manifest] = []
        for source in controller.webhooks:
            objects += local_webhooks(self.kube.kustomize(share / source.directory), source, controller.webhook_port,
                                      ca_bundle)
        self.kube.apply(objects, field_manager=FIELD_MANAGER)
        if controller.conversion_crds:
            rendered = self.kube.kustomize(share / controller.conversion_crds)
            for name, conversion in conversion_patches(rendered, controller.webhook_port, ca_bundle).items():
                self.kube.patch("customresourcedefinition", name, {"spec": {"conversion": conversion}})

    def unregister(self) -> None:
        """Remove every webhook configuration and conversion webhook the rehearsal registered."""
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            self.kube.delete(kind, selector=f"{REHEARSAL_LABEL}=webhooks")
        for crd in self.kube.items("customresourcedefinitions", namespace=None):
            client = (((crd["spec"].get("conversion") or {}).get("webhook") or {}).get("clientConfig") or {})
            if str(client.get("url", "")).startswith(f"https://{HOST}:"):
                self.kube.patch("customresourcedefinition", crd["metadata"]["name"],
                                [{"op": "replace", "path": "/spec/conversion", "value": {"strategy": "None"}}],
                                kind="json")

    def down(self) -> None:
        for controller in reversed(controllers(self.config, self.settings)):
            self.processes.stop(controller.name)

    def status(self) -> dict[str, bool]:
        return {c.name: self.processes.running(c.name) and self.ready(c)
                for c in host_controllers(self.config, self.settings)}

    def _ensure_kueue_metrics_certs(self) -> None:
        target = KUEUE_METRICS_CERT_DIR
        if (target / "tls.crt").exists() and (target / "tls.key").exists():
            return
        try:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.settings.pki / "webhook.crt", target / "tls.crt")
            shutil.copyfile(self.settings.pki / "webhook.key", target / "tls.key")
            (target / "tls.key").chmod(0o600)
        except OSError as exc:
            raise ClusterError(f"Kueue needs a metrics certificate in {target} (hard-coded upstream, kueue#4385) and "
                               f"it cannot be written ({exc.strerror}); create it once: mkdir -p {target} && cp "
                               f"{self.settings.pki}/webhook.crt {target}/tls.crt && cp {self.settings.pki}/webhook.key "
                               f"{target}/tls.key") from None


def established(crd: dict[str, Any]) -> bool:
    """Whether the API server serves ``crd`` (its Established condition True). A CRD read right after its create may
    have ``status.conditions: null`` (seen on the node tier's barman-cloud CRD, 2026-12-07: a TypeError instead of
    another poll), or no status at all."""
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])
