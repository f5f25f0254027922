"""``rehearsal.barman_cloud_image``: the barman-cloud plugin's images, offline (pins, lock, names, the plugin layout).

The sidecar's Debian and wheel layers are built from deb.debian.org and PyPI (or their caches) where the plugin runs
(the node tier); here: that its pins are upstream's sidecar requirements less psycopg2, which Debian's
python3-psycopg2 stands for, and that every bad input is refused with what to do.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.unit.test_factory import tiny_elf
from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.project import open_stack
from trainyard.rehearsal import barman_cloud_image as barman
from trainyard.rehearsal import debian, debian_python, wheels
from trainyard.rehearsal.images import ImageError

MIRROR = "trainyard.local/mirror/"
TOOLS = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools")
UPSTREAM = TOOLS / "share" / barman.TOOL / barman.UPSTREAM_REQUIREMENTS
BUILT = barman.STAND_INS[catalog.BARMAN_CLOUD_PLUGIN_VERSION].module_version


@pytest.fixture
def config() -> PlatformConfig:
    local = open_stack("local").config
    return local.model_copy(update={"images": local.images.model_copy(update={"registry_mirror": MIRROR})})


def test_the_lock_is_upstreams_sidecar_requirements_less_psycopg2() -> None:
    if not UPSTREAM.is_file():
        pytest.skip(f"{UPSTREAM} not found: `tools/build.sh {barman.TOOL}` copies it out of the plugin's module")
    production = barman.upstream_pins(UPSTREAM.read_text(encoding="utf-8"), str(UPSTREAM))
    locked = wheels.read_lock(barman.WHEEL_LOCK)
    barman.check_upstream_pins(production, locked)
    assert production["barman"] == "3.19.1" and "psycopg2" in production
    assert {p.name for p in locked} == set(production) - {"psycopg2"}


def test_upstream_pins_are_read_from_a_pip_compiled_file_and_anything_else_is_refused() -> None:
    text = ("# comment\nbarman[cloud]==3.20.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
            "boto3==1.43.81  # via barman\nPsycopg2==2.9.12\n")
    assert barman.upstream_pins(text, "r.txt") == {"barman": "3.20.0", "boto3": "1.43.81", "psycopg2": "2.9.12"}
    with pytest.raises(ImageError, match=r"r.txt:1: 'barman>=3' is not an exact `name==version` pin"):
        barman.upstream_pins("barman>=3\n", "r.txt")
    with pytest.raises(ImageError, match=r"r\.txt: pins no barman"):
        barman.upstream_pins("boto3==1.43.81\n", "r.txt")


def test_a_lock_that_drifted_from_upstream_is_refused_saying_how_to_rewrite_it() -> None:
    locked = [wheels.WheelPin("barman", "3.19.0", "a" * 64), wheels.WheelPin("psycopg2", "2.9.12", "b" * 64)]
    with pytest.raises(ImageError) as caught:
        barman.check_upstream_pins({"barman": "3.20.0", "boto3": "1.43.81", "psycopg2": "2.9.12"}, locked)
    message = str(caught.value)
    assert "barman==3.20.0: the lock has 3.19.0" in message and "boto3==1.43.81: the lock has none" in message
    assert "psycopg2 is a wheel in the lock: Debian's python3-psycopg2 stands for it" in message
    assert "python -m trainyard.rehearsal.barman_cloud_image lock" in message


def test_the_debian_closure_is_trixies_python3_with_psycopg2_libpq_and_tar() -> None:
    pins = debian.read_pins(barman.DEBIAN_PIN_FILE)
    versions = {p.name: p.version for p in pins.pins}
    assert pins.suite == "trixie"
    assert {"python3-psycopg2", "libpq5", "liblz4-1", "libsnappy1v5", "tar", "ca-certificates"} <= set(versions)
    assert versions["python3.13"].startswith("3.13.") and versions["libc6"].startswith("2.41-")
    assert debian_python.wheel_target(pins, barman.PYTHON).glibc == (2, 41)
    barman.check_debian_stands_in(pins)
    without = debian.PinFile(pins.suite, pins.roots, tuple(p for p in pins.pins if p.name != "python3-psycopg2"))
    with pytest.raises(ImageError, match="pins no python3-psycopg2, which stands for upstream's pin"):
        barman.check_debian_stands_in(without)


def test_the_images_are_upstreams_names_under_the_mirror_and_refused_without_one(config: PlatformConfig) -> None:
    names = barman.targets(config)
    assert str(names["plugin"]) == f"{MIRROR}cloudnative-pg/plugin-barman-cloud:{catalog.BARMAN_CLOUD_PLUGIN_VERSION}"
    assert str(names["sidecar"]) == \
        f"{MIRROR}cloudnative-pg/plugin-barman-cloud-sidecar:{catalog.BARMAN_CLOUD_PLUGIN_VERSION}"
    bare = config.model_copy(update={"images": config.images.model_copy(update={"registry_mirror": None})})
    with pytest.raises(ImageError, match=r"sets no images\.registry_mirror"):
        barman.targets(bare)


def test_the_plugin_built_is_the_recorded_stand_in_for_the_catalogs_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """tools/build.sh builds what STAND_INS records for the catalog's version, and nothing unrecorded is built."""
    script = (Path(__file__).resolve().parents[2] / "tools" / "build.sh").read_text()
    assert re.search(rf"^BARMAN_CLOUD_BUILD_VERSION={re.escape(BUILT)}$", script, re.M)
    assert re.search(rf"^BARMAN_CLOUD_VERSION={re.escape(catalog.BARMAN_CLOUD_PLUGIN_VERSION)}$", script, re.M)
    assert catalog.BARMAN_CLOUD_PLUGIN_VERSION == "v0.15.0" and BUILT == "v0.14.0"
    monkeypatch.setattr(catalog, "BARMAN_CLOUD_PLUGIN_VERSION", "v0.16.0")
    with pytest.raises(ImageError, match=r"no build recorded for plugin-barman-cloud v0.16.0 .*has v0.15.0"):
        barman.stand_in()


