"""A small OCI distribution client: manifest digests, and pulling and pushing whole images and artifacts.

Digests (``images lock``): ``HEAD /v2/<name>/manifests/<tag>`` with an ``Accept`` header listing the OCI
index and manifest types and Docker's manifest list and v2 manifest types; the registry answers with
``Docker-Content-Digest``. Where a HEAD carries no digest, a GET fetches the manifest and its sha256 is the
digest (and, where both exist, they must agree).

Pull and push (``bom --export`` / ``--import``): manifests by tag or digest (``GET``/``PUT
/v2/<name>/manifests/<reference>``, the body kept byte for byte, so digests survive the copy), blobs streamed
(``GET /v2/<name>/blobs/<digest>``, verified against the digest while it is read; ``HEAD`` to skip a blob
the target holds; upload as ``POST /v2/<name>/blobs/uploads/`` then one monolithic ``PUT <location>?digest=``,
which the registry itself verifies). Redirects (blob stores) are followed by hand, without the registry's
``Authorization`` header when they leave its host.

Presence (``images verify --in-mirror``, the program's mirror check): ``GET /v2/`` once per registry (any
HTTP answer means the host is there; the API version check, end-1 of the spec), then ``HEAD
/v2/<name>/manifests/<digest or tag>`` per image: 200 present, 404 not (``MANIFEST_UNKNOWN`` or
``NAME_UNKNOWN``); a registry that does not answer HEAD with either is asked with a GET.

Authentication follows the registry's challenge (``WWW-Authenticate`` on a 401): ``Bearer`` (token from
the realm, for ``repository:<name>:pull`` or ``:pull,push``, with basic credentials where given) or
``Basic``. Credentials come from the environment only: ``TRAINYARD_REGISTRY_USERNAME`` and
``TRAINYARD_REGISTRY_PASSWORD``. They are never logged or written anywhere.

Ref: https://github.com/opencontainers/distribution-spec/blob/main/spec.md#pulling-manifests
Ref: https://github.com/opencontainers/distribution-spec/blob/main/spec.md#checking-if-content-exists-in-the-registry
Ref: https://github.com/opencontainers/distribution-spec/blob/main/spec.md#pushing-blobs ("POST then PUT")
Ref: https://github.com/opencontainers/distribution-spec/blob/main/spec.md#pushing-manifests
Ref: https://distribution.github.io/distribution/spec/auth/token/ (the bearer token flow)
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from trainyard.supply.reference import DIGEST, DOCKER_HUB, DOCKER_HUB_API, ImageRef

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
USERNAME_ENV, PASSWORD_ENV = "TRAINYARD_REGISTRY_USERNAME", "TRAINYARD_REGISTRY_PASSWORD"
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')
TIMEOUT_SECONDS = 30


class RegistryError(Exception):
    """A registry that did not give a digest: names the reference, the URL and the reason."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Credentials | None:
        env = os.environ if environ is None else environ
        username, password = env.get(USERNAME_ENV), env.get(PASSWORD_ENV)
        return cls(username, password) if username and password else None

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


class RegistryUnreachable(RegistryError):
    """No answer at all from a registry host (name not resolved, connection refused, timed out)."""

    def __init__(self, message: str, host: str, reason: str) -> None:
        super().__init__(message)
        self.host = host
        self.reason = reason


Body = Callable[[], "bytes | IO[bytes]"]
_REDIRECTS = (301, 302, 303, 307, 308)
CHUNK = 1 << 20


