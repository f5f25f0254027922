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

**Another suite** (the PostgreSQL operand: trixie, ``postgres_image.py``): a ``SuiteRoot`` is a private apt root
(its own sources list, lists, cache and an empty dpkg status under ``$XDG_CACHE_HOME/trainyard/apt/<suite>``; the
machine's apt configuration is not touched) through which pins of that suite are downloaded. Its pins are a
**pin file** (``PinFile``: ``# suite:``, ``# roots:``, then ``name version sha256`` lines) holding a closure:
``apt-get --simulate install --no-install-recommends ROOTS`` against the empty status, so every Depends/Pre-Depends is
in, Recommends are not, and Essential packages only where a root names them. ``python -m trainyard.rehearsal.debian
PIN_FILE`` resolves the roots again and rewrites the file. A layer of such a closure may drop what
``debian:<suite>-slim`` drops (``slim_excluded``: debuerreotype's ``.slimify-excludes``, every ``copyright`` kept)
and is checked to be merged-/usr (nothing under ``/bin``, ``/sbin``, ``/lib``, ``/lib64`` but base-files' links).
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


def fetch_all(pins: Sequence[DebianPin], cache: Path | None = None,
              suite: SuiteRoot | None = None) -> dict[DebianPin, Path]:
    """Each pin's ``.deb`` from the cache; the missing ones downloaded by one ``apt-get download`` first (through
    ``suite``'s private apt root where given, else the machine's apt)."""
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
        command = [apt_get, "-q", "-o", "APT::Sandbox::User=root", *(suite.options() if suite else ()), "download",
                   *(pin.spec for pin in missing)]
        if suite is not None:
            suite.ensure_lists()
        result = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False,  # noqa: S603
                                timeout=900)
        if result.returncode != 0 and suite is not None:
            # Lists older than a point release or a security update: read them again once, then say what to do.
            suite.update()
            result = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False,  # noqa: S603
                                    timeout=900)
            if result.returncode != 0:
                raise ImageError(f"apt-get download from {suite.suite} failed (deb.debian.org serves only a suite's "
                                 "current versions: a pinned one may have been replaced by a point release or a "
                                 f"security update; re-pin with `python -m trainyard.rehearsal.debian PIN_FILE`):\n"
                                 f"{(result.stderr or result.stdout).strip()[-1500:]}")
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
                  extra: Sequence[Entry] = (), suite: SuiteRoot | None = None, slim: bool = False) -> Layer:
    """One layer of the pinned packages (their files and their dpkg records), plus ``extra`` entries (e.g. aliases);
    ``slim``: without what ``debian:<suite>-slim`` drops, and checked to be merged-/usr."""
    sources: list[tuple[str, Sequence[Entry]]] = []
    records = [Entry("var", mode=0o755), Entry("var/lib", mode=0o755), Entry("var/lib/dpkg", mode=0o755),
               Entry("var/lib/dpkg/status.d", mode=0o755)]
    debs = fetch_all(pins, cache, suite)
    for pin in pins:
        deb = debs[pin].read_bytes()
        entries = data_entries(deb)
        if slim:
            entries = [e for e in entries if not slim_excluded(e.path)]
            _check_merged_usr(pin, entries)
        sources.append((pin.spec, entries))
        records.append(Entry(f"var/lib/dpkg/status.d/{pin.name}", control(deb).encode(), mode=0o644))
    sources += [("dpkg records", records), ("the recipe", list(extra))]
    listed = ", ".join(f"{p.name} {p.version}" for p in pins)
    return Layer(tuple(merge(sources)), f"{created_by}: Debian {listed}")


def pins_key(pins: Sequence[DebianPin]) -> list[list[str]]:
    """What a layer of ``pins`` is made of, for a cache key: the pinned files' hashes stand for their contents."""
    return [[p.name, p.version, p.sha256] for p in pins]


# ------------------------------------------------------------------------------------------ another suite, pin files

MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MERGED_USR = ("bin", "sbin", "lib", "lib64")
# debuerreotype's .slimify-excludes (what debian:*-slim leaves out), with its include of every copyright file.
SLIM_EXCLUDES = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/groff/",
                 "usr/share/lintian/", "usr/share/linda/")


