"""Chart truth: does every chart a stack installs do what Trainyard's values say?

For each release in ``RenderedPlatform.releases`` (every concern's charts, so a chart added
later is covered by being declared), rendered with ``trainyard.charts``:

- images: every container image comes from the stack's mirror (``images.registry_mirror``)
  and is pinned (a tag other than latest/main/master, or a digest); the component's
  catalog image is among them at its pinned tag;
- CRDs: nothing the chart installs is a CRD (the post-renderer drops them), each dropped
  CRD is one Trainyard declares itself, and the post-renderer run by helm (as Pulumi runs
  it) gives the same output as the in-process filter;
- values: every leaf value Trainyard sets changes the output when changed
  (``chart_probes.probe_values``); a path the chart does not read is reported as unread;
- modes: per chart, what Trainyard switches (``MODE_CHECKS``: Kueue's manager
  configuration, Trainer's default runtimes and bundled JobSet off, MLflow's workers, job runner and liveness);
- schemas: every installed object passes the strict Kubernetes schemas or the upstream CRD
  schema of its kind.

``trainyard charts STACK`` (``review/charts_cli.py``) prints the summary; tests/charts asserts on the same report.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainyard import chart_probes, charts, post_render, yamlio
from trainyard.config.model import PlatformConfig
from trainyard.manifests import RenderedPlatform, installs, kueue, object_store
from trainyard.manifests.chart_release import ChartRelease
from trainyard.manifests.meta import object_id
from trainyard.supply.chart_images import CR_IMAGE_FIELDS

if TYPE_CHECKING:
    # Imported where used: jsonschema costs `trainyard charts` ~0.1 s before it needs it.
    from trainyard.schemas import Validator

UNPINNED_TAGS = frozenset({"", "latest", "main", "master"})
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")




def images_of(obj: Any) -> Iterator[str]:
    """Every ``image`` of a container in an object (pod templates at any depth, CR fields shaped like pods)."""
    if isinstance(obj, dict) and (obj.get("apiVersion"), obj.get("kind")) in CR_IMAGE_FIELDS:
        value: Any = obj
        for key in CR_IMAGE_FIELDS[(obj["apiVersion"], obj["kind"])]:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str):
            yield value
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in CONTAINER_LISTS and isinstance(value, list):
                yield from (c["image"] for c in value if isinstance(c, dict) and isinstance(c.get("image"), str))
            else:
                yield from images_of(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from images_of(item)


def image_tag(reference: str) -> str:
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def expected_controller_image(config: PlatformConfig, release: ChartRelease) -> str | None:
    """The catalog image of the release's component as the stack pulls it (before any lock digest); None if none."""
    from trainyard.supply.lock import ImageLock

    try:
        image = installs.controller_image(config, release.component, ImageLock())
    except (AttributeError, KeyError):
        return None
    return image.tagged


def image_problems(config: PlatformConfig, release: ChartRelease, images: list[str]) -> list[str]:
    problems: list[str] = []
    mirror = config.images.registry_mirror
    for image in images:
        if mirror and not image.startswith(mirror):
            problems.append(f"image {image} is not from the stack's mirror {mirror}")
        if "@sha256:" not in image and image_tag(image) in UNPINNED_TAGS:
            problems.append(f"image {image} is not pinned (tag {image_tag(image) or 'missing'})")
    expected = expected_controller_image(config, release)
    if expected is not None and not any(i == expected or i.startswith(f"{expected}@") for i in images):
        problems.append(f"controller image {expected} (catalog, pinned) is not in the chart output")
    return problems


def crd_problems(platform: RenderedPlatform, rendered: charts.RenderedChart) -> list[str]:
    """No CRD is installed by the chart; each one it renders is declared by Trainyard with the same spec.

    The spec is compared where the chart is installed: on a stack that marks the controller
    external nothing serves the chart's webhooks, and Trainyard leaves them out of its CRDs.
    """
    declared = {c["metadata"]["name"]: c for c in platform.crds}
    problems = [f"chart installs {object_id(o)}: the post-renderer must drop it" for o in rendered.objects
                if o.get("kind") in post_render.DROPPED_KINDS]
    for crd in rendered.dropped:
        name = crd["metadata"]["name"]
        if name not in declared:
            problems.append(f"chart renders CRD {name}, which the post-renderer drops but Trainyard does not declare")
        elif not rendered.release.external and crd["spec"] != declared[name]["spec"]:
            fields = sorted(k for k in crd["spec"].keys() | declared[name]["spec"].keys()
                            if crd["spec"].get(k) != declared[name]["spec"].get(k))
            problems.append(f"CRD {name}: Trainyard's spec differs from the chart's in {', '.join(fields)}")
    return problems


