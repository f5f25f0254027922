"""The images a real rehearsal node runs, built on this machine from sources here: nothing is pulled from a registry.

- **pause** (the sandbox image containerd starts for every pod): Kubernetes' own ``build/pause/linux/pause.c``
  of the kubelet's release, which ``tools/build.sh kubelet`` copies out of the verified ``k8s.io/kubernetes``
  module to ``share/kubelet/pause/``, compiled with the flags of ``build/pause/Makefile``
  (``-Os -Wall -Werror -static -DVERSION=v$(TAG)-$(REV)``) and laid out as its ``Dockerfile`` says
  (``/pause``, ``USER 65535:65535``, ``ENTRYPOINT ["/pause"]``).
- **busybox** (a small image for test pods): Debian's ``busybox-static`` ``/bin/busybox`` and a few applet links.
- **kubectl** (for pods that talk to the API server, and for the charts' hooks that run kubectl): the ``kubectl``
  that ``tools/build.sh kube-apiserver`` built (``CGO_ENABLED=0``: static, checked), laid out as upstream's
  ``build/server-image/kubectl/Dockerfile`` (``/bin/kubectl``, ``ENTRYPOINT ["/bin/kubectl"]``) on an empty base
  instead of go-runner's distroless one, tagged with its ``gitVersion``.

Each image is an OCI image layout written here (uncompressed tar layer, fixed mtimes, owners and order; a config
whose ``created`` is the epoch), so the same inputs give the same digest. It is pushed to the node's loopback
registry (``crane registry serve``), from which containerd pulls it through a mirror configuration
(``hosts.toml``) under the names below: the node never reaches anything but this machine, as an air-gapped site
pulls from its own mirror.
Ref: https://github.com/opencontainers/image-spec/blob/v1.1.0/image-layout.md,
https://github.com/opencontainers/distribution-spec/blob/v1.1.0/spec.md#pushing-blobs.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# The registry host the node's images are named under; containerd maps it to the loopback registry.
MIRROR_HOST = "trainyard.local"
PAUSE_REPOSITORY = "rehearsal/pause"
BUSYBOX_REPOSITORY = "rehearsal/busybox"
KUBECTL_REPOSITORY = "rehearsal/kubectl"
BUSYBOX = Path("/bin/busybox")  # Debian busybox-static
# The applets a test pod may call by name (busybox --list has ~300; links are cheap, but a short list keeps
# the layer's listing readable). Not wget: Debian's static busybox 1.35 segfaults in it (glibc's resolver in a static
# binary, even for an address literal: seen on the node tier); probes use nc. busybox's httpd serves the stand-ins.
BUSYBOX_APPLETS = ("cat", "echo", "env", "hostname", "httpd", "ip", "ls", "nc", "ping", "sh", "sleep")
LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


class ImageError(Exception):
    """An image could not be built or pushed; says which and why."""


@dataclass(frozen=True)
class Entry:
    """One file of a layer: a regular file (``data``), a directory, or a symbolic link (``link``), owned by uid:gid;
    ``xattrs`` are extended attributes (``security.capability``: file capabilities), carried as PAX
    ``SCHILY.xattr.*`` records."""

    path: str
    data: bytes | None = None
    mode: int = 0o755
    link: str | None = None
    uid: int = 0
    gid: int = 0
    xattrs: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class Layer:
    """One layer of an image: its entries, and the line the config's history gives for it."""

    entries: tuple[Entry, ...]
    created_by: str


@dataclass(frozen=True)
class Image:
    """An image built into an OCI layout: its name under the mirror host and its manifest digest."""

    repository: str
    tag: str
    layout: Path
    digest: str

    @property
    def reference(self) -> str:
        """What a pod (or containerd's ``sandbox_image``) names."""
        return f"{MIRROR_HOST}/{self.repository}:{self.tag}"


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def merge(sources: Sequence[tuple[str, Sequence[Entry]]]) -> list[Entry]:
    """The entries of several sources (Debian packages, wheels) as one layer's tree: a directory listed twice is kept
    once (the first one's mode); a file or link two sources both ship must be the same in both, else the layer would
    depend on an order (dpkg refuses such an overwrite too)."""
    kept: dict[str, tuple[str, Entry]] = {}
    for owner, entries in sources:
        for entry in entries:
            seen = kept.get(entry.path)
            if seen is None:
                kept[entry.path] = (owner, entry)
            elif (seen[1].data, seen[1].link) != (entry.data, entry.link):
                raise ImageError(f"/{entry.path} is in both {seen[0]} and {owner}, differently")
    return [entry for _, entry in kept.values()]


