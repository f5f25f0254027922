"""Ask a registry for the digest of a manifest, over the OCI distribution API.

``HEAD /v2/<name>/manifests/<tag>`` with an ``Accept`` header listing the OCI index and
manifest types and Docker's manifest list and v2 manifest types; the registry answers with
``Docker-Content-Digest``. Where a HEAD carries no digest, a GET fetches the manifest and its
sha256 is the digest (and, where both exist, they must agree).

Authentication follows the registry's challenge (``WWW-Authenticate`` on a 401): ``Bearer``
(token from the realm, for ``repository:<name>:pull``, with basic credentials where given)
or ``Basic``. Credentials come from the environment only: ``TRAINYARD_REGISTRY_USERNAME`` and
``TRAINYARD_REGISTRY_PASSWORD``. They are never logged or written anywhere.

Ref: https://github.com/opencontainers/distribution-spec/blob/main/spec.md#pulling-manifests
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
from collections.abc import Mapping
from dataclasses import dataclass, field

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


@dataclass
class RegistryClient:
    """Manifest digests from registries.

    ``endpoints`` maps a registry host to the base URL to ask instead (``registry.example.com`` ->
    ``http://127.0.0.1:5000``: a loopback copy of the mirror, or a pull-through proxy). Plain
    ``http`` and unverified TLS are allowed only with ``insecure``.
    """

    endpoints: Mapping[str, str] = field(default_factory=dict)
    credentials: Credentials | None = None
    insecure: bool = False
    _tokens: dict[tuple[str, str], str] = field(default_factory=dict)

    def base_url(self, registry: str) -> str:
        base = self.endpoints.get(registry) or f"https://{DOCKER_HUB_API if registry == DOCKER_HUB else registry}"
        if base.startswith("http://") and not self.insecure:
            raise RegistryError(f"{registry}: endpoint {base} is plain http; pass --insecure to allow it")
        return base.rstrip("/")

    def digest(self, ref: ImageRef) -> str:
        """The digest the registry serves for ``ref``'s tag."""
        url = f"{self.base_url(ref.registry)}/v2/{ref.repository}/manifests/{ref.tag or ref.digest}"
        status, headers, _ = self._request("HEAD", url, ref)
        digest = headers.get("docker-content-digest")
        if status == 200 and digest and DIGEST.match(digest):
            return digest
        status, headers, body = self._request("GET", url, ref)
        if status != 200:
            raise RegistryError(f"{ref}: {url}: HTTP {status}")
        computed = "sha256:" + hashlib.sha256(body).hexdigest()
        reported = headers.get("docker-content-digest")
        if reported and reported != computed:
            raise RegistryError(f"{ref}: {url}: Docker-Content-Digest {reported} does not match the manifest ({computed})")
        return computed

    def _request(self, method: str, url: str, ref: ImageRef) -> tuple[int, dict[str, str], bytes]:
        headers = {"Accept": ", ".join(MANIFEST_TYPES)}
        token = self._tokens.get((ref.registry, ref.repository))
        if token:
            headers["Authorization"] = token
        status, response_headers, body = self._send(method, url, headers)
        if status == 401:
            authorization = self._authorize(response_headers.get("www-authenticate", ""), ref, url)
            self._tokens[(ref.registry, ref.repository)] = authorization
            headers["Authorization"] = authorization
            status, response_headers, body = self._send(method, url, headers)
            if status == 401:
                raise RegistryError(f"{ref}: {url}: unauthorized (check {USERNAME_ENV}/{PASSWORD_ENV})")
        if status == 404:
            raise RegistryError(f"{ref}: {url}: not found in the registry "
                                "(mirror it first: `trainyard bom STACK --format sync --out DIR`, then DIR/sync.sh)")
        return status, response_headers, body

    def _authorize(self, challenge: str, ref: ImageRef, url: str) -> str:
        scheme, _, params_text = challenge.partition(" ")
        params = dict(_CHALLENGE_PARAM.findall(params_text))
        if scheme.lower() == "basic":
            if self.credentials is None:
                raise RegistryError(f"{ref}: {url}: the registry wants basic credentials; set {USERNAME_ENV}/{PASSWORD_ENV}")
            return self.credentials.basic()
        if scheme.lower() != "bearer" or "realm" not in params:
            raise RegistryError(f"{ref}: {url}: unsupported authentication challenge {challenge!r}")
        query = {"scope": params.get("scope") or f"repository:{ref.repository}:pull"}
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

    def _send(self, method: str, url: str, headers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        if not url.startswith(("https://", "http://")):
            raise RegistryError(f"{url}: only http(s) URLs are asked")
        if url.startswith("http://") and not self.insecure:
            raise RegistryError(f"{url}: plain http; pass --insecure to allow it")
        request = urllib.request.Request(url, method=method, headers=dict(headers))  # noqa: S310 - scheme checked above
        context = ssl._create_unverified_context() if self.insecure else ssl.create_default_context()  # noqa: S323
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=context) as response:  # noqa: S310
                return response.status, {k.lower(): v for k, v in response.headers.items()}, bytes(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, b""
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            text = (getattr(reason, "strerror", None) or str(reason)) if isinstance(reason, OSError) else str(reason)
            raise RegistryUnreachable(f"{url}: {text}", urllib.parse.urlsplit(url).netloc, text) from None
