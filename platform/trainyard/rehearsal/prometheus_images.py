"""The rehearsal's monitoring images: prometheus-operator, its config reloader and the Prometheus server, built here.

Trainyard does not install Prometheus for a site (docs/components/monitoring.md); the rehearsal runs one, as the site
would, so that the ServiceMonitors and PrometheusRule Trainyard declares are scraped and loaded for real
(``prometheus_install.py``). Its three images are pushed under the names prometheus-operator's own manifests and
defaults use, under the stack's mirror (``<mirror><upstream repository>:<tag>``):

- ``prometheus-operator/prometheus-operator:v0.93.0``: ``tools/build.sh prometheus-operator``'s ``prometheus-operator``
  (``./cmd/operator``) at ``/bin/operator``; prometheus-operator@v0.93.0:Dockerfile: ``FROM
  quay.io/prometheus/busybox-linux-amd64``, ``COPY ... /bin/operator``, ``USER 65534``, ``ENTRYPOINT ["/bin/operator"]``.
  That name is bundle.yaml's Deployment image.
- ``prometheus-operator/prometheus-config-reloader:v0.93.0``: ``prometheus-config-reloader`` at
  ``/bin/prometheus-config-reloader``; cmd/prometheus-config-reloader/Dockerfile: the same base, ``USER nobody``, that
  path as ``ENTRYPOINT``. The operator runs it with ``command: [/bin/prometheus-config-reloader]``
  (pkg/operator/config_reloader.go:363) beside every Prometheus; bundle.yaml passes the name as
  ``--prometheus-config-reloader``.
- ``prometheus/prometheus:v3.13.1``: the Prometheus the operator runs where a ``Prometheus`` names no version or image
  (``DefaultPrometheusImage``: the last entry of ``PrometheusCompatibilityMatrix``, pkg/operator/defaults.go, which the
  factory reads from ``share/prometheus-operator`` rather than trusting a constant); laid out as
  prometheus@v0.316.0:Dockerfile: ``/bin/prometheus``, ``/bin/promtool``, ``/etc/prometheus/prometheus.yml``
  (documentation/examples), ``/LICENSE``, ``/NOTICE``, ``/etc/prometheus`` and ``/prometheus`` owned by nobody (the
  latter group-writable), ``WORKDIR /prometheus``, ``USER nobody``, ``EXPOSE 9090``, ``VOLUME /prometheus``,
  ``ENTRYPOINT ["/bin/prometheus"]`` and its ``CMD``. The operator gives the container no command, only arguments
  (pkg/prometheus/server/statefulset.go:335-339): the entrypoint is what runs.

**The Prometheus version is a stand-in, named.** The server built here is Prometheus 3.16.0 (github.com/prometheus/
prometheus v0.316.0, the module promtool is built from, sharing its build cache: ``tools/build.sh prometheus``), pushed
under the 3.13.1 tag the operator pulls. ``STAND_INS`` records that one substitution; the labels say it
(``org.opencontainers.image.version: 3.16.0``, ``dev.trainyard.stands-in-for``) and so does the factory's output. The
proxy serves v0.313.1 too; one module for both binaries was chosen over a second Prometheus build (docs/tools.md).
3.16 reads every flag the operator v0.93.0 writes for 3.13.1. Built without the web UI's assets (no npm build here):
``/api/v1``, ``/-/ready``, ``/-/healthy``, ``/metrics`` and ``/federate`` are served; the UI pages are not.

Base: the controllers' base layer (``base_layer.py``: CA certificates, time zones, ``/etc/passwd`` with nobody 65534)
and, for upstream's busybox base, ``/bin/sh`` from Debian's ``busybox-static`` (the SeaweedFS image's layer, the same
blob). The user is numeric (``65534``, busybox's nobody) everywhere, so that a pod's ``runAsNonRoot`` can be checked
by the kubelet. Layers are written as every factory image is (sorted, mtime 0, numeric owners): the same binaries give
the same digests. These images are not in the stack's bill of materials (the stack does not run them), so they are
not in the rehearsal's lock: the install pins them by the digest the factory built and the registry reported.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.rehearsal import base_layer
from trainyard.rehearsal.debian import pins_key
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, layer_key, recipe_key
from trainyard.rehearsal.images import Entry, ImageError, Layer, tool_binary
from trainyard.rehearsal.seaweedfs_image import BUSYBOX, busybox_layer
from trainyard.supply.reference import ImageRef, mirrored

OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
NOBODY = 65534  # busybox's nobody; prometheus-operator's Dockerfile: "On busybox 'nobody' has uid `65534'"
OPERATOR, RELOADER, PROMETHEUS = "operator", "config-reloader", "prometheus"
COMPONENT = "monitoring"
EXPECTS = "the image recipe expects"  # what a binary of another version is told
DEFAULTS_GO = "pkg/operator/defaults.go"


@dataclass(frozen=True)
class StandIn:
    """The Prometheus build that stands in for a tag the operator pulls: its module version and ``--version``."""

    module_version: str
    version: str


# The operator's default Prometheus tag -> the build pushed under it (the module promtool is built from).
STAND_INS = {"v3.13.1": StandIn("v0.316.0", "3.16.0")}


def upstream_images(config: PlatformConfig, tools_dir: Path) -> dict[str, ImageRef]:
    """The names prometheus-operator's manifests and defaults use at the stack's operator version."""
    tag = f"v{config.versions.prometheus_operator}"
    return {OPERATOR: ImageRef("quay.io", "prometheus-operator/prometheus-operator", tag),
            RELOADER: ImageRef("quay.io", "prometheus-operator/prometheus-config-reloader", tag),
            PROMETHEUS: ImageRef("quay.io", "prometheus/prometheus", default_prometheus_version(tools_dir))}


def targets(config: PlatformConfig, tools_dir: Path) -> dict[str, ImageRef]:
    """Where each image is pushed: the upstream name under the stack's mirror (refused without one)."""
    if config.images.registry_mirror is None:
        raise ImageError("the stack has no images.registry_mirror: the factory's images are pushed under a mirror's "
                         "names only (an image built here is not upstream's and must not be named as it)")
    return {role: mirrored(ref, config.images.registry_mirror) for role, ref in upstream_images(config, tools_dir).items()}