def layer_tar(entries: Sequence[Entry]) -> bytes:
    """A reproducible tar: entries sorted by path, mtime 0, each entry's numeric owner, no user or group names."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(entries, key=lambda e: e.path):
            info = tarfile.TarInfo(entry.path)
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, entry.uid, entry.gid, "", "", entry.mode
            # Bytes below 0x80 only (a capability set is): tarfile writes them as the same bytes, in UTF-8.
            info.pax_headers = {f"SCHILY.xattr.{name}": value.decode("ascii") for name, value in entry.xattrs}
            if entry.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, entry.link
                tar.addfile(info)
            elif entry.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    return buffer.getvalue()


def write_layout(directory: Path, entries: Sequence[Entry], config: dict[str, object], history: str) -> str:
    """Write a one-layer image as an OCI layout in ``directory`` (replaced); return the manifest's digest."""
    return write_image(directory, [Layer(tuple(entries), history)], config)


def write_image(directory: Path, layers: Sequence[Layer], config: dict[str, object]) -> str:
    """Write an image of ``layers`` (bottom first) as an OCI layout in ``directory`` (replaced); return the manifest's
    digest. One layer gives exactly the bytes ``write_layout`` always gave (the pause and busybox digests hold)."""
    return _write(directory, [], [], layers, config)


def write_image_on(base: Path, directory: Path, layers: Sequence[Layer], config: dict[str, object]) -> str:
    """``write_image`` of the OCI layout ``base``'s layers (bottom first), then ``layers``, with ``config``: what a
    Containerfile ``FROM base`` builds. The base's layer blobs are hard-linked (copied across file systems), not
    rebuilt, and the bytes written are those ``write_image`` of every layer would write, so the digest is too."""
    try:
        index = json.loads((base / "index.json").read_bytes())
        manifest = json.loads(_blob(base, index["manifests"][0]["digest"]).read_bytes())
        config_of_base = json.loads(_blob(base, manifest["config"]["digest"]).read_bytes())
        base_layers, diff_ids = list(manifest["layers"]), list(config_of_base["rootfs"]["diff_ids"])
        history = list(config_of_base["history"])
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ImageError(f"{base}: not an OCI layout of one image: {exc}") from None
    if any(layer.get("mediaType") != LAYER for layer in base_layers) or \
            [layer.get("digest") for layer in base_layers] != diff_ids or len(history) != len(diff_ids):
        raise ImageError(f"{base}: only images of uncompressed layers (as write_image writes) can be built on")
    return _write(directory, [(_blob(base, d), d, layer["size"]) for d, layer in zip(diff_ids, base_layers, strict=True)],
                  history, layers, config)


def _blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


def _write(directory: Path, base: Sequence[tuple[Path, str, int]], history: Sequence[object], layers: Sequence[Layer],
           config: dict[str, object]) -> str:
    """The layout of ``base``'s layer blobs (path, digest, size; linked) with ``history``, then ``layers``."""
    tars = [layer_tar(layer.entries) for layer in layers]
    image_config = _json({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [*(d for _, d, _ in base), *(_sha256(tar) for tar in tars)]},
        "history": [*history, *({"created": "1970-01-01T00:00:00Z", "created_by": layer.created_by}
                                for layer in layers)]})
    manifest = _json({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": _sha256(image_config), "size": len(image_config)},
        "layers": [*({"mediaType": LAYER, "digest": d, "size": size} for _, d, size in base),
                   *({"mediaType": LAYER, "digest": _sha256(tar), "size": len(tar)} for tar in tars)]})
    if directory.exists():
        shutil.rmtree(directory)
    blobs = directory / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for path, digest, _ in base:
        try:
            os.link(path, _blob(directory, digest))
        except OSError:
            shutil.copyfile(path, _blob(directory, digest))
    for blob in (*tars, image_config, manifest):
        (blobs / _sha256(blob).removeprefix("sha256:")).write_bytes(blob)
    (directory / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    (directory / "index.json").write_bytes(_json({
        "schemaVersion": 2, "mediaType": INDEX,
        "manifests": [{"mediaType": MANIFEST, "digest": _sha256(manifest), "size": len(manifest)}]}))
    return _sha256(manifest)


def compile_pause(source_dir: Path, work: Path) -> tuple[bytes, str]:
    """Compile ``share/kubelet/pause/pause.c`` as ``build/pause/Makefile`` does; return the stripped binary and its tag."""
    source, tag_file = source_dir / "pause.c", source_dir / "TAG"
    if not source.is_file() or not tag_file.is_file():
        raise ImageError(f"{source} not found: run `tools/build.sh kubelet` (it copies pause.c of the kubelet's release)")
    tag = tag_file.read_text().strip()
    work.mkdir(parents=True, exist_ok=True)
    binary = work / "pause"
    # REV is the git describe of the Kubernetes checkout upstream; here the source is the module zip.
    command = ["gcc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{tag}-trainyard",
               f"-ffile-prefix-map={source_dir}=.", "-o", str(binary), str(source)]
    for step in (command, ["strip", str(binary)]):
        try:
            result = subprocess.run(step, capture_output=True, text=True, check=False)  # noqa: S603 - fixed argv
        except FileNotFoundError:
            raise ImageError(f"{step[0]} not found: the pause image is compiled here (apt-get install gcc libc6-dev)") from None
        if result.returncode != 0:
            raise ImageError(f"{' '.join(step)} failed:\n{result.stderr.strip()}")
    return binary.read_bytes(), tag


def is_static_elf(data: bytes) -> bool:
    """True for an x86-64 ELF executable without a program interpreter (PT_INTERP): it runs in an empty image."""
    x86_64 = 62  # e_machine EM_X86_64: the images are amd64
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] != 2 or int.from_bytes(data[18:20], "little") != x86_64:
        return False
    phoff = int.from_bytes(data[32:40], "little")
    phentsize, phnum = int.from_bytes(data[54:56], "little"), int.from_bytes(data[56:58], "little")
    interp = 3
    return all(int.from_bytes(data[phoff + i * phentsize:phoff + i * phentsize + 4], "little") != interp
               for i in range(phnum))