def _tools(directory: Path, binary: bytes, version: str = BUILT) -> Path:
    (directory / "bin").mkdir(parents=True)
    (directory / "bin" / barman.BINARY).write_bytes(binary)
    (directory / "share" / barman.TOOL).mkdir(parents=True)
    (directory / "share" / barman.TOOL / "VERSION").write_text(f"{version}\n")
    return directory


def test_the_plugin_binary_must_be_built_static_at_the_pinned_version(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match=r"barman-cloud-manager not found: build it with `tools/build.sh barman-cloud`"):
        barman.plugin_binary(tmp_path / "none")
    with pytest.raises(ImageError, match=r"built from github.com/cloudnative-pg/plugin-barman-cloud@v0.15.0, but the "
                                         r"image recipe expects v0.14.0"):
        barman.plugin_binary(_tools(tmp_path / "other", tiny_elf(), "v0.15.0"))
    with pytest.raises(ImageError, match="is not a static x86-64 ELF executable"):
        barman.plugin_binary(_tools(tmp_path / "dynamic", tiny_elf(interpreter=True)))
    assert barman.plugin_binary(_tools(tmp_path / "ok", tiny_elf(payload=b"manager"))).endswith(b"manager")


def test_the_plugin_image_is_upstreams_dockerfile_and_the_sidecar_runs_as_postgres(config: PlatformConfig) -> None:
    upstream = barman.upstream_images()
    plugin = barman.plugin_config(upstream["plugin"])
    assert plugin["Entrypoint"] == ["/manager"] and plugin["User"] == "65532:65532" and plugin["WorkingDir"] == "/"
    layer = barman.manager_layer(b"binary")
    assert [(e.path, e.mode, e.uid) for e in layer.entries] == [("manager", 0o755, 0)]
    pins = debian.read_pins(barman.DEBIAN_PIN_FILE)
    sidecar = barman.sidecar_config(upstream["sidecar"], pins, wheels.read_lock(barman.WHEEL_LOCK))
    assert sidecar["Entrypoint"] == ["/manager"] and sidecar["User"] == "26:26"
    labels = json.dumps(sidecar["Labels"])
    assert "python3-psycopg2" in labels and "barman 3.19.1" in labels  # what differs from upstream, named
    assert "built from v0.14.0: the module proxy refuses" in json.dumps(plugin["Labels"])  # the stand-in, named
    assert any(str(e).startswith("PATH=/usr/local/sbin:/usr/local/bin:") for e in sidecar["Env"])  # type: ignore[attr-defined]
    user = {e.path: e for e in barman.sidecar_user_layer(b"certs").entries}
    assert user["tmp"].mode == 0o1777 and user["etc/ssl/certs/ca-certificates.crt"].data == b"certs"
