"""The rehearsal cluster's certificates: its CA, every certificate issued from it, and kubeconfigs that use them."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

from trainyard.rehearsal.settings import CONTEXT, HOST, ClusterError


class Pki:
    """The cluster CA and every certificate issued from it (openssl, 10 years, loopback names only)."""

    def __init__(self, directory: Path, service_ip: str) -> None:
        self.directory = directory
        self.service_ip = service_ip

    def path(self, name: str) -> Path:
        return self.directory / name

    def ensure(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        if not self.path("ca.crt").exists():
            self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                          "-days", "3650", "-subj", "/CN=trainyard-local-ca")
        apiserver_names = (f"IP:{HOST},IP:{self.service_ip},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
                           "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")
        self._issue("apiserver", "/CN=kube-apiserver", server=apiserver_names)
        self._issue("admin", "/O=system:masters/CN=trainyard-admin")
        self._issue("kcm", "/CN=system:kube-controller-manager")
        self._issue("scheduler", "/CN=system:kube-scheduler")
        # What the API server shows a kubelet (logs, exec): the kubelet authorizes it by webhook, and
        # system:masters may do anything. Ref: kubernetes.io/docs/reference/access-authn-authz/kubelet-authn-authz/
        self._issue("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client")
        # The controllers' webhook servers: one serving certificate for 127.0.0.1, as envtest does.
        self._issue("webhook", "/CN=trainyard-rehearsal-webhooks", server=f"IP:{HOST},DNS:localhost")
        # The aggregation layer (an APIService such as Kueue's visibility API): the API server proxies to the extension
        # server as front-proxy-client and names the user in X-Remote-* headers, which the extension server trusts
        # only from a client certificate of this CA (its own, as kubeadm makes it: a cluster client certificate must
        # not be able to assert any user by header). Ref: kubernetes.io/docs/tasks/extend-kubernetes/configure-aggregation-layer/
        if not self.path("front-proxy-ca.crt").exists():
            self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "front-proxy-ca.key", "-out",
                          "front-proxy-ca.crt", "-days", "3650", "-subj", "/CN=trainyard-local-front-proxy-ca")
        self._issue("front-proxy-client", "/CN=front-proxy-client", ca="front-proxy-ca")
        if not self.path("sa.key").exists():
            self._openssl("genrsa", "-out", "sa.key", "2048")
            self._openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        for key in self.directory.glob("*.key"):
            key.chmod(0o600)

    def issue_client(self, name: str, user: str, groups: tuple[str, ...]) -> None:
        """A client certificate for ``user`` in ``groups``: the API server's x509 authenticator reads the
        user from CN and the groups from O (Ref: https://kubernetes.io/docs/reference/access-authn-authz/authentication/#x509-client-certificates).
        """
        for value in (user, *groups):
            if not value or any(c in value for c in "/=+,\\\n"):
                raise ClusterError(f"{value!r} cannot be put in a certificate subject")
        self._issue(name, "".join(f"/O={g}" for g in groups) + f"/CN={user}")
        self.path(f"{name}.key").chmod(0o600)

    def issue_server(self, name: str, subject: str, names: str) -> None:
        """A serving certificate for ``names`` (``IP:...,DNS:...``), e.g. a real node's kubelet."""
        self._issue(name, subject, server=names)
        self.path(f"{name}.key").chmod(0o600)

    def _issue(self, name: str, subject: str, server: str | None = None, ca: str = "ca") -> None:
        if self.path(f"{name}.crt").exists():
            return
        ext = self.path(f"{name}.ext")
        usage = "serverAuth" if server else "clientAuth"
        ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                       f"extendedKeyUsage={usage}\n" + (f"subjectAltName={server}\n" if server else ""))
        self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                      "-subj", subject)
        self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
                      "-out", f"{name}.crt", "-days", "3650", "-extfile", ext.name)
        self.path(f"{name}.csr").unlink()

    def _openssl(self, *args: str) -> None:
        try:
            result = subprocess.run(["openssl", *args], cwd=self.directory, capture_output=True,  # noqa: S603, S607
                                    text=True, check=False)
        except FileNotFoundError:
            raise ClusterError("openssl is required to make the rehearsal's certificates") from None
        if result.returncode != 0:
            raise ClusterError(f"openssl {args[0]} failed: {result.stderr.strip()}")

    def ca_bundle(self) -> str:
        return base64.b64encode(self.path("ca.crt").read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, pki: Pki, user: str, cert: str) -> None:
    def b64(name: str) -> str:
        return base64.b64encode(pki.path(name).read_bytes()).decode()

    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT}
  cluster:
    server: {server}
    certificate-authority-data: {b64("ca.crt")}
users:
- name: {user}
  user:
    client-certificate-data: {b64(cert + ".crt")}
    client-key-data: {b64(cert + ".key")}
contexts:
- name: {CONTEXT}
  context:
    cluster: {CONTEXT}
    user: {user}
current-context: {CONTEXT}
""")
    path.chmod(0o600)
