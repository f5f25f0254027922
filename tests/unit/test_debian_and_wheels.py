"""Pinned Debian packages and wheels as image layers, offline: hand-made ``.deb`` and wheel files are unpacked as dpkg
and a wheel installer would, the cache is trusted only for the pinned sha256, and what cannot be made reproducible is
refused with a message that says why."""

from __future__ import annotations

import hashlib
import io
import lzma
import tarfile
import zipfile
from pathlib import Path

import pytest

from trainyard.rehearsal import debian, wheels
from trainyard.rehearsal.images import Entry, ImageError, merge
from trainyard.rehearsal.python_base import WHEEL_TARGET


def _tar(members: list[tuple[str, bytes | None, str | None, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data, link, mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _ar(members: dict[str, bytes]) -> bytes:
    out = debian.AR_MAGIC
    for name, data in members.items():
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        out += header + data + (b"\n" if len(data) % 2 else b"")
    return out


CONTROL = "Package: libdemo1\nVersion: 1.0-1\nArchitecture: amd64\n"


def _deb(files: list[tuple[str, bytes | None, str | None, int]] | None = None) -> bytes:
    data = files or [("./", None, None, 0o755), ("./usr/", None, None, 0o755), ("./usr/lib/", None, None, 0o755),
                     ("./usr/lib/libdemo.so.1.0", b"\x7fELF demo", None, 0o644),
                     ("./usr/lib/libdemo.so.1", None, "libdemo.so.1.0", 0o777)]
    return _ar({"debian-binary": b"2.0\n", "control.tar.xz": lzma.compress(_tar([("./control", CONTROL.encode(), None, 0o644)])),
                "data.tar.xz": lzma.compress(_tar(data))})


def test_a_debian_package_unpacks_to_its_files_links_and_directories_with_their_modes() -> None:
    entries = {e.path: e for e in debian.data_entries(_deb())}
    assert sorted(entries) == ["usr", "usr/lib", "usr/lib/libdemo.so.1", "usr/lib/libdemo.so.1.0"]  # no "." entry
    assert entries["usr/lib/libdemo.so.1.0"].data == b"\x7fELF demo" and entries["usr/lib/libdemo.so.1.0"].mode == 0o644
    assert entries["usr/lib/libdemo.so.1"].link == "libdemo.so.1.0"
    assert debian.control(_deb()) == CONTROL


def test_a_package_is_taken_from_the_cache_only_with_the_pinned_sha256(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    deb = _deb()
    pin = debian.DebianPin("libdemo1", "1:1.0-1", hashlib.sha256(deb).hexdigest())
    assert pin.file_name == "libdemo1_1%3a1.0-1.deb"  # apt-get's quoting of the epoch
    (tmp_path / pin.file_name).write_bytes(deb)
    layer = debian.package_layer([pin], "demo", tmp_path)
    paths = {e.path: e for e in layer.entries}
    assert paths["var/lib/dpkg/status.d/libdemo1"].data == CONTROL.encode()  # what SBOM scanners read in distroless
    assert "usr/lib/libdemo.so.1.0" in paths and "Debian libdemo1 1:1.0-1" in layer.created_by
    (tmp_path / pin.file_name).write_bytes(deb + b"changed")
    monkeypatch.setattr(debian.shutil, "which", lambda name: None)  # no apt-get: nothing can replace the bad file
    with pytest.raises(ImageError, match=r"apt-get not found: the Debian packages libdemo1=1:1.0-1 are downloaded"):
        debian.fetch(pin, tmp_path)


def test_two_sources_that_ship_one_path_differently_are_refused() -> None:
    same = [Entry("usr", mode=0o755), Entry("usr/share/doc/x", b"same")]
    assert len(merge([("a", same), ("b", same)])) == 2
    with pytest.raises(ImageError, match=r"/usr/bin/tool is in both a and b, differently"):
        merge([("a", [Entry("usr/bin/tool", b"one")]), ("b", [Entry("usr/bin/tool", b"two")])])


def _wheel(name: str = "demo_pkg", version: str = "1.0") -> bytes:
    info = f"{name}-{version}.dist-info"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{name}/__init__.py", "VALUE = 1\n")
        archive.writestr(f"{name}-{version}.data/scripts/demo-tool", "#!python\nprint('tool')\n")
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: demo-pkg\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/entry_points.txt", "[console_scripts]\nDemo = demo_pkg.cli:main\n")
        archive.writestr(f"{info}/RECORD", "stale,,\n")
    return buffer.getvalue()


def test_a_wheel_installs_into_the_bases_site_packages_with_its_scripts_and_a_new_record(tmp_path: Path) -> None:
    (tmp_path / "demo.whl").write_bytes(_wheel())
    entries = {e.path: e for e in wheels.wheel_entries(tmp_path / "demo.whl", WHEEL_TARGET)}
    site = "usr/local/lib/python3.11/dist-packages"
    assert entries[f"{site}/demo_pkg/__init__.py"].data == b"VALUE = 1\n"
    script = entries["usr/local/bin/demo-tool"]
    assert script.data == b"#!/usr/bin/python3.11\nprint('tool')\n" and script.mode == 0o755  # PEP 427 #!python
    launcher = entries["usr/local/bin/Demo"].data or b""
    assert launcher.startswith(b"#!/usr/bin/python3.11\n") and b"from demo_pkg.cli import main" in launcher
    assert entries[f"{site}/demo_pkg-1.0.dist-info/INSTALLER"].data == b"trainyard\n"
    record = (entries[f"{site}/demo_pkg-1.0.dist-info/RECORD"].data or b"").decode().splitlines()
    assert "demo_pkg/__init__.py,sha256=" in "\n".join(record) and "stale,," not in record
    assert "../../../bin/demo-tool" in "\n".join(record)  # the script, where it was installed
    assert entries["usr/local/bin"].data is None  # directories of every file are in the layer


def test_the_lock_file_is_one_pinned_wheel_per_line(tmp_path: Path) -> None:
    good = tmp_path / "good.lock"
    good.write_text("# comment\nBoto3==1.44.8 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    assert wheels.read_lock(good) == [wheels.WheelPin("boto3", "1.44.8", "a" * 64)]
    bad = tmp_path / "bad.lock"
    bad.write_text("boto3>=1.44\n")
    with pytest.raises(ImageError, match=r"is not `name==version --hash=sha256:<64 hex>`"):
        wheels.read_lock(bad)


def test_wheels_are_chosen_for_the_bases_interpreter_and_libc_never_built_from_source() -> None:
    arguments = WHEEL_TARGET.pip_arguments()
    assert "--only-binary=:all:" in arguments and arguments[arguments.index("--python-version") + 1] == "3.11"
    platforms = [arguments[i + 1] for i, a in enumerate(arguments) if a == "--platform"]
    assert "manylinux_2_36_x86_64" in platforms and "manylinux_2_37_x86_64" not in platforms  # bookworm's glibc 2.36
