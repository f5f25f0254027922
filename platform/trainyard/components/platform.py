"""The ``Platform`` component: one stack's whole platform on one cluster.

Children, in apply order:

- ``Crds``: the upstream CRDs (retained on delete always; protected where the stack says);
- one group per concern, as ``render_platform`` built it (``Controllers``, ``Queueing``,
  ``Runtimes``, ``Admission``, ``Network``, ...): its namespaces first, then its other
  objects, then its Helm releases (skipped where the stack marks a controller external);
- one ``Tenant`` per team: its namespace first, then what every concern puts inside it.

Ordering is generic and per object, not per component: a custom resource waits for the CRD
of its own kind (not for every CRD), every namespaced object waits for its Namespace wherever
that is declared, ``AFTER`` names the few concerns that must wait for another (objects that a
controller's webhook validates wait for that controller), and a tenant's Namespace waits for
the objects of ``TENANTS_AFTER`` except those labelled for another tenant (its own
ClusterQueue, not all of them). Waiting for whole components made every object of the stack
wait for the slowest CRD and every tenant for every other tenant's queue: the Python SDK sends
a resource to the engine only once all its dependencies are done, so component-wide edges
are barriers (docs/architecture.md, "Engine speed"). Every Kubernetes resource names the
explicit provider built here; the project disables the default provider so nothing can reach
an ambient cluster by accident.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from trainyard import post_render
from trainyard.components import multikueue
from trainyard.components.generated import GeneratedValues
from trainyard.components.kubernetes_object import KubernetesObject
from trainyard.config.model import PlatformConfig
from trainyard.manifests import RenderedPlatform, render_platform
from trainyard.manifests.admission import KUEUE_FLAVOR_POLICY
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.concern import Concern
from trainyard.manifests.lifecycle import REPLACED_ON_IMMUTABLE_CHANGE, holds_data, immutable_fields
from trainyard.manifests.meta import TENANT_LABEL, Manifest

TYPE_PREFIX = "trainyard:platform"

# Concerns that must wait for others (besides each object's own CRD and Namespace).
# Kueue's and Trainer's webhooks validate queueing objects and runtimes.
# MLflow's PostgreSQL Cluster and Database are admitted by the CloudNativePG operator's webhooks.
# KServe's chart asks cert-manager for its webhook certificate, so it waits for cert-manager.
# MLflow waits for the object store's group too: its provisioning Job creates the artifact and backup buckets, and the
# ScheduledBackup's immediate first backup (and WAL archiving) of a fresh Cluster fail while the bucket is missing.
AFTER: dict[str, tuple[str, ...]] = {"queueing": ("controllers",), "runtimes": ("controllers",),
                                     "multikueue": ("controllers",), "mlflow": ("postgres-operator", "object-store"),
                                     "serving": ("cert-manager",)}
# Tenant namespaces are created only once their queues and the admission rules that guard them exist.
TENANTS_AFTER: tuple[str, ...] = ("queueing", "admission", "serving-admission")


def _object_opts(config: PlatformConfig, obj: Manifest, parent: pulumi.Resource,
                 depends_on: list[pulumi.Resource], secret_fields: list[str] | None = None,
                 immutable: tuple[str, ...] = ()) -> pulumi.ResourceOptions:
    """Options for one object: data-holding objects survive destroy, and are protected where the stack says.

    Fields holding generated values are secret inputs; their outputs are made secret too. For the kinds of
    ``REPLACED_ON_IMMUTABLE_CHANGE``, a change to a field the CRD makes immutable replaces the object (deleted
    first: the name stays), since the API server refuses the update; never a data-holding object.
    """
    data = holds_data(obj)
    replace = list(immutable) if immutable and not data else None
    return pulumi.ResourceOptions(parent=parent, depends_on=depends_on, retain_on_delete=data,
                                  protect=data and config.lifecycle.protect_data,
                                  additional_secret_outputs=secret_fields or None,
                                  replace_on_changes=replace, delete_before_replace=True if replace else None)


def _object(config: PlatformConfig, obj: Manifest, parent: pulumi.Resource, depends_on: list[pulumi.Resource],
            generated: GeneratedValues, immutable: tuple[str, ...] = ()) -> KubernetesObject:
    props, secret_fields = generated.resolve(obj)
    return KubernetesObject(props, _object_opts(config, obj, parent, depends_on, secret_fields, immutable))


def group_kind(obj: Manifest) -> tuple[str, str]:
    """(API group, kind) of an object: what a CRD's ``spec.group`` and ``spec.names.kind`` declare."""
    api_version: str = obj["apiVersion"]
    return (api_version.split("/", 1)[0] if "/" in api_version else "", obj["kind"])


