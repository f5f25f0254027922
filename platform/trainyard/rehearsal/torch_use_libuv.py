"""``USE_LIBUV`` for every TCPStore torch makes: Debian's python3-torch 2.6.0+dfsg-7 is built without libuv.

Copied into the lab's CPU image (``lab_image.py``) as ``trainyard_use_libuv`` and loaded at every interpreter start by
a ``.pth`` file; it imports nothing of torch and costs a meta-path lookup per import.

Why: ``TCPStore(..., use_libuv=True)`` is the binding's default and the one value a build without libuv refuses
(``RuntimeError: use_libuv was requested but PyTorch was build without libuv support``). torch 2.6 reads the variable
``USE_LIBUV`` (``"0"``: the legacy TCPStore) where ``init_process_group``'s env rendezvous creates its own store
(torch/distributed/rendezvous.py:64-67, :272-275), but not where these modules create one:

- torchrun's static rendezvous, what Trainer's torch plugin launches with its ``PET_*`` environment
  (torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py:67): torchrun fails before starting a worker;
- the workers' client of torchrun's agent store (``TORCHELASTIC_USE_AGENT_STORE``: rendezvous.py:183-190, the
  ``_create_c10d_store`` branch without ``use_libuv``): ``init_process_group`` fails in every rank;
- the c10d rendezvous backend (elastic/rendezvous/c10d_rendezvous_backend.py:159).

Upstream alike (torch 2.10.0's static_tcp_rendezvous.py has the same call; pytorch/pytorch#148283, Windows builds).
The production image's torch (PyPI's, with libuv) needs none of this. Here, when one of ``MODULES`` is imported, its
global ``TCPStore`` becomes a function that passes ``use_libuv`` from ``USE_LIBUV`` where the caller gives none; a
caller's own ``use_libuv`` is kept. The image sets ``USE_LIBUV=0``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

MODULES = frozenset({"torch.distributed.rendezvous", "torch.distributed.elastic.rendezvous.static_tcp_rendezvous",
                     "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend"})


def with_use_libuv(store: Callable[..., Any]) -> Callable[..., Any]:
    """``store`` (the TCPStore class) called with ``use_libuv`` from ``USE_LIBUV`` unless the caller passes one."""

    def create(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("use_libuv", os.environ.get("USE_LIBUV", "1") == "1")
        return store(*args, **kwargs)

    create.__wrapped__ = store  # type: ignore[attr-defined]
    return create


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        store = getattr(module, "TCPStore", None)
        if callable(store):
            setattr(module, "TCPStore", with_use_libuv(store))  # noqa: B010 - a module's global, named


class Finder(importlib.abc.MetaPathFinder):
    """Finds ``MODULES`` as the path finder does, and hands their loader to ``_Loader``."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    if not any(type(finder).__name__ == "Finder" and type(finder).__module__ == __name__ for finder in sys.meta_path):
        sys.meta_path.insert(0, Finder())


IMAGE_MODULE = "trainyard_use_libuv"  # its name in the image, where the .pth file imports it
if __name__ == IMAGE_MODULE:
    install()
