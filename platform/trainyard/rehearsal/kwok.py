"""kwok: the fake GPU nodes' kubelet. It keeps their leases and Ready condition fresh and moves pods through their lifecycle.

Standalone ``kwok`` v0.8.0 has no built-in stages (only kwokctl injects them; Ref: kwok
pkg/kwokctl/runtime/cluster.go, pkg/kwok/cmd/root.go "no stages found"), so the rehearsal renders
kwok's own ``kustomize/stage/fast`` set (node-initialize, node-heartbeat-with-lease, pod-ready,
pod-complete, pod-delete) and changes two stages:

- **pod-complete** waits ``RUN_FOR_ANNOTATION`` (a Go duration, e.g. ``90s``) before it marks a
  pod Succeeded, the way kwok's "general" stage set reads it
  (Ref: kustomize/stage/pod/general/pod-complete.yaml); without the annotation, ``DEFAULT_RUN_FOR``.
  As upstream, only pods owned by a Job complete (a JobSet's pods are).
- **pod-ready** skips pods annotated ``NEVER_READY_ANNOTATION``: they stay Pending on their node,
  which is what a hung image pull or a crash-looping init looks like to Kueue's waitForPodsReady.

kwok only manages nodes annotated ``kwok.x-k8s.io/node: fake`` (``manifests.rehearsal`` sets it).
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from trainyard.manifests.rehearsal import KWOK_NODE_ANNOTATION
from trainyard.rehearsal.kube import Kube, Manifest
from trainyard.rehearsal.processes import Processes
from trainyard.rehearsal.settings import HOST, Settings

RUN_FOR_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
NEVER_READY_ANNOTATION = "trainyard.dev/never-ready"
DEFAULT_RUN_FOR_MS = 1000


def rehearsal_stages(fast_stages: list[Manifest]) -> list[Manifest]:
    """kwok's fast stages with the run-time delay on pod-complete and the never-ready escape on pod-ready."""
    out = []
    names = set()
    for upstream in fast_stages:
        stage = copy.deepcopy(upstream)
        name = stage["metadata"]["name"]
        names.add(name)
        if name == "pod-complete":
            stage["spec"]["delay"] = {
                "durationMilliseconds": DEFAULT_RUN_FOR_MS,
                "durationFrom": {"jq": {"expression": f'.metadata.annotations["{RUN_FOR_ANNOTATION}"]'}},
            }
        if name == "pod-ready":
            stage["spec"]["selector"]["matchExpressions"].append(
                {"key": f'.metadata.annotations["{NEVER_READY_ANNOTATION}"]', "operator": "DoesNotExist"})
        out.append(stage)
    missing = {"node-initialize", "pod-ready", "pod-complete", "pod-delete"} - names
    if missing:
        raise ValueError(f"kwok's fast stage set lacks {', '.join(sorted(missing))}")
    return out


class Kwok:
    def __init__(self, settings: Settings, kube: Kube) -> None:
        self.settings = settings
        self.kube = kube
        self.processes = Processes(settings)

    def stages_file(self) -> Path:
        return self.settings.state_dir / "kwok-stages.yaml"

    def up(self) -> None:
        stages = rehearsal_stages(self.kube.kustomize(self.settings.share("kwok") / "kustomize" / "stage" / "fast"))
        self.stages_file().write_text(yaml.safe_dump_all(stages, sort_keys=False))
        port = self.settings.ports.kwok
        key, value = KWOK_NODE_ANNOTATION
        # Ref: kwok v0.8.0 pkg/kwok/cmd/root.go (flags)
        self.processes.start("kwok", [
            str(self.settings.binary("kwok")), "--kubeconfig", str(self.settings.kubeconfig),
            "--config", str(self.stages_file()), "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={key}={value}", "--node-lease-duration-seconds=40",
            "--cidr=10.244.0.0/16", f"--node-ip={HOST}", f"--node-port={port}", f"--server-address={HOST}:{port}"])

    def running(self) -> bool:
        return self.processes.running("kwok")

    def down(self) -> None:
        self.processes.stop("kwok")
