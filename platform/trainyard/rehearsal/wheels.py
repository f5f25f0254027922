"""Python wheels as an image layer: pinned with their sha256 in a lock file, downloaded by pip, unpacked here.

An image built on the factory's Python base (``python_base.py``) gets its libraries from PyPI wheels, never from a
``pip install`` inside a container (there is no container runtime to build with, and pip would write the machine's
interpreter into scripts and compile byte code with a timestamp). The inputs are a lock file in pip's own requirements
format, one ``name==version`` and one ``--hash=sha256:...`` per wheel, the whole dependency closure (written by
``python -m trainyard.rehearsal.python_base lock REQUIREMENTS LOCK``, which resolves with ``pip download`` for the base's
interpreter and platform). Fetching runs ``pip download --no-deps --require-hashes`` for the wheels the cache lacks
(``$TRAINYARD_WHEEL_CACHE``, default ``$XDG_CACHE_HOME/trainyard/wheels``, one directory per sha256), so pip checks
every file against the lock, and the factory checks it again.

Unpacking follows the wheel format (PEP 427, the binary distribution format specification): the archive's files go
to ``site-packages`` (purelib and platlib alike: one interpreter, one directory); ``<name>.data/scripts`` to the
scripts directory with a ``#!python`` first line replaced by the base's interpreter; ``.data/data`` under the prefix;
``.data/headers`` under the prefix's include directory. Console scripts (``entry_points.txt``) get a small launcher.
``INSTALLER`` says ``trainyard`` and ``RECORD`` is rewritten with the installed paths and hashes, as an installer
does, so ``importlib.metadata`` and ``pip list`` in the image see every distribution. No byte code is compiled: the
images run with ``PYTHONDONTWRITEBYTECODE=1`` and a read-only root, so imports compile in memory at each start.
"""

from __future__ import annotations

import base64
import configparser
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from trainyard.rehearsal.images import Entry, ImageError, Layer, merge

_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class WheelPin:
    name: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class Target:
    """The interpreter wheels are chosen for and installed to: what ``pip download`` is told, and where files go."""

    python: str  # "3.11"
    interpreter: str  # "/usr/bin/python3.11": scripts' first line
    glibc: tuple[int, int]  # the newest manylinux the base's libc satisfies
    prefix: str = "usr/local"

    @property
    def site_packages(self) -> str:
        return f"{self.prefix}/lib/python{self.python}/dist-packages"  # Debian's site.py puts it on sys.path

    @property
    def scripts(self) -> str:
        return f"{self.prefix}/bin"

    def pip_arguments(self) -> list[str]:
        """``pip download`` options that choose wheels for this interpreter and glibc, never an sdist."""
        abi = "cp" + self.python.replace(".", "")
        platforms = ["manylinux2014_x86_64", *(f"manylinux_2_{minor}_x86_64" for minor in range(17, self.glibc[1] + 1)),
                     "any"]
        return ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp",
                "--abi", abi, "--abi", "abi3", "--abi", "none", *(a for p in platforms for a in ("--platform", p))]


def read_lock(path: Path) -> list[WheelPin]:
    """The pins of a lock file (pip's requirements format, continuation lines joined); one hash per requirement."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImageError(f"{path}: {exc.strerror}") from None
    pins = []
    for raw in text.replace("\\\n", " ").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        requirement, hashes = _REQUIREMENT.match(line), _HASH.findall(line)
        if requirement is None or len(hashes) != 1:
            raise ImageError(f"{path}: {line!r} is not `name==version --hash=sha256:<64 hex>` (one wheel per line)")
        pins.append(WheelPin(canonical(requirement.group(1)), requirement.group(2), hashes[0]))
    return pins


_TOP_LEVEL_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9,._ -]+\])?)==(\S+)$")


def top_level_pins(path: Path) -> dict[str, str]:
    """An image's requirements file (``name[extras]==version`` lines, comments ignored): each requirement as written,
    extras included (``mlflow[auth]``) -> version. ImageError names a line that is not an exact pin."""
    pins = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _TOP_LEVEL_PIN.match(line)
        if match is None:
            raise ImageError(f"{path.name}: {line!r} is not `name[extras]==version`")
        pins[match.group(1)] = match.group(2)
    return pins


def canonical(name: str) -> str:
    """A distribution's normalized name (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def cache_root() -> Path:
    given = os.environ.get("TRAINYARD_WHEEL_CACHE")
    if given:
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainyard" / "wheels"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cached(pin: WheelPin, cache: Path) -> Path | None:
    found = sorted((cache / pin.sha256).glob("*.whl")) if (cache / pin.sha256).is_dir() else []
    return found[0] if found and _sha256(found[0]) == pin.sha256 else None


