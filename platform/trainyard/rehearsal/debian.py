"""Debian packages as image layers: downloaded by ``apt-get download`` at a pinned version, checked against a pinned
sha256, and unpacked here, as distroless unpacks them (its ``deb.package``: the package's ``data.tar``, no maintainer
script run).

The factory's Python base (``python_base.py``) and the SeaweedFS image's shell (``seaweedfs_image.py``) come from Debian
bookworm packages. Installed packages of this machine would make an image depend on what happens to be installed (and
at which version); a pin does not: ``name=version`` and the sha256 the archive's signed ``Packages`` index gives for
that file (``apt-cache show NAME=VERSION``, field ``SHA256``). ``apt-get download`` verifies the file against the index;
the factory verifies it against the pin again, so a pin is the whole input. Downloaded files are kept under
``$TRAINYARD_DEB_CACHE`` (default ``$XDG_CACHE_HOME/trainyard/debs``): a second build needs no network.

Debian's archive keeps only the current version of a package in a suite: a pin whose version has been superseded
(a point release, a security update) is no longer downloadable, and the build says so, naming the new candidate
(``candidates``: what ``python -m trainyard.rehearsal.debian PACKAGE...`` prints, to update the pins with).

What a layer gets from a package: every directory, file and symbolic link of its ``data.tar`` (hard links become
copies), with the package's modes and owners, and dpkg's record of it where scanners read one in a distroless image
(``var/lib/dpkg/status.d/<package>``: the package's ``control`` file; distroless writes the same, so an SBOM tool
sees what is inside). Ref: deb(5) (an ``ar`` archive of ``debian-binary``, ``control.tar.*``, ``data.tar.*``).
"""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainyard.rehearsal.images import Entry, ImageError, Layer, merge

ARCHITECTURE = "amd64"
AR_MAGIC = b"!<arch>\n"


@dataclass(frozen=True)
class DebianPin:
    """One Debian package at one version, and the sha256 of its ``.deb`` (the archive's ``Packages`` field)."""

    name: str
    version: str
    sha256: str

    @property
    def spec(self) -> str:
        return f"{self.name}={self.version}"

    @property
    def file_name(self) -> str:
        """The name in the cache: apt-get's name for the download (an epoch's ``:`` written ``%3a``), less the
        architecture."""
        return f"{self.name}_{self.version.replace(':', '%3a')}.deb"


def cache_root() -> Path:
    given = os.environ.get("TRAINYARD_DEB_CACHE")
    if given:
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainyard" / "debs"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(pin: DebianPin, cache: Path | None = None) -> Path:
    """The ``.deb`` of ``pin`` from the cache, downloaded first when absent; refused unless its sha256 is the pin's."""
    return fetch_all([pin], cache)[pin]


def fetch_all(pins: Sequence[DebianPin], cache: Path | None = None) -> dict[DebianPin, Path]:
    """Each pin's ``.deb`` from the cache; the missing ones downloaded by one ``apt-get download`` first."""
    directory = cache or cache_root()
    out = {pin: directory / pin.file_name for pin in pins
           if (directory / pin.file_name).is_file() and sha256_file(directory / pin.file_name) == pin.sha256}
    missing = [pin for pin in pins if pin not in out]
    if not missing:
        return out
    apt_get = shutil.which("apt-get")
    if apt_get is None:
        raise ImageError(f"apt-get not found: the Debian packages {', '.join(p.spec for p in missing)} are downloaded "
                         f"with it (a Debian machine with deb.debian.org reachable), or put their .debs in {directory}")
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=directory) as work:
        # As root apt-get would hand the download to its sandbox user _apt, which cannot write a private directory.
        result = subprocess.run([apt_get, "-q", "-o", "APT::Sandbox::User=root", "download",  # noqa: S603
                                 *(pin.spec for pin in missing)],
                                cwd=work, capture_output=True, text=True, check=False, timeout=900)
        if result.returncode != 0:
            superseded = [f"{name} {version} (sha256 {sha})" for name, (version, sha) in
                          candidates([p.name for p in missing]).items()
                          if version != next(p.version for p in missing if p.name == name)]
            hint = (f"; the archive's candidates now are {', '.join(superseded)}: update the pins "
                    "(python -m trainyard.rehearsal.debian NAME... prints them)" if superseded else
                    " (apt-get update, or check that deb.debian.org is reachable)")
            raise ImageError(f"apt-get download failed: {(result.stderr or result.stdout).strip()[-600:]}{hint}")
        for pin in missing:
            # apt-get names it <name>_<version>_<architecture>.deb (amd64, or all)
            found = sorted(Path(work).glob(pin.file_name.removesuffix(".deb") + "_*.deb"))
            if len(found) != 1:
                raise ImageError(f"apt-get download {pin.spec} gave {len(found)} files")
            downloaded = found[0]
            got = sha256_file(downloaded)
            if got != pin.sha256:
                raise ImageError(f"{pin.file_name}: sha256 {got}, the pin says {pin.sha256}: refused (the archive "
                                 f"serves other bytes for {pin.spec} than when it was pinned)")
            os.replace(downloaded, directory / pin.file_name)
            out[pin] = directory / pin.file_name
    return out


