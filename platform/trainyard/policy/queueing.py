"""Rules on Kueue objects: current API, references that resolve, quotas the hardware can honour.

Kueue accepts a LocalQueue pointing at a ClusterQueue that does not exist, or a ResourceFlavor
naming an unknown Topology, and only reports it in status: jobs then wait forever. Nominal
quotas above the physical GPUs promise capacity that is not there. These rules turn each of
those into a review finding. They read manifests, not the stack config, so a pull request that
adds a ClusterQueue by hand is held to them too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from trainyard import catalog
from trainyard.config.gpu_pools import advertised_resources
from trainyard.manifests.meta import Manifest
from trainyard.policy.model import Context, object_rule, stack_rule
from trainyard.policy.pods import as_dict, as_list, dig
from trainyard.quantity import parse_quantity

KUEUE_GROUP = catalog.KUEUE_API.split("/")[0]
# Extended resources of NVIDIA GPUs: nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-<profile>.
ACCELERATOR_PREFIX = "nvidia.com/"


def _names(objects: Sequence[Manifest], kind: str) -> set[str]:
    return {str(dig(o, "metadata", "name")) for o in objects if o.get("kind") == kind}


@object_rule("kueue-api-version", f"Kueue objects use {catalog.KUEUE_API} (v1beta1 is deprecated).",
             f"Set apiVersion: {catalog.KUEUE_API} and follow the v1beta2 field names.")
def kueue_api_version(obj: Manifest, ctx: Context) -> Iterator[str]:
    api_version = str(obj.get("apiVersion", ""))
    if api_version.startswith(f"{KUEUE_GROUP}/") and api_version != catalog.KUEUE_API:
        yield f"uses {api_version}, not {catalog.KUEUE_API}"


def dangling(objects: Sequence[Manifest], kind: str, field: str, target_kind: str) -> Iterator[tuple[Manifest, str]]:
    """Objects of ``kind`` whose ``spec.<field>`` names no declared ``target_kind``."""
    targets = _names(objects, target_kind)
    for obj in objects:
        name = dig(obj, "spec", field) if obj.get("kind") == kind else None
        if name is not None and name not in targets:
            yield obj, f"spec.{field} {name!r} is not a declared {target_kind}"


@stack_rule("local-queue-cluster-queue", "A LocalQueue points to an existing ClusterQueue.",
            "Set spec.clusterQueue to a ClusterQueue the stack declares (one per tenant, named after it).")
def local_queue_cluster_queue(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    yield from dangling(objects, "LocalQueue", "clusterQueue", "ClusterQueue")


@stack_rule("flavor-topology-exists", "A ResourceFlavor's topologyName names an existing Topology.",
            "Set spec.topologyName to the stack's topology name, or declare the Topology.")
def flavor_topology_exists(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    yield from dangling(objects, "ResourceFlavor", "topologyName", "Topology")


def nominal_accelerators(cluster_queue: Manifest) -> dict[tuple[str, str], int]:
    """(flavor, resource) -> nominal quota of every nvidia.com/ resource (whole GPUs, MIG slices, replicas)."""
    out: dict[tuple[str, str], int] = {}
    for group in as_list(dig(cluster_queue, "spec", "resourceGroups")):
        for flavor in as_list(as_dict(group).get("flavors")):
            for item in as_list(as_dict(flavor).get("resources")):
                resource = as_dict(item)
                name = str(resource.get("name"))
                if name.startswith(ACCELERATOR_PREFIX):
                    try:
                        amount = int(parse_quantity(resource.get("nominalQuota", 0)))
                    except (ValueError, TypeError):
                        continue  # the schema check reports a malformed quantity
                    key = (str(as_dict(flavor).get("name")), name)
                    out[key] = out.get(key, 0) + amount
    return out


@stack_rule("quota-fits-capacity", "Nominal GPU quotas per flavor fit what the flavor's pool advertises "
            "(whole GPUs, MIG slices, time-sliced replicas).",
            "Lower the tenants' nominal quotas (lend through cohorts instead), add nodes to the pool, "
            "or set allow_overcommit: true after review.")
def quota_fits_capacity(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    committed: dict[tuple[str, str], int] = {}
    for obj in objects:
        if obj.get("kind") == "ClusterQueue":
            for key, amount in nominal_accelerators(obj).items():
                committed[key] = committed.get(key, 0) + amount
    pools = {p.name: p for p in ctx.config.pools}
    for (flavor, resource), amount in sorted(committed.items()):
        pool = pools.get(flavor)
        if pool is None and amount > 0:
            yield None, f"flavor {flavor!r} has {amount} nominal {resource} but is not a pool of the stack (no capacity)"
        elif pool is not None and not ctx.config.allow_overcommit:
            offered = advertised_resources(pool).get(resource, 0)
            if amount > offered:
                unit = "GPUs" if resource == catalog.GPU_RESOURCE else resource
                yield None, f"flavor {flavor!r}: nominal {unit} quotas add up to {amount}, the pool has {offered}"


RULES = (kueue_api_version, local_queue_cluster_queue, flavor_topology_exists, quota_fits_capacity)