def _kueue_modes(config: PlatformConfig, rendered: charts.RenderedChart) -> list[str]:
    # Ref: kueue charts/kueue/templates/manager/manager-config.yaml (ConfigMap <fullname>-manager-config,
    # key controller_manager_config.yaml from managerConfig.controllerManagerConfigYaml).
    maps = [o for o in rendered.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-manager-config")]
    if len(maps) != 1:
        return [f"expected one Kueue manager ConfigMap, found {len(maps)}"]
    got = yamlio.safe_load(maps[0]["data"]["controller_manager_config.yaml"])
    want = dict(kueue.controller_configuration(config))
    # The chart adds internal certificate management when the configuration has none (and
    # cert-manager is off). Ref: kueue v0.19.2 charts/kueue/templates/manager/manager-config.yaml.
    want.setdefault("internalCertManagement", {"enable": True, "webhookServiceName": kueue.WEBHOOK_SERVICE,
                                               "webhookSecretName": "kueue-webhook-server-cert"})
    return [] if got == want else [f"Kueue manager configuration differs from the rendered Configuration: {got} != {want}"]


def _trainer_modes(config: PlatformConfig, rendered: charts.RenderedChart) -> list[str]:
    problems = [f"Trainer default runtime installed: {object_id(o)}" for o in rendered.objects
                if o["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime")]
    # The bundled JobSet subchart (jobset.install) would bring a second JobSet controller.
    problems += [f"bundled JobSet installed: {object_id(o)}" for o in rendered.objects
                 if o["kind"] == "Deployment" and "jobset" in o["metadata"]["name"]]
    return problems + _data_cache_modes(config, rendered)


def _data_cache_modes(config: PlatformConfig, rendered: charts.RenderedChart) -> list[str]:
    """With the data cache on, one LWS controller (the subchart's) and the initializer's ClusterRole; off, neither.

    Ref: charts/kubeflow-trainer templates/data-cache/cluster-role.yaml; lws templates/manager/deployment.yaml
    (``<fullname>-controller-manager``; fullname ``<release>-lws``: the parent's ``dataCache.lws.fullnameOverride``
    is not a subchart value, which Helm reads under ``lws:`` only).
    """
    from trainyard.manifests.data_cache import CHART_CLUSTER_ROLE

    lws = [o for o in rendered.objects
           if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("lws-controller-manager")]
    role = [o for o in rendered.objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == CHART_CLUSTER_ROLE]
    if not config.data_cache.enabled:
        return [f"data cache off, but the chart installs {object_id(o)}" for o in lws + role]
    problems = [] if len(lws) == 1 else [f"data cache on: expected one LWS controller Deployment, found {len(lws)}"]
    return problems + ([] if role else [f"data cache on: the chart renders no ClusterRole {CHART_CLUSTER_ROLE}"])


def _seaweedfs_modes(config: PlatformConfig, rendered: charts.RenderedChart) -> list[str]:
    """The all-in-one server reads the master.toml Trainyard writes: one volume per growth (manifests/object_store.py
    SEAWEEDFS_VOLUME_GROWTH). Ref: seaweedfs chart 4.44.0 templates/master/master-configmap.yaml (``master.config``
    as ``master.toml``), templates/all-in-one/all-in-one-deployment.yaml (mounted at /etc/seaweedfs/master.toml)."""
    maps = [o for o in rendered.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-master-config")]
    if len(maps) != 1:
        return [f"expected one SeaweedFS master ConfigMap, found {len(maps)}"]
    try:
        growth = tomllib.loads(maps[0]["data"]["master.toml"]).get("master", {}).get("volume_growth", {})
    except (KeyError, tomllib.TOMLDecodeError) as exc:
        return [f"the master ConfigMap's master.toml does not parse: {exc}"]
    problems = [f"master.volume_growth.{key} is {growth.get(key)!r}, not {want}"
                for key, want in object_store.SEAWEEDFS_VOLUME_GROWTH.items() if growth.get(key) != want]
    mounts = [m for o in rendered.objects if o["kind"] == "Deployment"
              for c in o["spec"]["template"]["spec"]["containers"] for m in c.get("volumeMounts", [])
              if m.get("mountPath") == "/etc/seaweedfs/master.toml"]
    return problems + ([] if mounts else ["no container mounts /etc/seaweedfs/master.toml"])


def _mlflow_modes(config: PlatformConfig, rendered: charts.RenderedChart) -> list[str]:
    """The server runs the stack's worker count, its job runner as the stack says, and a liveness probe that outlasts
    a slow start (manifests/mlflow.py LIVENESS_GRACE_SECONDS). Ref: charts/mlflow 1.11.5 templates/deployment.yaml
    (container ``mlflow``: extraArgs as ``--<kebab-key>=<value>``, extraEnvVars, livenessProbe)."""
    from trainyard.manifests.mlflow import LIVENESS_GRACE_SECONDS

    servers = [c for o in rendered.objects if o["kind"] == "Deployment"
               for c in o["spec"]["template"]["spec"]["containers"] if c["name"] == "mlflow"]
    if len(servers) != 1:
        return [f"expected one MLflow server container, found {len(servers)}"]
    server, problems = servers[0], []
    if f"--workers={config.mlflow.workers}" not in server.get("args", []):
        problems.append(f"the server's args lack --workers={config.mlflow.workers}: {server.get('args')}")
    env = {e["name"]: e.get("value") for e in server.get("env", [])}
    jobs = "true" if config.mlflow.server_jobs else "false"
    if env.get("MLFLOW_SERVER_ENABLE_JOB_EXECUTION") != jobs:
        problems.append(f"MLFLOW_SERVER_ENABLE_JOB_EXECUTION is {env.get('MLFLOW_SERVER_ENABLE_JOB_EXECUTION')!r}, "
                        f"not {jobs!r}")
    live = server.get("livenessProbe", {})
    grace = (live.get("initialDelaySeconds", 0)
             + live.get("periodSeconds", 10) * live.get("failureThreshold", 3))
    if grace < LIVENESS_GRACE_SECONDS:
        problems.append(f"the liveness probe restarts a server not healthy after {grace} s "
                        f"(under {LIVENESS_GRACE_SECONDS} s)")
    return problems


# Per chart name: what Trainyard switches on or off there. A chart added later adds its own.
MODE_CHECKS: dict[str, Callable[[PlatformConfig, charts.RenderedChart], list[str]]] = {
    "kueue": _kueue_modes,
    "kubeflow-trainer": _trainer_modes,
    "seaweedfs": _seaweedfs_modes,
    "mlflow": _mlflow_modes,
}


@dataclass
class ChartTruth:
    """The chart-truth report of one release of one stack."""

    stack: str
    release: ChartRelease
    rendered: charts.RenderedChart
    images: list[str]
    probes: chart_probes.ProbeReport
    problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.problems.values())


def check_release(stack: str, config: PlatformConfig, platform: RenderedPlatform, release: ChartRelease,
                  renderer: charts.ChartRenderer, validator: Validator) -> ChartTruth:
    from trainyard.schemas import SchemaNotFound

    rendered = renderer.render(release)
    images = sorted(set(images_of(list(rendered.objects))))
    probes = chart_probes.probe_values(renderer, release)
    via_helm = charts.parse_manifests(renderer.render_text(release, post_renderer=post_render.command()))
    # Custom resources a chart renders validate against the CRDs the stack declares, else the chart's own.
    for crd in (*rendered.dropped, *platform.crds):
        validator.add_crd(crd)
    schema: list[str] = []
    for obj in rendered.objects:
        try:
            schema += [str(e) for e in validator.errors(obj)]
        except SchemaNotFound as exc:
            schema.append(f"{object_id(obj)}: {exc}")
    modes = MODE_CHECKS.get(release.chart_name)
    return ChartTruth(stack, release, rendered, images, probes, problems={
        "images": image_problems(config, release, images),
        "crds": crd_problems(platform, rendered),
        "post-renderer": [] if via_helm == list(rendered.objects) else
                         ["helm running the post-renderer gives other objects than the in-process filter"],
        "unread values": [f"{p.path}: {p.evidence}" for p in probes.unread],
        "modes": modes(config, rendered) if modes else [],
        "schemas": schema,
    })


def format_summary(truth: ChartTruth) -> str:
    release, rendered = truth.release, truth.rendered
    kinds = ", ".join(f"{n} {k}" for k, n in rendered.kinds().items())
    lines = [
        f"{truth.stack} / {release.name}: {release.chart_name} {release.version} in {release.namespace}"
        f"{' (external on this stack: rendered, not installed)' if release.external else ''}",
        f"  objects: {len(rendered.objects)} ({kinds})",
        f"  CRDs dropped by the post-renderer (Trainyard declares them): {len(rendered.dropped)}; CRDs installed: "
        f"{sum(1 for o in rendered.objects if o.get('kind') in post_render.DROPPED_KINDS)}",
        f"  images: {', '.join(truth.images) or 'none'}",
        f"  values that took effect: {len(truth.probes.read)}/{len(truth.probes.probes)}; "
        f"unread value paths: {len(truth.probes.unread)}",
    ]
    lines += [f"    {p.path}: {p.evidence}" for p in truth.probes.probes]
    if rendered.stubs:
        lines.append(f"  dependencies stubbed (disabled, not in the mirror): {', '.join(rendered.stubs)}")
    for check, problems in truth.problems.items():
        lines += [f"  FAIL {check}: {p}" for p in problems]
    lines.append(f"  {'ok' if truth.ok else 'FAILED'}")
    return "\n".join(lines)
