"""The MLflow chart's busybox, offline: named as the chart's values name its init containers' image, its source pinned
by sha256 (a tarball with other bytes is refused, a cached one is not fetched again), upstream's defconfig changed only
where ``CONFIG`` says, and a machine without a compiler told what to install. The compile itself runs where the node
tier fills the rehearsal's mirror (tests/node/platform: the chart's pod runs it)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from trainyard.manifests import mlflow as mlflow_manifests
from trainyard.project import open_stack
from trainyard.rehearsal import busybox_image, debian
from trainyard.rehearsal.images import ImageError


def _config() -> Any:
    return open_stack("staging", ROOT).config


def test_the_image_is_named_as_the_charts_init_containers_pull_it() -> None:
    config = _config()
    values = mlflow_manifests.chart_values(config)
    name = str(busybox_image.target(config))
    assert name == "registry.trainyard.internal/mirror/library/busybox:1.38.0"
    for role in ("dbchecker", "iniFileInitializer"):
        image = values["initImages"][role]
        assert f"{image['repository']}:{image['tag'].split('@')[0]}" == name


def test_a_stack_without_a_mirror_is_refused() -> None:
    config = open_stack("local", ROOT).config
    assert config.images.registry_mirror is None
    with pytest.raises(ImageError, match="registry_mirror"):
        busybox_image.target(config)


def test_the_source_is_debians_orig_tarball_by_its_pinned_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert f"{debian.MIRROR}/pool/main/b/busybox/busybox_1.37.0.orig.tar.bz2" == busybox_image.SOURCE_URL
    served: list[str] = []

    def urlopen(url: str, timeout: float) -> io.BytesIO:
        served.append(url)
        return io.BytesIO(b"not busybox")

    monkeypatch.setattr(busybox_image.urllib.request, "urlopen", urlopen)
    with pytest.raises(ImageError, match=f"sha256 {hashlib.sha256(b'not busybox').hexdigest()}, pinned .*refused"):
        busybox_image.source(tmp_path)
    assert served == [busybox_image.SOURCE_URL] and not list(tmp_path.iterdir())  # nothing half-written kept
    # A cached tarball with the pinned sha256 is used as it is (the pin stubbed to what the cache holds).
    (tmp_path / busybox_image.SOURCE_NAME).write_bytes(b"cached source")
    monkeypatch.setattr(busybox_image, "SOURCE_SHA256", hashlib.sha256(b"cached source").hexdigest())
    assert busybox_image.source(tmp_path) == tmp_path / busybox_image.SOURCE_NAME and len(served) == 1


def test_an_unreachable_archive_says_where_to_put_the_tarball(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def urlopen(url: str, timeout: float) -> io.BytesIO:
        raise OSError("Network is unreachable")

    monkeypatch.setattr(busybox_image.urllib.request, "urlopen", urlopen)
    with pytest.raises(ImageError, match=f"Network is unreachable .*put {busybox_image.SOURCE_NAME} in {tmp_path}"):
        busybox_image.source(tmp_path)


def test_defconfig_is_changed_only_where_config_says() -> None:
    defconfig = "\n".join(["# Automatically generated", "CONFIG_HAVE_DOT_CONFIG=y", "# CONFIG_STATIC is not set",
                           "CONFIG_NC=y", "CONFIG_NC_EXTRA=y", "CONFIG_TC=y", "CONFIG_FEATURE_TC_INGRESS=y", ""])
    lines = busybox_image.configured(defconfig).splitlines()
    assert "CONFIG_STATIC=y" in lines and "# CONFIG_STATIC is not set" not in lines
    assert "# CONFIG_TC is not set" in lines and "CONFIG_TC=y" not in lines
    # nc -z (CONFIG_NC_EXTRA) is what the chart's dbchecker needs: defconfig's, kept.
    assert {"CONFIG_NC=y", "CONFIG_NC_EXTRA=y", "CONFIG_FEATURE_TC_INGRESS=y"} <= set(lines)
    assert busybox_image.configured("\n".join(lines)) == "\n".join(lines) + "\n"  # applying it again changes nothing


def test_a_machine_without_a_compiler_is_told_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(busybox_image.shutil, "which", lambda name: None if name == "gcc" else f"/usr/bin/{name}")
    with pytest.raises(ImageError, match=r"gcc not found: .*apt-get install gcc make libc6-dev"):
        busybox_image.build(_config(), Path("/nonexistent"))