def _share(tools_dir: Path, tool: str, relative: str) -> Path:
    path = tools_dir / "share" / tool / relative
    if not path.is_file():
        raise ImageError(f"{path} not found: run `tools/build.sh {tool}`")
    return path


def default_prometheus_version(tools_dir: Path) -> str:
    """``DefaultPrometheusVersion`` of the operator built: the last entry of ``PrometheusCompatibilityMatrix``."""
    source = _share(tools_dir, "prometheus-operator", DEFAULTS_GO).read_text(encoding="utf-8")
    matrix = re.search(r"PrometheusCompatibilityMatrix = \[\]string\{(.*?)\n\t\}", source, re.S)
    versions = re.findall(r'^\s*"(v[0-9][^"]*)",', matrix.group(1), re.M) if matrix else []
    if not versions:
        raise ImageError(f"{tools_dir / 'share' / 'prometheus-operator' / DEFAULTS_GO}: no PrometheusCompatibilityMatrix")
    return str(versions[-1])


def _says_version(path: Path, version: str) -> None:
    """``<binary> --version`` must name ``version`` (prometheus/common's version line)."""
    try:
        said = subprocess.run([str(path), "--version"], capture_output=True, text=True, check=False,  # noqa: S603
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"{path} --version: {exc}") from None
    first = (said.stdout or said.stderr).splitlines()[:1]
    if not first or f", version {version} " not in first[0] + " ":
        raise ImageError(f"{path} says {first[0] if first else 'nothing'!r}, not version {version}")


def stand_in_for(tools_dir: Path) -> tuple[str, StandIn]:
    tag = default_prometheus_version(tools_dir)
    if tag not in STAND_INS:
        raise ImageError(f"no Prometheus build stands in for quay.io/prometheus/prometheus:{tag}, the operator's default "
                         f"(the factory builds one for {', '.join(STAND_INS)})")
    return tag, STAND_INS[tag]


def _config(entrypoint: str, upstream: ImageRef, built_from: str, version: str, *, cmd: tuple[str, ...] = (),
            workdir: str = "/", ports: tuple[str, ...] = (), volumes: tuple[str, ...] = (),
            stands_in: bool = False) -> dict[str, object]:
    labels = {"org.opencontainers.image.version": version, "dev.trainyard.built-from": built_from,
              "dev.trainyard.upstream-image": str(upstream)}
    if stands_in:
        labels = {**labels, "dev.trainyard.stands-in-for": str(upstream)}
    return {"Entrypoint": [entrypoint], **({"Cmd": list(cmd)} if cmd else {}), "Env": list(base_layer.ENV),
            "User": str(NOBODY), "WorkingDir": workdir,
            **({"ExposedPorts": {port: {} for port in ports}} if ports else {}),
            **({"Volumes": {volume: {} for volume in volumes}} if volumes else {}), "Labels": labels}


