"""The rehearsal's stand-in for cert-manager: issues each Certificate's Secret and injects its CA where asked.

KServe's chart asks cert-manager for its webhook serving certificate (an Issuer, a Certificate whose Secret the
controller's pod mounts, ``cert-manager.io/inject-ca-from`` on its webhook configurations). cert-manager itself cannot
be built here yet (docs/tools.md "cert-manager: not built yet"), so on a rehearsal cluster that lists ``cert-manager``
in ``rehearsal.external_controllers`` this process does what cert-manager's controller and cainjector would do for the
Certificates the stack declares, and nothing else:

- **issuing** (cert-manager v1.21.1 ``pkg/controller/certificates/issuing/internal/secret.go`` ``SecretsManager``):
  for every ``cert-manager.io/v1`` Certificate, its ``spec.secretName`` Secret of type ``kubernetes.io/tls`` (an
  existing Secret keeps its type: ``getCertificateSecret``) with ``tls.crt``, ``tls.key`` and ``ca.crt``
  (``setValues``), the annotations ``AnnotationsForCertificate`` writes (``cert-manager.io/common-name``,
  ``alt-names``, ``ip-sans``, ``uri-sans``, ``subject-organizations``: internal/controller/certificates/secrets.go)
  plus ``cert-manager.io/certificate-name`` and the issuer's name, kind and group, the label
  ``controller.cert-manager.io/fao: "true"``, and ``spec.secretTemplate``'s labels and annotations; written by
  server-side apply with ``force``, as cert-manager does. The key and certificate come from the Certificate's spec
  with cert-manager's defaults (``standin_issuer.py``), self-signed where the issuer is a ``selfSigned`` Issuer or
  ClusterIssuer (``ca.crt`` then is the certificate itself, as cert-manager writes it), else signed by the stand-in's
  CA. The Certificate's status gets
  ``Ready`` and ``notBefore``/``notAfter``/``renewalTime``/``revision``. A Secret is issued again when the spec it was
  issued for changed, its CA is not the stand-in's, or its renewal time passed. A Certificate the stand-in cannot
  issue as cert-manager would (a keystore, a subject field it does not write: ``standin_issuer.spec_problems``) gets
  ``Ready=False`` naming the fields, and no Secret.
- **injecting** (``pkg/controller/cainjector``): every MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
  APIService and CRD (its conversion webhook, where ``spec.conversion.strategy`` is ``Webhook``: injectables.go
  ``crdConversionTarget.SetCA``) annotated ``cert-manager.io/inject-ca-from: <namespace>/<certificate>`` gets the
  ``ca.crt`` of that Certificate's Secret in each ``caBundle``, but only from a Secret whose
  ``cert-manager.io/certificate-name`` annotation names that Certificate (sources.go ``certificateDataSource.ReadCA``).
  The CA is merged into the bundle already there, duplicates dropped (``CAInjectorMerging``, GA and on in v1.21:
  internal/cainjector/bundle/bundle.go ``AppendCertificatesToBundle``; the stand-in does not drop expired ones).
  Written by server-side apply of only ``webhooks[name].clientConfig.caBundle`` (or the CRD's or APIService's
  ``caBundle``) with ``force`` (reconciler.go: ``Client.Apply(..., ForceOwnership, FieldOwner)``), so
  ``pulumi up``'s own server-side apply, which never sets ``caBundle``, does not fight it.
  cainjector's two other sources (``inject-ca-from-secret``, ``inject-apiserver-ca``: sources.go) are not served:
  no chart the stack installs uses them.

Its field manager is ``trainyard-cert-standin``; its identity a client certificate ``trainyard:cert-standin``. It is a
rehearsal piece, and cannot be anything else: it lives in ``trainyard.rehearsal`` and no product module imports it
(a unit test checks), it connects only to a loopback API server with the rehearsal cluster's own CA, and the
rehearsal starts it only where the stack lists ``cert-manager`` as external (``wanted``). A stack that does not
installs the real cert-manager from its chart. docs/architecture.md has the decision.

Run by the rehearsal as ``python -m trainyard.rehearsal.cert_standin --server URL --pki DIR`` (pid file and log like
every rehearsal process); it looks every ``--interval`` seconds (2), and SIGTERM stops it.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.rehearsal import api_loop
from trainyard.rehearsal.api_client import ApiClient, ApiError, Obj
from trainyard.rehearsal.api_loop import missing_pki, run_passes, stop_on_signals
from trainyard.rehearsal.standin_issuer import Issued, IssueError, StandinCa, request_of, spec_problems

PROCESS = "cert-standin"  # its pid file and log, beside the control plane's
FIELD_MANAGER = "trainyard-cert-standin"
USER = "trainyard:cert-standin"
CLIENT_CERT = "cert-standin"  # pki/<name>.crt, .key
INJECT = "cert-manager.io/inject-ca-from"
CERTIFICATE_NAME = "cert-manager.io/certificate-name"
FAO_LABEL = "controller.cert-manager.io/fao"
# What the stand-in records on a Secret it wrote: the digest of what it was issued for, and when to renew it.
ISSUED_FOR = "rehearsal.trainyard.dev/cert-standin-issued-for"
RENEW_AFTER = "rehearsal.trainyard.dev/cert-standin-renew-after"
CERTIFICATES = "/apis/cert-manager.io/v1/certificates"
CERT_MANAGER = "cert-manager"


@dataclass(frozen=True)
class Target:
    """A kind cainjector injects into: where it is listed, its apiVersion."""

    kind: str
    path: str
    api_version: str


TARGETS = (
    Target("MutatingWebhookConfiguration", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
           "admissionregistration.k8s.io/v1"),
    Target("ValidatingWebhookConfiguration", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
           "admissionregistration.k8s.io/v1"),
    Target("APIService", "/apis/apiregistration.k8s.io/v1/apiservices", "apiregistration.k8s.io/v1"),
    Target("CustomResourceDefinition", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
           "apiextensions.k8s.io/v1"),
)


def wanted(config: PlatformConfig) -> bool:
    """Whether the rehearsal of ``config`` (with real nodes) needs the stand-in: cert-manager is external (nothing
    else issues) and something installed here declares Certificates: KServe's chart, where serving is on and KServe
    is not external, or the barman-cloud plugin's manifest, where the MLflow database is backed up
    (``barman_cloud_install.wanted``). A stack that does not list cert-manager as external installs the real one:
    the stand-in never runs beside it."""
    from trainyard.rehearsal import barman_cloud_install

    externals = config.rehearsal.external_controllers
    kserve = config.serving is not None and config.serving.cert_manager.install and "kserve" not in externals
    return CERT_MANAGER in externals and (kserve or barman_cloud_install.wanted(config, real_nodes=True))


# ---------------------------------------------------------------- issuing (pure)


# What a self-signed certificate is issued under, in place of a CA (``spec_digest``, ``reissue_reason``).
SELF_SIGNED = b"cert-manager.io selfSigned issuer"


def spec_digest(certificate: Obj, ca_pem: bytes) -> str:
    """What a Secret was issued for: the Certificate's identity, its spec but the fields that do not shape the key
    pair (the Secret's name and template, the revision limit), and the CA."""
    spec = {k: v for k, v in (certificate.get("spec") or {}).items()
            if k not in ("secretName", "secretTemplate", "revisionHistoryLimit")}
    meta = certificate["metadata"]
    doc = {"certificate": f"{meta.get('namespace')}/{meta['name']}", "spec": spec,
           "ca": hashlib.sha256(ca_pem).hexdigest()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def reissue_reason(certificate: Obj, secret: Obj | None, ca_pem: bytes, now: datetime.datetime) -> str | None:
    """Why ``certificate``'s Secret must be (re)issued, or None when it is current."""
    if secret is None:
        return "no Secret yet"
    annotations = secret["metadata"].get("annotations") or {}
    data = secret.get("data") or {}
    if any(not data.get(key) for key in ("tls.crt", "tls.key", "ca.crt")):
        return "the Secret lacks tls.crt, tls.key or ca.crt"
    if annotations.get(ISSUED_FOR) != spec_digest(certificate, ca_pem):
        return "the Certificate's spec or the CA changed since the Secret was issued"
    renew = annotations.get(RENEW_AFTER)
    if not renew or now >= datetime.datetime.fromisoformat(renew):
        return "its renewal time passed"
    return None


def _csv(values: tuple[str, ...]) -> str:
    return ",".join(values)


def renewal_time(issued: Issued, renew_before_seconds: int) -> datetime.datetime:
    """cert-manager's RenewalTime: ``renewBefore`` before notAfter, truncated to the second."""
    return (issued.not_after - datetime.timedelta(seconds=renew_before_seconds)).replace(microsecond=0)


def certificate_secret(certificate: Obj, issued: Issued, ca_pem: bytes, secret_type: str,
                       now: datetime.datetime, self_signed: bool = False) -> Obj:
    """The apply configuration of ``certificate``'s Secret holding ``issued`` (signed by the CA ``ca_pem``, or by its
    own key: its ``ca.crt`` is then the certificate itself, as cert-manager's SelfSigned issuer writes it)."""
    issued_under = SELF_SIGNED if self_signed else ca_pem
    meta, spec = certificate["metadata"], certificate["spec"]
    request = request_of(spec)
    template = spec.get("secretTemplate") or {}
    issuer = spec.get("issuerRef") or {}
    annotations = {**(template.get("annotations") or {}),
                   "cert-manager.io/common-name": request.common_name,
                   "cert-manager.io/alt-names": _csv(request.dns_names),
                   "cert-manager.io/ip-sans": _csv(request.ip_addresses),
                   "cert-manager.io/uri-sans": _csv(request.uris),
                   **({"cert-manager.io/subject-organizations": _csv(request.organizations)}
                      if request.organizations else {}),
                   CERTIFICATE_NAME: meta["name"],
                   "cert-manager.io/issuer-name": str(issuer.get("name", "")),
                   "cert-manager.io/issuer-kind": str(issuer.get("kind") or "Issuer"),
                   "cert-manager.io/issuer-group": str(issuer.get("group") or "cert-manager.io"),
                   ISSUED_FOR: spec_digest(certificate, issued_under),
                   RENEW_AFTER: renewal_time(issued, request.renew_before_seconds).isoformat()}
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": spec["secretName"], "namespace": meta["namespace"],
                         "labels": {**(template.get("labels") or {}), FAO_LABEL: "true"}, "annotations": annotations},
            "type": secret_type,
            "data": {"tls.crt": b64(issued.cert_pem), "tls.key": b64(issued.key_pem),
                     "ca.crt": b64(issued.cert_pem if self_signed else ca_pem)}}


