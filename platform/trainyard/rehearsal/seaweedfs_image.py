"""The SeaweedFS server image the object store's chart pulls, built here from the ``weed`` that ``tools/build.sh`` built.

What the chart's all-in-one container needs of its image (seaweedfs chart 4.44.0,
templates/all-in-one/all-in-one-deployment.yaml): ``command: ["/bin/sh", "-ec", "/usr/bin/weed ... server -dir=/data
-ip=${POD_IP} ..."]`` (a shell, for the ``${POD_IP}`` expansion and the line continuations), the data volume at
``/data``, the identities at ``/etc/sw/s3``, ``master.toml`` mounted at ``/etc/seaweedfs/master.toml``, probes over
HTTP (no tool in the image), and the pod's own user (Trainyard sets uid/gid 1000, fsGroup 1000). Upstream's image is
laid out by ``docker/Dockerfile.go_build`` (read in the module zip of the version built, see below):
``COPY weed /usr/bin/``, ``/etc/seaweedfs/filer.toml`` (the module's ``docker/filer.toml``: the filer's leveldb2
store under ``/data/filerldb2``), ``/entrypoint.sh``, Alpine's packages, the user ``seaweed`` (uid/gid 1000, home
``/home/seaweed``), ``/data`` and ``/etc/seaweedfs`` owned by it, ``VOLUME /data``, ``WORKDIR /data``, the ports it
``EXPOSE``s, ``ENTRYPOINT ["/entrypoint.sh"]``, ``CMD ["mini", "-dir=/data"]``. Here, on the controller images' base
layer (``base_layer.py``: CA certificates, time zones, nsswitch.conf, ``/tmp``):

- ``/bin/sh``: Debian bookworm's ``busybox-static`` (Alpine's ``/bin/sh`` is BusyBox's ash too), its ``/bin/busybox``
  from the pinned ``.deb`` (``debian.py``) with ``/bin/sh`` linked to it, and its copyright file;
- ``/usr/bin/weed`` (0755, root), ``/etc/seaweedfs/filer.toml`` from the verified module (``go mod download``: the
  module sum ``tools/build.sh`` pins), ``seaweed`` in ``/etc/passwd`` and ``/etc/group`` (the base's entries plus it),
  ``/home/seaweed``, ``/data`` and ``/data/filerldb2`` owned by 1000:1000;
- the config: ``WorkingDir /data``, ``Volumes {/data}``, the ports, ``Entrypoint ["/usr/bin/weed"]``, ``Cmd ["mini",
  "-dir=/data"]`` and ``User 1000:1000``. Upstream's ``entrypoint.sh`` is not carried: run as root it chowns ``/data``
  and drops to ``seaweed`` with Alpine's ``su-exec``, and exports ``GODEBUG=fips140=on``; the chart replaces the
  entrypoint with its own command, so in the chart's pod neither happens upstream either. ``User 1000:1000`` is the
  user the entrypoint would have dropped to. Not carried either: ``weed-volume``/``weed-worker``/``weed-vector``
  (the Rust volume server and workers, which ``weed server`` does not start), ``curl``, ``fuse``.

**The version.** The stack pins ``chrislusf/seaweedfs:4.44`` (the chart's appVersion). The Go module proxy serves one
version of ``github.com/seaweedfs/seaweedfs``, the pseudo-version ``v0.0.0-20261109003541-7506e5f91cd6``, whose
``weed version`` is 4.53 (docs/tools.md); the tag 4.44 is refused by the proxy (``4.44.info``: 403 "not available").
So the rehearsal's server is 4.53 standing in for 4.44, pushed under the name the chart pulls
(``trainyard.local/mirror/chrislusf/seaweedfs:4.44``: the rehearsal deploys the stack as written) and saying what it
is in its labels (``org.opencontainers.image.version: 4.53``, ``dev.trainyard.stands-in-for``) and in the factory's
output. ``STAND_INS`` names the one substitution allowed; any other binary version is refused. The chart's command
uses only flags 4.53's ``weed server`` has (``weed/command/server.go``: ``-ip.bind``, ``-volume.max``,
``-master.telemetry``, ``-s3.config``...).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests.installs import upstream_image
from trainyard.rehearsal import base_layer
from trainyard.rehearsal.debian import DebianPin, data_entries, fetch, pins_key
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, layer_key, recipe_key, targets
from trainyard.rehearsal.images import Entry, ImageError, Layer, is_static_elf, tool_binary

MODULE = "github.com/seaweedfs/seaweedfs"
SEAWEED = 1000  # Dockerfile.go_build: addgroup -g 1000 seaweed && adduser -D -u 1000 -G seaweed seaweed
BUSYBOX = DebianPin("busybox-static", "1:1.35.0-4+deb12u1+b1",
                    "3d3fdbe91d4660c873e14b092c213fe81c1da6362daa236eb25d0171eb108744")
PORTS = (18080, 8080, 18888, 8888, 19333, 9333, 8333, 7333)  # Dockerfile.go_build's EXPOSE lines


@dataclass(frozen=True)
class StandIn:
    """The build that stands in for a pinned upstream tag: module version and sum (tools/build.sh), ``weed version``."""

    module_version: str
    module_sum: str
    weed_version: str


# The stack's tag -> what the rehearsal builds for it (the module proxy serves nothing else; see the docstring).
STAND_INS = {"4.44": StandIn("v0.0.0-20261109003541-7506e5f91cd6", "h1:LOYZFToHq9F7pSR6lkPGfkM8RmHlVFrzndKdhmNZjrU=",
                             "4.53")}


def weed_binary(tools_dir: Path, stand_in: StandIn) -> bytes:
    """``tools/build.sh seaweedfs``'s ``weed``, refused unless static and of the stand-in's module version."""
    path = tools_dir / "bin" / "weed"
    data = tool_binary(tools_dir, "weed", "seaweedfs", stand_in.module_version, source=f"{MODULE}@",
                       pinned_by="the image recipe expects")
    try:
        said = subprocess.run([str(path), "version"], capture_output=True, text=True, check=False, timeout=60).stdout  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"{path} version: {exc}") from None
    if f" {stand_in.weed_version} {stand_in.module_version} " not in said:
        raise ImageError(f"{path} says {said.splitlines()[0] if said else 'nothing'!r}, not "
                         f"{stand_in.weed_version} {stand_in.module_version}")
    return data


def module_file(stand_in: StandIn, relative: str) -> bytes:
    """A file of the SeaweedFS module at the stand-in's version, from the Go module cache (``go mod download``:
    the zip verified by the checksum database when it was downloaded), refused unless the module sum is the pin."""
    go = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    try:
        result = subprocess.run([go, "mod", "download", "-json", f"{MODULE}@{stand_in.module_version}"],  # noqa: S603
                                capture_output=True, text=True, check=False, timeout=600, cwd="/")
        info = json.loads(result.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise ImageError(f"go mod download {MODULE}@{stand_in.module_version}: {exc} (go is needed, as for "
                         "tools/build.sh)") from None
    if info.get("Error") or info.get("Sum") != stand_in.module_sum:
        raise ImageError(f"{MODULE}@{stand_in.module_version}: {info.get('Error') or 'sum ' + str(info.get('Sum'))}, "
                         f"the pin is {stand_in.module_sum}")
    try:
        return (Path(info["Dir"]) / relative).read_bytes()
    except (OSError, KeyError) as exc:
        raise ImageError(f"{MODULE}@{stand_in.module_version}: {relative}: {exc}") from None


def stand_in_for(config: PlatformConfig) -> tuple[str, StandIn]:
    tag = str(upstream_image(config, "seaweedfs").tag)
    if tag not in STAND_INS:
        raise ImageError(f"no SeaweedFS build stands in for chrislusf/seaweedfs:{tag} (the factory builds "
                         f"{', '.join(STAND_INS)}; the module proxy serves {MODULE} at one version only)")
    return tag, STAND_INS[tag]


def busybox_layer(cache: Path | None = None) -> Layer:
    """``/bin/busybox`` of the pinned busybox-static package, ``/bin/sh`` -> busybox, and the package's copyright."""
    files = {e.path: e for e in data_entries(fetch(BUSYBOX, cache).read_bytes())}
    copyright_path = "usr/share/doc/busybox-static/copyright"
    binary, notice = files.get("bin/busybox"), files.get(copyright_path)
    if binary is None or binary.data is None or notice is None or not is_static_elf(binary.data):
        raise ImageError(f"Debian {BUSYBOX.spec} has no static /bin/busybox or no copyright file")
    entries = (Entry("bin", mode=0o755), Entry("bin/busybox", binary.data, mode=0o755),
               Entry("bin/sh", link="busybox", mode=0o777), Entry("usr", mode=0o755), Entry("usr/share", mode=0o755),
               Entry("usr/share/doc", mode=0o755), Entry("usr/share/doc/busybox-static", mode=0o755),
               Entry(copyright_path, notice.data, mode=0o644))
    return Layer(entries, f"/bin/sh: Debian {BUSYBOX.name} {BUSYBOX.version} /bin/busybox (BusyBox's ash, as Alpine's)")