def candidates(names: Iterable[str]) -> dict[str, tuple[str, str]]:
    """What apt would install now for each package: ``{name: (version, sha256)}`` (what a pin is updated to)."""
    out: dict[str, tuple[str, str]] = {}
    for name in names:
        policy = subprocess.run(["apt-cache", "policy", name], capture_output=True, text=True, check=False)  # noqa: S603, S607
        version = next((line.split()[1] for line in policy.stdout.splitlines()
                        if line.strip().startswith("Candidate:") and len(line.split()) > 1), None)
        if version is None or version == "(none)":
            continue
        show = subprocess.run(["apt-cache", "show", f"{name}={version}"], capture_output=True, text=True,  # noqa: S603, S607
                              check=False)
        sha = next((line.split()[1] for line in show.stdout.splitlines() if line.startswith("SHA256:")), "")
        out[name] = (version, sha)
    return out


# ------------------------------------------------------------------------------------------ reading a .deb


def ar_members(data: bytes) -> dict[str, bytes]:
    """The members of an ``ar`` archive (a ``.deb``): name -> bytes. Ref: deb(5), ar(5) (common format)."""
    if not data.startswith(AR_MAGIC):
        raise ImageError("not a Debian package (no ar archive header)")
    members, offset = {}, len(AR_MAGIC)
    while offset + 60 <= len(data):
        header = data[offset:offset + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        members[name] = data[offset + 60:offset + 60 + size]
        offset += 60 + size + (size % 2)  # members start on even offsets
    return members


def _decompressed(name: str, data: bytes) -> bytes:
    if name.endswith(".xz"):
        return lzma.decompress(data)
    if name.endswith(".gz"):
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)
    if name.endswith(".tar"):
        return data
    raise ImageError(f"{name}: compression not supported here (xz, gz or none; bookworm's packages use xz)")


def _tar_member(members: dict[str, bytes], prefix: str) -> bytes:
    found = [name for name in members if name.startswith(prefix)]
    if len(found) != 1:
        raise ImageError(f"a Debian package has {len(found)} {prefix}* members ({', '.join(sorted(members))})")
    return _decompressed(found[0], members[found[0]])


def control(deb: bytes) -> str:
    """The package's ``control`` file."""
    with tarfile.open(fileobj=io.BytesIO(_tar_member(ar_members(deb), "control.tar"))) as tar:
        member = next((m for m in tar.getmembers() if m.name.lstrip("./") == "control"), None)
        handle = tar.extractfile(member) if member is not None else None
        if handle is None:
            raise ImageError("a Debian package without a control file")
        return handle.read().decode("utf-8")


def data_entries(deb: bytes) -> list[Entry]:
    """Every directory, file and link of the package's ``data.tar``, as the package has them (hard links copied)."""
    entries = []
    with tarfile.open(fileobj=io.BytesIO(_tar_member(ar_members(deb), "data.tar"))) as tar:
        for member in tar.getmembers():
            path = member.name.removeprefix("./").strip("/")
            if path in ("", "."):
                continue
            mode = member.mode & 0o7777
            if member.isdir():
                entries.append(Entry(path, mode=mode, uid=member.uid, gid=member.gid))
            elif member.issym():
                entries.append(Entry(path, link=member.linkname, mode=0o777, uid=member.uid, gid=member.gid))
            elif member.isfile() or member.islnk():
                handle = tar.extractfile(member)
                if handle is None:
                    raise ImageError(f"/{path}: its content is not in the package")
                entries.append(Entry(path, handle.read(), mode=mode, uid=member.uid, gid=member.gid))
            else:
                raise ImageError(f"/{path}: a device or fifo in a Debian package is not laid out here")
    return entries


# ------------------------------------------------------------------------------------------ layers


def package_layer(pins: Sequence[DebianPin], created_by: str, cache: Path | None = None,
                  extra: Sequence[Entry] = ()) -> Layer:
    """One layer of the pinned packages (their files and their dpkg records), plus ``extra`` entries (e.g. aliases)."""
    sources: list[tuple[str, Sequence[Entry]]] = []
    records = [Entry("var", mode=0o755), Entry("var/lib", mode=0o755), Entry("var/lib/dpkg", mode=0o755),
               Entry("var/lib/dpkg/status.d", mode=0o755)]
    debs = fetch_all(pins, cache)
    for pin in pins:
        deb = debs[pin].read_bytes()
        sources.append((pin.spec, data_entries(deb)))
        records.append(Entry(f"var/lib/dpkg/status.d/{pin.name}", control(deb).encode(), mode=0o644))
    sources += [("dpkg records", records), ("the recipe", list(extra))]
    listed = ", ".join(f"{p.name} {p.version}" for p in pins)
    return Layer(tuple(merge(sources)), f"{created_by}: Debian {listed}")


def pins_key(pins: Sequence[DebianPin]) -> list[list[str]]:
    """What a layer of ``pins`` is made of, for a cache key: the pinned files' hashes stand for their contents."""
    return [[p.name, p.version, p.sha256] for p in pins]


def main(argv: Sequence[str]) -> int:
    """Print each package's current candidate as a pin line (to update a recipe's pins)."""
    found = candidates(argv)
    for name in argv:
        if name in found:
            version, sha = found[name]
            print(f'DebianPin("{name}", "{version}", "{sha}"),')
        else:
            print(f"# {name}: no candidate (apt-get update?)", file=sys.stderr)
    return 0 if set(found) == set(argv) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
