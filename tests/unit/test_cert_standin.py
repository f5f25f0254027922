"""The rehearsal's cert-manager stand-in, offline: what it issues for a Certificate (keys, names, CA, annotations as
cert-manager writes them), when it issues again, where it injects the CA (and where not), that a second pass writes
nothing, and that only the rehearsal can run it."""

from __future__ import annotations

import base64
import copy
import datetime
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from trainyard.project import open_stack
from trainyard.rehearsal import cert_standin
from trainyard.rehearsal.api_client import loopback_server
from trainyard.rehearsal.cert_standin import TARGETS, CertStandin, injection, merged_bundle, reissue_reason
from trainyard.rehearsal.stack import InCluster, read_platform, rehearsal_platform
from trainyard.rehearsal.standin_issuer import StandinCa, request_of, spec_problems

# The clock the stand-in is handed: the real one, since openssl dates what it signs by the real clock (a fixed date
# here made the renewal-time assertion fail once the day moved past it).
NOW = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
# What kserve-resources v0.20.0 renders (files/kserve/certificate-patch.yaml, files/common/certmanager.yaml).
KSERVE_CERTIFICATE: dict[str, Any] = {
    "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
    "metadata": {"name": "serving-cert", "namespace": "kserve", "generation": 1},
    "spec": {"commonName": "kserve-webhook-server-service.kserve.svc",
             "dnsNames": ["kserve-webhook-server-service.kserve.svc"],
             "issuerRef": {"kind": "Issuer", "name": "selfsigned-issuer"},
             "secretName": "kserve-webhook-server-cert"}}
WEBHOOKS: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "inferenceservice.serving.kserve.io", "annotations": {cert_standin.INJECT: "kserve/serving-cert"}},
    "webhooks": [{"name": "inferenceservice.kserve-webhook-server.defaulter",
                  "clientConfig": {"service": {"name": "kserve-webhook-server-service", "namespace": "kserve"}}},
                 {"name": "inferenceservice.kserve-webhook-server.pod-mutator",
                  "clientConfig": {"service": {"name": "kserve-webhook-server-service", "namespace": "kserve"}}}]}


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> StandinCa:
    authority = StandinCa(tmp_path_factory.mktemp("pki"))
    authority.ensure()
    return authority


def _openssl(*args: str, data: bytes | None = None) -> str:
    return subprocess.run(["openssl", *args], input=data, capture_output=True, check=True).stdout.decode()


class FakeApi:
    """The API server as the stand-in sees it: objects by path, every apply recorded and merged shallowly."""

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = copy.deepcopy(objects)
        self.applied: list[tuple[str, str]] = []

    def get(self, path: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(path))

    def items(self, path: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for p, o in self.objects.items() if p.rsplit("/", 1)[0].endswith(path.rsplit("/", 1)[-1])
                and o["kind"] == "Certificate"]

    def metadata(self, path: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o["metadata"]) for p, o in self.objects.items() if p.rsplit("/", 1)[0] == path]

    def apply(self, path: str, configuration: dict[str, Any], field_manager: str) -> dict[str, Any]:
        assert field_manager == "trainyard-cert-standin"
        self.applied.append((path, configuration["kind"]))
        target = path.removesuffix("/status")
        current = self.objects.setdefault(target, {"metadata": {}})
        if path.endswith("/status"):
            current["status"] = configuration["status"]
        elif configuration["kind"].endswith("WebhookConfiguration"):
            bundles = {w["name"]: w["clientConfig"]["caBundle"] for w in configuration["webhooks"]}
            for webhook in current["webhooks"]:
                webhook["clientConfig"]["caBundle"] = bundles[webhook["name"]]
        else:
            current.update(configuration)
        return current


def _cluster(certificate: dict[str, Any] = KSERVE_CERTIFICATE) -> FakeApi:
    return FakeApi({"/apis/cert-manager.io/v1/namespaces/kserve/certificates/serving-cert": certificate,
                    f"{TARGETS[0].path}/inferenceservice.serving.kserve.io": WEBHOOKS})