def operator_layer(binary: bytes, path: str, version: str) -> Layer:
    return Layer((Entry("bin", mode=0o755), Entry(path, binary, mode=0o755)),
                 f"COPY /{path}: built by tools/build.sh prometheus-operator from {OPERATOR_MODULE}@v{version} "
                 "(CGO_ENABLED=0, -trimpath, the Makefile's -ldflags)")


def prometheus_layer(prometheus: bytes, promtool: bytes, prometheus_yml: bytes, licence: bytes, notice: bytes,
                     stand_in: StandIn) -> Layer:
    entries = (Entry("bin", mode=0o755), Entry("bin/prometheus", prometheus, mode=0o755),
               Entry("bin/promtool", promtool, mode=0o755),
               Entry("etc", mode=0o755), Entry("etc/prometheus", mode=0o755, uid=NOBODY, gid=NOBODY),
               Entry("etc/prometheus/prometheus.yml", prometheus_yml, mode=0o644, uid=NOBODY, gid=NOBODY),
               Entry("LICENSE", licence, mode=0o644), Entry("NOTICE", notice, mode=0o644),
               # RUN chown -R nobody:nobody /etc/prometheus /prometheus && chmod g+w /prometheus
               Entry("prometheus", mode=0o775, uid=NOBODY, gid=NOBODY))
    return Layer(entries, f"COPY /bin/prometheus, /bin/promtool: {PROMETHEUS_MODULE}@{stand_in.module_version} "
                          f"(Prometheus {stand_in.version}) built by tools/build.sh prometheus and promtool; "
                          "documentation/examples/prometheus.yml, LICENSE, NOTICE; /prometheus owned by nobody")


def _layers(base: Layer, top: Layer, deb_cache: Path | None) -> list[Layer]:
    return [base, busybox_layer(deb_cache), top]


def build(config: PlatformConfig, tools_dir: Path, cache: Path, root: Path = Path("/"),
          deb_cache: Path | None = None) -> dict[str, BuiltImage]:
    """The three images (or each from the cache), by role, under the stack's mirror names."""
    names, upstream = targets(config, tools_dir), upstream_images(config, tools_dir)
    version = config.versions.prometheus_operator
    tag, stand_in = stand_in_for(tools_dir)
    base = base_layer.base_layer(root)
    busybox_key = {"debian": pins_key([BUSYBOX]), "layer": "busybox /bin/sh"}
    operator_files = {
        OPERATOR: ("prometheus-operator", "bin/operator"),
        RELOADER: ("prometheus-config-reloader", "bin/prometheus-config-reloader")}
    tops: dict[str, tuple[Layer, dict[str, object], str]] = {}
    for role, (binary, path) in operator_files.items():
        data = tool_binary(tools_dir, binary, "prometheus-operator", f"v{version}", pinned_by=EXPECTS)
        package = "./cmd/operator" if role == OPERATOR else "./cmd/prometheus-config-reloader"
        tops[role] = (operator_layer(data, path, version),
                      _config(f"/{path}", upstream[role], f"{OPERATOR_MODULE}@v{version} {package}", version), "")
    prometheus = tool_binary(tools_dir, "prometheus", "prometheus", f"{PROMETHEUS_MODULE}@{stand_in.module_version}",
                             pinned_by=EXPECTS)
    _says_version(tools_dir / "bin" / "prometheus", stand_in.version)
    promtool = tool_binary(tools_dir, "promtool", "promtool")
    _says_version(tools_dir / "bin" / "promtool", stand_in.version)
    prometheus_yml, licence, notice = (_share(tools_dir, "prometheus", name).read_bytes()
                                       for name in ("prometheus.yml", "LICENSE", "NOTICE"))
    layer = prometheus_layer(prometheus, promtool, prometheus_yml, licence, notice, stand_in)
    tops[PROMETHEUS] = (layer, _config("/bin/prometheus", upstream[PROMETHEUS],
                                       f"{PROMETHEUS_MODULE}@{stand_in.module_version} ./cmd/prometheus", stand_in.version,
                                       cmd=("--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"),
                                       workdir="/prometheus", ports=("9090/tcp",), volumes=("/prometheus",),
                                       stands_in=True),
                        f"Prometheus {stand_in.version} ({stand_in.module_version}) standing in for {tag}")
    out = {}
    for role, (top, image, note) in tops.items():
        key = recipe_key([layer_key(base), busybox_key, layer_key(top)], image)
        layout, digest, cached = cached_build(cache, key, partial(_layers, base, top, deb_cache), image)
        out[role] = BuiltImage(COMPONENT, names[role], upstream[role], layout, digest, cached, note=note)
    return out
