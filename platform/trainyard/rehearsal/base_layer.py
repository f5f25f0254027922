"""The base layer of the controller images: what ``gcr.io/distroless/static:nonroot`` gives a static Go controller.

Kueue, JobSet and Trainer each build their image ``FROM gcr.io/distroless/static:nonroot`` (their Dockerfiles, see
``rehearsal/factory.py``). No registry is reachable here, so that base is not pulled: the files of it a controller
may need are made on this machine, as distroless makes them (GoogleContainerTools/distroless@11eeda5
``static/static.bzl`` ``static_image``, ``common/BUILD.bazel``), from the Debian packages installed here where a file
comes from a package:

- ``/etc/passwd``, ``/etc/group``: written here with distroless's entries (users root 0, nobody 65534, nonroot
  65532; groups root, nobody, tty 5, staff 50, nonroot). The image runs as 65532; a lookup of the running user
  (Go's ``os/user``) finds ``nonroot``.
- ``/home/nonroot`` (0700, 65532:65532), ``/home``, ``/root`` (0700): as distroless's ``home`` rule; ``$HOME`` of
  the user the controller runs as.
- ``/tmp`` (1777): ``os.TempDir()``. controller-runtime's default webhook certificate directory is
  ``/tmp/k8s-webhook-server/serving-certs`` (controller-runtime@v0.24.1:pkg/webhook/server.go:144), where the
  charts mount the certificate Secret.
- ``/etc/nsswitch.conf``: Debian ``libc-bin``'s ``/usr/share/libc-bin/nsswitch.conf`` (what Debian installs as
  ``/etc/nsswitch.conf``). Go's resolver reads its ``hosts:`` line for the order of ``/etc/hosts`` and DNS.
- ``/etc/ssl/certs/ca-certificates.crt`` and the package's ``copyright``: Debian ``ca-certificates``, every
  ``/usr/share/ca-certificates/**.crt`` sorted by path and concatenated, as rules_distroless
  ``distroless/private/cacerts.sh`` does. Go's ``crypto/x509`` system roots (``SSL_CERT_FILE`` points there): a
  MultiKueue worker cluster or a webhook endpoint with a publicly signed certificate.

- ``/usr/share/zoneinfo`` and the package's ``copyright``: Debian ``tzdata``, as it installed them (files, links,
  directories). Go's ``time.LoadLocation`` reads zones there, and the managers link code that loads a zone by name:
  CEL's timestamp functions (cel-go@v0.27.0:common/types/timestamp.go:288; Kubernetes' CEL libraries in Kueue and
  JobSet, e.g. DRA device selectors) and cron schedules with ``CRON_TZ=`` (robfig/cron/v3@v3.0.1:parser.go:99,
  linked into Kueue). Without ``/etc/localtime`` Go's local time is UTC, as in distroless.

Left out, and why: ``netbase`` (``/etc/services``, ``/etc/protocols``: the managers name ports by number),
``media-types`` (``/etc/mime.types``: no manager serves files by type), ``base-files`` (``/etc/os-release`` would
claim a Debian the image is not).

Every file taken from a package is checked against dpkg's own record of it (``/var/lib/dpkg/info/<pkg>.md5sums``):
a file changed locally is refused, not shipped. The packages' versions go into the layer's history, so an image
says what it was made from. The same packages give the same bytes, hence the same layer digest.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from trainyard.rehearsal.images import Entry, ImageError, Layer

NONROOT, NOBODY = 65532, 65534
# distroless's static image environment (static/static.bzl: PATH, and SSL_CERT_FILE "allows openssl to find the
# certificates by default").
ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
PASSWD = ("root:x:0:0:root:/root:/sbin/nologin\n"
          f"nobody:x:{NOBODY}:{NOBODY}:nobody:/nonexistent:/sbin/nologin\n"
          f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n")
GROUP = f"root:x:0:\nnobody:x:{NOBODY}:\ntty:x:5:\nstaff:x:50:\nnonroot:x:{NONROOT}:\n"
CA_CERTIFICATES, LIBC_BIN, TZDATA = "ca-certificates", "libc-bin", "tzdata"
CERTS_DIR = "usr/share/ca-certificates/"
NSSWITCH = "usr/share/libc-bin/nsswitch.conf"
CA_COPYRIGHT = "usr/share/doc/ca-certificates/copyright"
ZONEINFO = "usr/share/zoneinfo"
TZ_COPYRIGHT = "usr/share/doc/tzdata/copyright"


@dataclass(frozen=True)
class DebianPackage:
    """An installed Debian package: its version and the files dpkg recorded for it (path without ``/`` -> md5)."""

    name: str
    version: str
    md5sums: dict[str, str]
    paths: tuple[str, ...] = ()  # every path the package installed (dpkg's .list), without the leading /

    def read(self, path: str, root: Path) -> bytes:
        """The bytes of one of the package's files, refused unless they are the ones dpkg installed."""
        expected = self.md5sums.get(path)
        if expected is None:
            raise ImageError(f"/{path} is not a file of the Debian package {self.name} {self.version}")
        try:
            data = (root / path).read_bytes()
        except OSError as exc:
            raise ImageError(f"/{path} of {self.name}: {exc.strerror} (apt-get install --reinstall {self.name})") from None
        if hashlib.md5(data, usedforsecurity=False).hexdigest() != expected:
            raise ImageError(f"/{path} differs from what the Debian package {self.name} {self.version} installed "
                             f"(dpkg's md5sums): refused (apt-get install --reinstall {self.name})")
        return data

    def tree(self, prefix: str, root: Path) -> list[Entry]:
        """Every path of the package under ``prefix`` as it is installed: directories, links, and files (checked)."""
        entries = []
        for path in self.paths:
            if path != prefix and not path.startswith(prefix + "/"):
                continue
            where = root / path
            if path in self.md5sums:
                entries.append(Entry(path, self.read(path, root), mode=0o644))
            elif where.is_symlink():
                entries.append(Entry(path, link=os.readlink(where), mode=0o777))
            elif where.is_dir():
                entries.append(Entry(path, mode=0o755))
            else:
                raise ImageError(f"/{path} of the Debian package {self.name} {self.version} is missing "
                                 f"(apt-get install --reinstall {self.name})")
        if not entries:
            raise ImageError(f"the Debian package {self.name} {self.version} installed nothing under /{prefix}")
        return entries