@dataclass(frozen=True)
class SuiteRoot:
    """A private apt root for one Debian suite (``<suite>``, ``-updates``, ``-security``; main) under ``directory``."""

    suite: str
    directory: Path

    @classmethod
    def of(cls, suite: str, cache: Path | None = None) -> SuiteRoot:
        base = cache or cache_root().parent / "apt"
        return cls(suite, base / suite)

    def options(self) -> list[str]:
        root = self.directory
        self._write()
        return ["-o", f"Dir::Etc::sourcelist={root / 'sources.list'}", "-o", "Dir::Etc::sourceparts=/nonexistent",
                "-o", f"Dir::State::Lists={root / 'lists'}", "-o", f"Dir::Cache={root / 'cache'}",
                "-o", f"Dir::State::status={root / 'status'}", "-o", f"APT::Architecture={ARCHITECTURE}",
                "-o", f"APT::Architectures::={ARCHITECTURE}", "-o", "APT::Sandbox::User=root",
                "-o", "Debug::NoLocking=1"]

    def _write(self) -> None:
        (self.directory / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (self.directory / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        sources = "".join(f"deb [signed-by={KEYRING}] {mirror} {suite} main\n" for mirror, suite in (
            (MIRROR, self.suite), (MIRROR, f"{self.suite}-updates"), (SECURITY_MIRROR, f"{self.suite}-security")))
        (self.directory / "sources.list").write_text(sources, encoding="utf-8")
        (self.directory / "status").touch()

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([tool, *self.options(), *args], capture_output=True, text=True,  # noqa: S603
                                  check=False, timeout=900, env={**os.environ, "LC_ALL": "C"})
        except FileNotFoundError:
            raise ImageError(f"{tool} not found: Debian {self.suite}'s packages are downloaded with apt") from None

    def update(self) -> None:
        result = self.run("apt-get", "update")
        if result.returncode != 0:
            raise ImageError(f"apt-get update of {self.suite} (deb.debian.org) failed:\n{result.stderr.strip()[-1500:]}")

    def ensure_lists(self) -> None:
        self._write()
        if not any((self.directory / "lists").glob("*_Packages*")):
            self.update()


@dataclass(frozen=True)
class PinFile:
    suite: str
    roots: tuple[str, ...]
    pins: tuple[DebianPin, ...]

    def version_of(self, name: str) -> str:
        for pin in self.pins:
            if pin.name == name:
                return pin.version
        raise ImageError(f"{name} is not pinned (roots: {' '.join(self.roots)})")

    def dump(self) -> str:
        lines = [f"# suite: {self.suite}", f"# roots: {' '.join(self.roots)}",
                 "# Generated by `python -m trainyard.rehearsal.debian THIS_FILE`: the --no-install-recommends closure",
                 "# of the roots in the suite (apt-get --simulate against an empty dpkg status). name version sha256"]
        return "\n".join([*lines, *(f"{p.name} {p.version} {p.sha256}" for p in self.pins)]) + "\n"


def read_pins(path: Path) -> PinFile:
    suite, roots, pins = "", tuple[str, ...](), list[DebianPin]()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("# suite: "):
            suite = line.removeprefix("# suite: ").strip()
        elif line.startswith("# roots: "):
            roots = tuple(line.removeprefix("# roots: ").split())
        elif line.strip() and not line.startswith("#"):
            fields = line.split()
            if len(fields) != 3 or len(fields[2]) != 64:
                raise ImageError(f"{path}:{number}: not 'name version sha256': {line!r}")
            pins.append(DebianPin(*fields))
    if not suite or not roots or not pins:
        raise ImageError(f"{path}: no '# suite:', '# roots:' or pinned package")
    return PinFile(suite, roots, tuple(pins))


def resolve(suite: SuiteRoot, roots: Sequence[str]) -> PinFile:
    """The closure of ``roots`` in ``suite`` as deb.debian.org serves it now, with each package's SHA-256."""
    suite.update()
    result = suite.run("apt-get", "--simulate", "install", "--no-install-recommends", *roots)
    if result.returncode != 0:
        raise ImageError(f"apt cannot install {' '.join(roots)} from {suite.suite}:\n{result.stdout[-1500:]}"
                         f"{result.stderr}")
    wanted = [(line.split()[1], line.split()[2].strip("()[]")) for line in result.stdout.splitlines()
              if line.startswith("Inst ")]
    shown = suite.run("apt-cache", "show", *(f"{n}={v}" for n, v in wanted)).stdout
    sums: dict[tuple[str, str], str] = {}
    for paragraph in shown.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in paragraph.splitlines() if ": " in line and not line[0].isspace())
        if "Package" in fields and "SHA256" in fields:
            sums.setdefault((fields["Package"], fields["Version"]), fields["SHA256"])
    missing = [f"{n}={v}" for n, v in wanted if (n, v) not in sums]
    if missing:
        raise ImageError(f"apt-cache shows no SHA256 for {', '.join(missing)}")
    pins = sorted((DebianPin(n, v, sums[(n, v)]) for n, v in wanted), key=lambda p: p.name)
    return PinFile(suite.suite, tuple(roots), tuple(pins))


def repin(path: Path) -> int:
    """``python -m trainyard.rehearsal.debian PIN_FILE``: the file's roots resolved again in its suite, rewritten."""
    try:
        old = read_pins(path)
        new = resolve(SuiteRoot.of(old.suite), old.roots)
        path.write_text(new.dump(), encoding="utf-8")
    except (ImageError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    changed = sorted({(p.name, p.version) for p in new.pins} - {(p.name, p.version) for p in old.pins})
    print(f"{path}: {len(new.pins)} packages; changed: {', '.join(f'{n} {v}' for n, v in changed) or 'none'}")
    return 0


def slim_excluded(path: str) -> bool:
    """What ``debian:<suite>-slim`` leaves out (docs, man pages, translations), every ``copyright`` file kept."""
    if path.startswith("usr/share/doc/"):
        return not path.endswith("/copyright") and path.count("/") > 3
    return any(path.startswith(prefix) and path != prefix.rstrip("/") for prefix in SLIM_EXCLUDES)


def _check_merged_usr(pin: DebianPin, entries: Sequence[Entry]) -> None:
    """A merged-/usr suite ships nothing under /bin, /sbin, /lib, /lib64 but base-files' links to /usr."""
    for entry in entries:
        top, _, rest = entry.path.partition("/")
        if top in MERGED_USR and (rest or entry.link != f"usr/{top}"):
            raise ImageError(f"{pin.spec} ships /{entry.path}: not a merged-/usr package (this layer has no "
                             f"/{top} directory)")


def merged_usr_links(entries: Sequence[Entry]) -> list[Entry]:
    """The merged-/usr links a layer lacks (base-files ships them; an image without base-files needs them)."""
    present = {e.path for e in entries}
    return [Entry(top, link=f"usr/{top}", mode=0o777) for top in MERGED_USR if top not in present]


def main(argv: Sequence[str]) -> int:
    """Print each package's current candidate as a pin line (to update a recipe's pins); given one pin file, resolve
    its roots again in its suite and rewrite it."""
    if len(argv) == 1 and argv[0].endswith(".txt"):
        return repin(Path(argv[0]))
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
