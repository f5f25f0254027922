"""Which kubeconfigs the rehearsal's in-process reads use (rehearsal/api_client.py ``ApiClient.from_kubeconfig``): the
rehearsal's own (a loopback server, a client certificate or a bearer token); kubectl answers for every other."""

from __future__ import annotations

import base64
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainyard.rehearsal.api_client import ApiClient


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A self-signed certificate and its key (the CA and the client pair alike: loading is what is tested)."""
    where = tmp_path_factory.mktemp("pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=test", "-days", "1", "-keyout", str(where / "k.pem"), "-out", str(where / "c.pem")],
                   check=True, capture_output=True)
    return {"cert": (where / "c.pem").read_text(), "key": (where / "k.pem").read_text()}


def kubeconfig(tmp_path: Path, pem: dict[str, str], server: str = "https://127.0.0.1:6443",
               user: dict[str, Any] | None = None, namespace: str | None = None) -> Path:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
              "clusters": [{"name": "k", "cluster": {"server": server, "certificate-authority-data": b64(pem["cert"])}}],
              "users": [{"name": "u", "user": user if user is not None else {
                  "client-certificate-data": b64(pem["cert"]), "client-key-data": b64(pem["key"])}}],
              "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u",
                                                     **({"namespace": namespace} if namespace else {})}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_rehearsals_kubeconfigs_are_used(tmp_path: Path, pem: dict[str, str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    made = ApiClient.from_kubeconfig(kubeconfig(tmp_path, pem), "test")
    assert made is not None and made[1] == "default" and made[0].server == "https://127.0.0.1:6443"
    assert list((tmp_path / "tmp").iterdir()) == []  # the key's file is gone again
    made = ApiClient.from_kubeconfig(kubeconfig(tmp_path, pem, user={"token": "t0ken"}, namespace="team-a"), "test")
    assert made is not None and made[1] == "team-a" and made[0].token == "t0ken"
    (tmp_path / "c.pem").write_text(pem["cert"])
    (tmp_path / "k.pem").write_text(pem["key"])
    assert ApiClient.from_kubeconfig(kubeconfig(tmp_path, pem, user={"client-certificate": "c.pem",
                                                                     "client-key": "k.pem"}), "test") is not None


@pytest.mark.parametrize(("server", "user"), [
    ("https://10.0.0.1:6443", None),  # not the rehearsal's: not on a loopback address
    ("http://127.0.0.1:8080", None),  # not https
    ("https://127.0.0.1:6443", {"exec": {"command": "get-token"}}),  # a credential plugin
    ("https://127.0.0.1:6443", {"token": "t", "as": "someone"}),  # impersonation
    ("https://127.0.0.1:6443", {}),  # no credentials
    ("https://127.0.0.1:6443", {"client-certificate-data": "bm90IGEgY2VydA=="}),  # a certificate without its key
    ("https://127.0.0.1:6443", {"client-certificate-data": "bm90IGEgY2VydA==", "client-key-data": "bm90IGEga2V5"}),
    ("https://127.0.0.1:6443", {"client-certificate-data": "not base64!"}),
])
def test_other_kubeconfigs_are_left_to_kubectl(tmp_path: Path, pem: dict[str, str], server: str,
                                               user: dict[str, Any] | None) -> None:
    assert ApiClient.from_kubeconfig(kubeconfig(tmp_path, pem, server, user), "test") is None


def test_an_unreadable_or_malformed_kubeconfig_is_left_to_kubectl(tmp_path: Path) -> None:
    assert ApiClient.from_kubeconfig(tmp_path / "absent", "test") is None
    (tmp_path / "bad").write_text("current-context: [\n")
    assert ApiClient.from_kubeconfig(tmp_path / "bad", "test") is None
    (tmp_path / "empty").write_text("")
    assert ApiClient.from_kubeconfig(tmp_path / "empty", "test") is None