def installed_package(name: str, root: Path = Path("/")) -> DebianPackage:
    """``name`` as dpkg knows it on this machine (``root`` is ``/``; tests point it at a fake tree)."""
    status = root / "var/lib/dpkg/status"
    version = _status_version(status, name)
    md5sums_file = root / "var/lib/dpkg/info" / f"{name}.md5sums"
    if version is None or not md5sums_file.is_file():
        raise ImageError(f"the Debian package {name} is not installed: the controller images' base layer takes files "
                         f"from it (apt-get install {name})")
    md5sums = {}
    for line in md5sums_file.read_text(encoding="utf-8").splitlines():
        digest, _, path = line.partition("  ")
        if digest and path:
            md5sums[path] = digest
    listed = md5sums_file.with_suffix(".list")
    paths = listed.read_text(encoding="utf-8").splitlines() if listed.is_file() else []
    return DebianPackage(name, version, md5sums, tuple(p.lstrip("/") for p in paths if p.strip("/.")))


# dpkg states whose files are all unpacked and configured: only a trigger (libc-bin's ldconfig, ...) is still to run.
# Ref: dpkg-query(1) "Package status" (triggers-awaited, triggers-pending).
INSTALLED_STATES = ("installed", "triggers-pending", "triggers-awaited")


def _status_version(status: Path, name: str) -> str | None:
    """The ``Version:`` of an installed ``name`` in dpkg's status file (its paragraphs are separated by blank lines).
    A package whose triggers are pending counts as installed (an apt-get elsewhere on the machine triggers libc-bin);
    one being unpacked or configured does not: ``ImageError`` names its state."""
    try:
        text = status.read_text(encoding="utf-8")
    except OSError:
        return None
    for paragraph in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in paragraph.splitlines() if ": " in line and not line[0].isspace())
        if fields.get("Package") != name:
            continue
        want, _, state = fields.get("Status", "").partition(" ok ")
        if want == "install" and state in INSTALLED_STATES:
            return fields.get("Version")
        if want == "install" and state != "not-installed":
            raise ImageError(f"the Debian package {name} is {state} (dpkg): an apt-get or dpkg is changing it; run again "
                             "when it is done")
    return None


def ca_bundle(package: DebianPackage, root: Path) -> bytes:
    """Every certificate the package ships, sorted by path and concatenated (rules_distroless ``cacerts.sh``)."""
    paths = sorted(p for p in package.md5sums if p.startswith(CERTS_DIR) and p.endswith(".crt"))
    if not paths:
        raise ImageError(f"the Debian package {package.name} {package.version} lists no certificate under /{CERTS_DIR}")
    return b"".join(package.read(path, root) for path in paths)


def _directory(path: str, mode: int = 0o755, owner: int = 0) -> Entry:
    return Entry(path, mode=mode, uid=owner, gid=owner)


def _file(path: str, data: bytes) -> Entry:
    return Entry(path, data, mode=0o644)


def base_layer(root: Path = Path("/")) -> Layer:
    """The base layer, from the Debian packages installed under ``root``."""
    certificates, libc = installed_package(CA_CERTIFICATES, root), installed_package(LIBC_BIN, root)
    tzdata = installed_package(TZDATA, root)
    entries = (
        _directory("etc"), _file("etc/passwd", PASSWD.encode()), _file("etc/group", GROUP.encode()),
        _file("etc/nsswitch.conf", libc.read(NSSWITCH, root)),
        _directory("etc/ssl"), _directory("etc/ssl/certs"),
        _file("etc/ssl/certs/ca-certificates.crt", ca_bundle(certificates, root)),
        _directory("home"), _directory("home/nonroot", 0o700, NONROOT), _directory("root", 0o700),
        _directory("tmp", 0o1777),
        _directory("usr"), _directory("usr/share"), _directory("usr/share/doc"),
        _directory("usr/share/doc/ca-certificates"),
        _file(CA_COPYRIGHT, certificates.read(CA_COPYRIGHT, root)),
        *tzdata.tree(ZONEINFO, root),
        _directory("usr/share/doc/tzdata"), _file(TZ_COPYRIGHT, tzdata.read(TZ_COPYRIGHT, root)),
    )
    return Layer(entries, f"trainyard base (distroless static:nonroot's files): passwd, group, /home/nonroot, /tmp; "
                          f"Debian {libc.name} {libc.version} nsswitch.conf; {certificates.name} {certificates.version}; "
                          f"{tzdata.name} {tzdata.version}")

