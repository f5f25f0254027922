"""Health probes of the rehearsal's servers on loopback: a real answer, not an open port."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

from trainyard.rehearsal.pki import Pki


def https_ok(url: str, pki: Pki | None = None, client: str | None = None, body: str = "ok") -> bool:
    """GET ``url`` over TLS (verified against the cluster CA when ``pki`` is given); True iff it answers ``body``."""
    context = ssl.create_default_context(cafile=str(pki.path("ca.crt"))) if pki else ssl._create_unverified_context()  # noqa: S323 - loopback health port with a self-signed serving cert
    if pki and client:
        context.load_cert_chain(str(pki.path(f"{client}.crt")), str(pki.path(f"{client}.key")))
    try:
        with urllib.request.urlopen(url, context=context, timeout=3) as response:  # noqa: S310 - loopback URL we built
            return bool(response.status == 200 and response.read().decode().strip() == body)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def http_ok(url: str, contains: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310 - loopback URL we built
            return contains in response.read().decode()
    except (urllib.error.URLError, OSError):
        return False