def served_kind(crd: Manifest) -> tuple[str, str]:
    """(API group, kind) of the objects a CRD serves."""
    return (crd["spec"]["group"], crd["spec"]["names"]["kind"])


def belongs_to_another_tenant(obj: Manifest, tenant: str) -> bool:
    """An object labelled for a tenant other than ``tenant`` (another tenant's ClusterQueue)."""
    owner = (obj["metadata"].get("labels") or {}).get(TENANT_LABEL)
    return owner is not None and owner != tenant


class Declared:
    """What has been declared so far, so that each object waits for exactly what it needs.

    A namespaced object waits for its Namespace; a custom resource for the CRD of its kind.
    A custom resource of a kind no declared CRD serves (the cluster or a chart brings it)
    waits for every CRD, as before.
    """

    def __init__(self) -> None:
        self._namespaces: dict[str, pulumi.Resource] = {}
        self._crds: dict[tuple[str, str], pulumi.Resource] = {}
        self._all_crds: list[pulumi.Resource] = []
        self._secrets: dict[str, list[pulumi.Resource]] = {}
        self._flavors: list[pulumi.Resource] = []
        self._immutable: dict[tuple[str, str, str], tuple[str, ...]] = {}

    def add(self, obj: Manifest, resource: pulumi.Resource) -> None:
        if obj["kind"] == "Namespace":
            self._namespaces[obj["metadata"]["name"]] = resource
        if obj["kind"] == "CustomResourceDefinition":
            self._crds[served_kind(obj)] = resource
            self._all_crds.append(resource)
            group, kind = served_kind(obj)
            if (group, kind) in REPLACED_ON_IMMUTABLE_CHANGE:
                for version in obj["spec"].get("versions", []):
                    self._immutable[(group, version["name"], kind)] = immutable_fields(obj, version["name"])
        if obj["kind"] == "Secret":
            self._secrets.setdefault(obj["metadata"]["name"], []).append(resource)
        if obj["kind"] == "ResourceFlavor":
            self._flavors.append(resource)

    def immutable(self, obj: Manifest) -> tuple[str, ...]:
        """The fields whose change replaces ``obj``: those its CRD makes immutable, for the kinds of
        ``REPLACED_ON_IMMUTABLE_CHANGE`` (manifests/lifecycle.py); none for any other kind."""
        group, kind = group_kind(obj)
        version = obj["apiVersion"].rsplit("/", 1)[-1]
        return self._immutable.get((group, version, kind), ())

    def crds(self) -> list[pulumi.Resource]:
        return list(self._all_crds)

    def needs(self, obj: Manifest) -> list[pulumi.Resource]:
        namespace = obj["metadata"].get("namespace")
        needed = [self._namespaces[namespace]] if namespace in self._namespaces else []
        group, _ = key = group_kind(obj)
        if key in self._crds:
            needed.append(self._crds[key])
        elif "." in group and not group.endswith(".k8s.io"):
            # Not a built-in API group, and no CRD of ours serves it: wait for all of them, as a component would.
            needed += self._all_crds
        # An admission policy resolves its paramKind when it is loaded: created before the CRD of that kind, it is
        # a configuration error (every matched request refused under failurePolicy Fail) until the next refresh.
        param_kind = (obj.get("spec") or {}).get("paramKind") if obj["kind"].endswith("AdmissionPolicy") else None
        if isinstance(param_kind, dict) and group_kind(param_kind) in self._crds:
            needed.append(self._crds[group_kind(param_kind)])
        # A MultiKueueCluster reads its kubeconfig Secret (in Kueue's namespace) as soon as it exists: created
        # first, Kueue logs "Secret not found" and marks the cluster inactive until its next retry.
        source = ((obj.get("spec") or {}).get("clusterSource") or {}).get("kubeConfig") or {}
        if obj["kind"] == "MultiKueueCluster" and source.get("locationType", "Secret") == "Secret":
            needed += self._secrets.get(source.get("location", ""), [])
        # The pod flavor policy maps the flavors' nodeLabels to their names: it changes only once the flavors
        # did, so a flavor change the API server refuses (nodeLabels are immutable under TAS) leaves it as it was.
        if obj["metadata"].get("name") == KUEUE_FLAVOR_POLICY and obj["kind"].startswith("MutatingAdmissionPolicy"):
            needed += self._flavors
        return needed