def seaweedfs_layer(weed: bytes, filer_toml: bytes, stand_in: StandIn) -> Layer:
    passwd = base_layer.PASSWD + f"seaweed:x:{SEAWEED}:{SEAWEED}:Linux User,,,:/home/seaweed:/bin/sh\n"
    group = base_layer.GROUP + f"seaweed:x:{SEAWEED}:seaweed\n"
    entries = (Entry("usr", mode=0o755), Entry("usr/bin", mode=0o755), Entry("usr/bin/weed", weed, mode=0o755),
               Entry("etc", mode=0o755), Entry("etc/passwd", passwd.encode(), mode=0o644),
               Entry("etc/group", group.encode(), mode=0o644), Entry("etc/seaweedfs", mode=0o755, uid=SEAWEED, gid=SEAWEED),
               Entry("etc/seaweedfs/filer.toml", filer_toml, mode=0o644, uid=SEAWEED, gid=SEAWEED),
               Entry("home", mode=0o755), Entry("home/seaweed", mode=0o755, uid=SEAWEED, gid=SEAWEED),
               Entry("data", mode=0o755, uid=SEAWEED, gid=SEAWEED), Entry("data/filerldb2", mode=0o755, uid=SEAWEED, gid=SEAWEED))
    return Layer(entries, f"COPY /usr/bin/weed: {MODULE}@{stand_in.module_version} (weed {stand_in.weed_version}) built by "
                          "tools/build.sh seaweedfs (CGO_ENABLED=0, -trimpath); docker/filer.toml; user seaweed 1000:1000")


