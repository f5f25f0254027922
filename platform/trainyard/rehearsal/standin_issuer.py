"""The certificate stand-in's issuer: a rehearsal CA and the keys and certificates made from a Certificate's spec.

What cert-manager's issuing controller would produce for a cert-manager.io/v1 Certificate, made with openssl like the
rest of the rehearsal's PKI (``pki.py``), signed by a CA of the stand-in's own (``cert-standin-ca``, beside the
cluster CA in the cluster's ``pki/`` directory: the cluster CA, which the API server trusts for client certificates,
never signs a workload's serving certificate).

Read in cert-manager v1.21.1:
- the defaults: RSA 2048 (``pkg/apis/certmanager/v1/types.go`` PrivateKey, "defaults to RSA", size 2048), PKCS1
  encoding (``PrivateKeyEncoding``, default PKCS1; Ed25519 is always PKCS8), duration 90 days
  (``pkg/apis/certmanager/v1/const.go`` DefaultCertificateDuration), usages ``digital signature, key encipherment``
  (``types.go`` DefaultKeyUsages), ``isCA`` adds ``cert sign`` (``pkg/util/pki/csr.go`` BuildKeyUsages);
- the renewal time: two thirds through the validity unless ``renewBefore``/``renewBeforePercentage`` say otherwise
  (``pkg/util/pki/renewaltime.go`` RenewalTime: ``renewBefore`` defaults to a third of the duration).

The signer follows the issuer's kind only so far: an Issuer or ClusterIssuer with ``spec.selfSigned`` gets a
certificate signed by its own key, whose ``ca.crt`` is the certificate itself (cert-manager's SelfSigned issuer); any
other issuer is served by the stand-in's CA. The difference matters: a Go TLS client sends its certificate only where
its issuer is one the server asks for, so the barman-cloud plugin, which trusts exactly its client's self-signed
certificate (``--client-cert``), refused the operator's CA-signed one ("tls: certificate required", 2026-12-06).
openssl 3.0's ``x509 -days`` takes whole days, so a duration is rounded up to a day.
"""

from __future__ import annotations

import datetime
import secrets
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CA_NAME = "cert-standin-ca"
CA_SUBJECT = "/CN=trainyard-rehearsal-cert-standin-ca"
DEFAULT_DURATION = 90 * 24 * 3600

# cert-manager's KeyUsage names (pkg/apis/certmanager/v1/types.go) -> openssl's keyUsage / extendedKeyUsage names.
KEY_USAGES = {"signing": "digitalSignature", "digital signature": "digitalSignature",
              "content commitment": "nonRepudiation", "key encipherment": "keyEncipherment",
              "key agreement": "keyAgreement", "data encipherment": "dataEncipherment", "cert sign": "keyCertSign",
              "crl sign": "cRLSign", "encipher only": "encipherOnly", "decipher only": "decipherOnly"}
EXTENDED_USAGES = {"server auth": "serverAuth", "client auth": "clientAuth", "code signing": "codeSigning",
                   "email protection": "emailProtection", "timestamping": "timeStamping", "ocsp signing": "OCSPSigning",
                   "any": "anyExtendedKeyUsage", "ipsec end system": "ipsecEndSystem", "ipsec tunnel": "ipsecTunnel",
                   "ipsec user": "ipsecUser", "s/mime": "emailProtection", "microsoft sgc": "msSGC",
                   "netscape sgc": "nsSGC"}
DEFAULT_USAGES = ("digital signature", "key encipherment")
RSA_SIZES = (2048, 3072, 4096, 8192)
EC_CURVES = {256: "P-256", 384: "P-384", 521: "P-521"}
# The spec fields the stand-in honours; a Certificate that sets any other is refused with its names (spec_problems).
SUPPORTED_SPEC = frozenset({"secretName", "issuerRef", "commonName", "dnsNames", "ipAddresses", "uris", "duration",
                            "renewBefore", "usages", "isCA", "privateKey", "secretTemplate", "subject",
                            "revisionHistoryLimit"})
SUPPORTED_SUBJECT = frozenset({"organizations"})
SUPPORTED_PRIVATE_KEY = frozenset({"algorithm", "size", "encoding", "rotationPolicy"})


class IssueError(Exception):
    """openssl could not make the key or the certificate; says which step and why."""


@dataclass(frozen=True)
class Request:
    """What a Certificate asks for, with cert-manager's defaults filled in."""

    common_name: str
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    uris: tuple[str, ...]
    organizations: tuple[str, ...]
    duration_seconds: int
    renew_before_seconds: int
    usages: tuple[str, ...]
    is_ca: bool
    algorithm: str
    size: int
    encoding: str