@dataclass(frozen=True)
class FetchedManifest:
    """A manifest as the registry serves it: the exact bytes (its digest is their sha256) and its media type."""

    media_type: str
    body: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.body).hexdigest()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects come back as responses: ``_call`` follows them itself (dropping credentials off the host)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class RegistryClient:
    """Manifest digests from registries; images and artifacts pulled and pushed.

    ``endpoints`` maps a registry host to the base URL to ask instead (``registry.example.com`` ->
    ``http://127.0.0.1:5000``: a loopback copy of the mirror, or a pull-through proxy). Plain
    ``http`` and unverified TLS are allowed only with ``insecure``, or plain ``http`` to the addresses in
    ``plain_http`` (``host:port``: the loopback endpoints ``TRAINYARD_REGISTRY_ENDPOINTS`` names, ``endpoints.py``).
    """

    endpoints: Mapping[str, str] = field(default_factory=dict)
    credentials: Credentials | None = None
    insecure: bool = False
    plain_http: frozenset[str] = frozenset()
    _tokens: dict[tuple[str, str, str], str] = field(default_factory=dict)
    _context: ssl.SSLContext | None = None

    def base_url(self, registry: str) -> str:
        base = self.endpoints.get(registry) or f"https://{DOCKER_HUB_API if registry == DOCKER_HUB else registry}"
        if base.startswith("http://") and not self._plain_http_allowed(base):
            raise RegistryError(f"{registry}: endpoint {base} is plain http; pass --insecure to allow it")
        return base.rstrip("/")

    def _plain_http_allowed(self, url: str) -> bool:
        return self.insecure or urllib.parse.urlsplit(url).netloc in self.plain_http

    def ping(self, registry: str) -> int:
        """``GET /v2/`` of ``registry``: the HTTP status (200, or 401 where it wants credentials: there all the
        same); ``RegistryUnreachable`` where nothing answers."""
        url = f"{self.base_url(registry)}/v2/"
        return self._send("GET", url, {})[0]

    def has_manifest(self, ref: ImageRef, reference: str) -> bool:
        """Whether ``ref``'s repository serves the manifest ``reference`` (a digest or a tag): ``HEAD``, then
        ``GET`` where the HEAD answers neither 200 nor 404. ``RegistryError`` for any other answer."""
        url = self._url(ref, "manifests", reference)
        for method in ("HEAD", "GET"):
            status, _, _ = self._call(method, url, ref, accept=MANIFEST_TYPES, missing_ok=True)
            if status in (200, 404):
                return status == 200
        raise RegistryError(f"{ref}: {url}: HTTP {status}")

    def manifest_url(self, ref: ImageRef, reference: str) -> str:
        return self._url(ref, "manifests", reference)

    def _url(self, ref: ImageRef, kind: str, reference: str) -> str:
        return f"{self.base_url(ref.registry)}/v2/{ref.repository}/{kind}/{reference}"

    def digest(self, ref: ImageRef) -> str:
        """The digest the registry serves for ``ref``'s tag."""
        url = self._url(ref, "manifests", str(ref.tag or ref.digest))
        status, headers, _ = self._call("HEAD", url, ref, accept=MANIFEST_TYPES)
        digest = headers.get("docker-content-digest")
        if status == 200 and digest and DIGEST.match(digest):
            return digest
        status, headers, body = self._call("GET", url, ref, accept=MANIFEST_TYPES)
        if status != 200:
            raise RegistryError(f"{ref}: {url}: HTTP {status}")
        computed = "sha256:" + hashlib.sha256(body).hexdigest()
        reported = headers.get("docker-content-digest")
        if reported and reported != computed:
            raise RegistryError(f"{ref}: {url}: Docker-Content-Digest {reported} does not match the manifest ({computed})")
        return computed

    def manifest(self, ref: ImageRef, reference: str, accept: tuple[str, ...] = MANIFEST_TYPES) -> FetchedManifest:
        """The manifest ``reference`` (a tag or a digest) of ``ref``'s repository, exactly as served; a digest
        reference must match the bytes."""
        url = self._url(ref, "manifests", reference)
        status, headers, body = self._call("GET", url, ref, accept=accept)
        if status != 200:
            raise RegistryError(f"{ref}: {url}: HTTP {status}")
        media_type = headers.get("content-type", "").split(";", 1)[0].strip()
        fetched = FetchedManifest(media_type or _media_type_of(body), body)
        if DIGEST.match(reference) and fetched.digest != reference:
            raise RegistryError(f"{ref}: {url}: the registry served a manifest with digest {fetched.digest}, "
                                f"not the {reference} asked for")
        return fetched

    def blob(self, ref: ImageRef, digest: str, write: Callable[[bytes], object]) -> int:
        """Stream blob ``digest`` of ``ref``'s repository to ``write``; its sha256 must be ``digest``. Returns its size.

        What was written before a mismatch is known is the caller's to discard (the error says so).
        """
        url = self._url(ref, "blobs", digest)
        hasher, size = hashlib.sha256(), 0

        def sink(chunk: bytes) -> None:
            nonlocal size
            hasher.update(chunk)
            size += len(chunk)
            write(chunk)

        status, _, _ = self._call("GET", url, ref, sink=sink)
        if status != 200:
            raise RegistryError(f"{ref}: {url}: HTTP {status}")
        computed = "sha256:" + hasher.hexdigest()
        if computed != digest:
            raise RegistryError(f"{ref}: blob {digest}: the registry served content with digest {computed}")
        return size

    def has_blob(self, ref: ImageRef, digest: str) -> bool:
        status, _, _ = self._call("HEAD", self._url(ref, "blobs", digest), ref, actions="pull,push", missing_ok=True)
        return status == 200

    def push_blob(self, ref: ImageRef, digest: str, size: int, body: Body) -> None:
        """Upload one blob into ``ref``'s repository (``POST`` for an upload location, then one ``PUT``)."""
        start = f"{self.base_url(ref.registry)}/v2/{ref.repository}/blobs/uploads/"
        status, headers, _ = self._call("POST", start, ref, actions="pull,push", body=lambda: b"")
        location = headers.get("location")
        if status != 202 or not location:
            raise RegistryError(f"{ref}: {start}: HTTP {status}, expected 202 with an upload Location")
        target = urllib.parse.urljoin(start, location)
        target += ("&" if urllib.parse.urlsplit(target).query else "?") + urllib.parse.urlencode({"digest": digest})
        status, _, _ = self._call("PUT", target, ref, actions="pull,push", body=body,
                                  content=("application/octet-stream", size))
        if status not in (201, 204):
            raise RegistryError(f"{ref}: blob {digest}: upload ended with HTTP {status}, expected 201")

    def push_manifest(self, ref: ImageRef, reference: str, manifest: FetchedManifest) -> str:
        """``PUT`` the manifest under ``reference`` (a tag or its digest); returns the digest the registry reports."""
        url = self._url(ref, "manifests", reference)
        status, headers, _ = self._call("PUT", url, ref, actions="pull,push", body=lambda: manifest.body,
                                        content=(manifest.media_type, len(manifest.body)))
        if status not in (200, 201):
            raise RegistryError(f"{ref}: {url}: manifest upload ended with HTTP {status}, expected 201")
        reported = headers.get("docker-content-digest") or manifest.digest
        if reported != manifest.digest:
            raise RegistryError(f"{ref}: {url}: the registry stored digest {reported}, the manifest is {manifest.digest}")
        return reported

    def _call(self, method: str, url: str, ref: ImageRef, *, accept: tuple[str, ...] = (), actions: str = "pull",
              body: Body | None = None, content: tuple[str, int] | None = None,
              sink: Callable[[bytes], None] | None = None,
              missing_ok: bool = False) -> tuple[int, dict[str, str], bytes]:
        headers = {"Accept": ", ".join(accept)} if accept else {}
        if content is not None:
            headers.update({"Content-Type": content[0], "Content-Length": str(content[1])})
        elif body is not None:
            headers["Content-Length"] = "0"
        key = (ref.registry, ref.repository, actions)
        status, response_headers, data = 0, dict[str, str](), b""
        for _ in range(6):  # the request, one authorization, and redirects
            request_headers = dict(headers)
            if key in self._tokens and urllib.parse.urlsplit(url).netloc == self._host(ref):
                request_headers["Authorization"] = self._tokens[key]
            status, response_headers, data = self._send(method, url, request_headers, body() if body else None, sink)
            if status == 401 and "Authorization" not in request_headers:
                self._tokens[key] = self._authorize(response_headers.get("www-authenticate", ""), ref, url, actions)
                continue
            if status == 401:
                raise RegistryError(f"{ref}: {url}: unauthorized (check {USERNAME_ENV}/{PASSWORD_ENV})")
            if status in _REDIRECTS and response_headers.get("location") and method in ("GET", "HEAD"):
                url = urllib.parse.urljoin(url, response_headers["location"])
                continue
            break
        if status == 404 and not missing_ok:
            raise RegistryError(f"{ref}: {url}: not found in the registry "
                                "(mirror it first: `trainyard bom STACK --format sync --out DIR`, then DIR/sync.sh)")
        return status, response_headers, data

    def _host(self, ref: ImageRef) -> str:
        return urllib.parse.urlsplit(self.base_url(ref.registry)).netloc

    def _authorize(self, challenge: str, ref: ImageRef, url: str, actions: str = "pull") -> str:
        scheme, _, params_text = challenge.partition(" ")
        params = dict(_CHALLENGE_PARAM.findall(params_text))
        if scheme.lower() == "basic":
            if self.credentials is None:
                raise RegistryError(f"{ref}: {url}: the registry wants basic credentials; set {USERNAME_ENV}/{PASSWORD_ENV}")
            return self.credentials.basic()
        if scheme.lower() != "bearer" or "realm" not in params:
            raise RegistryError(f"{ref}: {url}: unsupported authentication challenge {challenge!r}")
        query = {"scope": params.get("scope") or f"repository:{ref.repository}:{actions}"}
        if "service" in params:
            query["service"] = params["service"]
        token_url = f"{params['realm']}?{urllib.parse.urlencode(query)}"
        headers = {"Authorization": self.credentials.basic()} if self.credentials else {}
        status, _, body = self._send("GET", token_url, headers)
        if status != 200:
            raise RegistryError(f"{ref}: token endpoint {params['realm']}: HTTP {status}")
        try:
            answer = json.loads(body)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"{ref}: token endpoint {params['realm']} gave no token")
        return f"Bearer {token}"

    def _tls(self) -> ssl.SSLContext:
        """One TLS context per client: building one loads the system's CA bundle (tens of ms), once per request
        would be most of the time a presence check of ~40 images takes."""
        if self._context is None:
            self._context = ssl._create_unverified_context() if self.insecure else ssl.create_default_context()  # noqa: S323
        return self._context

    def _send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | IO[bytes] | None = None,
              sink: Callable[[bytes], None] | None = None) -> tuple[int, dict[str, str], bytes]:
        if not url.startswith(("https://", "http://")):
            raise RegistryError(f"{url}: only http(s) URLs are asked")
        if url.startswith("http://") and not self._plain_http_allowed(url):
            raise RegistryError(f"{url}: plain http; pass --insecure to allow it")
        request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))  # noqa: S310 - scheme checked above
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self._tls()), _NoRedirect())
        try:
            with opener.open(request, timeout=TIMEOUT_SECONDS) as response:
                response_headers = {k.lower(): v for k, v in response.headers.items()}
                if sink is not None and response.status == 200:
                    while chunk := response.read(CHUNK):
                        sink(chunk)
                    return response.status, response_headers, b""
                return response.status, response_headers, bytes(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, b""
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            text = (getattr(reason, "strerror", None) or str(reason)) if isinstance(reason, OSError) else str(reason)
            raise RegistryUnreachable(f"{url}: {text}", urllib.parse.urlsplit(url).netloc, text) from None


def _media_type_of(body: bytes) -> str:
    """The ``mediaType`` a manifest declares in itself (for a registry that sends no Content-Type)."""
    try:
        declared = json.loads(body).get("mediaType")
    except (ValueError, AttributeError):
        declared = None
    return declared if isinstance(declared, str) else "application/vnd.oci.image.manifest.v1+json"
