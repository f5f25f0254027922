"""A plain server-side apply of rendered objects: the yardstick for what `pulumi up` costs.

``kubectl apply --server-side`` of exactly the objects ``trainyard render`` writes, in the order a
person would apply them by hand (CRDs, wait until they are Established, Namespaces, then the rest),
each phase one kubectl call. Not a dry run: the API server writes every object, as Pulumi's
provider does. The cluster tier and ``bench/bench_engine.py`` time it next to ``pulumi up``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainyard.rehearsal.kube import Kube, Manifest

FIELD_MANAGER = "trainyard-ssa"
# Kept when the applied objects are removed again, as `pulumi destroy` keeps them (retainOnDelete).
RETAINED_KINDS = frozenset({"CustomResourceDefinition", "Namespace"})


@dataclass(frozen=True)
class Applied:
    objects: int
    seconds: float


def server_side_apply(kube: Kube, objects: Sequence[Manifest], field_manager: str = FIELD_MANAGER,
                      timeout: float = 1800) -> Applied:
    """Apply ``objects`` server-side (conflicts forced: the objects are the same, the manager is another)."""
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    rest = [o for o in objects if o["kind"] not in RETAINED_KINDS]
    start = time.monotonic()
    kube.apply(crds, field_manager, timeout=timeout)
    if crds:
        kube.run("wait", "--for=condition=Established", f"--timeout={int(timeout)}s",
                 *(f"customresourcedefinition/{c['metadata']['name']}" for c in crds), timeout=timeout)
    kube.apply(namespaces, field_manager, timeout=timeout)
    kube.apply(rest, field_manager, timeout=timeout)
    return Applied(len(objects), time.monotonic() - start)


def remove_applied(kube: Kube, objects: Iterable[Manifest], timeout: float = 1800) -> None:
    """Delete what was applied, except CRDs and Namespaces (which ``pulumi destroy`` keeps too), and wait until gone."""
    removable = [o for o in objects if o["kind"] not in RETAINED_KINDS]
    if removable:
        kube.delete_objects(list(reversed(removable)), timeout=timeout)
