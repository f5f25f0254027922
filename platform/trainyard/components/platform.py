"""The ``Platform`` component: one stack's whole platform on one cluster.

Children, in apply order:

- ``Crds``: the upstream CRDs (retained on delete always; protected where the stack says);
- ``Controllers``: the Helm releases of JobSet, Kueue and Trainer (skipped when a stack marks
  a controller external, as the local rehearsal does);
- ``Queueing``: Topology, ResourceFlavors, Cohorts, WorkloadPriorityClasses, ClusterQueues;
- ``Runtimes``: the approved ClusterTrainingRuntimes;
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
    """Helm releases of the upstream controllers, CRDs off (Trainyard owns the CRDs)."""

    def __init__(self, config: PlatformConfig, releases: list[ChartRelease], namespaces: list[Manifest],
                 opts: pulumi.ResourceOptions, depends_on: list[pulumi.Resource]) -> None:
        super().__init__(f"{TYPE_PREFIX}:Controllers", "controllers", None, opts)
        by_name = {ns["metadata"]["name"]: ns for ns in namespaces}
        self.resources: list[pulumi.Resource] = []
        previous: list[pulumi.Resource] = []
        for release in releases:
            if release.external:
                pulumi.log.info(f"{release.name}: controller is external on this stack; chart not installed",
                                resource=self)
                continue
            namespace = KubernetesObject(by_name[release.namespace],
                                         _object_opts(config, by_name[release.namespace], self, depends_on))
            chart = k8s.helm.v4.Chart(
                release.name,
                chart=release.chart,
                version=release.version,
                namespace=release.namespace,
                repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=release.repo) if release.repo else None,
                values=release.values,
                skip_crds=True,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*depends_on, namespace, *previous]),
            )
            # JobSet before Kueue before Trainer: each one's webhooks serve the next one's objects.
            previous = [chart]
            self.resources += [namespace, chart]
        self.register_outputs({"charts": [r.name for r in releases if not r.external]})


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
        system_namespaces = [o for o in rendered.objects
                             if o["kind"] == "Namespace" and COMPONENT_LABEL in (o["metadata"].get("labels") or {})]
        self.controllers = Controllers(config, list(rendered.releases), system_namespaces, child, crds)

        by_tenant: dict[str, list[Manifest]] = {}
        cluster_scoped: list[Manifest] = []
        runtimes: list[Manifest] = []
        for obj in rendered.objects:
            if any(obj is ns for ns in system_namespaces):
                continue
            tenant = (obj["metadata"].get("labels") or {}).get(TENANT_LABEL)
            if obj["kind"] == "ClusterTrainingRuntime":
                runtimes.append(obj)
            elif tenant is not None and obj["kind"] != "ClusterQueue":
                by_tenant.setdefault(tenant, []).append(obj)
            else:
                cluster_scoped.append(obj)

        self.queueing = _Group("Queueing", "queueing", config, cluster_scoped, child, crds)
        self.runtimes = _Group("Runtimes", "runtimes", config, runtimes, child, crds)
        self.tenants = [Tenant(name, config, objects, child, [*crds, self.queueing])
                        for name, objects in by_tenant.items()]
        self.register_outputs({
            "environment": config.environment,
            "tenants": [t.name for t in config.tenants],
            "flavors": [p.name for p in config.gpu_pools],
        })
