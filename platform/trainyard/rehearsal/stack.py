"""The rehearsal overlay: any stack, prod included, made deployable to the rehearsal cluster, without editing its file.

``rehearsal_platform`` takes the stack's ``trainyard:platform`` value as written and changes only:

- ``cluster.context`` -> ``trainyard-local`` (and no kubeconfig path): the engine can reach nothing else;
- ``rehearsal.external_controllers`` -> every controller a chart would install: their charts would start
  Deployments that nothing runs (no container runtime) and register webhooks at Services with no
  endpoints; the rehearsal runs Kueue, JobSet and Trainer as local processes instead (``controllers.py``),
  and the other charts' objects (object store, MLflow, KServe, cert-manager) are simply not installed;
- every GPU and CPU pool ``fake: true``: its nodes are fake Node objects shaped like the pool (``manifests.rehearsal``);
- ``lifecycle.protect_data: false``: a rehearsal is disposable (CRDs and namespaces are still retained on delete);

With real nodes (``InCluster``: the charts whose pods the rehearsal can run, from images built here: Kueue, JobSet,
Trainer, CloudNativePG, the object store's SeaweedFS and KServe, whose webhook certificate the rehearsal's
cert-manager stand-in issues while cert-manager stays external: ``cert_standin.py``) it changes three more things,
and those charts are installed by ``pulumi up`` like on any cluster:

- ``rehearsal.external_controllers`` -> every chart controller *but* those;
- ``images.registry_mirror`` -> ``trainyard.local/mirror/`` (containerd maps that host to the nodes' loopback
  registry: ``rehearsal/images.py``) and ``images.lock_file`` -> the rehearsal's own lock in the cluster's state
  directory, which the image factory fills with the digests it pushed (the repository's lock is not touched);
  that mirror is added to ``runtimes.approved_registries``, as a site's mirror lies under its approved registry
  (staging and prod: ``registry.trainyard.internal/mirror/`` under ``registry.trainyard.internal/``): KServe's pod
  mutator puts the storage initializer, from the mirror, into every predictor pod of a tenant, and the stack's
  ``trainyard-pod-images`` policy refuses a tenant pod with an image from anywhere else;
- ``charts`` -> the same loopback registry as the OCI chart mirror (``rehearsal/mirror.py`` pushes the charts);
- ``system_pods.node_selector`` -> the real nodes' label, so that no controller lands on a fake GPU node;
- the first CPU pool ``fake: false``: the real node is its first node (``real_node_pool``; the session labels it as
  the pool's node), so that a CPU-only TrainJob through a tenant's queue runs its containers there (the lab, live);


then a scenario's own ``platform:`` overrides (merged; lists of named items merge by ``name``). The result
is validated like any stack and written to the cluster's state directory, where ``tools/pulumi-local.sh``
deploys it (``TRAINYARD_STACK_FILE``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import yaml

from trainyard import yamlio
from trainyard.config import ConfigError, PlatformConfig, validate_platform
from trainyard.config.load import CONFIG_KEY
from trainyard.config.model import Rehearsal
from trainyard.rehearsal.settings import CONTEXT, REAL_NODE_LABELS


def _chart_controllers() -> list[str]:
    """Every name ``rehearsal.external_controllers`` accepts (one source: the config model's field)."""
    field_type = Rehearsal.model_fields["external_controllers"].annotation  # tuple[Literal[...], ...]
    return [str(name) for name in get_args(get_args(field_type)[0])]


EXTERNAL = _chart_controllers()
# The mirror prefix the rehearsal's images are pushed and pulled under (MIRROR_HOST of rehearsal/images.py).
REHEARSAL_MIRROR = "trainyard.local/mirror/"


@dataclass(frozen=True)
class InCluster:
    """Controllers whose charts the rehearsal installs (their pods run on real nodes), and the lock of their images."""

    controllers: tuple[str, ...]
    lock_file: Path
    registry: str = "127.0.0.1:25000"  # the real nodes' loopback registry (host:port): charts and images

    def __post_init__(self) -> None:
        unknown = sorted(set(self.controllers) - set(EXTERNAL))
        if unknown:
            raise ValueError(f"not a chart controller: {', '.join(unknown)} (one of {', '.join(EXTERNAL)})")


def merge(base: Any, override: Any) -> Any:
    """``override`` over ``base``: mappings merge key by key, lists of named mappings merge by name, the rest replaces."""
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if (isinstance(base, list) and isinstance(override, list) and override
            and all(isinstance(i, Mapping) and "name" in i for i in [*base, *override])):
        merged = [copy.deepcopy(i) for i in base]
        index = {i["name"]: n for n, i in enumerate(merged)}
        for item in override:
            if item["name"] in index:
                merged[index[item["name"]]] = merge(merged[index[item["name"]]], item)
            else:
                merged.append(copy.deepcopy(item))
        return merged
    return copy.deepcopy(override)


def rehearsal_platform(platform: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                       in_cluster: InCluster | None = None) -> dict[str, Any]:
    out: dict[str, Any] = copy.deepcopy(dict(platform))
    cluster = {k: v for k, v in (out.get("cluster") or {}).items() if k != "kubeconfig"}
    out["cluster"] = {**cluster, "context": CONTEXT}
    running = in_cluster.controllers if in_cluster else ()
    out["rehearsal"] = {**(out.get("rehearsal") or {}),
                        "external_controllers": [name for name in EXTERNAL if name not in running]}
    if in_cluster is not None:
        out["images"] = {**(out.get("images") or {}), "registry_mirror": REHEARSAL_MIRROR,
                         "lock_file": str(in_cluster.lock_file)}
        runtimes = out.get("runtimes") or {}
        approved = list(runtimes.get("approved_registries") or [])
        out["runtimes"] = {**runtimes, "approved_registries": [*approved, *([REHEARSAL_MIRROR]
                                                                           if REHEARSAL_MIRROR not in approved else [])]}
        out["charts"] = {"mirror": f"oci://{in_cluster.registry}/charts", "plain_http": True}
        out["system_pods"] = {**(out.get("system_pods") or {}), "node_selector": dict(REAL_NODE_LABELS)}
    out["gpu_pools"] = [{**pool, "fake": True} for pool in out.get("gpu_pools") or []]
    if out.get("cpu_pools"):
        out["cpu_pools"] = [{**pool, "fake": in_cluster is None or index > 0}
                            for index, pool in enumerate(out["cpu_pools"])]
    out["lifecycle"] = {**(out.get("lifecycle") or {}), "protect_data": False}
    merged: dict[str, Any] = merge(out, dict(overrides or {}))
    return merged


def real_node_pool(config: PlatformConfig) -> str | None:
    """The CPU pool the rehearsal's real node serves (the overlay's first CPU pool, ``fake: false``); None if none."""
    return next((pool.name for pool in config.cpu_pools if not pool.fake), None)


def read_platform(stack_file: Path) -> dict[str, Any]:
    """The stack file's ``trainyard:platform`` value as written (the file is validated separately)."""
    document = yamlio.safe_load(stack_file.read_text(encoding="utf-8"))
    platform = document["config"][CONFIG_KEY]
    if isinstance(platform, Mapping) and set(platform) == {"value"}:
        platform = platform["value"]
    return dict(platform)


def write_rehearsal_stack(stack_file: Path, target: Path, overrides: Mapping[str, Any] | None = None,
                          source: str | None = None, in_cluster: InCluster | None = None) -> PlatformConfig:
    """Validate the overlaid stack and write it to ``target``; raises ConfigError naming ``source``."""
    platform = rehearsal_platform(read_platform(stack_file), overrides, in_cluster)
    shown = source or f"{stack_file} (rehearsal overlay)"
    config = validate_platform(platform, shown)
    target.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# Generated by `trainyard rehearse` from {stack_file}: the rehearsal overlay "
              "(trainyard/rehearsal/stack.py) applied. Do not edit.\n")
    target.write_text(header + yaml.safe_dump({"config": {CONFIG_KEY: platform}}, sort_keys=False))
    return config


__all__ = ["REHEARSAL_MIRROR", "ConfigError", "InCluster", "merge", "read_platform", "real_node_pool",
           "rehearsal_platform", "write_rehearsal_stack"]