@dataclass(frozen=True)
class Issued:
    key_pem: bytes
    cert_pem: bytes
    not_before: datetime.datetime
    not_after: datetime.datetime


def parse_duration(text: str) -> int:
    """Seconds of a Go duration as the Certificate writes it (``2160h``, ``1h30m``, ``90s``); ValueError otherwise."""
    units = {"h": 3600, "m": 60, "s": 1}
    total, number = 0.0, ""
    for char in text.strip():
        if char.isdigit() or char == ".":
            number += char
        elif char in units and number:
            total, number = total + float(number) * units[char], ""
        else:
            raise ValueError(f"{text!r} is not a duration (hours, minutes, seconds: 2160h, 1h30m)")
    if number or total <= 0:
        raise ValueError(f"{text!r} is not a positive duration (hours, minutes, seconds: 2160h, 1h30m)")
    return int(total)


def spec_problems(spec: Mapping[str, Any]) -> list[str]:
    """Why the stand-in cannot issue ``spec`` as cert-manager would (empty when it can): the fields it does not
    implement (keystores, other subject fields, name constraints...), named, and values it does not know."""
    found = [f"spec.{name}" for name in sorted(set(spec) - SUPPORTED_SPEC)]
    found += [f"spec.subject.{name}" for name in sorted(set(spec.get("subject") or {}) - SUPPORTED_SUBJECT)]
    key = spec.get("privateKey") or {}
    found += [f"spec.privateKey.{name}" for name in sorted(set(key) - SUPPORTED_PRIVATE_KEY)]
    if not spec.get("secretName"):
        found.append("spec.secretName is required")
    if not (spec.get("commonName") or spec.get("dnsNames") or spec.get("ipAddresses") or spec.get("uris")):
        found.append("one of commonName, dnsNames, ipAddresses, uris is required")
    for usage in spec.get("usages") or ():
        if usage not in KEY_USAGES and usage not in EXTENDED_USAGES:
            found.append(f"spec.usages: unknown usage {usage!r}")
    try:
        request_of(spec)
    except ValueError as error:
        found.append(str(error))
    return found


def request_of(spec: Mapping[str, Any]) -> Request:
    """The Request of a Certificate's spec, with cert-manager's defaults; ValueError names a value it cannot take."""
    key = spec.get("privateKey") or {}
    algorithm = str(key.get("algorithm") or "RSA")
    if algorithm not in ("RSA", "ECDSA", "Ed25519"):
        raise ValueError(f"spec.privateKey.algorithm: {algorithm!r} (RSA, ECDSA or Ed25519)")
    size = int(key.get("size") or {"RSA": 2048, "ECDSA": 256, "Ed25519": 0}[algorithm])
    if (algorithm == "RSA" and size not in RSA_SIZES) or (algorithm == "ECDSA" and size not in EC_CURVES):
        raise ValueError(f"spec.privateKey.size: {size} is not a {algorithm} size")
    encoding = str(key.get("encoding") or "PKCS1")
    if encoding not in ("PKCS1", "PKCS8"):
        raise ValueError(f"spec.privateKey.encoding: {encoding!r} (PKCS1 or PKCS8)")
    duration = parse_duration(str(spec["duration"])) if spec.get("duration") else DEFAULT_DURATION
    renew_before = parse_duration(str(spec["renewBefore"])) if spec.get("renewBefore") else duration // 3
    if renew_before >= duration:
        raise ValueError(f"spec.renewBefore ({spec.get('renewBefore')}) must be shorter than the duration")
    is_ca = bool(spec.get("isCA"))
    usages = tuple(spec.get("usages") or DEFAULT_USAGES)
    if is_ca and "cert sign" not in usages:
        usages = (*usages, "cert sign")
    dns = tuple(str(n) for n in spec.get("dnsNames") or ())
    common = str(spec.get("commonName") or "")
    for value in (common, *dns, *(str(o) for o in (spec.get("subject") or {}).get("organizations") or ())):
        if any(c in value for c in "/=+,\\\n"):
            raise ValueError(f"{value!r} cannot be put in a certificate subject or name")
    return Request(common, dns, tuple(str(i) for i in spec.get("ipAddresses") or ()),
                   tuple(str(u) for u in spec.get("uris") or ()),
                   tuple(str(o) for o in (spec.get("subject") or {}).get("organizations") or ()),
                   duration, renew_before, usages, is_ca, "Ed25519" if algorithm == "Ed25519" else algorithm,
                   size, "PKCS8" if algorithm == "Ed25519" else encoding)