def image_config(stand_in: StandIn, upstream: str) -> dict[str, object]:
    """Dockerfile.go_build's settings, with the user its entrypoint drops to; the labels say which weed is inside."""
    return {"Entrypoint": ["/usr/bin/weed"], "Cmd": ["mini", "-dir=/data"], "Env": list(base_layer.ENV),
            "User": f"{SEAWEED}:{SEAWEED}", "WorkingDir": "/data", "Volumes": {"/data": {}},
            "ExposedPorts": {f"{port}/tcp": {} for port in PORTS},
            "Labels": {"org.opencontainers.image.version": stand_in.weed_version,
                       "dev.trainyard.built-from": f"{MODULE}@{stand_in.module_version} ./weed",
                       "dev.trainyard.stands-in-for": upstream}}


def build(config: PlatformConfig, tools_dir: Path, cache: Path, root: Path = Path("/"),
          deb_cache: Path | None = None) -> BuiltImage:
    """The SeaweedFS image under the name the stack's chart pulls (or from the cache)."""
    tag, stand_in = stand_in_for(config)
    upstream = upstream_image(config, "seaweedfs")
    weed = weed_binary(tools_dir, stand_in)
    filer_toml = module_file(stand_in, "docker/filer.toml")
    base = base_layer.base_layer(root)
    top = seaweedfs_layer(weed, filer_toml, stand_in)
    image = image_config(stand_in, str(upstream))
    key = recipe_key([layer_key(base), {"debian": pins_key([BUSYBOX]), "layer": "busybox /bin/sh"}, layer_key(top)],
                     image)
    layout, digest, cached = cached_build(cache, key, lambda: [base, busybox_layer(deb_cache), top], image)
    return BuiltImage("seaweedfs", targets(config, ["seaweedfs"])["seaweedfs"], upstream, layout, digest, cached,
                      note=f"weed {stand_in.weed_version} ({stand_in.module_version}) standing in for {tag}")
