"""The ``Platform`` component: one stack's whole platform on one cluster.

Children, in apply order:

- ``Crds``: the upstream CRDs (retained on delete always; protected where the stack says);
- ``Controllers``: the Helm releases of JobSet, Kueue and Trainer (skipped when a stack marks
  a controller external, as the local rehearsal does);
- ``Queueing``: Topology, ResourceFlavors, Cohorts, WorkloadPriorityClasses, ClusterQueues;
- ``Runtimes``: the approved ClusterTrainingRuntimes;
- ``Admission``: ValidatingAdmissionPolicies and their bindings;
- one ``Tenant`` per team: its namespace first, then everything inside it.

Every Kubernetes resource names the explicit provider built here; the project disables
the default provider so nothing can reach an ambient cluster by accident.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from trainyard.components.kubernetes_object import KubernetesObject
from trainyard.config.model import PlatformConfig
from trainyard.manifests import RenderedPlatform, render_platform
from trainyard.manifests.installs import COMPONENT_LABEL, ChartRelease
from trainyard.manifests.lifecycle import holds_data
from trainyard.manifests.meta import TENANT_LABEL, Manifest

TYPE_PREFIX = "trainyard:platform"


def _object_opts(config: PlatformConfig, obj: Manifest, parent: pulumi.Resource,
                 depends_on: list[pulumi.Resource]) -> pulumi.ResourceOptions:
    """Options for one object: data-holding objects survive destroy, and are protected where the stack says."""
    data = holds_data(obj)
    return pulumi.ResourceOptions(parent=parent, depends_on=depends_on, retain_on_delete=data,
                                  protect=data and config.lifecycle.protect_data)


class _Group(pulumi.ComponentResource):
    """A named group of objects that share a parent and dependencies."""

    def __init__(self, kind: str, name: str, config: PlatformConfig, objects: list[Manifest],
                 opts: pulumi.ResourceOptions, depends_on: list[pulumi.Resource]) -> None:
        super().__init__(f"{TYPE_PREFIX}:{kind}", name, None, opts)
        self.resources: list[KubernetesObject] = []
        for obj in objects:
            self.resources.append(KubernetesObject(obj, _object_opts(config, obj, self, depends_on)))
        self.register_outputs({"count": len(self.resources)})


class Tenant(pulumi.ComponentResource):
    """A tenant namespace, and then everything in it."""

    def __init__(self, name: str, config: PlatformConfig, objects: list[Manifest],
                 opts: pulumi.ResourceOptions, depends_on: list[pulumi.Resource]) -> None:
        super().__init__(f"{TYPE_PREFIX}:Tenant", name, None, opts)
        namespaces = [o for o in objects if o["kind"] == "Namespace"]
        inside = [o for o in objects if o["kind"] != "Namespace"]
        self.namespace = KubernetesObject(namespaces[0], _object_opts(config, namespaces[0], self, depends_on))
        self.resources = [self.namespace] + [
            KubernetesObject(obj, _object_opts(config, obj, self, [*depends_on, self.namespace])) for obj in inside
        ]
        self.register_outputs({"namespace": namespaces[0]["metadata"]["name"]})


class Controllers(pulumi.ComponentResource):
    """The upstream controllers: each one's namespace and the objects in it, then its Helm release.

    Charts are installed with their CRDs off (Trainyard owns the CRDs).
    """

    def __init__(self, config: PlatformConfig, releases: list[ChartRelease], system_objects: list[Manifest],
                 opts: pulumi.ResourceOptions, depends_on: list[pulumi.Resource]) -> None:
        super().__init__(f"{TYPE_PREFIX}:Controllers", "controllers", None, opts)
        self.resources: list[pulumi.Resource] = []
        previous: list[pulumi.Resource] = []
        for release in releases:
            if release.external:
                pulumi.log.info(f"{release.name}: controller is external on this stack; chart not installed",
                                resource=self)
                continue
            (namespace_obj,) = [o for o in system_objects
                                if o["kind"] == "Namespace" and o["metadata"]["name"] == release.namespace]
            namespace = KubernetesObject(namespace_obj, _object_opts(config, namespace_obj, self, depends_on))
            inside = [KubernetesObject(o, _object_opts(config, o, self, [*depends_on, namespace]))
                      for o in system_objects if o["metadata"].get("namespace") == release.namespace]
            chart = k8s.helm.v4.Chart(
                release.name,
                chart=release.chart,
                version=release.version,
                namespace=release.namespace,
                repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=release.repo) if release.repo else None,
                values=release.values,
                skip_crds=True,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*depends_on, namespace, *inside, *previous]),
            )
            # JobSet before Kueue before Trainer: each one's webhooks serve the next one's objects.
            previous = [chart]
            self.resources += [namespace, *inside, chart]
        self.register_outputs({"charts": [r.name for r in releases if not r.external]})


def concern_of(obj: Manifest) -> str:
    """Which child component declares an object."""
    labels = obj["metadata"].get("labels") or {}
    if COMPONENT_LABEL in labels:
        return "controllers"
    if obj["kind"] == "ClusterTrainingRuntime":
        return "runtimes"
    if obj["apiVersion"].startswith("admissionregistration.k8s.io/"):
        return "admission"
    if TENANT_LABEL in labels and obj["kind"] != "ClusterQueue":
        return "tenant"
    return "queueing"


class Platform(pulumi.ComponentResource):
    """The whole platform for one stack."""

    def __init__(self, name: str, config: PlatformConfig, root: Path, stack_dir: Path | None = None,
                 rendered: RenderedPlatform | None = None, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TYPE_PREFIX}:Platform", name, None, opts)
        rendered = rendered if rendered is not None else render_platform(config, root, stack_dir)
        self.provider = k8s.Provider(
            "cluster",
            context=config.cluster.context,
            kubeconfig=config.cluster.kubeconfig,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, providers={"kubernetes": self.provider})

        self.crds = _Group("Crds", "crds", config, list(rendered.crds), child, [])
        crds: list[pulumi.Resource] = [self.crds]
        groups: dict[str, list[Manifest]] = {"controllers": [], "runtimes": [], "admission": [], "queueing": []}
        by_tenant: dict[str, list[Manifest]] = {}
        for obj in rendered.objects:
            concern = concern_of(obj)
            if concern == "tenant":
                by_tenant.setdefault(obj["metadata"]["labels"][TENANT_LABEL], []).append(obj)
            else:
                groups[concern].append(obj)

        self.controllers = Controllers(config, list(rendered.releases), groups["controllers"], child, crds)
        self.queueing = _Group("Queueing", "queueing", config, groups["queueing"], child, crds)
        self.runtimes = _Group("Runtimes", "runtimes", config, groups["runtimes"], child, crds)
        self.admission = _Group("Admission", "admission", config, groups["admission"], child, crds)
        # Admission policies first: no tenant object exists before the rules that guard it.
        self.tenants = [Tenant(name, config, objects, child, [*crds, self.queueing, self.admission])
                        for name, objects in by_tenant.items()]
        self.register_outputs({
            "environment": config.environment,
            "tenants": [t.name for t in config.tenants],
            "flavors": [p.name for p in config.gpu_pools],
        })