def fetch(pins: Sequence[WheelPin], target: Target, cache: Path | None = None) -> dict[WheelPin, Path]:
    """Each pinned wheel from the cache, the missing ones downloaded first (``pip download --require-hashes``)."""
    directory = cache or cache_root()
    out = {pin: path for pin in pins if (path := _cached(pin, directory)) is not None}
    missing = [pin for pin in pins if pin not in out]
    if not missing:
        return out
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=directory) as work:
        requirements = Path(work) / "requirements.txt"
        requirements.write_text("".join(f"{pin.requirement}\n" for pin in missing))
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                   "--require-hashes", *target.pip_arguments(), "--dest", str(Path(work) / "wheels"),
                   "-r", str(requirements)]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)  # noqa: S603
        if result.returncode != 0:
            raise ImageError(f"pip download of {len(missing)} pinned wheels failed (the package index must be "
                             f"reachable, or the wheels be in {directory}):\n{(result.stderr or result.stdout)[-1500:]}")
        by_hash = {_sha256(path): path for path in (Path(work) / "wheels").glob("*.whl")}
        for pin in missing:
            path = by_hash.get(pin.sha256)
            if path is None:
                raise ImageError(f"pip download gave no wheel of sha256 {pin.sha256} for {pin.name}=={pin.version}")
            (directory / pin.sha256).mkdir(exist_ok=True)
            final = directory / pin.sha256 / path.name
            os.replace(path, final)
            out[pin] = final
    return out


# ---------------------------------------------------------------------------------------------- unpacking


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def _launcher(interpreter: str, module: str, attribute: str) -> bytes:
    """A console script: import the entry point's object and exit with what it returns."""
    head, _, rest = attribute.partition(".")
    call = f"{head}{'.' + rest if rest else ''}()"
    return (f"#!{interpreter}\nimport sys\nfrom {module} import {head}\n"
            f"if __name__ == \"__main__\":\n    sys.exit({call})\n").encode()


def _installed_path(parts: tuple[str, ...], data_dir: str, target: Target) -> tuple[PurePosixPath, bool]:
    """Where an archive member goes (PEP 427 "Installing a wheel"), and whether it is a script."""
    site = PurePosixPath(target.site_packages)
    if parts[0] != data_dir:
        return site.joinpath(*parts), False
    scheme, rest = parts[1], PurePosixPath(*parts[2:])
    places = {"purelib": site, "platlib": site, "scripts": PurePosixPath(target.scripts),
              "data": PurePosixPath(target.prefix),
              "headers": PurePosixPath(target.prefix) / "include" / f"python{target.python}"}
    if scheme not in places:
        raise ImageError(f"unknown wheel scheme {scheme!r} in {'/'.join(parts)}")
    return places[scheme] / rest, scheme == "scripts"


def _console_scripts(text: str, target: Target) -> dict[str, tuple[bytes, int]]:
    points = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    points.optionxform = str  # type: ignore[assignment,method-assign]  # script names keep their case
    points.read_string(text)
    out = {}
    for name, value in (points["console_scripts"].items() if points.has_section("console_scripts") else []):
        module, _, attribute = value.split("[")[0].strip().partition(":")
        out[f"{target.scripts}/{name}"] = (_launcher(target.interpreter, module.strip(), attribute.strip()), 0o755)
    return out


