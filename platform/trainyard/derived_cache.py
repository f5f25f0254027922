"""A disk cache of text derived from content: the parsed and the serialised forms of the upstream CRDs.

The 15 upstream CRDs are a few MB of YAML; parsing them and dumping them again as YAML was most
of a render's time (PyYAML builds Python objects node by node even with libyaml). Both results
depend only on the content, so they are kept under a key that is a hash of everything they
depend on: the content id, PyYAML's version and a probe of the serialiser's output format.
A change to any of these is a new key, never a stale hit; a cache that cannot be written
(read-only home, full disk) only costs the time.

Entries live in ``$XDG_CACHE_HOME/trainyard/derived`` (next to the CRD download cache) and
are written atomically (temporary file, then rename), so a crash leaves no half entry.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainyard" / "derived"


def cache_key(parts: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def derived_text(kind: str, key_parts: Iterable[str], compute: Callable[[], str | None]) -> str | None:
    """The cached text for ``key_parts``, or ``compute()`` (stored unless it is None)."""
    path = cache_root() / kind / f"{cache_key(key_parts)}.txt"
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    text = compute()
    if text is not None:
        _store(path, text)
    return text


def _store(path: Path, text: str) -> None:
    temporary: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except OSError:
        # A cache that cannot be written only costs time.
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
