"""Where a registry host is asked: the one mapping the program and every ``trainyard`` command read.

An image keeps its real name (``registry.trainyard.internal/mirror/kueue/kueue:v0.19.2``, what the nodes pull);
the machine that asks the registry may have to reach that host at another address: a loopback copy of the
mirror (the rehearsal's ``trainyard.local`` registry on ``127.0.0.1``, a test's ``crane registry serve``), a
pull-through proxy, a port forward. That is a fact about the machine, not the stack, so it comes from the
environment:

    TRAINYARD_REGISTRY_ENDPOINTS="trainyard.local=http://127.0.0.1:25000 registry.example.com=https://10.0.0.5:5000"

``HOST=URL`` items separated by spaces or commas, the syntax of ``--endpoint`` (which ``images lock``,
``images verify`` and ``bom --export/--import`` take too, and which wins for its host). Plain ``http`` is
accepted in the variable only for a loopback address (127.0.0.0/8, ::1, localhost), and such an endpoint is
then asked over plain http without ``--insecure``: the traffic never leaves the machine, and the Pulumi
program has no ``--insecure`` to pass (the same rule as ``charts.plain_http``). Any other plain-http or
unverified-TLS endpoint needs the command line's ``--endpoint`` with ``--insecure``.

Credentials stay where ``registry.Credentials`` reads them (``TRAINYARD_REGISTRY_USERNAME``/``_PASSWORD``).
"""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping

from trainyard.supply.registry import Credentials, RegistryClient

ENDPOINTS_ENV = "TRAINYARD_REGISTRY_ENDPOINTS"
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$")


class EndpointError(ValueError):
    """A ``HOST=URL`` mapping that cannot be used: names where it came from and what is wrong."""


def parse_endpoint(value: str, origin: str = "--endpoint") -> tuple[str, str]:
    """``HOST=URL`` -> (host, url), or ``EndpointError`` naming ``origin`` (a flag or the variable)."""
    host, sep, url = value.partition("=")
    parts = urllib.parse.urlsplit(url) if sep else None
    if (parts is None or not _HOST.match(host) or parts.scheme not in ("http", "https") or not parts.netloc
            or parts.query or parts.fragment):
        raise EndpointError(f"{origin} {value!r}: expected HOST=http(s)://ADDRESS[:PORT][/PATH] "
                            "(e.g. registry.example.com=http://127.0.0.1:5000)")
    return host, url


def is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def environment_endpoints(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The host -> URL mapping of ``TRAINYARD_REGISTRY_ENDPOINTS`` (empty where unset)."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for item in re.split(r"[\s,]+", env.get(ENDPOINTS_ENV, "").strip()):
        if not item:
            continue
        host, url = parse_endpoint(item, ENDPOINTS_ENV)
        if url.startswith("http://") and not is_loopback(url):
            raise EndpointError(f"{ENDPOINTS_ENV} {item!r}: plain http is accepted here only for a loopback address "
                                "(127.0.0.1, ::1, localhost); use https, or --endpoint with --insecure on the command line")
        if host in out and out[host] != url:
            raise EndpointError(f"{ENDPOINTS_ENV}: {host} is mapped twice ({out[host]}, {url})")
        out[host] = url
    return out


def registry_client(flags: Iterable[str] = (), insecure: bool = False,
                    environ: Mapping[str, str] | None = None) -> RegistryClient:
    """The client every command and the program ask registries with: ``TRAINYARD_REGISTRY_ENDPOINTS``, then the
    ``--endpoint`` flags over it (per host); credentials from the environment; plain http to the variable's
    loopback endpoints, anything else plain or unverified only with ``insecure``."""
    from_env = environment_endpoints(environ)
    from_flags = dict(parse_endpoint(value) for value in flags)
    endpoints = {**from_env, **from_flags}
    plain = frozenset(urllib.parse.urlsplit(url).netloc for host, url in from_env.items()
                      if url.startswith("http://") and host not in from_flags)
    return RegistryClient(endpoints, Credentials.from_environment(environ), insecure=insecure, plain_http=plain)


__all__ = ["ENDPOINTS_ENV", "EndpointError", "environment_endpoints", "is_loopback", "parse_endpoint", "registry_client"]
