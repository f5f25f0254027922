"""A thin client over the built ``kubectl``: JSON in, JSON out, errors that say what failed.

The rehearsal talks to its API server only through this (and ``kubectl`` only through it), so
every call uses the rehearsal's kubeconfig and the kubectl built with the API server, never an
ambient one.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from trainyard import yamlio

Manifest = dict[str, Any]
T = TypeVar("T")


# How long one kubectl call may take. Applying every CRD at once (KServe's and the GPU operator's are
# large) took over 120 s on a 2-core machine at load 25; TRAINYARD_KUBECTL_TIMEOUT overrides it.
def _kubectl_timeout() -> float:
    raw = os.environ.get("TRAINYARD_KUBECTL_TIMEOUT", "")
    return float(raw) if raw.replace(".", "", 1).isdigit() and float(raw) > 0 else 600.0


KUBECTL_TIMEOUT = _kubectl_timeout()


class KubeError(Exception):
    """A kubectl call that failed: the command and what the API server said."""


@dataclass(frozen=True)
class Kube:
    kubectl: Path
    kubeconfig: Path

    def run(self, *args: str, stdin: str | None = None, check: bool = True,
            timeout: float = KUBECTL_TIMEOUT) -> subprocess.CompletedProcess[str]:
        command = [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args]
        try:
            result = subprocess.run(command, input=stdin, capture_output=True, text=True,  # noqa: S603 - the built kubectl
                                    timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise KubeError(f"kubectl {' '.join(args)}: no answer in {timeout:.0f}s") from None
        if check and result.returncode != 0:
            raise KubeError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def get(self, resource: str, name: str | None = None, namespace: str | None = None) -> Any:
        """One object, or (without a name) the list; namespace ``"*"`` means every namespace."""
        args = ["get", resource, *([name] if name else [])]
        if namespace == "*":
            args.append("--all-namespaces")
        elif namespace:
            args += ["-n", namespace]
        return json.loads(self.run(*args, "-o", "json").stdout)

    def items(self, resource: str, namespace: str | None = "*", selector: str | None = None) -> list[Manifest]:
        args = ["get", resource, "-o", "json"]
        args += ["--all-namespaces"] if namespace == "*" else (["-n", namespace] if namespace else [])
        if selector:
            args += ["-l", selector]
        items: list[Manifest] = json.loads(self.run(*args).stdout)["items"]
        return items

    def exists(self, resource: str, name: str, namespace: str | None = None) -> bool:
        args = ["get", resource, name, "-o", "name", *(["-n", namespace] if namespace else [])]
        return self.run(*args, check=False).returncode == 0

    def apply(self, objects: Iterable[Manifest], field_manager: str, server_side: bool = True,
              timeout: float = 120, subresource: str | None = None) -> str:
        documents = "".join("---\n" + json.dumps(o) + "\n" for o in objects)
        if not documents:
            return ""
        args = ["apply", "-f", "-", f"--field-manager={field_manager}"]
        if server_side:
            args += ["--server-side", "--force-conflicts"]
        if subresource:
            args.append(f"--subresource={subresource}")
        return self.run(*args, stdin=documents, timeout=timeout).stdout

    def delete_objects(self, objects: Iterable[Manifest], timeout: float = 120) -> None:
        """Delete these objects (those already gone are fine) and wait until they are."""
        documents = "".join("---\n" + json.dumps(o) + "\n" for o in objects)
        if documents:
            self.run("delete", "-f", "-", "--ignore-not-found", "--wait=true", stdin=documents, timeout=timeout)

    def create(self, obj: Manifest) -> Manifest:
        created: Manifest = json.loads(self.run("create", "-f", "-", "-o", "json", stdin=json.dumps(obj)).stdout)
        return created

    def delete(self, resource: str, *names: str, namespace: str | None = None, wait: bool = False,
               selector: str | None = None) -> None:
        args = ["delete", resource, *names, "--ignore-not-found", f"--wait={str(wait).lower()}"]
        if namespace:
            args += ["-n", namespace]
        if selector:
            args += ["-l", selector]
        self.run(*args)

    def patch(self, resource: str, name: str, patch: Manifest | list[Manifest], namespace: str | None = None,
              subresource: str | None = None, kind: str = "merge") -> None:
        args = ["patch", resource, name, f"--type={kind}", "-p", json.dumps(patch)]
        if namespace:
            args += ["-n", namespace]
        if subresource:
            args.append(f"--subresource={subresource}")
        self.run(*args)

    def kustomize(self, directory: Path) -> list[Manifest]:
        """``kubectl kustomize DIR``: the upstream kustomizations, rendered as upstream's Makefiles do."""

        return [d for d in yamlio.safe_load_all(self.run("kustomize", str(directory)).stdout) if d]


def wait_until(what: str, check: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    """Poll ``check`` until it returns something other than None/False; TimeoutError names ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except KubeError:
            value = None
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def pod_not_ready(pod: Manifest, events: Iterable[Manifest] = ()) -> str | None:
    """Why ``pod`` is not Ready, in one line (None when it is, or when it finished): unscheduled, each container
    waiting (ImagePullBackOff, CrashLoopBackOff: with its last exit) or exited (the kubelet of 1.36 shows a container
    in its restart back-off so), running but not ready, and the pod's latest Warning events (a failed probe, a failed
    pull) from ``events``, the namespace's. What an admin asks first when a Deployment misses its readiness wait."""
    status = pod.get("status", {})
    phase = status.get("phase", "Pending")
    owners = pod["metadata"].get("ownerReferences") or []
    if phase in ("Succeeded", "Failed") and any(owner.get("kind") == "Job" for owner in owners):
        return None
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if conditions.get("Ready", {}).get("status") == "True":
        return None
    name = f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"
    reasons = []
    if not pod.get("spec", {}).get("nodeName"):
        scheduled = conditions.get("PodScheduled", {})
        why = [scheduled.get("reason", "no decision yet"), scheduled.get("message", "").strip()]
        reasons.append(f"not scheduled ({': '.join(part for part in why if part)})")
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state, last = container.get("state", {}), container.get("lastState", {}).get("terminated")
        restarts = container.get("restartCount", 0)
        previous = (f", last exit {last.get('exitCode')} ({last.get('reason', 'no reason')})" if last else "")
        if "waiting" in state:
            waiting = state["waiting"]
            reasons.append(f"{container['name']} waiting: {waiting.get('reason', '?')} "
                           f"{waiting.get('message', '').strip()[:300]}".rstrip()
                           + f" (restarts {restarts}{previous})")
        elif "running" in state and not container.get("ready"):
            reasons.append(f"{container['name']} running, not ready (restarts {restarts}{previous})")
        elif "terminated" in state and state["terminated"].get("exitCode") != 0:
            reasons.append(f"{container['name']} exited {state['terminated'].get('exitCode')} "
                           f"({state['terminated'].get('reason', 'no reason')}, restarts {restarts})")
    if not reasons:
        reasons.append(f"phase {phase}")
    uid = pod["metadata"].get("uid")
    warnings = sorted((e for e in events if e.get("type") == "Warning"
                       and e.get("involvedObject", {}).get("uid") == uid and uid),
                      key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    said = [f"{e.get('reason')}: {' '.join(str(e.get('message', '')).split())[:300]}"
            + (f" (x{e['count']})" if e.get("count", 1) > 1 else "") for e in warnings[-2:]]
    return f"{name}: {'; '.join(reasons)}" + (f" [events: {' | '.join(said)}]" if said else "")
