"""The CoreDNS image of the rehearsal's cluster DNS (``rehearsal/dns.py``), built here as upstream's Dockerfile builds it.

coredns@v1.15.0:Dockerfile: ``FROM gcr.io/distroless/static-debian12:nonroot``; a build stage runs
``setcap cap_net_bind_service=+ep /coredns``; ``COPY --from=build /coredns /coredns``, ``USER 65532:65532`` (numeric,
so that ``runAsNonRoot`` can be checked), ``WORKDIR /``, ``EXPOSE 53 53/udp``, ``ENTRYPOINT ["/coredns"]``. Here:

- the base is the controller images' base layer (``base_layer.py``: distroless ``static:nonroot``'s files, from the
  Debian packages installed here), so the layer is the same blob as theirs;
- the second layer is ``/coredns``, the static binary of ``tools/build.sh coredns``, root-owned 0755 as ``COPY``
  leaves it, with the extended attribute ``security.capability`` that ``setcap`` writes (``file_capability``), carried
  as a PAX ``SCHILY.xattr.security.capability`` record as image builders write it; containerd sets it when it unpacks
  the layer. A process of uid 65532 then binds port 53: on exec the kernel grants the file's permitted set, kept under
  ``no_new_privs`` (``allowPrivilegeEscalation: false``) because runc already put ``NET_BIND_SERVICE`` (added by the
  pod spec) in the permitted set it execs with (linux security/commoncap.c ``cap_bprm_creds_from_file``).

Tagged with the binary's version (``coredns -version``) and named under ``trainyard.local/rehearsal/``, like the pause
and busybox images: an image built here is not upstream's and does not carry its name. Reproducible as every image of
``images.write_image``: the same binary and packages give the same digest.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from trainyard.rehearsal import base_layer
from trainyard.rehearsal.images import Entry, Image, ImageError, Layer, is_static_elf, write_image

COREDNS_REPOSITORY = "rehearsal/coredns"
CAP_NET_BIND_SERVICE = 10  # linux include/uapi/linux/capability.h
NONROOT = f"{base_layer.NONROOT}:{base_layer.NONROOT}"  # the Dockerfile's USER 65532:65532


def file_capability(*capabilities: int) -> bytes:
    """The ``security.capability`` value ``setcap CAPS=+ep`` writes: ``struct vfs_cap_data`` revision 2 (magic
    0x02000000 | VFS_CAP_FLAGS_EFFECTIVE), then the permitted and inheritable words of capabilities 0-31 and 32-63,
    little-endian. Ref: linux include/uapi/linux/capability.h (VFS_CAP_REVISION_2, struct vfs_cap_data)."""
    permitted = sum(1 << c for c in capabilities)
    words = (0x02000001, permitted & 0xFFFFFFFF, 0, permitted >> 32, 0)
    return b"".join(w.to_bytes(4, "little") for w in words)


def coredns_version(binary: Path) -> str:
    """``coredns -version`` prints ``CoreDNS-1.15.0`` and then the platform (coredns@v1.15.0:coremain/run.go)."""
    try:
        result = subprocess.run([str(binary), "-version"], capture_output=True, text=True, check=False, timeout=30)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"{binary} does not run ({exc}): run `tools/build.sh coredns`") from None
    first = result.stdout.splitlines()[0] if result.stdout else ""
    if not first.startswith("CoreDNS-"):
        raise ImageError(f"{binary} does not say its CoreDNS version ({first!r}): run `tools/build.sh coredns`")
    return first.removeprefix("CoreDNS-")


def missing_packages(root: Path = Path("/")) -> list[str]:
    """What the base layer needs from Debian and this machine lacks (empty: the image can be built)."""
    found = []
    for name in (base_layer.CA_CERTIFICATES, base_layer.LIBC_BIN, base_layer.TZDATA):
        try:
            base_layer.installed_package(name, root)
        except ImageError as exc:
            found.append(str(exc))
    return found


def build_coredns(binary: Path, out: Path, root: Path = Path("/")) -> Image:
    """The CoreDNS image as an OCI layout in ``out/coredns`` (rebuilt every time: well under a second)."""
    if not binary.is_file():
        raise ImageError(f"{binary} not found: run `tools/build.sh coredns`")
    data = binary.read_bytes()
    if not is_static_elf(data):
        raise ImageError(f"{binary} is not a static x86-64 executable: the image has no libc (CGO_ENABLED=0, as "
                         "`tools/build.sh coredns` builds it)")
    version = coredns_version(binary)
    capability = file_capability(CAP_NET_BIND_SERVICE)
    layers = [base_layer.base_layer(root),
              Layer((Entry("coredns", data, mode=0o755, xattrs=(("security.capability", capability),)),),
                    f"COPY /coredns: CoreDNS {version} built by tools/build.sh coredns (CGO_ENABLED=0, -trimpath); "
                    "setcap cap_net_bind_service=+ep")]
    config: dict[str, object] = {
        "Entrypoint": ["/coredns"], "Env": list(base_layer.ENV), "User": NONROOT, "WorkingDir": "/",
        "ExposedPorts": {"53/tcp": {}, "53/udp": {}},
        "Labels": {"org.opencontainers.image.version": version,
                   "dev.trainyard.built-from": f"github.com/coredns/coredns@v{version} (tools/coredns)"}}
    digest = write_image(out / "coredns", layers, config)
    return Image(COREDNS_REPOSITORY, version, out / "coredns", digest)
