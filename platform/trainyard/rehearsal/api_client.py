"""A small HTTPS client of the rehearsal's API server, for a loop that must not start a kubectl per request.

The rehearsal talks to its API server through the built kubectl (``kube.py``); a process that looks at the cluster
every two seconds (the certificate stand-in, ``cert_standin.py``) would start several kubectl processes a pass on a
2-core machine. This client speaks the API directly with a client certificate of the rehearsal's CA: JSON reads,
metadata-only lists (``PartialObjectMetadataList``, so that a list of CRDs does not carry their schemas), and
server-side apply under a field manager of the caller's (``PATCH`` with ``application/apply-patch+yaml``; JSON is
YAML). Only loopback servers are accepted: the rehearsal's API server binds 127.0.0.1, and nothing else is its.

Ref: https://kubernetes.io/docs/reference/using-api/server-side-apply/ (fieldManager, force),
https://kubernetes.io/docs/reference/using-api/api-concepts/#receiving-resources-as-tables (the ``as=`` Accept form).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

JSON = "application/json"
APPLY = "application/apply-patch+yaml"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"

Obj = dict[str, Any]


class ApiError(Exception):
    """The API server refused a request (or could not be reached); says which and why."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status


def loopback_server(server: str) -> str:
    """``server`` (``https://127.0.0.1:PORT``) if it is an https URL of a loopback address; ValueError otherwise."""
    parsed = urllib.parse.urlsplit(server)
    try:
        loopback = parsed.scheme == "https" and parsed.hostname is not None and ipaddress.ip_address(
            parsed.hostname).is_loopback and parsed.port is not None
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"{server!r} is not the rehearsal's API server (https on a loopback address and port)")
    return server.rstrip("/")


class ApiClient:
    def __init__(self, server: str, ca: Path, cert: Path, key: Path, user_agent: str, timeout: float = 10) -> None:
        self.server = loopback_server(server)
        self.context = ssl.create_default_context(cafile=str(ca))
        self.context.load_cert_chain(str(cert), str(key))
        self.user_agent = user_agent
        self.timeout = timeout

    def request(self, method: str, path: str, body: Obj | None = None, content_type: str = JSON,
                accept: str = JSON) -> Obj | None:
        """The decoded answer; None for 404 (an absent object, or an API the cluster does not serve)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method,  # noqa: S310 - https only
                                         headers={"Accept": accept, "Content-Type": content_type,
                                                  "User-Agent": self.user_agent})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as answer:  # noqa: S310
                decoded: Obj = json.loads(answer.read() or b"{}")
                return decoded
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            text = error.read().decode(errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                text = str(json.loads(text).get("message", text))
            raise ApiError(method, path, error.code, text) from None
        except (urllib.error.URLError, OSError) as error:
            raise ApiError(method, path, 0, f"unreachable: {error}") from None

    def get(self, path: str) -> Obj | None:
        return self.request("GET", path)

    def items(self, path: str) -> list[Obj]:
        """Every object of a list path; [] where the API is not served."""
        found = self.get(path)
        return list(found.get("items") or []) if found else []

    def metadata(self, path: str) -> list[Obj]:
        """The metadata of every object of a list path (no spec, no status); [] where the API is not served."""
        found = self.request("GET", path, accept=METADATA_LIST)
        return [item.get("metadata") or {} for item in (found or {}).get("items") or []]

    def apply(self, path: str, configuration: Obj, field_manager: str) -> Obj | None:
        """Server-side apply ``configuration`` at ``path`` (the object's own path) as ``field_manager``, taking over
        conflicting fields (``force``), as a controller does for the fields it alone sets."""
        query = urllib.parse.urlencode({"fieldManager": field_manager, "force": "true"})
        return self.request("PATCH", f"{path}?{query}", configuration, content_type=APPLY)
