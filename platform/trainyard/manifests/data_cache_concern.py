"""The data-cache concern: the cache pods' admission policy for the cache image the reviewed runtime names,
and per tenant the initializer's RBAC, settings and API-server path (``manifests/data_cache.py``).

It sits above ``manifests/runtimes.py``: the image comes from the reviewed cache runtime, loaded and
pinned the way the runtimes concern loads it, so the policy matches exactly what the runtime runs.
"""

from __future__ import annotations

from pathlib import Path

from trainyard.config.data_cache import CACHE_RUNTIME
from trainyard.config.model import PlatformConfig
from trainyard.manifests.concern import Concern
from trainyard.manifests.data_cache import pod_policy, runtime_image_env, tenant_objects
from trainyard.manifests.runtimes import RuntimeFileError, load_runtime
from trainyard.supply.lock import ImageLock
from trainyard.supply.reference import ImageRef


def cache_image(config: PlatformConfig, root: Path, lock: ImageLock) -> str:
    """The data-cache image the reviewed cache runtime names (CACHE_IMAGE), pinned by the lock."""
    runtime = load_runtime(root / config.runtimes.directory / f"{CACHE_RUNTIME}.yaml", config, lock)
    images = runtime_image_env(runtime)
    if len(images) != 1:
        raise RuntimeFileError(f"{config.runtimes.directory}/{CACHE_RUNTIME}.yaml", "CACHE_IMAGE",
                               f"the dataset-initializer must name the data-cache image exactly once (found {len(images)})")
    return str(lock.pin(ImageRef.parse(images[0])))


def build(config: PlatformConfig, root: Path, lock: ImageLock | None = None) -> Concern:
    """The data cache: the cache pods' admission policy, and per tenant the initializer's RBAC, settings and path."""
    if not config.data_cache.enabled:
        return Concern("data-cache")
    pins = lock if lock is not None else ImageLock()
    return Concern("data-cache", objects=pod_policy(config, cache_image(config, root, pins)),
                   tenant_objects={t.name: tenant_objects(config, t) for t in config.tenants})
