"""Generated secrets never appear in plaintext, offline: not in ``trainyard render``'s files, not in any
input the program registers outside a Pulumi secret (manifests, chart values, providers), not in what the
program prints or logs. On stacks with MLflow and its backups on, whose concern holds most generated
values (the admin, PostgreSQL and per-tenant passwords, the Flask session key) next to the object-store keys.

The cluster tier's check (tests/cluster/test_secrets_not_in_plaintext.py) deploys the local stack, which
has MLflow off. Here the program runs under the SDK's mocks, where each generated value is recognisably its
own (``mockgen<hash of its name>``, tests/program/test_program.py), so one that leaks is found wherever it
went, raw or base64-encoded.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import rendered, stack
from tests.program.test_program import DYNAMIC, SECRET_SIG, SIG, run_program
from trainyard.manifests import mlflow
from trainyard.manifests.generated import placeholder
from trainyard.review.render import write_rendered

# Staging and prod both run MLflow with backups (prod: 3 PostgreSQL instances, MinIO; staging: SeaweedFS).
MLFLOW_STACKS = ("staging", "prod")


def plain_strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, string) for every string in a registered input that is not inside a Pulumi secret (or a dict key)."""
    if isinstance(value, dict):
        if value.get(SIG) == SECRET_SIG:
            return
        for key, item in value.items():
            yield path, str(key)
            yield from plain_strings(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from plain_strings(item, f"{path}[{index}]")
    elif isinstance(value, str):
        yield path, value


def leaks(text: str, values: dict[str, str]) -> list[str]:
    """The names of the generated values that ``text`` holds, raw or base64-encoded."""
    return sorted(name for name, value in values.items()
                  if value in text or base64.b64encode(value.encode()).decode() in text)


@pytest.mark.parametrize("name", MLFLOW_STACKS)
def test_no_generated_value_in_the_rendered_files_the_registered_inputs_or_the_logs(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    config = stack(name).config
    assert config.mlflow.enabled and config.mlflow.backup.enabled, f"{name} no longer runs MLflow with backups"
    platform = rendered(name)
    assert platform.by_kind("ObjectStore"), "backups on: the barman-cloud ObjectStore is rendered"

    caplog.set_level(logging.DEBUG)
    registered, _ = run_program(name, monkeypatch)
    values = registered.generated
    expected = {mlflow.GENERATED_ADMIN_PASSWORD, mlflow.GENERATED_DB_PASSWORD, mlflow.GENERATED_FLASK_KEY,
                *(mlflow.tenant_password_name(t.name) for t in config.tenants)}
    assert expected <= set(values), sorted(expected - set(values))
    assert any(n.startswith("object-store/") for n in values), sorted(values)

    # Render: every generated value appears as its placeholder only.
    files = write_rendered(platform, tmp_path / "out")
    text = "\n".join(path.read_text(encoding="utf-8") for path in files)
    assert all(placeholder(n) in text for n in expected), "render no longer shows MLflow's placeholders"
    found = [f"{n} in {p}" for p in files for n in leaks(p.read_text(encoding="utf-8"), values)]
    assert found == [], found

    # The program: a generated value travels only inside a Pulumi secret, whatever the resource type.
    found = [f"{n} in {r.typ} {r.name} inputs{where}"
             for r in registered.resources if r.typ != DYNAMIC
             for where, string in plain_strings(r.inputs) for n in leaks(string, values)]
    assert found == [], found
    secret_objects = [r for r in registered.resources if r.typ == "kubernetes:core/v1:Secret"
                      and r.inputs["metadata"]["namespace"] == config.mlflow.namespace]
    assert len(secret_objects) >= 4, [r.name for r in secret_objects]  # admin, db, tenant users, flask key

    # What the program printed and logged (the engine would show and keep it).
    out, err = capfd.readouterr()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert leaks(out + err + logged, values) == []
    with capfd.disabled():
        print(f"\n{name}: {len(values)} generated values ({len(expected)} MLflow's) searched raw and base64 in "
              f"{len(files)} rendered files, the inputs of {len(registered.resources)} registered resources and "
              f"{len(caplog.records)} log records: 0 outside a secret")


def test_a_leaked_value_is_found_raw_and_base64_and_outside_secrets_only() -> None:
    values = {"mlflow/admin-password": "mockgen0123456789abcdef01234567"}
    assert leaks("password: mockgen0123456789abcdef01234567", values) == ["mlflow/admin-password"]
    assert leaks(base64.b64encode(b"mockgen0123456789abcdef01234567").decode(), values) == ["mlflow/admin-password"]
    wrapped = {"stringData": {SIG: SECRET_SIG, "value": {"password": "mockgen0123456789abcdef01234567"}}}
    assert list(plain_strings(wrapped)) == [("", "stringData")]
    assert ("[0].password", "mockgen0123456789abcdef01234567") in list(
        plain_strings([{"password": "mockgen0123456789abcdef01234567"}]))
