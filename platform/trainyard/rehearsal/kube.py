"""A thin client over the built ``kubectl``: JSON in, JSON out, errors that say what failed.

The rehearsal talks to its API server only through this (and ``kubectl`` only through it), so
every call uses the rehearsal's kubeconfig and the kubectl built with the API server, never an
ambient one.

Reads (``get``, ``items``, ``exists``) do what ``kubectl get`` does without starting a kubectl: they are what the
rehearsal polls (a scenario looks at its Workloads, TrainJobs and pods every second; every wait is a loop of them),
and a kubectl process costs ~85 ms of CPU, which on a 2-core machine was the largest single share of the cluster
tier's CPU (4315 kubectl processes, 366 CPU-seconds of its ~2050, process accounting, 2026-12-07). The same
request goes to the API server with the kubeconfig's credentials (``api_client.ApiClient.from_kubeconfig``), the
resource named as kubectl accepts it (plural, singular, short name or kind, optionally ``.group`` or
``.version.group``) and found in the server's aggregated discovery, core first as kubectl does. Anything else falls
back to kubectl itself, so its answer and its error text stay the reference: a kubeconfig this client cannot use, a
name discovery does not resolve to one resource, any refusal but NotFound.
Ref: https://kubernetes.io/docs/concepts/overview/kubernetes-api/#aggregated-discovery
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from trainyard import yamlio
from trainyard.rehearsal.api_client import ApiClient, ApiError

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
        read = _reads(self.kubeconfig)
        if read is not None:
            status, found = read.get(resource, name, namespace)
            if status == 200:
                return found
            if status == 404 and name:
                raise KubeError(f"kubectl {' '.join(args)} -o json failed (1): Error from server (NotFound): "
                                f"{found.get('message') or f'{resource} {name!r} not found'}")
        return json.loads(self.run(*args, "-o", "json").stdout)

    def items(self, resource: str, namespace: str | None = "*", selector: str | None = None) -> list[Manifest]:
        read = _reads(self.kubeconfig)
        if read is not None:
            status, found = read.get(resource, None, namespace, selector)
            if status == 200:
                listed: list[Manifest] = found["items"]
                return listed
        args = ["get", resource, "-o", "json"]
        args += ["--all-namespaces"] if namespace == "*" else (["-n", namespace] if namespace else [])
        if selector:
            args += ["-l", selector]
        items: list[Manifest] = json.loads(self.run(*args).stdout)["items"]
        return items

    def exists(self, resource: str, name: str, namespace: str | None = None) -> bool:
        read = _reads(self.kubeconfig)
        if read is not None:
            status, _ = read.get(resource, name, namespace)
            if status in (200, 404):
                return status == 200
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


# The Accept header of aggregated discovery: every group, version and resource of the server in one answer.
DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
# What a read through the API may take before it counts as failed (and falls back to kubectl, whose own timeout is
# KUBECTL_TIMEOUT): lists of every pod on a loaded 2-core machine have taken seconds.
READ_TIMEOUT = 120.0
# A name discovery did not know is looked up again in a new discovery, at most this often (seconds).
REDISCOVER_AFTER = 2.0
NOT_READ = 0  # the status of a read this client did not make: the caller asks kubectl


@dataclass(frozen=True)
class _Resource:
    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


class _Reads:
    """``kubectl get``'s reads through one kubeconfig's credentials, without a kubectl process."""

    def __init__(self, client: ApiClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.index: dict[str, list[_Resource]] | None = None
        self.discovered_at = 0.0

    def _discover(self) -> dict[str, list[_Resource]]:
        """Every name kubectl accepts for a resource (plural, singular, short names, kind), each with every
        version that serves it: the preferred version first, the core group before all others."""
        index: dict[str, list[_Resource]] = {}
        for path in ("/api", "/apis"):
            found = self.client.request("GET", path, accept=DISCOVERY) or {}
            if found.get("kind") != "APIGroupDiscoveryList":
                raise ApiError("GET", path, 0, "no aggregated discovery")
            for group in found.get("items") or []:
                name = str((group.get("metadata") or {}).get("name") or "")
                for version in group.get("versions") or []:
                    for entry in version.get("resources") or []:
                        kind = str((entry.get("responseKind") or {}).get("kind") or "")
                        resource = _Resource(name, str(version.get("version")), str(entry.get("resource")),
                                             entry.get("scope") == "Namespaced", kind)
                        names = {resource.plural, str(entry.get("singularResource") or ""), kind.lower(),
                                 *(str(n) for n in entry.get("shortNames") or [])}
                        for key in names - {""}:
                            index.setdefault(key, []).append(resource)
        return index

    def resolve(self, resource: str) -> _Resource | None:
        """The one resource kubectl would read for ``resource``; None where that is not plain (the caller asks
        kubectl, which then says what it makes of it)."""
        if "/" in resource or "," in resource or not resource:
            return None
        found = self._matching(resource)
        if not found and time.monotonic() - self.discovered_at > REDISCOVER_AFTER:
            self.index = None  # a resource served since (a CRD the stack installed): discover again
            found = self._matching(resource)
        return found[0] if len({r.group for r in found}) == 1 else None

    def _matching(self, resource: str) -> list[_Resource]:
        if self.index is None:
            self.index = self._discover()
            self.discovered_at = time.monotonic()
        head, _, qualifier = resource.lower().partition(".")
        found = [r for r in self.index.get(head, [])
                 if not qualifier or qualifier in (r.group, f"{r.version}.{r.group}")]
        if not qualifier and any(r.group == "" for r in found):
            found = [r for r in found if r.group == ""]
        return found

    def get(self, resource: str, name: str | None, namespace: str | None,
            selector: str | None = None) -> tuple[int, Any]:
        """(HTTP status, answer) of what ``kubectl get`` reads; ``(NOT_READ, None)`` where kubectl must answer. A
        list comes back as kubectl prints it: a ``List`` whose items carry their apiVersion and kind."""
        try:
            found = self.resolve(resource)
            if found is None or (name and namespace == "*"):
                return NOT_READ, None
            path = found.prefix
            if found.namespaced and namespace != "*":
                path += f"/namespaces/{urllib.parse.quote(namespace or self.namespace, safe='')}"
            path += f"/{found.plural}"
            if name:
                path += f"/{urllib.parse.quote(name, safe='')}"
            if selector:
                path += "?" + urllib.parse.urlencode({"labelSelector": selector})
            status, answer = self.client.status("GET", path)
        except ApiError:
            return NOT_READ, None
        if status == 404 and not name:
            self.index = None  # a resource discovery named is gone (its CRD deleted): discover again next time
            return NOT_READ, None
        if status != 200:
            return status, answer
        if name:
            return status, _shown(answer)
        items = [_shown({"apiVersion": found.api_version, "kind": found.kind, **item}) for item in answer.get("items") or []]
        return status, {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def _shown(obj: Manifest) -> Manifest:
    """``obj`` as ``kubectl get -o json`` prints it: without its managedFields (``--show-managed-fields=false``)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        obj = {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    return obj


_READS: dict[tuple[str, int, int], _Reads | None] = {}


def _reads(kubeconfig: Path) -> _Reads | None:
    """The reads of ``kubeconfig`` (kept while the file is unchanged); None where its credentials are not ones
    ``ApiClient`` uses (kubectl reads then)."""
    try:
        stat = kubeconfig.stat()
    except OSError:
        return None
    key = (str(kubeconfig), stat.st_mtime_ns, stat.st_size)
    if key not in _READS:
        if len(_READS) > 64:
            _READS.clear()
        made = ApiClient.from_kubeconfig(kubeconfig, "trainyard-rehearsal", timeout=READ_TIMEOUT)
        _READS[key] = _Reads(*made) if made else None
    return _READS[key]


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