def _declare(config: PlatformConfig, objects: list[Manifest], parent: pulumi.Resource,
             depends_on: list[pulumi.Resource], declared: Declared,
             generated: GeneratedValues) -> list[tuple[Manifest, KubernetesObject]]:
    """Namespaces first, then Secrets, then every other object after what it needs (its namespace, its CRD,
    a MultiKueueCluster its kubeconfig Secret); generated values substituted as secrets."""
    resources: list[tuple[Manifest, KubernetesObject]] = []
    for obj in sorted(objects, key=lambda o: (o["kind"] != "Namespace", o["kind"] != "Secret")):
        resource = _object(config, obj, parent, [*depends_on, *declared.needs(obj)], generated, declared.immutable(obj))
        declared.add(obj, resource)
        resources.append((obj, resource))
    return resources


def chart_child_kind(type_: str) -> str:
    """The Kind of a chart child from its type token (``kubernetes:apps/v1:StatefulSet`` -> ``StatefulSet``)."""
    return type_.rsplit(":", 1)[-1]


def chart_child_object(type_: str) -> Manifest:
    """apiVersion and kind of a chart child from its type token (``kubernetes:postgresql.cnpg.io/v1:Cluster``)."""
    parts = type_.split(":")
    return {"apiVersion": parts[1] if len(parts) == 3 else "v1", "kind": chart_child_kind(type_)}


def retain_chart_data(protect: bool) -> pulumi.ResourceTransform:
    """A transform for a chart's children: those that hold data (a chart's CRDs, claims, StatefulSets)
    are retained on delete and protected like Trainyard's own (manifests/lifecycle.py).

    Some charts render CRDs as templates without a switch (Kueue, the MinIO operator): without this,
    destroying the release would delete the CRD and every object of its kind.
    """
    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if not args.custom or not holds_data(chart_child_object(args.type_)):
            return None
        opts = pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(retain_on_delete=True, protect=protect))
        return pulumi.ResourceTransformResult(args.props, opts)
    return transform


def keep_regenerated_secrets(names: tuple[str, ...]) -> pulumi.ResourceTransform:
    """A transform for a chart's children: Secrets whose values the chart generates while rendering
    are created once and then left alone, instead of changing on every preview."""
    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        metadata = args.props.get("metadata") if isinstance(args.props, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if chart_child_kind(args.type_) != "Secret" or name not in names:
            return None
        opts = pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(ignore_changes=["data", "stringData"]))
        return pulumi.ResourceTransformResult(args.props, opts)
    return transform


def chart_repository_opts(release: ChartRelease, stack_dir: Path | None) -> k8s.helm.v4.RepositoryOptsArgs | None:
    """helm's repository options of a release: the upstream chart repository's URL, or the private CA that signed
    the OCI chart mirror's certificate (``repositoryOpts.caFile`` reaches helm's registry client for ``oci://``
    charts too: pulumi-kubernetes provider/pkg/helm/tool.go ``ApplyRepositoryOpts``, ``newRegistryClient``)."""
    if release.ca_file:
        path = Path(release.ca_file)
        resolved = path if path.is_absolute() or stack_dir is None else stack_dir / path
        return k8s.helm.v4.RepositoryOptsArgs(ca_file=pulumi.FileAsset(str(resolved)))
    return k8s.helm.v4.RepositoryOptsArgs(repo=release.repo) if release.repo else None


def _title(concern: str) -> str:
    return "".join(part.title() for part in concern.split("-"))


