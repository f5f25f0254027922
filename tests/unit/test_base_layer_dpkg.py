"""The base layer reads dpkg's status: a package whose triggers are pending is installed; one being changed is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.rehearsal.base_layer import installed_package
from trainyard.rehearsal.images import ImageError


def _root(tmp_path: Path, status: str) -> Path:
    info = tmp_path / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    (info / "libc-bin.md5sums").write_text("d41d8cd98f00b204e9800998ecf8427e  etc/ld.so.conf\n")
    (info / "libc-bin.list").write_text("/.\n/etc\n/etc/ld.so.conf\n")
    (tmp_path / "var/lib/dpkg/status").write_text(
        f"Package: bash\nStatus: install ok installed\nVersion: 5.2\n\n"
        f"Package: libc-bin\nStatus: {status}\nVersion: 2.36-9+deb12u14\n")
    return tmp_path


@pytest.mark.parametrize("state", ["installed", "triggers-pending", "triggers-awaited"])
def test_a_package_with_its_files_in_place_is_installed(tmp_path: Path, state: str) -> None:
    # An apt-get elsewhere on the machine (the node tier's packages) leaves libc-bin triggers-pending for a moment.
    assert installed_package("libc-bin", _root(tmp_path, f"install ok {state}")).version == "2.36-9+deb12u14"


@pytest.mark.parametrize("state", ["unpacked", "half-configured", "half-installed"])
def test_a_package_being_changed_is_refused_naming_its_state(tmp_path: Path, state: str) -> None:
    with pytest.raises(ImageError, match=f"libc-bin is {state} \\(dpkg\\): an apt-get or dpkg is changing it"):
        installed_package("libc-bin", _root(tmp_path, f"install ok {state}"))


def test_a_package_not_installed_names_the_install(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match=r"libc-bin is not installed.*apt-get install libc-bin"):
        installed_package("libc-bin", _root(tmp_path, "deinstall ok config-files"))