def _ready(certificate: Obj, status: str, reason: str, message: str, now: datetime.datetime) -> Obj:
    previous = next((c for c in (certificate.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"),
                    None)
    since = (previous.get("lastTransitionTime") if previous and previous.get("status") == status
             else now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return {"type": "Ready", "status": status, "reason": reason, "message": message, "lastTransitionTime": since,
            "observedGeneration": certificate["metadata"].get("generation", 1)}


def _timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def issued_status(certificate: Obj, issued: Issued, renew: datetime.datetime, now: datetime.datetime) -> Obj:
    """The Certificate's status once its Secret holds ``issued`` (cert-manager's Ready condition and times)."""
    revision = int((certificate.get("status") or {}).get("revision") or 0) + 1
    return {"conditions": [_ready(certificate, "True", "Ready", "Certificate is up to date and has not expired", now)],
            "notBefore": _timestamp(issued.not_before), "notAfter": _timestamp(issued.not_after),
            "renewalTime": _timestamp(renew), "revision": revision}


# ---------------------------------------------------------------- injecting (pure)

_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s+(.*?)\s+-----END CERTIFICATE-----", re.S)


def _blocks(pem: bytes) -> list[bytes]:
    """The DER of each certificate of a PEM bundle (whitespace inside the base64 removed)."""
    return [base64.b64decode(b"".join(body.split())) for body in _PEM.findall(pem)]


def merged_bundle(existing_b64: str | None, ca_pem: bytes) -> str:
    """The ``caBundle`` (base64 of PEM) with ``ca_pem``'s certificates appended to those already there, each once."""
    existing = base64.b64decode(existing_b64) if existing_b64 else b""
    seen: list[bytes] = []
    for der in [*_blocks(existing), *_blocks(ca_pem)]:
        if der not in seen:
            seen.append(der)
    pem = b"".join(b"-----BEGIN CERTIFICATE-----\n" + b"\n".join(
        base64.b64encode(der)[i:i + 64] for i in range(0, len(base64.b64encode(der)), 64))
        + b"\n-----END CERTIFICATE-----\n" for der in seen)
    return base64.b64encode(pem).decode()


def _has_all(existing_b64: str | None, ca_pem: bytes) -> bool:
    existing = _blocks(base64.b64decode(existing_b64)) if existing_b64 else []
    return all(der in existing for der in _blocks(ca_pem))


def injection(target: Target, obj: Obj, ca_pem: bytes) -> Obj | None:
    """The apply configuration that puts ``ca_pem`` into every ``caBundle`` of ``obj`` (None when every one already
    holds it, or the object has none to fill: a CRD without a conversion webhook)."""
    head = {"apiVersion": target.api_version, "kind": target.kind, "metadata": {"name": obj["metadata"]["name"]}}
    if target.kind.endswith("WebhookConfiguration"):
        webhooks = obj.get("webhooks") or []
        if not webhooks or all(_has_all((w.get("clientConfig") or {}).get("caBundle"), ca_pem) for w in webhooks):
            return None
        return {**head, "webhooks": [{"name": w["name"], "clientConfig": {"caBundle": merged_bundle(
            (w.get("clientConfig") or {}).get("caBundle"), ca_pem)}} for w in webhooks]}
    if target.kind == "APIService":
        bundle = (obj.get("spec") or {}).get("caBundle")
        return None if _has_all(bundle, ca_pem) else {**head, "spec": {"caBundle": merged_bundle(bundle, ca_pem)}}
    conversion = (obj.get("spec") or {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        return None
    bundle = ((conversion.get("webhook") or {}).get("clientConfig") or {}).get("caBundle")
    if _has_all(bundle, ca_pem):
        return None
    return {**head, "spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": merged_bundle(bundle, ca_pem)}}}}}


# ---------------------------------------------------------------- the loop


def _certificate_path(namespace: str, name: str) -> str:
    return f"/apis/cert-manager.io/v1/namespaces/{namespace}/certificates/{name}"


def _secret_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/secrets/{name}"


class CertStandin:
    """One pass at a time over the cluster's Certificates and injectables (``run`` repeats it)."""

    def __init__(self, api: ApiClient, ca: StandinCa, log: Callable[[str], None] = print) -> None:
        self.api = api
        self.ca = ca
        self.ca_pem = ca.ensure()
        self.log = log

    def pass_once(self, now: datetime.datetime | None = None) -> list[str]:
        """Issue what is due, inject what lacks the CA; one line per thing done."""
        moment = now or datetime.datetime.now(datetime.UTC)
        done = [line for certificate in self.api.items(CERTIFICATES) for line in self.issue(certificate, moment)]
        for target in TARGETS:
            for meta in self.api.metadata(target.path):
                source = (meta.get("annotations") or {}).get(INJECT)
                if source:
                    done += self.inject(target, str(meta["name"]), source)
        return done

    def issue(self, certificate: Obj, now: datetime.datetime) -> list[str]:
        meta, spec = certificate["metadata"], certificate.get("spec") or {}
        namespace, name = meta["namespace"], meta["name"]
        shown = f"Certificate {namespace}/{name}"
        problems = spec_problems(spec)
        if problems:
            message = "the rehearsal's cert-manager stand-in cannot issue this as cert-manager would: " + "; ".join(problems)
            return self._status(certificate, {"conditions": [_ready(certificate, "False", "StandInUnsupported", message,
                                                                    now)]}, f"{shown}: not issued ({message})")
        secret = self.api.get(_secret_path(namespace, spec["secretName"]))
        self_signed = self.self_signed_issuer(certificate)
        reason = reissue_reason(certificate, secret, SELF_SIGNED if self_signed else self.ca_pem, now)
        if reason is None:
            ready: Obj = next((c for c in (certificate.get("status") or {}).get("conditions") or []
                          if c.get("type") == "Ready"), {})
            if ready.get("status") == "True" and ready.get("observedGeneration") == meta.get("generation", 1):
                return []
            annotations = (secret or {}).get("metadata", {}).get("annotations") or {}
            return self._status(certificate, {"conditions": [_ready(
                certificate, "True", "Ready", "Certificate is up to date and has not expired", now)],
                "renewalTime": _timestamp(datetime.datetime.fromisoformat(annotations[RENEW_AFTER]))},
                f"{shown}: Ready (its Secret is current)")
        request = request_of(spec)
        issued = self.ca.issue(request, self_signed=self_signed)
        secret_type = str((secret or {}).get("type") or "kubernetes.io/tls")
        self.api.apply(_secret_path(namespace, spec["secretName"]),
                       certificate_secret(certificate, issued, self.ca_pem, secret_type, now, self_signed), FIELD_MANAGER)
        renew = renewal_time(issued, request.renew_before_seconds)
        return self._status(certificate, issued_status(certificate, issued, renew, now),
                            f"{shown}: issued Secret {namespace}/{spec['secretName']} ({reason}; dnsNames "
                            f"{', '.join(request.dns_names) or '-'}, until {_timestamp(issued.not_after)})")

    def self_signed_issuer(self, certificate: Obj) -> bool:
        """Whether the Certificate's ``issuerRef`` is an Issuer (in its namespace) or ClusterIssuer with
        ``spec.selfSigned``; any other issuer, or none found, is served by the stand-in's CA."""
        ref = (certificate.get("spec") or {}).get("issuerRef") or {}
        if (ref.get("group") or "cert-manager.io") != "cert-manager.io" or not ref.get("name"):
            return False
        kind = ref.get("kind") or "Issuer"
        path = (f"/apis/cert-manager.io/v1/clusterissuers/{ref['name']}" if kind == "ClusterIssuer" else
                f"/apis/cert-manager.io/v1/namespaces/{certificate['metadata']['namespace']}/issuers/{ref['name']}")
        issuer = self.api.get(path) if kind in ("Issuer", "ClusterIssuer") else None
        return issuer is not None and "selfSigned" in (issuer.get("spec") or {})

    def _status(self, certificate: Obj, status: Obj, line: str) -> list[str]:
        meta = certificate["metadata"]
        current = certificate.get("status") or {}
        if all(current.get(k) == v for k, v in status.items() if k != "conditions") and [
                {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in current.get("conditions") or []
                if c.get("type") == "Ready"] == [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                                                 for c in status.get("conditions") or []]:
            return []
        self.api.apply(_certificate_path(meta["namespace"], meta["name"]) + "/status",
                       {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                        "metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "status": status},
                       FIELD_MANAGER)
        return [line]

    def ca_of(self, source: str) -> bytes | None:
        """The ``ca.crt`` of the Certificate ``<namespace>/<name>``'s Secret; None until it is issued, or where the
        Secret is not that Certificate's (sources.go ``certificateDataSource.ReadCA`` refuses it too)."""
        namespace, _, certificate_name = source.partition("/")
        certificate = self.api.get(_certificate_path(namespace, certificate_name))
        secret_name = ((certificate or {}).get("spec") or {}).get("secretName")
        secret = self.api.get(_secret_path(namespace, secret_name)) if secret_name else None
        if secret is None or (secret["metadata"].get("annotations") or {}).get(CERTIFICATE_NAME) != certificate_name:
            return None
        ca_b64 = (secret.get("data") or {}).get("ca.crt")
        return base64.b64decode(ca_b64) if ca_b64 else None

    def inject(self, target: Target, name: str, source: str) -> list[str]:
        namespace, sep, certificate_name = source.partition("/")
        shown = f"{target.kind} {name}"
        if not sep or not namespace or not certificate_name:
            return [f"{shown}: {INJECT} {source!r} is not <namespace>/<certificate>; skipped"]
        ca_pem = self.ca_of(source)
        obj = self.api.get(f"{target.path}/{name}") if ca_pem else None
        patch = injection(target, obj, ca_pem) if obj is not None and ca_pem else None
        if patch is None:
            return []
        self.api.apply(f"{target.path}/{name}", patch, FIELD_MANAGER)
        return [f"{shown}: CA of Certificate {source} injected"]

    def run(self, interval: float, stop: Callable[[], bool]) -> None:
        run_passes(self.pass_once, interval, stop, self.log, (ApiError, IssueError, ValueError, KeyError))

# ---------------------------------------------------------------- the process


def command(python: str, server: str, pki: Path, interval: float = 2) -> list[str]:
    return [python, "-m", "trainyard.rehearsal.cert_standin", "--server", server, "--pki", str(pki),
            "--interval", f"{interval:g}"]


def client(server: str, pki: Path) -> ApiClient:
    """The stand-in's client: its own certificate, the cluster's CA, a loopback server only."""
    return api_loop.client(server, pki, CLIENT_CERT, FIELD_MANAGER)


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    del env
    parser = api_loop.arguments("cert_standin", "The rehearsal's stand-in for cert-manager (rehearsal clusters only).",
                                interval=2.0)
    args = parser.parse_args(argv)
    missing = missing_pki(args.pki, CLIENT_CERT)
    if missing:
        print(f"cert-standin: not a rehearsal cluster's pki directory (missing {', '.join(missing)}): the stand-in "
              "runs only with the cluster `trainyard cluster up --real-nodes` starts", file=sys.stderr)
        return 2
    try:
        standin = CertStandin(client(args.server, args.pki), StandinCa(args.pki),
                              lambda line: print(line, flush=True))
    except (ValueError, IssueError) as error:
        print(f"cert-standin: {error}", file=sys.stderr)
        return 2
    stopped = stop_on_signals()
    print(f"cert-standin: {args.server}, field manager {FIELD_MANAGER}, CA {standin.ca.cert}", flush=True)
    if args.once:
        for line in standin.pass_once():
            print(line, flush=True)
        return 0
    standin.run(args.interval, stopped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