def tool_binary(tools_dir: Path, name: str, tool: str, pinned: str | None = None, *, source: str = "",
                pinned_by: str = "the stack pins") -> bytes:
    """``bin/<name>`` as ``tools/build.sh TOOL`` left it in ``tools_dir``, refused (saying what to run) unless it is a
    static x86-64 ELF (an image has no libc for it) and, given ``pinned``, was built from that version
    (``share/<tool>/VERSION``; ``source`` prefixes what the file says in the message, e.g. the module and ``@``)."""
    path = tools_dir / "bin" / name
    if not path.is_file():
        raise ImageError(f"{path} not found: build it with `tools/build.sh {tool}`")
    if pinned is not None:
        version_file = tools_dir / "share" / tool / "VERSION"
        built = version_file.read_text(encoding="utf-8").strip() if version_file.is_file() else None
        if built != pinned:
            raise ImageError(f"{path} was built from {source}{built or '? (no ' + str(version_file) + ')'}, but "
                             f"{pinned_by} {pinned}: `tools/build.sh {tool}` builds the pinned version")
    data = path.read_bytes()
    if not is_static_elf(data):
        raise ImageError(f"{path} is not a static x86-64 ELF executable (it needs a program interpreter, or is not "
                         f"amd64 ELF at all): the image has no libc for it; build it with CGO_ENABLED=0 "
                         f"(`tools/build.sh {tool}` does)")
    return data


def build_pause(source_dir: Path, out: Path) -> Image:
    binary, tag = compile_pause(source_dir, out / "pause-build")
    entries = [Entry("pause", binary)]
    digest = write_layout(out / "pause", entries, {"Entrypoint": ["/pause"], "User": "65535:65535"},
                          f"gcc -Os -Wall -Werror -static kubernetes build/pause/linux/pause.c (v{tag})")
    return Image(PAUSE_REPOSITORY, tag, out / "pause", digest)


def busybox_version(binary: Path) -> str:
    result = subprocess.run([str(binary)], capture_output=True, text=True, check=False)  # noqa: S603 - our path
    first = (result.stdout or result.stderr).splitlines()[0] if (result.stdout or result.stderr) else ""
    # "BusyBox v1.35.0 (Debian 1:1.35.0-4+b1) multi-call binary."
    parts = first.split()
    if len(parts) < 2 or not parts[1].startswith("v"):
        raise ImageError(f"{binary} does not say its BusyBox version: {first!r}")
    return parts[1].removeprefix("v")


def busybox_entries(data: bytes, applets: Sequence[str]) -> list[Entry]:
    """``/bin/busybox``, a link in ``/bin`` per applet (as ``busybox --install``), a world-writable ``/tmp``."""
    return [Entry("bin", mode=0o755), Entry("bin/busybox", data), Entry("tmp", mode=0o1777),
            *(Entry(f"bin/{applet}", link="busybox", mode=0o777) for applet in applets)]


def build_busybox(out: Path, binary: Path = BUSYBOX) -> Image:
    if not binary.is_file():
        raise ImageError(f"{binary} not found: apt-get install busybox-static")
    data = binary.read_bytes()
    if not is_static_elf(data):
        raise ImageError(f"{binary} is dynamically linked: the test image needs Debian's busybox-static")
    version = busybox_version(binary)
    entries = busybox_entries(data, BUSYBOX_APPLETS)
    digest = write_layout(out / "busybox", entries, {"Env": ["PATH=/bin"], "Cmd": ["sh"]},
                          f"Debian busybox-static {version}: /bin/busybox and {len(BUSYBOX_APPLETS)} applet links")
    return Image(BUSYBOX_REPOSITORY, version, out / "busybox", digest)


