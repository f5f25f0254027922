"""``Rehearsal``: one stack on one rehearsal cluster. Start it, deploy it with the real engine, submit TrainJobs, watch Kueue.

Used by ``trainyard cluster``, ``trainyard rehearse``, ``make up`` and the cluster tier alike::

    rehearsal = Rehearsal(open_stack("local"))
    rehearsal.up()                      # control plane, CRDs, kwok, controllers, fake nodes
    rehearsal.deploy()                  # tools/pulumi-local.sh up, on the rehearsal overlay of the stack
    rehearsal.submit(Job(name="demo", tenant="team-a", gpus_per_node=4))
    rehearsal.wait_finished(["demo"])
    rehearsal.workloads("team-a")
    rehearsal.down()                    # webhooks first, then controllers, kwok, control plane

With ``real_nodes=True`` (``trainyard cluster up --real-nodes``, root) a real node (containerd, kubelet,
kube-proxy) joins the cluster beside the fake GPU nodes, the rehearsal fills its loopback registry the way an
air-gapped site fills its mirror (``mirror.py``: the charts, the images the factory builds, the lock), and
Kueue, JobSet and Trainer are no longer local processes: ``deploy`` installs their charts with the rest of the
stack (``stack.InCluster``) and their pods run on the real node. So is KServe's, whose webhook certificate the
rehearsal's cert-manager stand-in issues (``cert_standin.py``: cert-manager stays external, it is not built here).
Where the stack backs up its MLflow database, ``deploy`` also installs the barman-cloud plugin as a site would
(``barman_cloud_install.py``), and where it turns monitoring on, a site's Prometheus (``prometheus_install.py``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainyard.config.model import PlatformConfig
from trainyard.manifests.rehearsal import fake_nodes, pool_node_labels
from trainyard.project import Stack
from trainyard.rehearsal import factory, volumes
from trainyard.rehearsal.cluster import CONTROL_PLANE, ControlPlane
from trainyard.rehearsal.controllers import Controllers
from trainyard.rehearsal.kube import Kube, KubeError, Manifest, pod_not_ready, wait_until
from trainyard.rehearsal.kwok import Kwok
from trainyard.rehearsal.processes import Processes
from trainyard.rehearsal.report import Observer, check, table
from trainyard.rehearsal.scenario import Job, Scenario, seconds
from trainyard.rehearsal.settings import HOST, ClusterError, Settings
from trainyard.rehearsal.stack import InCluster, real_node_pool, write_rehearsal_stack
from trainyard.rehearsal.trainjobs import trainjob_for

if TYPE_CHECKING:
    from trainyard.rehearsal.node import RealNode
    from trainyard.rehearsal.sdk import TenantSdk

PROBE_NAMESPACE = "trainyard-rehearsal"
# The controllers the rehearsal runs as pods on a real node: those whose images the image factory builds here.
IN_CLUSTER_CONTROLLERS = factory.COMPONENTS
REAL_NODES_MARKER = "real-nodes"  # in the state directory: this cluster was started with real nodes
REAL_NODE = "node-0"
TRAINJOBS_QUOTA_KEY = "count/trainjobs.trainer.kubeflow.org"


@dataclass(frozen=True)
class EngineRun:
    returncode: int
    output: str
    seconds: float


class Rehearsal:
    def __init__(self, stack: Stack, settings: Settings | None = None, overrides: Mapping[str, Any] | None = None,
                 env: Mapping[str, str] | None = None, config_secrets: Mapping[str, Path] | None = None,
                 real_nodes: bool | None = None) -> None:
        """``config_secrets``: Pulumi config secrets the deploy sets first (key in the ``trainyard`` namespace ->
        file holding the value; tools/pulumi-local.sh ``TRAINYARD_CONFIG_SECRETS``), e.g. a worker's kubeconfig.
        ``real_nodes``: None keeps what the running cluster was started with (its state directory says)."""
        self.stack = stack
        self.settings = settings or Settings.from_env(env)
        marker = self.settings.state_dir / REAL_NODES_MARKER
        self.real_nodes = marker.exists() if real_nodes is None else real_nodes
        self.in_cluster = (InCluster(IN_CLUSTER_CONTROLLERS, self.settings.state_dir / "images.lock.yaml",
                                     f"{HOST}:{self.settings.ports.registry}") if self.real_nodes else None)
        self.env = dict(os.environ if env is None else env)
        self.overrides = dict(overrides or {})
        self.config_secrets = dict(config_secrets or {})
        self.stack_file = self.settings.state_dir / "stacks" / f"Pulumi.{stack.name}.yaml"
        self.config: PlatformConfig = write_rehearsal_stack(stack.path, self.stack_file, self.overrides,
                                                            in_cluster=self.in_cluster)
        self.control_plane = ControlPlane(self.settings)
        self.kube: Kube = self.settings.kube()
        self.kwok = Kwok(self.settings, self.kube)
        self.controllers = Controllers(self.settings, self.config, self.kube)

    # ------------------------------------------------------------------ lifecycle

    def with_overrides(self, overrides: Mapping[str, Any]) -> Rehearsal:
        """The same stack and cluster with a scenario's platform overrides."""
        return Rehearsal(self.stack, self.settings, overrides, self.env, self.config_secrets, self.real_nodes)

    def up(self) -> None:
        """Everything but the stack itself: control plane, CRDs, kwok, controllers, fake nodes. Idempotent."""
        start = time.monotonic()
        self._claim_cluster()
        print(f"==> rehearsal cluster for stack {self.stack.name} in {self.settings.state_dir}", flush=True)
        if self.in_cluster is not None:
            self._real_node().check()  # a machine that cannot run the node: say what is missing, start nothing
            if self.backup_plugin_wanted():  # the site's plugin is installed at deploy: its tool must be there now
                from trainyard.rehearsal import barman_cloud_image, barman_cloud_install
                from trainyard.rehearsal.images import ImageError

                barman_cloud_install.upstream_objects(self.settings.tools_dir)
                try:
                    barman_cloud_image.plugin_binary(self.settings.tools_dir)
                except ImageError as exc:
                    raise ClusterError(str(exc)) from None
        self.controllers.check_versions()
        self.control_plane.up()
        self.controllers.install_crds()
        self.wait_for_quota_controller()
        if self.in_cluster is not None:
            self._cert_standin_up()
            self._real_node_up()
            self._local_provisioner_up()
        self.kwok.up()
        self.controllers.up()
        served = real_node_pool(self.config) if self.in_cluster is not None else None
        nodes = fake_nodes(self.config, every_pool=True, real={served: 1} if served else None)
        self.control_plane.apply_storage_class(real_nodes=self.in_cluster is not None)
        self.control_plane.apply_nodes(nodes)
        self._wait_nodes_ready([n["metadata"]["name"] for n in nodes])
        print(f"==> rehearsal cluster up in {time.monotonic() - start:.0f}s: {self.control_plane.server}, "
              f"{len(nodes)} fake nodes, Kueue v{self.config.versions.kueue}, JobSet v{self.config.versions.jobset}, "
              f"Trainer v{self.config.versions.trainer}; export KUBECONFIG={self.settings.kubeconfig}", flush=True)

    def _real_node(self) -> RealNode:
        from trainyard.rehearsal.mirror import registry_hosts
        from trainyard.rehearsal.node import RealNode

        # The stack's NetworkPolicies are enforced on it (kube-router's firewall): the platform must work inside them.
        hosts = registry_hosts(self.config, self.in_cluster) if self.in_cluster is not None else ()
        return RealNode(self.settings, REAL_NODE, 0, proxy=True, dns=True, network_policy=True, registry_hosts=hosts)

    def push_lab_images(self) -> Iterator[str]:
        """The images a ``lora-peft`` TrainJob's pods run, for the real node: the lab's CPU stand-in of the runtime's
        image and Trainer's dataset and model initializers (``factory.ON_REQUEST``: ~1.2 GB, so not part of ``up``),
        and the ``peft-cpu`` serving runtime's image that serves what the lab trains (the lab image's layers + one),
        built or taken from the factory's cache, pushed to the loopback mirror and locked in the rehearsal's lock, so
        the next ``deploy`` renders the runtimes with their digests. Yields one line per thing done."""
        from trainyard.rehearsal.images import ImageError
        from trainyard.rehearsal.mirror import push_images

        if self.in_cluster is None:
            raise ClusterError("the lab's images run on a real node: start the cluster with `trainyard cluster up "
                               f"{self.stack.name} --real-nodes` first")
        try:
            yield from push_images(self.stack, self.config, self.in_cluster, self.settings.tools_dir,
                                   (factory.LAB, factory.INITIALIZERS, factory.SERVING))
        except ImageError as exc:
            raise ClusterError(f"the lab's images: {exc}") from None

    def _real_node_up(self) -> None:
        """The real node the controllers' pods run on, and the mirror the stack is deployed from."""
        from trainyard.rehearsal.mirror import fill_mirror

        assert self.in_cluster is not None
        (self.settings.state_dir / REAL_NODES_MARKER).write_text(",".join(self.in_cluster.controllers) + "\n")
        start = time.monotonic()
        self._real_node().up()
        print(f"==> real node {REAL_NODE} Ready in {time.monotonic() - start:.0f}s", flush=True)
        served = real_node_pool(self.config)
        if served is not None:  # the node of the stack's CPU pool: its ResourceFlavor's labels and topology domains
            labels = pool_node_labels(self.config.pool(served), 0)
            self.kube.apply([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": REAL_NODE, "labels": labels}}],
                            field_manager="trainyard-cluster")
            print(f"    {REAL_NODE} is node 0 of CPU pool {served}: {', '.join(f'{k}={v}' for k, v in labels.items())}",
                  flush=True)
        start = time.monotonic()
        for line in fill_mirror(self.stack, self.config, self.in_cluster, self.settings.tools_dir):
            print(f"    {line}", flush=True)
        print(f"==> the rehearsal's mirror filled in {time.monotonic() - start:.0f}s", flush=True)
        store = volumes.object_store_volume(self.config, self.settings.state_dir, REAL_NODE)
        for volume in [*([store] if store is not None else []),
                       *volumes.database_volumes(self.config, self.settings.state_dir, REAL_NODE)]:
            print(f"    {volumes.provide(self.kube, volume)}", flush=True)

    def _cert_standin_up(self) -> None:
        """The stand-in for cert-manager, where the stack lists it as external and installs a chart that asks it for
        certificates (KServe's): started with the cluster, before ``deploy`` applies any Certificate."""
        from trainyard.rehearsal import cert_standin

        if not cert_standin.wanted(self.config):
            return
        self._host_process_up(cert_standin.PROCESS, cert_standin.CLIENT_CERT, cert_standin.USER,
                              cert_standin.command(sys.executable, self.control_plane.server, self.settings.pki),
                              "the cert-manager stand-in")

    def _local_provisioner_up(self) -> None:
        """The volumes of claims of the default class, on the real node (``local_provisioner.py``): with the node."""
        from trainyard.rehearsal import local_provisioner

        root = self.settings.state_dir / "volumes" / "dynamic"
        self._host_process_up(local_provisioner.PROCESS, local_provisioner.CLIENT_CERT, local_provisioner.USER,
                              local_provisioner.command(sys.executable, self.control_plane.server, self.settings.pki,
                                                        root, REAL_NODE),
                              "the local volume provisioner")

    def _host_process_up(self, name: str, client_cert: str, user: str, command: list[str], what: str) -> None:
        """One of the rehearsal's API host processes (``api_loop.py``), with its own identity (the API server's audit
        names it; system:masters like the rehearsal's other host processes); a ClusterError with its log if it exits."""
        self.control_plane.pki.issue_client(client_cert, user, ("system:masters",))
        processes = Processes(self.settings)
        processes.start(name, command)
        time.sleep(0.5)
        if not processes.running(name):
            raise ClusterError(f"{what} exited:\n{processes.log_tail(name)}")

    def _claim_cluster(self) -> None:
        """One stack per rehearsal cluster: its queues, nodes and tenants would mix with another's."""
        marker = self.settings.state_dir / "stack"
        holder = marker.read_text().strip() if marker.exists() else None
        if holder and holder != self.stack.name:
            raise ClusterError(f"the rehearsal cluster in {self.settings.state_dir} holds stack {holder!r}; "
                               f"`trainyard cluster down --purge` first, or use another TRAINYARD_CLUSTER_DIR and ports "
                               f"(`trainyard cluster env` lists them)")
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(self.stack.name + "\n")

    def wait_for_quota_controller(self, timeout: float = 120) -> None:
        """Return once kube-controller-manager's quota controller counts TrainJobs.

        A ResourceQuota that lists ``count/trainjobs...`` and is synced before the quota controller has
        discovered the TrainJob CRD (it rediscovers every 30 s) gets no usage for it, and nothing requeues it
        before the full resync (``--resource-quota-sync-period``, 5 min): meanwhile the API server refuses every
        TrainJob in that namespace ("status unknown for quota"). The rehearsal installs the CRDs before the
        stack, so it waits here, with a probe quota whose spec it changes until the controller counts it,
        and every tenant quota created afterwards is counted at once.
        Ref: kubernetes pkg/controller/resourcequota/resource_quota_controller.go (Sync, replenishQuota).
        """
        kube = self.kube
        counter = [0]

        def counted() -> bool:
            counter[0] += 1
            # Only a change of spec.hard makes the controller look at a quota again. (A namespace left
            # terminating by an earlier run refuses the quota until it is gone; then it is made again.)
            kube.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROBE_NAMESPACE}},
                        {"apiVersion": "v1", "kind": "ResourceQuota",
                         "metadata": {"name": "trainjob-discovery-probe", "namespace": PROBE_NAMESPACE},
                         "spec": {"hard": {TRAINJOBS_QUOTA_KEY: str(1000 + counter[0] % 2)}}}], "trainyard-rehearsal")
            quota = kube.get("resourcequota", "trainjob-discovery-probe", PROBE_NAMESPACE)
            return TRAINJOBS_QUOTA_KEY in (quota.get("status", {}).get("used") or {})

        start = time.monotonic()
        wait_until("the quota controller to count TrainJobs", counted, timeout, interval=2)
        kube.delete("namespace", PROBE_NAMESPACE)
        waited = time.monotonic() - start
        if waited > 1:
            print(f"    quota controller counts TrainJobs (waited {waited:.0f}s for its CRD discovery)", flush=True)

    def _wait_nodes_ready(self, names: list[str]) -> None:
        def ready() -> bool:
            nodes = {n["metadata"]["name"]: n for n in self.kube.items("nodes", None)}
            return all(any(c["type"] == "Ready" and c["status"] == "True" for c in nodes[n].get("status", {})
                           .get("conditions", [])) and not any(t["key"] == "node.kubernetes.io/not-ready"
                                                               for t in nodes[n].get("spec", {}).get("taints", []))
                       for n in names if n in nodes) and set(names) <= set(nodes)

        wait_until("the fake nodes to be Ready", ready, 60)

    def down(self, purge: bool = False) -> None:
        """Webhook registrations first (failurePolicy Fail), then controllers, kwok and the control plane."""
        if self.control_plane.api_ready():
            try:
                self.controllers.unregister()
            except KubeError as exc:
                print(f"    warning: could not remove the webhook registrations: {exc}", file=sys.stderr)
        stop_everything(self.settings)
        (self.settings.state_dir / REAL_NODES_MARKER).unlink(missing_ok=True)
        if purge:
            import shutil

            shutil.rmtree(self.settings.state_dir, ignore_errors=True)
            print(f"    removed {self.settings.state_dir}", flush=True)

    # ------------------------------------------------------------------ the stack

    def deploy(self, extra: Iterable[str] = ()) -> EngineRun:
        """``pulumi up`` of the rehearsal overlay of the stack, with the real engine (tools/pulumi-local.sh); then, where
        the stack declares monitoring on real nodes, the Prometheus a site would run (``install_monitoring``)."""
        if self.backup_plugin_wanted():  # before the stack's Cluster needs it, as a site installs it
            self.install_backup_plugin_crd()
            self.install_backup_plugin()
        run = self.engine("up", "--yes", "--skip-preview", *extra)
        if run.returncode == 0 and self.monitoring_wanted():
            self.install_monitoring()
        return run

    # ------------------------------------------------------------------ the site's backup plugin (rehearsal only)

    def backup_plugin_wanted(self) -> bool:
        from trainyard.rehearsal import barman_cloud_install

        return barman_cloud_install.wanted(self.config, self.in_cluster is not None)

    def install_backup_plugin_crd(self) -> None:
        """The plugin's ObjectStore CRD, before ``pulumi up`` applies the stack's ObjectStore (``barman_cloud_install``)."""
        from functools import partial

        from trainyard.rehearsal import barman_cloud_install

        crd = barman_cloud_install.crd(barman_cloud_install.upstream_objects(self.settings.tools_dir))
        self.kube.apply([crd], field_manager=barman_cloud_install.FIELD_MANAGER)
        wait_until(f"CRD {barman_cloud_install.CRD_NAME} to be established",
                   partial(self.controllers._established, barman_cloud_install.CRD_NAME), 60)

    def install_backup_plugin(self) -> None:
        """The barman-cloud plugin from upstream's manifest in the operator's namespace (made here if the stack's
        ``pulumi up`` has not yet), its images built by the factory and pushed to the loopback mirror
        (``barman_cloud_install.py``); its Certificates are issued by the cert-manager stand-in."""
        from trainyard.rehearsal import barman_cloud_image, barman_cloud_install
        from trainyard.rehearsal.image_cache import cache_root

        assert self.in_cluster is not None
        start = time.monotonic()
        built = barman_cloud_image.build(self.config, self.settings.tools_dir, cache_root())
        factory.push_images(built, self.in_cluster.registry)
        for image in built:
            print(f"    image {image.reference} ({'cached' if image.cached else 'built'}"
                  f"{'; ' + image.note if image.note else ''})", flush=True)
        plugin, sidecar = built  # barman_cloud_image.build's order
        upstream = barman_cloud_install.upstream_objects(self.settings.tools_dir)
        objects = barman_cloud_install.plugin_objects(self.config, upstream, plugin.reference, sidecar.reference)
        self.kube.apply(objects, field_manager=barman_cloud_install.FIELD_MANAGER)
        print(f"==> backups (the site's plugin, rehearsal only) in {time.monotonic() - start:.1f}s: barman-cloud "
              f"{barman_cloud_image.stand_in().module_version} in {barman_cloud_install.namespace(upstream)} "
              f"({len(objects)} objects of its manifest.yaml)", flush=True)

    def monitoring_wanted(self) -> bool:
        from trainyard.rehearsal import prometheus_install

        return prometheus_install.wanted(self.config, self.in_cluster is not None)

    def install_monitoring(self) -> None:
        """prometheus-operator from upstream's bundle and one Prometheus in ``monitoring.prometheus.namespace``, their
        images built by the factory and pushed to the loopback mirror (``prometheus_install.py``)."""
        from functools import partial

        from trainyard.manifests import crd_components
        from trainyard.manifests.crds import crd_sources
        from trainyard.rehearsal import prometheus_images, prometheus_install
        from trainyard.rehearsal.image_cache import cache_root

        assert self.in_cluster is not None
        start = time.monotonic()
        built = prometheus_images.build(self.config, self.settings.tools_dir, cache_root())
        factory.push_images(list(built.values()), self.in_cluster.registry)
        for image in built.values():
            print(f"    image {image.reference} ({'cached' if image.cached else 'built'}"
                  f"{'; ' + image.note if image.note else ''})", flush=True)
        upstream = prometheus_install.upstream_objects(self.settings.tools_dir)
        declared = {source.name: source.document() for source in crd_sources(self.config, crd_components(self.config))}
        crds = prometheus_install.crds_to_apply(upstream, declared)
        self.kube.apply(crds, field_manager=prometheus_install.FIELD_MANAGER)
        for name in [str(crd["metadata"]["name"]) for crd in crds]:
            wait_until(f"CRD {name} to be established", partial(self.controllers._established, name), 60)
        operator = prometheus_install.operator_objects(self.config, upstream, built[prometheus_images.OPERATOR].reference,
                                                       built[prometheus_images.RELOADER].reference)
        site = prometheus_install.prometheus_objects(self.config, built[prometheus_images.PROMETHEUS].reference)
        self.kube.apply([*operator, *site], field_manager=prometheus_install.FIELD_MANAGER)
        shared = sum(o["kind"] == "CustomResourceDefinition" for o in upstream) - len(crds)
        print(f"==> monitoring (the site's, rehearsal only) in {time.monotonic() - start:.1f}s: prometheus-operator "
              f"v{self.config.versions.prometheus_operator} in {prometheus_install.operator_namespace(upstream)} "
              f"({len(crds)} CRDs of its bundle applied; {shared} are the stack's), Prometheus "
              f"{self.config.monitoring.prometheus.namespace}/{prometheus_install.PROMETHEUS} as "
              f"{self.config.monitoring.prometheus.service_account}", flush=True)

    def monitoring_problems(self) -> list[str]:
        """Why the operator or the Prometheus is not Ready on the real node (empty without monitoring)."""
        from trainyard.rehearsal import prometheus_install

        if not self.monitoring_wanted():
            return []
        found = []
        namespace = self.config.monitoring.prometheus.namespace
        for ns, selector in (("*", "app.kubernetes.io/name=prometheus-operator"),
                             (namespace, f"prometheus={prometheus_install.PROMETHEUS}")):
            pods = self.kube.items("pods", ns, selector=selector)
            if not pods:
                found.append(f"{ns}: no pod {selector} yet")
            for pod in pods:
                ready = any(c["type"] == "Ready" and c["status"] == "True"
                            for c in pod.get("status", {}).get("conditions", []))
                where = pod["spec"].get("nodeName")
                if not ready or where != REAL_NODE:
                    found.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}: "
                                 f"{'Ready' if ready else 'not Ready'} on {where}")
        found += prometheus_install.prometheus_problems(next(iter(
            self.kube.items("prometheuses.monitoring.coreos.com", namespace)), None))
        return found

    def engine(self, command: str, *args: str) -> EngineRun:
        env = {**self.env, **self.settings.env(), "TRAINYARD_STACK_FILE": str(self.stack_file)}
        if self.config_secrets:
            env["TRAINYARD_CONFIG_SECRETS"] = "".join(f"{k}={v}\n" for k, v in sorted(self.config_secrets.items()))
        start = time.monotonic()
        script = self.stack.root / "tools" / "pulumi-local.sh"
        result = subprocess.run([str(script), command, self.stack.name, *args],  # noqa: S603 - the repo's script
                                env=env, capture_output=True, text=True, check=False)
        run = EngineRun(result.returncode, result.stdout + result.stderr, time.monotonic() - start)
        log = self.settings.logs / f"pulumi-{self.stack.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as handle:
            handle.write(run.output)
        return run

    def installed_namespaces(self) -> list[str]:
        """The namespaces of the charts this rehearsal installs (none without real nodes): the controllers', the
        object store's, CloudNativePG's and KServe's."""
        from trainyard.manifests import installs, mlflow, object_store, serving

        releases = [*installs.releases(self.config), *object_store.build(self.config).releases,
                    *(mlflow.releases(self.config) if self.config.mlflow.enabled else []),
                    *([serving.chart_release(self.config)] if self.config.serving is not None else [])]
        return sorted({r.namespace for r in releases if not r.external})

    def object_store_namespace(self) -> str | None:
        """The object store's namespace when its server runs here (its chart installed), else None."""
        from trainyard.manifests import object_store

        installed = [r for r in object_store.build(self.config).releases if not r.external]
        return installed[0].namespace if installed else None

    def provisioning_jobs(self) -> list[Manifest]:
        from trainyard.manifests.object_store import PROVISIONER_LABEL

        namespace = self.object_store_namespace()
        return self.kube.items("jobs.batch", namespace, selector=f"{PROVISIONER_LABEL}=true") if namespace else []

    def postgres_clusters(self) -> list[tuple[str, str]]:
        """(namespace, name) of the CloudNativePG Clusters the stack declares where their operator runs here."""
        from trainyard.manifests import mlflow

        if not self.config.mlflow.enabled or "cnpg" in self.config.rehearsal.external_controllers:
            return []
        return [(self.config.mlflow.namespace, mlflow.CLUSTER)]

    def postgres_problems(self) -> list[str]:
        """Why a Cluster of ``postgres_clusters`` is not Ready with every instance Running on the real node."""
        found = []
        for namespace, name in self.postgres_clusters():
            try:
                cluster = self.kube.get("clusters.postgresql.cnpg.io", name, namespace)
            except KubeError:
                found.append(f"Cluster {namespace}/{name}: not found")
                continue
            status = cluster.get("status", {})
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
            if not ready:
                found.append(f"Cluster {namespace}/{name}: {status.get('phase', 'no phase yet')}"
                             f" ({status.get('phaseReason', '')}), {status.get('readyInstances', 0)}/"
                             f"{cluster['spec'].get('instances')} instances ready")
            for pod in self.kube.items("pods", namespace, selector=f"cnpg.io/cluster={name}"):
                where = pod["spec"].get("nodeName")
                if where not in (None, REAL_NODE):
                    found.append(f"{namespace}/{pod['metadata']['name']} on {where}, not the real node {REAL_NODE}")
        return found

    def wait_platform_ready(self, timeout: float = 600) -> str:
        """Every Deployment the installed charts made is Available, every pod of theirs Ready, on a real node, the
        object store's provisioning Job (where the object store runs here) Complete, and every PostgreSQL Cluster the
        stack declares Ready there; returns the pods as ``kubectl get pods -o wide`` lists them, and the Job."""
        namespaces = self.installed_namespaces()
        store = self.object_store_namespace()

        def problems() -> list[str]:
            found = []
            if store is not None:
                found += self._provisioning_problems(store)
            for namespace in namespaces:
                deployments = self.kube.items("deployments", namespace)
                if not deployments:
                    found.append(f"{namespace}: no Deployment yet")
                for deployment in deployments:
                    status, wanted = deployment.get("status", {}), deployment["spec"].get("replicas", 1)
                    if status.get("availableReplicas", 0) < wanted:
                        found.append(f"{namespace}/{deployment['metadata']['name']}: "
                                     f"{status.get('availableReplicas', 0)}/{wanted} available")
                for pod in self.kube.items("pods", namespace):
                    if pod["spec"].get("nodeName") not in (None, REAL_NODE):
                        found.append(f"{namespace}/{pod['metadata']['name']} on {pod['spec'].get('nodeName')}, "
                                     f"not the real node {REAL_NODE}")
            return found + (self.postgres_problems() + self.monitoring_problems() if not found else [])

        try:
            wait_until("the platform's pods to be Ready on the real node", lambda: not problems(), timeout)
        except TimeoutError:
            raise ClusterError("the platform is not Ready: " + "; ".join(problems() + self.pods_not_ready())) from None
        shown = [self.kube.run("get", "pods", "-n", namespace, "-o", "wide").stdout.rstrip()
                 for namespace in [*namespaces, *self._postgres_namespaces()]]
        if store is not None:
            shown.append(self.kube.run("get", "jobs", "-n", store).stdout.rstrip())
        if self.monitoring_wanted():
            shown.append(self.kube.run("get", "pods", "-A", "-o", "wide", "-l",
                                       "app.kubernetes.io/name in (prometheus-operator, prometheus)").stdout.rstrip())
        return "\n".join(shown)

    def pods_not_ready(self) -> list[str]:
        """Each pod of the installed charts' namespaces (and the stack's PostgreSQL Clusters') that is not Ready, and
        why (``kube.pod_not_ready``): what a failed ``pulumi up`` or readiness wait prints next to its own error. Empty
        without real nodes (nothing is installed) or when the API server does not answer (the error said so)."""
        if not self.real_nodes:
            return []
        found = []
        try:
            for namespace in sorted({*self.installed_namespaces(), *self._postgres_namespaces()}):
                events = self.kube.items("events", namespace)
                found += [why for pod in self.kube.items("pods", namespace)
                          if (why := pod_not_ready(pod, events)) is not None]
        except (KubeError, ClusterError) as exc:
            return [f"(the pods could not be listed: {exc})"]
        return found

    def _postgres_namespaces(self) -> list[str]:
        return sorted({namespace for namespace, _ in self.postgres_clusters()})

    def _provisioning_problems(self, namespace: str) -> list[str]:
        """Why the object store's provisioning Job is not Complete (empty once it is); a failed one with its log."""
        jobs = self.provisioning_jobs()
        if not jobs:
            return [f"{namespace}: no provisioning Job yet"]
        found = []
        for job in jobs:
            conditions = {c["type"]: c for c in job.get("status", {}).get("conditions", []) if c.get("status") == "True"}
            name = job["metadata"]["name"]
            if "Failed" in conditions:
                log = self.kube.run("logs", f"job/{name}", "-n", namespace, "--tail=20", check=False)
                found.append(f"{namespace}/{name} failed ({conditions['Failed'].get('reason')}): "
                             f"{(log.stdout or log.stderr).strip()[-1500:]}")
            elif "Complete" not in conditions:
                found.append(f"{namespace}/{name}: not complete ({job.get('status', {}).get('failed', 0)} failed runs)")
        return found

    def deployed_digest(self) -> str:
        return hashlib.sha256(self.stack_file.read_bytes()).hexdigest()

    def deploy_if_changed(self) -> EngineRun | None:
        """Deploy unless exactly this rehearsal stack file was deployed last (scenarios share one deployment)."""
        marker = self.settings.state_dir / f"deployed.{self.stack.name}.sha256"
        digest = self.deployed_digest()
        if marker.exists() and marker.read_text() == digest:
            return None
        marker.unlink(missing_ok=True)
        run = self.deploy()
        if run.returncode == 0:
            marker.write_text(digest)
        return run

    # ------------------------------------------------------------------ jobs

    def trainjob(self, job: Job) -> Manifest:
        return trainjob_for(self.config, job)

    def submit(self, job: Job) -> Manifest:
        """Create ``job``'s TrainJob (as the tenant's SDK does, where the scenario says so); the created object."""
        if job.submitted_by == "sdk":
            self.tenant_sdk(job.tenant).submit(self.config, job)
            created: Manifest = self.kube.get("trainjobs.trainer.kubeflow.org", job.name, self.namespace_of(job.tenant))
            return created
        return self.kube.create(self.trainjob(job))

    def tenant_sdk(self, tenant: str) -> TenantSdk:
        """The Kubeflow SDK as a member of ``tenant`` (one client per tenant, made on first use)."""
        from trainyard.rehearsal.sdk import TenantSdk

        clients: dict[str, TenantSdk] = self.__dict__.setdefault("_sdk_clients", {})
        if tenant not in clients:
            clients[tenant] = TenantSdk(self.tenant_kubeconfig(tenant), self.namespace_of(tenant))
        return clients[tenant]

    def namespace_of(self, tenant: str) -> str:
        return next(t.namespace_name for t in self.config.tenants if t.name == tenant)

    def tenant_kubeconfig(self, tenant: str, user: str | None = None) -> Path:
        """A kubeconfig for a member of ``tenant``: a user in the tenant's groups, nothing more (no impersonation,
        no admin rights), so its tools (kubectl, the Kubeflow SDK) meet exactly the tenant's RBAC."""
        found = next((t for t in self.config.tenants if t.name == tenant), None)
        if found is None:
            raise ClusterError(f"tenant {tenant!r} is not in the stack ({', '.join(t.name for t in self.config.tenants)})")
        if not found.groups:
            raise ClusterError(f"tenant {tenant!r} binds no groups (tenants[].groups): no user can act as it")
        user = user or f"{tenant}-member"
        return self.control_plane.user_kubeconfig(user, found.groups, self.settings.state_dir / "tenants" / f"{user}.kubeconfig")

    def workloads(self, namespace: str | None = "*") -> list[Manifest]:
        return self.kube.items("workloads.kueue.x-k8s.io", namespace)

    def trainjobs(self, namespace: str | None = "*") -> list[Manifest]:
        return self.kube.items("trainjobs.trainer.kubeflow.org", namespace)

    def wait_finished(self, names: Iterable[str], namespace: str, timeout: float = 120) -> None:
        wanted = set(names)

        def done() -> bool:
            complete = {t["metadata"]["name"] for t in self.trainjobs(namespace)
                        if any(c["type"] == "Complete" and c["status"] == "True"
                               for c in t.get("status", {}).get("conditions", []))}
            return wanted <= complete

        try:
            wait_until(f"TrainJobs {', '.join(sorted(wanted))} to complete", done, timeout, interval=1)
        except TimeoutError as error:
            raise TimeoutError(f"{error}\n{self.where_jobs_stand(wanted, namespace)}") from None

    def where_jobs_stand(self, names: Iterable[str], namespace: str) -> str:
        """Where each TrainJob stands, for a timeout's message: its conditions, its Workload's, its pods' phase and
        node (the rehearsal's failures are read from this, not guessed)."""
        def conditions(obj: Manifest) -> str:
            found = obj.get("status", {}).get("conditions", [])
            return ", ".join(f"{c['type']}={c['status']}" + (f" ({c.get('reason')})" if c.get("reason") else "")
                             for c in found) or "none"

        lines = []
        try:
            trainjobs = {t["metadata"]["name"]: t for t in self.trainjobs(namespace)}
            workloads = self.workloads(namespace)
            pods = self.kube.items("pods", namespace)
            jobsets = {j["metadata"]["name"]: j for j in self.kube.items("jobsets.jobset.x-k8s.io", namespace)}
            jobs = self.kube.items("jobs.batch", namespace)
            warnings = [e for e in self.kube.items("events", namespace) if e.get("type") == "Warning"]
        except KubeError as error:
            return f"  (could not read the jobs: {error})"
        for name in sorted(names):
            trainjob = trainjobs.get(name)
            if trainjob is None:
                lines.append(f"  TrainJob {namespace}/{name}: not found")
                continue
            lines.append(f"  TrainJob {namespace}/{name}: {conditions(trainjob)}")
            for workload in workloads:
                if any(o.get("name") == name for o in workload["metadata"].get("ownerReferences", [])):
                    lines.append(f"    Workload {workload['metadata']['name']}: {conditions(workload)}")
            if name in jobsets:
                lines.append(f"    JobSet {name}: {conditions(jobsets[name])}; child Jobs: " + (", ".join(
                    f"{j['metadata']['name']} ({conditions(j)})" for j in jobs
                    if j["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name") == name) or "none"))
            # What a controller was refused (a quota, a webhook) is in its Warning events, e.g. PVCCreationFailed;
            # the same refusal repeated is one line with its count.
            seen: dict[tuple[str, str, str, str], int] = {}
            for event in warnings:
                involved = event.get("involvedObject", {})
                if involved.get("name") == name or str(involved.get("name", "")).startswith(f"{name}-"):
                    key = (str(involved.get("kind")), str(involved.get("name")), str(event.get("reason")),
                           str(event.get("message", ""))[:300])
                    seen[key] = seen.get(key, 0) + int(event.get("count") or 1)
            lines += [f"    event {kind}/{obj} {reason} x{count}: {message}"
                      for (kind, obj, reason, message), count in seen.items()]
            for pod in pods:
                if pod["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name") == name:
                    status = pod.get("status", {})
                    lines.append(f"    pod {pod['metadata']['name']}: {status.get('phase')} on "
                                 f"{pod.get('spec', {}).get('nodeName') or '(unbound)'}; {conditions(pod)}")
        return "\n".join(lines)

    def reset_jobs(self, timeout: float = 120) -> None:
        """Delete every TrainJob in the tenant namespaces and wait until their Workloads and pods are gone."""
        for tenant in self.config.tenants:
            self.kube.delete("trainjobs.trainer.kubeflow.org", "--all", namespace=tenant.namespace_name)

        def clean() -> bool:
            namespaces = {t.namespace_name for t in self.config.tenants}
            return not any(w["metadata"]["namespace"] in namespaces for w in self.workloads()) and not any(
                p["metadata"]["namespace"] in namespaces for p in self.kube.items("pods"))

        wait_until("the previous scenario's jobs to be gone", clean, timeout, interval=1)

    def run_scenario(self, scenario: Scenario, out: Any = None) -> list[str]:
        """Submit the scenario's jobs on time, observe until all finished or the timeout; the unmet expectations."""
        out = out or sys.stdout
        observer = Observer(self.kube, self.config, scenario)
        jobs = sorted(scenario.jobs, key=lambda j: seconds(j.submit_after))
        start = time.monotonic()
        deadline = start + seconds(scenario.timeout)
        while True:
            now = time.monotonic()
            for job in jobs:
                history = observer.history[job.name]
                if history.submitted_at is None and now - start >= seconds(job.submit_after):
                    self.submit(job)
                    history.submitted_at = time.monotonic()
            observer.observe()
            everything_submitted = all(h.submitted_at is not None for h in observer.history.values())
            if everything_submitted and all(h.finished_at is not None or h.failed for h in observer.history.values()):
                break
            if now >= deadline:
                break
            time.sleep(1)
        print(f"\n## {scenario.name} ({self.stack.name}, {time.monotonic() - start:.0f}s)\n\n{scenario.description}\n",
              file=out)
        print(table(observer), file=out)
        failures = check(observer, scenario.expect)
        for failure in failures:
            print(f"EXPECTATION NOT MET: {failure}", file=out)
        if not failures:
            print(f"all {len(scenario.expect)} expectations met", file=out)
        self.last_observer = observer
        return failures


def host_processes() -> tuple[str, ...]:
    """The pid-file names of the rehearsal's API host processes (``api_loop.py``), for ``stop`` and ``status``."""
    from trainyard.rehearsal.cert_standin import PROCESS as CERT_STANDIN
    from trainyard.rehearsal.local_provisioner import PROCESS as LOCAL_PROVISIONER

    return CERT_STANDIN, LOCAL_PROVISIONER


def stop_everything(settings: Settings) -> None:
    """Stop every process of the cluster by its pid file (the order matters only for the webhooks, removed before)."""
    from trainyard.rehearsal.node import stop_real_nodes

    # Real nodes first, while the API server still answers (their pods are deleted through it): nothing of
    # them may be left mounted under the state directory that --purge deletes next.
    stop_real_nodes(settings)
    processes = Processes(settings)
    for name in ("kueue", "trainer", "jobset", "kwok", *host_processes(), *reversed(CONTROL_PLANE)):
        processes.stop(name)