def test_a_certificate_gets_its_secret_with_the_keys_and_names_cert_manager_writes(ca: StandinCa) -> None:
    api = _cluster()
    done = CertStandin(api, ca).pass_once(NOW)  # type: ignore[arg-type]
    assert done[0].startswith("Certificate kserve/serving-cert: issued Secret kserve/kserve-webhook-server-cert")
    secret = api.objects["/api/v1/namespaces/kserve/secrets/kserve-webhook-server-cert"]
    assert secret["type"] == "kubernetes.io/tls" and sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    annotations = secret["metadata"]["annotations"]
    assert annotations["cert-manager.io/certificate-name"] == "serving-cert"
    assert annotations["cert-manager.io/alt-names"] == "kserve-webhook-server-service.kserve.svc"
    assert (annotations["cert-manager.io/issuer-name"], annotations["cert-manager.io/issuer-kind"],
            annotations["cert-manager.io/issuer-group"]) == ("selfsigned-issuer", "Issuer", "cert-manager.io")
    assert secret["metadata"]["labels"] == {"controller.cert-manager.io/fao": "true"}
    crt, key, ca_crt = (base64.b64decode(secret["data"][k]) for k in ("tls.crt", "tls.key", "ca.crt"))
    assert ca_crt == ca.cert.read_bytes()
    # Signed by the stand-in's CA, for the Service's name, RSA 2048 in PKCS1 (cert-manager's defaults), 90 days.
    assert _openssl("verify", "-CAfile", str(ca.cert), data=crt).strip() == "stdin: OK"
    text = _openssl("x509", "-noout", "-text", data=crt)
    assert "DNS:kserve-webhook-server-service.kserve.svc" in text and "Public-Key: (2048 bit)" in text
    assert "Digital Signature, Key Encipherment" in text and "CA:FALSE" in text
    assert key.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    status = api.objects["/apis/cert-manager.io/v1/namespaces/kserve/certificates/serving-cert"]["status"]
    assert status["conditions"][0]["status"] == "True" and status["revision"] == 1
    not_before, not_after = (datetime.datetime.fromisoformat(status[k]) for k in ("notBefore", "notAfter"))
    assert not_after - not_before == datetime.timedelta(days=90)
    renewal = datetime.datetime.fromisoformat(status["renewalTime"])
    assert renewal == not_after - datetime.timedelta(days=30)  # a third of the duration before expiry


def test_the_ca_is_injected_into_every_webhook_and_a_second_pass_writes_nothing(ca: StandinCa) -> None:
    api = _cluster()
    standin = CertStandin(api, ca)  # type: ignore[arg-type]
    first = standin.pass_once(NOW)
    assert first[-1] == "MutatingWebhookConfiguration inferenceservice.serving.kserve.io: CA of Certificate " \
                        "kserve/serving-cert injected"
    webhooks = api.objects[f"{TARGETS[0].path}/inferenceservice.serving.kserve.io"]["webhooks"]
    assert {base64.b64decode(w["clientConfig"]["caBundle"]) for w in webhooks} == {ca.cert.read_bytes()}
    writes = len(api.applied)
    assert standin.pass_once(NOW + datetime.timedelta(minutes=1)) == [] and len(api.applied) == writes


def test_a_secret_is_issued_again_when_the_spec_changes_or_its_renewal_time_passed(ca: StandinCa) -> None:
    api = _cluster()
    CertStandin(api, ca).pass_once(NOW)  # type: ignore[arg-type]
    secret = api.objects["/api/v1/namespaces/kserve/secrets/kserve-webhook-server-cert"]
    certificate = api.objects["/apis/cert-manager.io/v1/namespaces/kserve/certificates/serving-cert"]
    assert reissue_reason(certificate, secret, ca.cert.read_bytes(), NOW) is None
    assert reissue_reason(certificate, secret, ca.cert.read_bytes(), NOW + datetime.timedelta(days=61)) == \
        "its renewal time passed"
    changed = copy.deepcopy(certificate)
    changed["spec"]["dnsNames"].append("kserve-webhook-server-service.kserve.svc.cluster.local")
    assert "spec" in str(reissue_reason(changed, secret, ca.cert.read_bytes(), NOW))
    assert reissue_reason(certificate, secret, b"another CA", NOW) is not None
    assert reissue_reason(certificate, None, ca.cert.read_bytes(), NOW) == "no Secret yet"