def wheel_entries(wheel: Path, target: Target) -> list[Entry]:
    """The files a wheel installs for ``target``, with their directories, ``INSTALLER`` and a rewritten ``RECORD``."""
    site, files = PurePosixPath(target.site_packages), {}
    with zipfile.ZipFile(wheel) as archive:
        infos = [i for i in archive.infolist() if not i.is_dir()]
        dist_info = {PurePosixPath(i.filename).parts[0] for i in infos if i.filename.endswith(".dist-info/WHEEL")}
        if len(dist_info) != 1:
            raise ImageError(f"{wheel.name}: not a wheel (no single .dist-info/WHEEL)")
        info_dir = dist_info.pop()
        if not re.search(r"^Wheel-Version: 1\.", archive.read(f"{info_dir}/WHEEL").decode(), re.MULTILINE):
            raise ImageError(f"{wheel.name}: Wheel-Version other than 1.x")
        for info in infos:
            if info.filename in (f"{info_dir}/RECORD", f"{info_dir}/INSTALLER"):
                continue  # written below, for the installed paths
            where, script = _installed_path(PurePosixPath(info.filename).parts, info_dir.removesuffix(".dist-info")
                                            + ".data", target)
            data = archive.read(info)
            first, _, rest = data.partition(b"\n")
            if script and first.startswith(b"#!python"):  # PEP 427: the installer puts the interpreter there
                data = b"#!" + target.interpreter.encode() + b"\n" + rest
            files[str(where)] = (data, 0o755 if script or (info.external_attr >> 16) & 0o111 else 0o644)
        if f"{info_dir}/entry_points.txt" in archive.namelist():
            files |= _console_scripts(archive.read(f"{info_dir}/entry_points.txt").decode(), target)
    files[str(site / info_dir / "INSTALLER")] = (b"trainyard\n", 0o644)
    record = site / info_dir / "RECORD"
    lines = [f"{os.path.relpath(path, site)},{_record_hash(data)},{len(data)}" for path, (data, _) in sorted(files.items())]
    files[str(record)] = (("\n".join([*lines, f"{os.path.relpath(record, site)},,"]) + "\n").encode(), 0o644)
    directories = {str(parent) for path in files for parent in PurePosixPath(path).parents if str(parent) != "."}
    return [*(Entry(d, mode=0o755) for d in sorted(directories)),
            *(Entry(path, data, mode=mode) for path, (data, mode) in sorted(files.items()))]


def wheels_layer(pins: Sequence[WheelPin], target: Target, created_by: str, cache: Path | None = None) -> Layer:
    """One layer with every pinned wheel installed for ``target``."""
    wheels = fetch(pins, target, cache)
    sources = [(f"{pin.name}=={pin.version}", wheel_entries(wheels[pin], target)) for pin in pins]
    return Layer(tuple(merge(sources)), f"{created_by}: " + ", ".join(f"{p.name}=={p.version}" for p in pins))


def pins_key(pins: Sequence[WheelPin]) -> list[list[str]]:
    return [[p.name, p.version, p.sha256] for p in pins]


# ---------------------------------------------------------------------------------------------- locking


def lock(requirements: Path, target: Target) -> str:
    """The lock file of ``requirements`` (top-level pins) for ``target``: every wheel pip resolves, with its sha256."""
    with tempfile.TemporaryDirectory(prefix="trainyard-wheel-lock-") as work:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                   *target.pip_arguments(), "--dest", work, "-r", str(requirements)]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)  # noqa: S603
        if result.returncode != 0:
            raise ImageError(f"pip download -r {requirements} failed:\n{(result.stderr or result.stdout)[-1500:]}")
        lines = []
        for path in sorted(Path(work).glob("*.whl")):
            with zipfile.ZipFile(path) as archive:
                metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
                fields = dict(line.split(": ", 1) for line in archive.read(metadata).decode().splitlines()
                              if ": " in line and not line.startswith(" "))
            lines.append((canonical(fields["Name"]), fields["Version"], _sha256(path)))
    body = "".join(f"{name}=={version} \\\n    --hash=sha256:{sha}\n" for name, version, sha in sorted(lines))
    return (f"# The wheels of {requirements.name} and everything they need, for CPython {target.python} on glibc "
            f"{target.glibc[0]}.{target.glibc[1]} (x86-64).\n# Written by `python -m trainyard.rehearsal.python_base lock "
            f"{requirements.name} <this file>`; the image factory installs exactly these files.\n" + body)