def extensions(request: Request) -> str:
    """The openssl extension lines of the certificate: constraints, usages, subject alternative names."""
    key_usages = sorted({KEY_USAGES[u] for u in request.usages if u in KEY_USAGES})
    extended = sorted({EXTENDED_USAGES[u] for u in request.usages if u in EXTENDED_USAGES})
    names = ([f"DNS:{n}" for n in request.dns_names] + [f"IP:{i}" for i in request.ip_addresses]
             + [f"URI:{u}" for u in request.uris])
    lines = [f"basicConstraints=critical,CA:{'TRUE' if request.is_ca else 'FALSE'}",
             "subjectKeyIdentifier=hash", "authorityKeyIdentifier=keyid"]
    if key_usages:
        lines.append("keyUsage=critical," + ",".join(key_usages))
    if extended:
        lines.append("extendedKeyUsage=" + ",".join(extended))
    if names:
        lines.append("subjectAltName=" + ",".join(names))
    return "\n".join(lines) + "\n"


def subject(request: Request) -> str:
    return "".join(f"/O={o}" for o in request.organizations) + (f"/CN={request.common_name}" if request.common_name
                                                                 else "")


def _key_command(request: Request) -> list[str]:
    if request.algorithm == "Ed25519":
        return ["genpkey", "-algorithm", "ed25519"]
    if request.algorithm == "ECDSA":
        curve = EC_CURVES[request.size]
        return (["genpkey", "-algorithm", "EC", "-pkeyopt", f"ec_paramgen_curve:{curve}"] if request.encoding == "PKCS8"
                else ["ecparam", "-name", {"P-256": "prime256v1", "P-384": "secp384r1", "P-521": "secp521r1"}[curve],
                      "-genkey", "-noout"])
    return (["genpkey", "-algorithm", "RSA", "-pkeyopt", f"rsa_keygen_bits:{request.size}"]
            if request.encoding == "PKCS8" else ["genrsa", "-traditional", str(request.size)])


def _openssl(args: list[str], cwd: Path, step: str) -> str:
    try:
        result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,  # noqa: S603, S607
                                check=False)
    except FileNotFoundError:
        raise IssueError("openssl is required by the certificate stand-in (Debian: apt-get install openssl)") from None
    if result.returncode != 0:
        raise IssueError(f"openssl {step}: {result.stderr.strip()}")
    return result.stdout


class StandinCa:
    """The stand-in's CA in ``directory`` (made on first use, 10 years) and what it issues."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.cert = directory / f"{CA_NAME}.crt"
        self.key = directory / f"{CA_NAME}.key"

    def ensure(self) -> bytes:
        """The CA certificate (PEM), made first where absent."""
        if not (self.cert.exists() and self.key.exists()):
            self.directory.mkdir(parents=True, exist_ok=True)
            _openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", self.key.name, "-out",
                      self.cert.name, "-days", "3650", "-subj", CA_SUBJECT,
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"], self.directory, "CA")
            self.key.chmod(0o600)
        return self.cert.read_bytes()

    def issue(self, request: Request, self_signed: bool = False) -> Issued:
        """A new key and a certificate for ``request`` signed by this CA, or, for a ``selfSigned`` issuer, by its own
        key (cert-manager's SelfSigned issuer: issuer = subject, the Secret's ``ca.crt`` is the certificate itself)."""
        self.ensure()
        days = max(1, -(-request.duration_seconds // 86400))
        signer = ["-signkey", "key.pem"] if self_signed else ["-CA", str(self.cert), "-CAkey", str(self.key)]
        with tempfile.TemporaryDirectory(prefix="trainyard-cert-standin-") as work:
            cwd = Path(work)
            key_pem = _openssl(_key_command(request), cwd, "key")
            (cwd / "key.pem").write_text(key_pem)
            (cwd / "ext.cnf").write_text(extensions(request))
            _openssl(["req", "-new", "-key", "key.pem", "-out", "req.csr", "-subj", subject(request) or "/"], cwd, "CSR")
            _openssl(["x509", "-req", "-in", "req.csr", *signer,
                      "-set_serial", str(secrets.randbits(120)), "-days", str(days), "-extfile", "ext.cnf",
                      "-out", "cert.pem"], cwd, "sign")
            cert_pem = (cwd / "cert.pem").read_bytes()
            dates = _openssl(["x509", "-in", "cert.pem", "-noout", "-startdate", "-enddate", "-dateopt", "iso_8601"],
                             cwd, "read dates")
        found = dict(line.split("=", 1) for line in dates.splitlines() if "=" in line)
        return Issued(key_pem.encode(), cert_pem, _iso(found["notBefore"]), _iso(found["notAfter"]))


def _iso(text: str) -> datetime.datetime:
    """openssl's ``-dateopt iso_8601`` form (``2026-12-05 13:10:00Z``) as an aware datetime."""
    return datetime.datetime.fromisoformat(text.strip().replace(" ", "T").replace("Z", "+00:00"))
