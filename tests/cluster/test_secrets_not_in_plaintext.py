"""Generated secrets never appear in plaintext: not in the Pulumi state, not in the engine's output, not
in the controllers' logs (the local stack on the rehearsal, deployed by the real engine and provider).

The values are read back from the cluster (the Secrets the deployment wrote: each tenant's object-store
keys, generated at deploy time by the dynamic provider, docs/components/object-store.md), then searched
for, raw and base64-encoded, in every file of the Pulumi state directory and every log of the rehearsal.
The state must hold them as Pulumi secrets (ciphertext) instead.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from trainyard.manifests.meta import OBJECT_STORE_SECRET
from trainyard.rehearsal.session import Rehearsal

pytestmark = pytest.mark.cluster

MIN_SECRET_LENGTH = 16  # generated keys are 20-40 characters; shorter values (a region, "true") are not secrets


def generated_values(rehearsal: Rehearsal) -> dict[str, str]:
    """Each tenant's object-store Secret as stored: key -> value, for the values long enough to be secrets."""
    values: dict[str, str] = {}
    for tenant in rehearsal.config.tenants:
        secret = rehearsal.kube.get("secret", OBJECT_STORE_SECRET, tenant.namespace_name)
        for key, encoded in (secret.get("data") or {}).items():
            value = base64.b64decode(encoded).decode()
            if len(value) >= MIN_SECRET_LENGTH and "://" not in value:
                values[f"{tenant.name}/{key}"] = value
    return values


def files_under(*roots: Path) -> list[Path]:
    return sorted(p for root in roots if root.exists() for p in root.rglob("*") if p.is_file())


def test_generated_keys_are_ciphertext_in_the_state_and_absent_from_every_log(deployed_rehearsal: Rehearsal,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    rehearsal = deployed_rehearsal
    values = generated_values(rehearsal)
    secret_keys = [k for k in values if k.endswith("SECRET_ACCESS_KEY")]
    assert len(secret_keys) == len(rehearsal.config.tenants), sorted(values)
    state_dir = Path(rehearsal.env["TRAINYARD_STATE_DIR"])
    searched = files_under(state_dir, rehearsal.settings.logs, Path(rehearsal.env["TRAINYARD_RUN_DIR"]))
    states = [p for p in searched if p.suffix == ".json" and "stacks" in p.parts]
    assert states, f"no Pulumi state under {state_dir}"
    found = []
    for path in searched:
        text = path.read_bytes().decode(errors="replace")
        for name, value in values.items():
            if value in text or base64.b64encode(value.encode()).decode() in text:
                found.append(f"{name} in {path}")
    assert found == [], found
    # The state keeps them, as Pulumi secrets: the secret signature with a ciphertext, no plaintext.
    state = json.loads(states[0].read_text())
    resources = state.get("checkpoint", state).get("latest", {}).get("resources", [])
    secrets = [r for r in resources if r.get("type") == "kubernetes:core/v1:Secret"
               and r.get("outputs", {}).get("metadata", {}).get("name") == OBJECT_STORE_SECRET]
    assert len(secrets) == len(rehearsal.config.tenants)
    for resource in secrets:
        data = resource["outputs"].get("data") or resource["outputs"].get("stringData")
        assert isinstance(data, dict) and "ciphertext" in data, resource["urn"]
    with capsys.disabled():
        print(f"\n## No plaintext secrets\n\n{len(values)} generated values of {len(rehearsal.config.tenants)} "
              f"tenants' {OBJECT_STORE_SECRET} Secrets (read back from the cluster) searched raw and base64 in "
              f"{len(searched)} files (Pulumi state: {len(states)}, engine and controller logs): 0 found; the "
              f"state holds {len(secrets)} of those Secrets as ciphertext.")
