"""KServe's storage initializer image (rehearsal/storage_initializer_image.py): kserve-storage on the Python base."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from trainyard.project import open_stack
from trainyard.rehearsal import factory, mlflow_image, wheels
from trainyard.rehearsal import storage_initializer_image as si
from trainyard.rehearsal.images import ImageError
from trainyard.supply.reference import ImageRef


def test_it_is_named_as_the_kserve_chart_names_it_under_the_mirror() -> None:
    config = open_stack("staging", ROOT).config
    assert si.upstream(config) == ImageRef.parse("docker.io/kserve/storage-initializer:v0.20.0")
    assert str(si.target(config)) == "registry.trainyard.internal/mirror/kserve/storage-initializer:v0.20.0"
    with pytest.raises(ImageError, match=r"no images\.registry_mirror"):
        si.target(open_stack("local", ROOT).config)  # the rehearsal gives the local stack its mirror


def test_the_lock_is_the_requirements_at_the_charts_kserve_version_and_the_data_plane_tiers() -> None:
    pins = wheels.read_lock(si.WHEEL_LOCK)
    si.check_lock(si.top_level_pins(), pins, "v0.20.0")
    with pytest.raises(ImageError, match=r"runs the storage initializer v0\.21\.0; storage-initializer\.lock "
                                         r"has kserve-storage 0\.20\.0"):
        si.check_lock(si.top_level_pins(), pins, "v0.21.0")
    drifted = [p if p.name != "kserve-storage" else wheels.WheelPin(p.name, "0.19.0", p.sha256) for p in pins]
    with pytest.raises(ImageError, match=r"kserve-storage==0.20.0 \(locked: 0.19.0\); rewrite it with"):
        si.check_lock(si.top_level_pins(), drifted, "v0.20.0")
    # The data-plane tier runs KServe's storage code at the same version (tools/mlflow/requirements.txt).
    tools = mlflow_image.top_level_pins(ROOT / "tools" / "mlflow" / "requirements.txt")
    assert tools["kserve-storage"] == si.top_level_pins()["kserve-storage"]


def test_the_entrypoint_takes_upstreams_arguments_and_the_image_runs_as_its_user() -> None:
    compile(si.ENTRYPOINT_SCRIPT, si.ENTRYPOINT, "exec")
    script = si.ENTRYPOINT_SCRIPT.decode()
    assert script.startswith("#!/usr/bin/python3.11\n")
    assert "Storage.download_files(pairs[0::2], pairs[1::2])" in script
    layer = si.entrypoint_layer()
    assert [(e.path, e.mode) for e in layer.entries][-1] == ("storage-initializer/scripts/initializer-entrypoint", 0o755)
    config = si.image_config(ImageRef.parse("docker.io/kserve/storage-initializer:v0.20.0"), wheels.read_lock(si.WHEEL_LOCK))
    assert config["Entrypoint"] == ["/storage-initializer/scripts/initializer-entrypoint"]
    assert (config["User"], config["WorkingDir"]) == ("1000:1000", "/work")  # numeric: runAsNonRoot can check it
    passwd = next(e for e in si.user_layer().entries if e.path == "etc/passwd").data
    assert passwd is not None and b"kserve:x:1000:1000::/home/kserve:" in passwd


def test_the_factory_builds_it_with_kserves_chart() -> None:
    assert si.COMPONENT == "kserve" and "kserve" in factory.COMPONENTS