def static_binary_image(binary: Path, path: str, repository: str, tag: str, out: Path, config: dict[str, object],
                        history: str) -> Image:
    """One statically linked executable at ``path`` (plus a world-writable ``/tmp``) as the image's only content."""
    data = binary.read_bytes()
    if not is_static_elf(data):
        raise ImageError(f"{binary} is not a static executable (an empty image has no loader): build it with CGO_ENABLED=0")
    directories = sorted({str(Path(path).parents[i]) for i in range(len(Path(path).parents) - 1)})
    entries = [*(Entry(d) for d in directories), Entry(path, data), Entry("tmp", mode=0o1777)]
    name = repository.rsplit("/", 1)[-1]
    return Image(repository, tag, out / name, write_layout(out / name, entries, config, history))


def kubectl_version(binary: Path) -> str:
    """``kubectl version --client -o json``'s gitVersion (``v1.36.3``): the image's tag."""
    try:
        result = subprocess.run([str(binary), "version", "--client", "-o", "json"], capture_output=True, text=True,  # noqa: S603 - our path
                                check=False, timeout=60)
        version: str = json.loads(result.stdout)["clientVersion"]["gitVersion"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
        raise ImageError(f"{binary} does not say its version ({exc}): run `tools/build.sh kube-apiserver`") from None
    return version


def build_kubectl(binary: Path, out: Path) -> Image:
    """The kubectl image: ``/bin/kubectl`` as upstream's image has it; ``HOME=/tmp`` gives any user a discovery cache."""
    if not binary.is_file():
        raise ImageError(f"{binary} not found: run `tools/build.sh kube-apiserver` (it builds kubectl)")
    version = kubectl_version(binary)
    return static_binary_image(binary, "bin/kubectl", KUBECTL_REPOSITORY, version, out,
                               {"Entrypoint": ["/bin/kubectl"], "Env": ["PATH=/bin", "HOME=/tmp"]},
                               f"kubectl {version} (k8s.io/kubernetes, CGO_ENABLED=0) as build/server-image/kubectl")


def build_node_images(pause_source: Path, out: Path, kubectl: Path) -> list[Image]:
    """The pause, busybox and kubectl images as OCI layouts under ``out`` (rebuilt every time: a second or two)."""
    return [build_pause(pause_source, out), build_busybox(out), build_kubectl(kubectl, out)]


# ------------------------------------------------------------------------------------------- push


def _request(method: str, url: str, data: bytes | None = None, content_type: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - loopback registry URL we built
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            return response.status, response.headers.get("Location") or ""
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (urllib.error.URLError, OSError) as exc:
        raise ImageError(f"{method} {url}: {exc}") from None


def push(image: Image, registry: str) -> None:
    """Push ``image``'s layout to the plain-HTTP registry at ``registry`` (host:port) under its repository and tag."""
    base = f"http://{registry}/v2/{image.repository}"
    index = json.loads((image.layout / "index.json").read_text())
    manifest_digest: str = index["manifests"][0]["digest"]
    blobs = image.layout / "blobs" / "sha256"
    manifest = (blobs / manifest_digest.removeprefix("sha256:")).read_bytes()
    parsed = json.loads(manifest)
    for blob_digest in [parsed["config"]["digest"], *(layer["digest"] for layer in parsed["layers"])]:
        if _request("HEAD", f"{base}/blobs/{blob_digest}")[0] == 200:
            continue
        status, location = _request("POST", f"{base}/blobs/uploads/", b"")
        if status != 202 or not location:
            raise ImageError(f"{registry} refused an upload to {image.repository} (HTTP {status})")
        upload = location if location.startswith("http") else f"http://{registry}{location}"
        separator = "&" if "?" in upload else "?"
        data = (blobs / blob_digest.removeprefix("sha256:")).read_bytes()
        status, _ = _request("PUT", f"{upload}{separator}digest={blob_digest}", data, "application/octet-stream")
        if status != 201:
            raise ImageError(f"{registry} refused blob {blob_digest} of {image.repository} (HTTP {status})")
    status, _ = _request("PUT", f"{base}/manifests/{image.tag}", manifest, MANIFEST)
    if status != 201:
        raise ImageError(f"{registry} refused the manifest of {image.reference} (HTTP {status})")


def mirror_hosts_toml(registry: str) -> str:
    """containerd's ``certs.d/<MIRROR_HOST>/hosts.toml``: every pull of a ``trainyard.local/...`` image goes to the
    loopback registry over plain HTTP, and nowhere else. Ref: containerd docs/hosts.md (config_path, server)."""
    return f'server = "http://{registry}"\n\n[host."http://{registry}"]\n  capabilities = ["pull", "resolve"]\n'
