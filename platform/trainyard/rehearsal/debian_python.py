"""A Debian suite's own CPython with wheels on top: what the factory's images of Python programs on trixie share.

The lab's CPU image (``lab_image.py``: Debian's PyTorch) and the barman-cloud sidecar (``barman_cloud_image.py``:
Debian's psycopg2 under upstream's pinned barman) are each a closure of Debian packages (``debian.PinFile``) and a
wheel lock (``wheels.py``) that adds what Debian does not provide, or not at a version the program accepts. This module
is what both need to make those two layers agree:

- **what Debian provides**: the Python distributions its packages install in ``/usr/lib/python3/dist-packages``
  (``debian_distributions``, read from their ``.dist-info``/``.egg-info`` metadata);
- **locking**: ``lock_on_debian`` has pip resolve a program's pins for the suite's CPython on its glibc with Debian's
  distributions standing in as metadata-only wheels (version ``+debian``, pinned by constraint), so pip never picks
  a wheel that would shadow one of Debian's; the stand-ins are dropped from the lock;
- **checking**: ``check_closure`` refuses wheels whose requirements neither layer meets at an accepted version, and a
  wheel that is also one of Debian's distributions;
- what ``update-ca-certificates`` and libc-bin's postinst would have written (``ca_bundle``, ``NSSWITCH``): no
  maintainer script runs in an image made of unpacked packages.
"""

from __future__ import annotations

import email.parser
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from trainyard.rehearsal import debian, wheels
from trainyard.rehearsal.image_cache import layer_key
from trainyard.rehearsal.images import Entry, ImageError, Layer

DEBIAN_SITE = "usr/lib/python3/dist-packages"
DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # debian:trixie-slim's ENV PATH
MULTIARCH = "usr/lib/x86_64-linux-gnu"
# Debian libc-bin's /etc/nsswitch.conf (what its postinst installs from /usr/share/libc-bin/nsswitch.conf), the
# lookups a Python program makes: users and groups from /etc, hosts from /etc/hosts (the kubelet's) then DNS.
NSSWITCH = b"passwd:         files\ngroup:          files\nshadow:         files\nhosts:          files dns\n" \
           b"networks:       files\nprotocols:      db files\nservices:       db files\n"
CA_CERTIFICATES = "ca-certificates"
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"
STUB_LABEL = "debian"  # the local version label of the stand-ins ``lock_on_debian`` gives pip for Debian's distributions


@dataclass(frozen=True)
class Distribution:
    """A Python distribution as its metadata says: name, version, and its requirements (``Requires-Dist``)."""

    name: str
    version: str
    requires: tuple[str, ...] = ()


def parse_metadata(text: str) -> Distribution:
    """A ``METADATA`` / ``PKG-INFO`` file (RFC 822 headers, core metadata)."""
    headers = email.parser.Parser().parsestr(text, headersonly=True)
    name, version = headers.get("Name"), headers.get("Version")
    if not name or not version:
        raise ImageError("Python metadata without Name or Version")
    return Distribution(wheels.canonical(name), version, tuple(headers.get_all("Requires-Dist") or ()))


def debian_distributions(entries: Iterable[Entry]) -> dict[str, Distribution]:
    """The distributions Debian's packages install in ``/usr/lib/python3/dist-packages`` (dist-info or egg-info)."""
    out = {}
    for entry in entries:
        path = PurePosixPath(entry.path)
        if entry.data is None or DEBIAN_SITE not in (str(path.parent.parent), str(path.parent)):
            continue
        metadata = (path.name == "METADATA" and path.parent.name.endswith(".dist-info")) or \
                   (path.name == "PKG-INFO" and path.parent.name.endswith(".egg-info")) or \
                   (path.name.endswith(".egg-info") and str(path.parent) == DEBIAN_SITE)
        if metadata:
            found = parse_metadata(entry.data.decode("utf-8", errors="replace"))
            out[found.name] = Distribution(found.name, found.version)  # Debian's apt closure holds their needs
    return out


def wheel_distribution(wheel: Path) -> Distribution:
    with zipfile.ZipFile(wheel) as archive:
        name = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
        if name is None:
            raise ImageError(f"{wheel.name}: no .dist-info/METADATA")
        return parse_metadata(archive.read(name).decode("utf-8"))


def environment(python_full: str) -> dict[str, str]:
    """PEP 508 marker values of the image's interpreter (CPython on Linux x86-64)."""
    return {"implementation_name": "cpython", "implementation_version": python_full, "os_name": "posix",
            "platform_machine": "x86_64", "platform_python_implementation": "CPython", "platform_release": "",
            "platform_system": "Linux", "platform_version": "", "python_full_version": python_full,
            "python_version": ".".join(python_full.split(".")[:2]), "sys_platform": "linux", "extra": ""}