def test_a_secret_that_is_not_the_certificates_is_not_a_ca_source(ca: StandinCa) -> None:
    """cainjector reads ca.crt only from a Secret whose certificate-name annotation names the Certificate."""
    api = _cluster()
    api.objects["/api/v1/namespaces/kserve/secrets/kserve-webhook-server-cert"] = {
        "kind": "Secret", "metadata": {"name": "kserve-webhook-server-cert", "namespace": "kserve",
                                       "annotations": {"cert-manager.io/certificate-name": "another"}},
        "data": {"ca.crt": base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").decode()}}
    assert CertStandin(api, ca).inject(TARGETS[0], "inferenceservice.serving.kserve.io", "kserve/serving-cert") == []  # type: ignore[arg-type]


def test_the_ca_is_merged_into_a_bundle_already_there_once(ca: StandinCa, tmp_path: Path) -> None:
    other = StandinCa(tmp_path)
    other_pem = other.ensure()
    merged = merged_bundle(base64.b64encode(other_pem).decode(), ca.cert.read_bytes())
    assert _openssl("crl2pkcs7", "-nocrl", data=base64.b64decode(merged))  # parses as a PEM bundle
    assert base64.b64decode(merged).count(b"BEGIN CERTIFICATE") == 2
    assert merged_bundle(merged, ca.cert.read_bytes()) == merged


def test_a_crd_is_injected_only_where_its_conversion_is_a_webhook(ca: StandinCa) -> None:
    crd = next(t for t in TARGETS if t.kind == "CustomResourceDefinition")
    plain = {"metadata": {"name": "x.example.com"}, "spec": {"conversion": {"strategy": "None"}}}
    assert injection(crd, plain, ca.cert.read_bytes()) is None
    webhook = {"metadata": {"name": "x.example.com"}, "spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "clientConfig": {"service": {"name": "s", "namespace": "n"}}}}}}
    patch = injection(crd, webhook, ca.cert.read_bytes())
    assert patch is not None and set(patch["spec"]) == {"conversion"}  # only the caBundle, nothing Pulumi sets
    assert base64.b64decode(patch["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]) == ca.cert.read_bytes()
    api_service = next(t for t in TARGETS if t.kind == "APIService")
    patch = injection(api_service, {"metadata": {"name": "v1.x"}, "spec": {}}, ca.cert.read_bytes())
    assert patch is not None and set(patch["spec"]) == {"caBundle"}


def test_what_the_stand_in_cannot_issue_as_cert_manager_would_is_refused_by_name(ca: StandinCa) -> None:
    spec = {**KSERVE_CERTIFICATE["spec"], "keystores": {"pkcs12": {"create": True}}, "subject": {"countries": ["FR"]}}
    assert spec_problems(spec) == ["spec.keystores", "spec.subject.countries"]
    assert spec_problems({**KSERVE_CERTIFICATE["spec"], "privateKey": {"algorithm": "DSA"}}) == [
        "spec.privateKey.algorithm: 'DSA' (RSA, ECDSA or Ed25519)"]
    api = _cluster({**KSERVE_CERTIFICATE, "spec": spec})
    done = CertStandin(api, ca).pass_once(NOW)  # type: ignore[arg-type]
    assert "not issued" in done[0] and "spec.keystores" in done[0]
    assert "/api/v1/namespaces/kserve/secrets/kserve-webhook-server-cert" not in api.objects
    ready = api.objects["/apis/cert-manager.io/v1/namespaces/kserve/certificates/serving-cert"]["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "StandInUnsupported")


def test_ecdsa_pkcs8_and_a_short_duration_are_honoured(ca: StandinCa) -> None:
    request = request_of({"dnsNames": ["a.b.svc"], "secretName": "s", "duration": "36h", "usages": ["server auth"],
                          "privateKey": {"algorithm": "ECDSA", "size": 384, "encoding": "PKCS8"}})
    issued = ca.issue(request)
    assert issued.key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    text = _openssl("x509", "-noout", "-text", data=issued.cert_pem)
    assert "NIST CURVE: P-384" in text and "TLS Web Server Authentication" in text
    assert issued.not_after - issued.not_before == datetime.timedelta(days=2)  # openssl 3.0: whole days


def test_the_rehearsal_runs_it_only_where_cert_manager_is_external_and_kserve_is_installed(tmp_path: Path) -> None:
    stack = open_stack("local")
    from trainyard.config import validate_platform

    def overlay(controllers: tuple[str, ...], **overrides: Any) -> Any:
        platform = rehearsal_platform(read_platform(stack.path), overrides, InCluster(controllers, tmp_path / "l"))
        return validate_platform(platform, "test")

    assert cert_standin.wanted(overlay(("kueue", "kserve")))  # make up: KServe in the cluster, cert-manager external
    assert not cert_standin.wanted(overlay(("kueue",)))  # KServe external: no Certificate is applied
    assert not cert_standin.wanted(overlay(("kueue", "kserve", "cert-manager")))  # the real cert-manager is installed
    assert not cert_standin.wanted(open_stack("staging").config) and not cert_standin.wanted(open_stack("prod").config)
    # The barman-cloud plugin's two Certificates (the MLflow database backed up, CloudNativePG installed here), even
    # with KServe external.
    backups = {"mlflow": {"enabled": True, "object_store": {"endpoint_url": "http://seaweedfs-all-in-one.object-store.svc:8333"},
                          "backup": {"enabled": True}},
               "object_store": {"platform_buckets": [{"name": "mlflow-artifacts"}, {"name": "mlflow-backups"}],
                                "services": [{"name": "mlflow", "namespace": "mlflow",
                                              "buckets": ["mlflow-artifacts", "mlflow-backups"]}]}}
    assert cert_standin.wanted(overlay(("kueue", "cnpg"), **backups))
    assert not cert_standin.wanted(overlay(("kueue", "cnpg", "cert-manager"), **backups))


def test_no_product_module_imports_the_stand_in() -> None:
    """The stand-in is a rehearsal piece: nothing that `pulumi up` of a stack runs can reach it."""
    importing = [str(path.relative_to(ROOT)) for path in (ROOT / "platform").rglob("*.py")
                 if "rehearsal" not in path.relative_to(ROOT / "platform").parts
                 and ("cert_standin" in path.read_text() or "standin_issuer" in path.read_text())]
    assert importing == []


def test_it_talks_to_a_loopback_api_server_only() -> None:
    assert loopback_server("https://127.0.0.1:26443/") == "https://127.0.0.1:26443"
    for server in ("https://10.0.0.1:6443", "http://127.0.0.1:26443", "https://kubernetes.example.com:443"):
        with pytest.raises(ValueError, match="not the rehearsal's API server"):
            loopback_server(server)


def test_the_process_refuses_a_directory_that_is_not_a_rehearsal_clusters_pki(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert cert_standin.main(["--server", "https://127.0.0.1:1", "--pki", str(tmp_path), "--once"]) == 2
    assert "not a rehearsal cluster's pki directory" in capsys.readouterr().err


# The barman-cloud plugin's client Certificate and its issuer (plugin-barman-cloud manifest.yaml): self-signed, and
# the plugin trusts exactly that certificate (--client-cert=/client/tls.crt). A Go TLS client only sends a certificate
# whose issuer the server names as acceptable, so one signed by another CA is never sent ("tls: certificate required").
BARMAN_CLIENT: dict[str, Any] = {
    "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
    "metadata": {"name": "barman-cloud-client", "namespace": "cnpg-system", "generation": 1},
    "spec": {"commonName": "barman-cloud-client", "duration": "2160h", "isCA": False, "renewBefore": "360h",
             "issuerRef": {"group": "cert-manager.io", "kind": "Issuer", "name": "selfsigned-issuer"},
             "secretName": "barman-cloud-client-tls", "usages": ["client auth"]}}
SELF_SIGNED_ISSUER: dict[str, Any] = {"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                                      "metadata": {"name": "selfsigned-issuer", "namespace": "cnpg-system"},
                                      "spec": {"selfSigned": {}}}


def test_a_self_signed_issuers_certificate_is_self_signed_and_its_own_ca(ca: StandinCa) -> None:
    api = FakeApi({"/apis/cert-manager.io/v1/namespaces/cnpg-system/certificates/barman-cloud-client": BARMAN_CLIENT,
                   "/apis/cert-manager.io/v1/namespaces/cnpg-system/issuers/selfsigned-issuer": SELF_SIGNED_ISSUER})
    done = CertStandin(api, ca).pass_once(NOW)  # type: ignore[arg-type]
    assert "issued Secret cnpg-system/barman-cloud-client-tls" in done[0]
    secret = api.objects["/api/v1/namespaces/cnpg-system/secrets/barman-cloud-client-tls"]
    crt, ca_crt = (base64.b64decode(secret["data"][k]) for k in ("tls.crt", "ca.crt"))
    assert ca_crt == crt  # cert-manager's SelfSigned issuer: ca.crt is the certificate itself
    text = _openssl("x509", "-noout", "-issuer", "-subject", "-ext", "extendedKeyUsage", data=crt)
    assert "issuer=CN = barman-cloud-client" in text and "subject=CN = barman-cloud-client" in text
    assert "TLS Web Client Authentication" in text
    with tempfile.NamedTemporaryFile(suffix=".pem") as own:
        own.write(crt)
        own.flush()
        assert _openssl("verify", "-CAfile", own.name, "-purpose", "sslclient", data=crt).strip() == "stdin: OK"
    # Current afterwards: a second pass issues nothing; the same Certificate under the stand-in's CA would be reissued.
    assert CertStandin(api, ca).pass_once(NOW + datetime.timedelta(minutes=1)) == []  # type: ignore[arg-type]
    certificate = api.objects["/apis/cert-manager.io/v1/namespaces/cnpg-system/certificates/barman-cloud-client"]
    assert reissue_reason(certificate, secret, cert_standin.SELF_SIGNED, NOW) is None
    assert reissue_reason(certificate, secret, ca.cert.read_bytes(), NOW) is not None
