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

import base64
import contextlib
import ipaddress
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from trainyard import yamlio

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
    def __init__(self, server: str, context: ssl.SSLContext, user_agent: str, timeout: float = 10,
                 token: str | None = None) -> None:
        self.server = loopback_server(server)
        self.user_agent = user_agent
        self.timeout = timeout
        self.token = token
        # No proxy, whatever the environment says: the server is on a loopback address (Go's clients, kubectl among
        # them, never proxy one either).
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                  urllib.request.HTTPSHandler(context=context))

    @classmethod
    def from_files(cls, server: str, ca: Path, cert: Path, key: Path, user_agent: str, timeout: float = 10) -> ApiClient:
        """A client presenting the certificate ``cert`` (its key ``key``) and trusting the CA ``ca``."""
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        return cls(server, context, user_agent, timeout)

    @classmethod
    def from_kubeconfig(cls, path: Path, user_agent: str, timeout: float = 10) -> tuple[ApiClient, str] | None:
        """A client with the credentials of ``path``'s current context, and that context's namespace ("default" if
        it names none); None where this client cannot stand in for kubectl with that kubeconfig: a server that is
        not a loopback https URL, or a user that is neither a client certificate nor a bearer token (exec and
        auth-provider plugins, impersonation)."""
        try:
            config = yamlio.safe_load(path.read_text()) or {}
            context_name = config.get("current-context")
            context = _named(config.get("contexts"), context_name, "context")
            cluster = _named(config.get("clusters"), context.get("cluster"), "cluster")
            user = _named(config.get("users"), context.get("user"), "user")
            server = loopback_server(str(cluster.get("server") or ""))
        except (OSError, ValueError, AttributeError, TypeError, yaml.YAMLError):
            return None
        if cluster.get("proxy-url") or cluster.get("insecure-skip-tls-verify") or cluster.get("tls-server-name") or (
                set(user) - {"client-certificate-data", "client-key-data", "client-certificate", "client-key", "token"}):
            return None
        try:
            ca = _pem(cluster, "certificate-authority", path.parent)
            cert, key = _pem(user, "client-certificate", path.parent), _pem(user, "client-key", path.parent)
        except (OSError, ValueError):
            return None
        token = user.get("token")
        tls = _tls(ca, cert, key) if ca is not None and ((cert and key) or token) else None
        if tls is None:
            return None
        client = cls(server, tls, user_agent, timeout, token=str(token) if token and not (cert and key) else None)
        return client, str(context.get("namespace") or "default")

    def request(self, method: str, path: str, body: Obj | None = None, content_type: str = JSON,
                accept: str = JSON) -> Obj | None:
        """The decoded answer; None for 404 (an absent object, or an API the cluster does not serve)."""
        code, decoded, text = self._send(method, path, body, content_type, accept)
        if code == 404:
            return None
        if code >= 400:
            raise ApiError(method, path, code, str(decoded.get("message") or text))
        return decoded

    def status(self, method: str, path: str) -> tuple[int, Obj]:
        """A request's HTTP status and decoded body, errors included (their ``Status`` object): for a caller that
        reports the API server's own message, as kubectl does."""
        code, decoded, _ = self._send(method, path)
        return code, decoded

    def _send(self, method: str, path: str, body: Obj | None = None, content_type: str = JSON,
              accept: str = JSON) -> tuple[int, Obj, str]:
        """(HTTP status, the answer decoded (``{}`` where it is not a JSON object), its text); ApiError with status 0
        where the server could not be reached."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": accept, "Content-Type": content_type, "User-Agent": self.user_agent}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.server + path, data=data, method=method,  # noqa: S310 - https only
                                         headers=headers)
        try:
            with self.opener.open(request, timeout=self.timeout) as answer:
                code, raw = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            code, raw = error.code, error.read()
        except (urllib.error.URLError, OSError) as error:
            raise ApiError(method, path, 0, f"unreachable: {error}") from None
        text = raw.decode(errors="replace")
        decoded: Any = {}
        with contextlib.suppress(ValueError):
            decoded = json.loads(raw or b"{}")
        return code, decoded if isinstance(decoded, dict) else {}, text

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


def _named(entries: Any, name: Any, key: str) -> dict[str, Any]:
    """The ``key`` mapping of the kubeconfig list entry called ``name``; ValueError if there is none."""
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get(key), dict):
            found: dict[str, Any] = entry[key]
            return found
    raise ValueError(f"no {key} {name!r}")


def _pem(section: dict[str, Any], field: str, base: Path) -> str | None:
    """A kubeconfig credential as PEM text: ``FIELD-data`` (base64) or ``FIELD`` (a file, relative to the
    kubeconfig's directory); None if neither is set."""
    if section.get(f"{field}-data"):
        return base64.b64decode(str(section[f"{field}-data"]), validate=True).decode()
    if section.get(field):
        return (base / str(section[field])).read_text()
    return None


def _tls(ca: str, cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """A TLS context that trusts ``ca`` and presents ``cert`` and ``key`` where given; None if they do not load."""
    try:
        tls = ssl.create_default_context(cadata=ca)
        if cert and key:
            # ssl loads a certificate chain from a file only: the pair goes to a private file that is gone again
            # before this returns (the kubeconfig itself holds the key, readable by its owner only).
            fd, name = tempfile.mkstemp(prefix=".kube-client-", suffix=".pem")
            try:
                with os.fdopen(fd, "w") as out:
                    out.write(cert + "\n" + key + "\n")
                tls.load_cert_chain(name)
            finally:
                os.unlink(name)
    except ssl.SSLError:
        return None
    return tls