def check_closure(installed: Sequence[Distribution], provided: Mapping[str, Distribution], python_full: str,
                  image: str = "the image") -> None:
    """Every requirement of every installed wheel (extras not asked for are skipped) is met by a wheel or by
    Debian's layer; no wheel is also one of Debian's (it would shadow it). ``image`` names the image in the error."""
    env = environment(python_full)
    shadow = sorted(d.name for d in installed if d.name in provided)
    everything = {**provided, **{d.name: d for d in installed}}
    problems = [f"{name} is both a wheel and Debian's {provided[name].version}: the wheel would shadow it"
                for name in shadow]
    for dist in installed:
        for line in dist.requires:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                problems.append(f"{dist.name} {dist.version}: unreadable requirement {line!r}")
                continue
            if requirement.marker is not None and not Marker(str(requirement.marker)).evaluate(env):
                continue
            have = everything.get(wheels.canonical(requirement.name))
            if have is None:
                problems.append(f"{dist.name} {dist.version} needs {line!r}: neither a wheel nor Debian's")
                continue
            try:
                ok = requirement.specifier.contains(Version(have.version), prereleases=True)
            except InvalidVersion:
                ok = False
            if not ok:
                source = "Debian's" if have.name in provided else "the wheel"
                problems.append(f"{dist.name} {dist.version} needs {line!r}: {source} {have.name} is {have.version}")
    if problems:
        raise ImageError(f"{image}'s Python distributions do not fit together:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class PythonOnDebian:
    """What an image of a Python program on Debian is built on: the pinned closure (one slim layer, with ``extra``
    entries its maintainer scripts would have made) and the wheel lock (one layer), checked to fit together, and the CA
    bundle of the closure's ca-certificates. ``pin_file`` and ``lock_file`` name the files in layers and errors."""

    pins: debian.PinFile
    pin_file: str
    locked: tuple[wheels.WheelPin, ...]
    lock_file: str
    python: str
    image: str  # how errors name the image
    extra: tuple[Entry, ...] = ()
    apt_cache: Path | None = field(default=None, compare=False)

    @property
    def target(self) -> wheels.Target:
        return wheel_target(self.pins, self.python, self.pin_file)

    @property
    def suite(self) -> debian.SuiteRoot:
        return debian.SuiteRoot.of(self.pins.suite, self.apt_cache)

    @property
    def created_by(self) -> str:
        return (f"Debian {self.pins.suite}: the closure of {' '.join(self.pins.roots)} ({self.pin_file}, "
                f"{len(self.pins.pins)} packages), slim")

    @property
    def ca_pin(self) -> debian.DebianPin:
        pin = next((p for p in self.pins.pins if p.name == CA_CERTIFICATES), None)
        if pin is None:
            raise ImageError(f"{self.pin_file} pins no {CA_CERTIFICATES}")
        return pin

    def key_parts(self) -> list[object]:
        """The two layers' cache keys: the pins stand for the packages' and wheels' bytes."""
        target = self.target
        return [{"debs": debian.pins_key(self.pins.pins), "suite": self.pins.suite, "slim": True,
                 "created_by": self.created_by, "extra": layer_key(Layer(self.extra, ""))},
                {"wheels": wheels.pins_key(self.locked), "into": target.site_packages, "interpreter": target.interpreter}]

    def layers(self, deb_cache: Path | None = None, wheel_cache: Path | None = None,
               check_packages: Callable[[Sequence[Entry]], None] | None = None) -> list[Layer]:
        """The packages' layer (``check_packages`` sees its entries first) and the wheels', refused unless every
        wheel's requirements are met by the two (``check_closure``)."""
        packages = debian.package_layer(self.pins.pins, self.created_by, deb_cache, extra=list(self.extra),
                                        suite=self.suite, slim=True)
        if check_packages is not None:
            check_packages(packages.entries)
        target = self.target
        fetched = wheels.fetch(self.locked, target, wheel_cache)
        check_closure([wheel_distribution(fetched[p]) for p in self.locked], debian_distributions(packages.entries),
                      python_full_version(self.pins, self.python), self.image)
        return [packages, wheels.wheels_layer(self.locked, target, self.lock_file, wheel_cache)]

    def ca_bundle(self, deb_cache: Path | None = None) -> bytes:
        """What ``update-ca-certificates`` writes from the pinned ca-certificates."""
        pin = self.ca_pin
        return ca_bundle(debian.data_entries(debian.fetch_all([pin], deb_cache, self.suite)[pin].read_bytes()))


def wheel_target(pins: debian.PinFile, python: str, source: str = "the pin file") -> wheels.Target:
    """Wheels for the pinned CPython on the pinned glibc (libc6 ``2.41-...`` -> manylinux_2_41)."""
    libc = next((p.version for p in pins.pins if p.name == "libc6"), None)
    match = re.match(r"(\d+)\.(\d+)", libc or "")
    if match is None:
        raise ImageError(f"{source} pins no libc6")
    return wheels.Target(python, f"/usr/bin/python{python}", (int(match.group(1)), int(match.group(2))))


def python_full_version(pins: debian.PinFile, python: str) -> str:
    """``3.13.5`` from python3.13's Debian version ``3.13.5-2+deb13u5``."""
    return pins.version_of(f"python{python}").split("-")[0]


def ca_bundle(entries: Iterable[Entry]) -> bytes:
    """``update-ca-certificates`` over the package's defaults: every ``.crt`` under /usr/share/ca-certificates, sorted."""
    certificates = sorted((e for e in entries if e.data is not None and e.path.startswith("usr/share/ca-certificates/")
                           and e.path.endswith(".crt")), key=lambda e: e.path)
    if not certificates:
        raise ImageError(f"{CA_CERTIFICATES} ships no certificate")
    return b"".join(e.data if e.data.endswith(b"\n") else e.data + b"\n" for e in certificates if e.data is not None)


def provided_by(pins: debian.PinFile, deb_cache: Path | None = None,
                apt_cache: Path | None = None) -> dict[str, Distribution]:
    """The Python distributions the pinned packages install (each package read from the cache or deb.debian.org)."""
    debs = debian.fetch_all(pins.pins, deb_cache, debian.SuiteRoot.of(pins.suite, apt_cache))
    provided: dict[str, Distribution] = {}
    for pin in pins.pins:
        provided |= debian_distributions(e for e in debian.data_entries(debs[pin].read_bytes())
                                         if e.path.startswith(DEBIAN_SITE))
    return provided


def stub_wheel(directory: Path, dist: Distribution) -> str:
    """A wheel with nothing but metadata standing for Debian's ``dist`` while pip resolves (version ``+debian``)."""
    version = Version(dist.version)
    stub = f"{version.public}+{STUB_LABEL}"
    project = re.sub(r"[-.]+", "_", dist.name)
    info = f"{project}-{stub}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist.name}\nVersion: {stub}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: trainyard\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(directory / f"{project}-{stub}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return f"{dist.name}=={stub}"


def write_lock(path: Path, make: Callable[[], str]) -> int:
    """A ``lock`` command's body: ``make()``'s lock written to ``path`` (exit 0), or the error said (exit 1)."""
    try:
        path.write_text(make(), encoding="utf-8")
    except (ImageError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{path}: {len(wheels.read_lock(path))} wheels")
    return 0


def lock_on_debian(requirements: Sequence[str], pins: debian.PinFile, python: str, image: str,
                   deb_cache: Path | None = None, apt_cache: Path | None = None) -> str:
    """The body of a wheel lock: ``requirements`` (pip requirement lines) resolved by pip for the suite's CPython on
    its glibc with Debian's distributions as installed (stand-in wheels pinned by constraint), less those stand-ins;
    each wheel with its sha256, sorted. Raises ImageError when pip cannot resolve them or the result does not fit."""
    target = wheel_target(pins, python)
    provided = provided_by(pins, deb_cache, apt_cache)
    with tempfile.TemporaryDirectory(prefix="trainyard-debian-lock-") as work:
        stubs, dest = Path(work) / "debian", Path(work) / "wheels"
        stubs.mkdir()
        constraints = [stub_wheel(stubs, dist) for dist in provided.values()]
        (Path(work) / "constraints.txt").write_text("\n".join(constraints) + "\n")
        (Path(work) / "requirements.txt").write_text("".join(f"{line}\n" for line in requirements))
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                   *target.pip_arguments(), "--find-links", str(stubs), "--dest", str(dest),
                   "-c", str(Path(work) / "constraints.txt"), "-r", str(Path(work) / "requirements.txt")]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)  # noqa: S603
        if result.returncode != 0:
            raise ImageError(f"pip could not resolve {image}'s requirements on Debian's distributions:\n"
                             f"{(result.stderr or result.stdout)[-2500:]}")
        found = [(wheel_distribution(path), path) for path in sorted(dest.glob("*.whl"))]
        chosen = [(dist, path) for dist, path in found if not dist.version.endswith(f"+{STUB_LABEL}")]
        check_closure([d for d, _ in chosen], provided, python_full_version(pins, python), image)
        return "".join(f"{d.name}=={d.version} \\\n    --hash=sha256:{hashlib.sha256(p.read_bytes()).hexdigest()}\n"
                       for d, p in sorted(chosen, key=lambda c: c[0].name))
