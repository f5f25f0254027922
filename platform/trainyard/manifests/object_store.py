"""SHIM, delete at the merge of branch ``object-store``: the two functions serving relies on.

The object-store branch owns this module (per-tenant buckets, endpoints, identities). Serving
codes against its contract only: ``bucket_name(config, tenant, purpose)`` with purpose
``datasets|checkpoints|models`` and ``endpoint_url(config)``. Until that branch lands, this shim
answers with the contract's default naming (``<tenant>-<purpose>``) and an in-cluster URL built
from ``security.network.object_store``, so the serving builder, policy and tests run on main.
At merge time take the object-store branch's version of this file. (Still needed after the merge
of main at 7bc83a6: main has no object-store concern either; its ``runtimes.checkpoints_bucket``
codes against the same contract default.)
"""

from __future__ import annotations

from typing import Literal

from trainyard.config.model import PlatformConfig, Tenant

Purpose = Literal["datasets", "checkpoints", "models"]


def bucket_name(config: PlatformConfig, tenant: Tenant, purpose: Purpose) -> str:
    """SHIM: the tenant's bucket for ``purpose`` (contract default: ``<tenant>-<purpose>``)."""
    return f"{tenant.name}-{purpose}"


def endpoint_url(config: PlatformConfig) -> str:
    """SHIM: the S3 endpoint tenants' pods use, as a URL with scheme."""
    endpoint = config.security.network.object_store
    if endpoint is None or endpoint.namespace is None:
        raise ValueError("security.network.object_store must name the in-cluster object store (shim of object-store)")
    return f"http://s3.{endpoint.namespace}.svc.cluster.local:{endpoint.ports[0]}"