class ConcernGroup(pulumi.ComponentResource):
    """One concern's platform-level objects, then its chart releases (charts install with no CRDs at all)."""

    def __init__(self, config: PlatformConfig, concern: Concern, declared: Declared, generated: GeneratedValues,
                 opts: pulumi.ResourceOptions, depends_on: list[pulumi.Resource], stack_dir: Path | None = None) -> None:
        super().__init__(f"{TYPE_PREFIX}:{_title(concern.name)}", concern.name, None, opts)
        self._protect_chart_data = config.lifecycle.protect_data
        self._stack_dir = stack_dir
        self.declared = _declare(config, list(concern.objects), self, depends_on, declared, generated)
        self.resources: list[pulumi.Resource] = [resource for _, resource in self.declared]
        self.charts: list[pulumi.Resource] = []
        # A chart may render custom resources of any kind: it waits for every CRD.
        chart_needs = [*depends_on, *declared.crds()]
        previous: list[pulumi.Resource] = []
        for release in concern.releases:
            if release.external:
                pulumi.log.info(f"{release.name}: controller is external on this stack; chart not installed",
                                resource=self)
                continue
            # Releases of one concern go in order: JobSet before Kueue before Trainer, each one's
            # webhooks serve the next one's objects.
            chart = self._chart(release, [*chart_needs, *self.resources, *previous])
            previous = [chart]
            self.charts.append(chart)
            self.resources.append(chart)
        # Objects that use what the charts run (a provisioning Job) wait for every chart of the concern.
        self.resources += [resource for _, resource in _declare(
            config, list(concern.after_releases), self, [*depends_on, *self.resources], declared, generated)]
        self.register_outputs({"count": len(self.resources),
                               "charts": [r.name for r in concern.releases if not r.external]})

    def _chart(self, release: ChartRelease, depends_on: list[pulumi.Resource]) -> pulumi.Resource:
        # skip_crds skips only a chart's crds/ directory; the post-renderer also drops CRDs that
        # a chart renders as templates (Kueue has no switch for them), so that the CRDs Trainyard
        # declares in the Crds group are the only ones applied. Pulumi transforms cannot drop a
        # chart's child resource, a post-renderer can. Ref: trainyard/post_render.py.
        command, args = post_render.command()
        return k8s.helm.v4.Chart(
            release.name,
            chart=release.chart,
            version=release.version,
            namespace=release.namespace,
            repository_opts=chart_repository_opts(release, self._stack_dir),
            # A chart from a loopback OCI mirror (charts.plain_http): helm's --plain-http, the Chart's own input.
            plain_http=True if release.plain_http else None,
            values=release.values,
            skip_crds=True,
            post_renderer=k8s.helm.v4.PostRendererArgs(command=command, args=args),
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on,
                                        transforms=[retain_chart_data(self._protect_chart_data),
                                                    keep_regenerated_secrets(release.regenerated_secrets)]),
        )


class Tenant(pulumi.ComponentResource):
    """A tenant namespace, and then everything every concern puts in it."""

    def __init__(self, name: str, config: PlatformConfig, objects: list[Manifest], declared: Declared,
                 generated: GeneratedValues, opts: pulumi.ResourceOptions, guards: list[ConcernGroup]) -> None:
        super().__init__(f"{TYPE_PREFIX}:Tenant", name, None, opts)
        # The namespace (and through it everything in it) waits for the objects that guard it:
        # the admission policies and the queueing objects, not other tenants' ClusterQueues.
        before: list[pulumi.Resource] = [resource for group in guards for obj, resource in group.declared
                                         if not belongs_to_another_tenant(obj, name)]
        before += [chart for group in guards for chart in group.charts]
        namespaces = [o for o in objects if o["kind"] == "Namespace"]
        self.declared = _declare(config, namespaces, self, before, declared, generated)
        self.declared += _declare(config, [o for o in objects if o["kind"] != "Namespace"], self, [], declared,
                                  generated)
        self.resources = [resource for _, resource in self.declared]
        self.register_outputs({"namespace": namespaces[0]["metadata"]["name"]})


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
        declared = Declared()
        # One generated value per name for the whole stack, whichever concern or tenant references it.
        self.generated = GeneratedValues(self, (spec for c in rendered.concerns for spec in c.generated))

        self.crds = ConcernGroup(config, Concern("crds", objects=rendered.crds), declared, self.generated, child, [])
        self.groups: dict[str, ConcernGroup] = {}
        present = {c.name for c in rendered.concerns if c.objects or c.releases or c.after_releases}
        for concern in rendered.concerns:
            if concern.name not in present:
                continue
            # A concern waits for the groups AFTER names that the stack has; each comes earlier in the render order.
            missing = [c for c in AFTER.get(concern.name, ()) if c in present and c not in self.groups]
            if missing:
                raise RuntimeError(f"concern {concern.name} is rendered before {', '.join(missing)}, which it waits for "
                                   "(platform.AFTER): reorder render_platform's concerns")
            after = [self.groups[c] for c in AFTER.get(concern.name, ()) if c in self.groups]
            concern = multikueue.with_kubeconfigs(config, concern, root)  # noqa: PLW2901 - deploy-time secrets put in
            self.groups[concern.name] = ConcernGroup(config, concern, declared, self.generated, child, list(after),
                                                     stack_dir)

        guards = [self.groups[c] for c in TENANTS_AFTER if c in self.groups]
        self.tenants = [Tenant(t.name, config, list(rendered.tenant_objects(t.name)), declared, self.generated, child,
                               guards)
                        for t in config.tenants]
        self.register_outputs({
            "environment": config.environment,
            "tenants": [t.name for t in config.tenants],
            "flavors": [p.name for p in config.pools],
        })
