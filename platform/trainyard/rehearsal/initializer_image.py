"""Kubeflow Trainer's dataset and model initializer images, built here from Trainer's source on the factory's Python base.

The ``lora-peft`` and ``lora-finetune`` runtimes run ``registry.trainyard.internal/kubeflow/trainer/dataset-initializer:
v2.3.0`` and ``.../model-initializer:v2.3.0`` (upstream: ``ghcr.io/kubeflow/trainer/{dataset,model}-initializer``,
github.com/kubeflow/trainer/v2@v2.3.0:manifests/overlays/runtimes/kustomization.yaml) as uid/gid 1000 with the
initializer volume at ``/workspace``. Upstream builds each one with ``cmd/initializers/<kind>/Dockerfile`` (v2.3.0):

    FROM python:3.14-slim-bookworm
    COPY --from=ghcr.io/astral-sh/uv:0.7 /uv /uvx /bin/
    WORKDIR /app
    COPY cmd/initializers/<kind>/pyproject.toml .
    COPY cmd/initializers/<kind>/uv.lock .
    COPY pkg/initializers pkg/initializers
    RUN uv sync --locked --no-dev
    ENV PATH="/app/.venv/bin:$PATH"
    ENTRYPOINT ["python", "-m", "pkg.initializers.<kind>"]

no ``USER`` (root). ``pyproject.toml`` asks for ``huggingface-hub>=1.24.0,<1.25``, ``opendal>=0.47.3`` and (dataset
only) ``kubernetes>=36.0.3``, ``requires-python >=3.12``; ``uv.lock`` pins the closure. The rehearsal makes the same
images without a registry or a container build, as an air-gapped site would:

- the Python base (``python_base.py``: distroless ``python3-debian12`` from pinned Debian packages): CPython **3.11**
  where upstream has 3.14. The initializers' code parses and runs on 3.11 (``match`` is 3.10; nothing newer is used),
  and every version ``uv.lock`` pins has a wheel for CPython 3.11 on glibc 2.36 (pure wheels, abi3 wheels, or the
  same release's cp311 wheels), so only ``requires-python`` (the uv project's, not a package's) says 3.12;
- one layer of wheels: ``pins/trainer-initializers.lock``, the closure of both images at exactly ``uv.lock``'s versions
  (both locks agree on every shared package), resolved for the base's interpreter with every wheel's sha256
  (``python -m trainyard.rehearsal.initializer_image lock``). Each image installs the part of it its own ``uv.lock``
  names (the model image has no ``kubernetes``, ``aiohttp``...), into ``/usr/local/lib/python3.11/dist-packages``
  rather than ``/app/.venv`` (``wheels.py``);
- the program layer: what the Dockerfile COPYs into ``/app``, read from the Go module download of
  github.com/kubeflow/trainer/v2@v2.3.0 (``go mod download -json``: the zip checked against the checksum database,
  and its sum against ``MODULE_SUM``, which ``tools/build.sh`` pins for the controller as ``TRAINER_VERSION``):
  ``pyproject.toml``, ``uv.lock`` and the whole ``pkg/initializers`` tree (tests included, as COPY takes them),
  root-owned, 0644/0755 as a git checkout gives them;
- the config: the Dockerfile's ``WORKDIR /app`` (``python -m`` finds ``pkg.initializers`` from there) and
  ``ENTRYPOINT``, the base's environment (its ``PATH`` has ``/usr/bin/python`` -> ``python3.11``), and
  ``User 1000:1000``: the runtimes' ``runAsUser``/``runAsGroup`` (upstream's image has no ``USER``; the pods set it).
  ``PYTHONDONTWRITEBYTECODE=1``: ``/app`` and the site directory are root's, so uid 1000 could not write byte code.

Named as the runtimes name them (not under ``images.registry_mirror``: the runtime files are reviewed as written), and
labelled with what they are built from (``dev.trainyard.built-from``, ``dev.trainyard.python``). Built on request
(``factory.ON_REQUEST``: ``trainyard images build STACK --component trainer-initializers``), not with every chart's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests.runtimes import RuntimeFileError, containers_of, read_runtime_file
from trainyard.rehearsal import python_base, wheels
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, layer_key, recipe_key
from trainyard.rehearsal.images import Entry, ImageError, Layer
from trainyard.supply.reference import ImageRef, ReferenceError

COMPONENT = "trainer-initializers"  # the factory's name for the pair (``images build --component``)
MODULE = "github.com/kubeflow/trainer/v2"
VERSION = "v2.3.0"  # tools/build.sh TRAINER_VERSION, the catalog's trainer release
MODULE_SUM = "h1:Je+e7zvTLzB4qW09J1fB7pZrqvPtWuGng2NqdN5p5QU="  # go mod download -json: "Sum" (Origin.Hash 658725bd)
UPSTREAM_REGISTRY = "ghcr.io"  # manifests/overlays/runtimes/kustomization.yaml: ghcr.io/kubeflow/trainer/<name>
UPSTREAM_BASE = "python:3.14-slim-bookworm"  # cmd/initializers/<kind>/Dockerfile: FROM
USER = 1000  # the runtimes' runAsUser and runAsGroup
APP = "app"  # the Dockerfile's WORKDIR
SOURCES = "pkg/initializers"  # the Dockerfile's COPY pkg/initializers pkg/initializers
PINS = Path(__file__).resolve().parent / "pins"
WHEEL_LOCK = PINS / "trainer-initializers.lock"


@dataclass(frozen=True)
class Initializer:
    """One of the two images: ``dataset`` or ``model``."""

    kind: str

    @property
    def component(self) -> str:
        """The runtimes' container (and replicated job) name, and the image's last path element."""
        return f"{self.kind}-initializer"

    @property
    def directory(self) -> str:
        """Where the Dockerfile, pyproject.toml and uv.lock are in the module."""
        return f"cmd/initializers/{self.kind}"

    @property
    def package(self) -> str:
        return f"pkg.initializers.{self.kind}"

    @property
    def entrypoint(self) -> list[str]:
        """The Dockerfile's ENTRYPOINT."""
        return ["python", "-m", self.package]

    @property
    def upstream(self) -> ImageRef:
        return ImageRef(UPSTREAM_REGISTRY, f"kubeflow/trainer/{self.component}", VERSION)


DATASET, MODEL = Initializer("dataset"), Initializer("model")
INITIALIZERS = (DATASET, MODEL)


# ------------------------------------------------------------------------------------------ the module's source


def _go() -> str:
    return os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"


def module_dir(*, offline: bool = False) -> Path:
    """The module's directory in Go's module cache (``go mod download``, downloading the zip first if it is absent,
    unless ``offline``), refused unless its sum is ``MODULE_SUM``. The directory is read-only, as Go leaves it."""
    env = {**os.environ, "GOFLAGS": "-mod=mod", **({"GOPROXY": "off"} if offline else {})}
    try:
        result = subprocess.run([_go(), "mod", "download", "-json", f"{MODULE}@{VERSION}"],  # noqa: S603
                                capture_output=True, text=True, check=False, timeout=600, cwd="/", env=env)
        info = json.loads(result.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise ImageError(f"go mod download {MODULE}@{VERSION}: {exc} (go is needed, as for tools/build.sh)") from None
    if info.get("Error"):
        raise ImageError(f"go mod download {MODULE}@{VERSION}: {info['Error']}")
    if info.get("Sum") != MODULE_SUM:
        raise ImageError(f"{MODULE}@{VERSION} has sum {info.get('Sum')}, the pin is {MODULE_SUM}")
    directory = Path(info["Dir"])
    if not (directory / SOURCES).is_dir():
        raise ImageError(f"{directory} has no {SOURCES}: not Trainer's module")
    return directory


def _read(source: Path, relative: str) -> bytes:
    try:
        return (source / relative).read_bytes()
    except OSError as exc:
        raise ImageError(f"{MODULE}@{VERSION}: {relative}: {exc.strerror}") from None


def source_files(source: Path) -> dict[str, bytes]:
    """Every file of ``pkg/initializers`` (module-relative path -> content), as the Dockerfile's COPY takes them."""
    root = source / SOURCES
    files = {path.relative_to(source).as_posix(): path.read_bytes()
             for path in sorted(root.rglob("*")) if path.is_file() and "__pycache__" not in path.parts}
    if f"{SOURCES}/utils/utils.py" not in files:
        raise ImageError(f"{root}: no utils/utils.py: not Trainer's initializers")
    return files


def locked_versions(source: Path, initializer: Initializer) -> dict[str, str]:
    """``uv.lock``'s packages (canonical name -> version), the uv project itself left out."""
    try:
        doc = tomllib.loads(_read(source, f"{initializer.directory}/uv.lock").decode())
    except tomllib.TOMLDecodeError as exc:
        raise ImageError(f"{initializer.directory}/uv.lock: {exc}") from None
    return {wheels.canonical(p["name"]): str(p["version"]) for p in doc.get("package", [])
            if (p.get("source") or {}).get("virtual") is None and p["name"] != initializer.component}


def dependencies(source: Path, initializer: Initializer) -> list[str]:
    """``pyproject.toml``'s ``[project] dependencies``: the top-level requirements."""
    doc = tomllib.loads(_read(source, f"{initializer.directory}/pyproject.toml").decode())
    return [str(d) for d in doc["project"]["dependencies"]]


def dockerfile_facts(source: Path, initializer: Initializer) -> dict[str, str]:
    """What the recipe copies from the Dockerfile (FROM, WORKDIR, ENTRYPOINT), checked against what this module does."""
    lines = [line.strip() for line in _read(source, f"{initializer.directory}/Dockerfile").decode().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    facts = {}
    for line in lines:
        instruction, _, rest = line.partition(" ")
        if instruction in ("FROM", "WORKDIR", "ENTRYPOINT", "USER"):
            facts[instruction] = rest.strip()
    expected = {"FROM": UPSTREAM_BASE, "WORKDIR": f"/{APP}", "ENTRYPOINT": json.dumps(initializer.entrypoint)}
    differing = [f"{k} {facts.get(k)!r} (the recipe follows {v!r})" for k, v in expected.items() if facts.get(k) != v]
    if differing or "USER" in facts:
        raise ImageError(f"{initializer.directory}/Dockerfile no longer matches the recipe: "
                         + ", ".join(differing or [f"USER {facts['USER']}"]))
    return facts


# ------------------------------------------------------------------------------------------ the image


def target(config: PlatformConfig, project: Path, initializer: Initializer) -> ImageRef:
    """The image every runtime file's ``<kind>-initializer`` container names (by tag; the lock adds the digest)."""
    directory = project / config.runtimes.directory
    named: dict[str, list[str]] = {}
    for path in sorted(directory.glob("*.yaml")):
        try:
            doc = read_runtime_file(path)
        except RuntimeFileError as exc:
            raise ImageError(f"{path}: {exc}") from None
        for _, container in containers_of(doc if isinstance(doc, dict) else {}):
            if container.get("name") == initializer.component:
                named.setdefault(str(container.get("image", "")), []).append(path.name)
    if len(named) != 1:
        seen = "; ".join(f"{image} ({', '.join(files)})" for image, files in named.items()) or "no image"
        raise ImageError(f"{directory}: the {initializer.component} containers name {seen}: the factory builds one "
                         "image under the one name they all pull")
    try:
        name = ImageRef.parse(next(iter(named))).with_digest(None)
    except ReferenceError as exc:
        raise ImageError(f"{directory}: {exc}") from None
    if str(name.tag) != VERSION or not name.repository.endswith(f"kubeflow/trainer/{initializer.component}"):
        raise ImageError(f"the runtimes pull {name}, but the factory builds {initializer.upstream.repository}:{VERSION} "
                         f"({MODULE}@{VERSION})")
    return name


def image_pins(locked: Sequence[wheels.WheelPin], source: Path, initializer: Initializer) -> list[wheels.WheelPin]:
    """The lock's wheels this image installs: those its ``uv.lock`` names, each at ``uv.lock``'s version."""
    upstream = locked_versions(source, initializer)
    drifted = [f"{p.name} {p.version} (uv.lock: {upstream[p.name]})" for p in locked
               if p.name in upstream and upstream[p.name] != p.version]
    if drifted:
        raise ImageError(f"{WHEEL_LOCK.name} is not {initializer.directory}/uv.lock: {', '.join(drifted)}; "
                         "rewrite it with `python -m trainyard.rehearsal.initializer_image lock`")
    return [p for p in locked if p.name in upstream]


def check_lock(locked: Sequence[wheels.WheelPin], source: Path) -> None:
    """Every locked wheel is in one of the two ``uv.lock`` closures (nothing pip added for CPython 3.11 alone)."""
    names = set().union(*(locked_versions(source, i) for i in INITIALIZERS))
    extra = sorted(p.name for p in locked if p.name not in names)
    if extra:
        raise ImageError(f"{WHEEL_LOCK.name} has wheels no uv.lock names: {', '.join(extra)}")


def program_layer(source: Path, initializer: Initializer) -> Layer:
    """What the Dockerfile COPYs to /app: pyproject.toml, uv.lock and pkg/initializers, root-owned."""
    files = {f"{APP}/pyproject.toml": _read(source, f"{initializer.directory}/pyproject.toml"),
             f"{APP}/uv.lock": _read(source, f"{initializer.directory}/uv.lock"),
             **{f"{APP}/{path}": data for path, data in source_files(source).items()}}
    directories = sorted({str(parent) for path in files for parent in Path(path).parents if str(parent) != "."})
    entries = (*(Entry(d, mode=0o755) for d in directories),
               *(Entry(path, data, mode=0o644) for path, data in sorted(files.items())))
    return Layer(entries, f"COPY {initializer.directory}/pyproject.toml, uv.lock and {SOURCES} to /{APP} "
                          f"({MODULE}@{VERSION}: {initializer.directory}/Dockerfile)")


def image_config(name: ImageRef, initializer: Initializer, pins: Sequence[wheels.WheelPin]) -> dict[str, object]:
    python = next(p.version for p in python_base.PYTHON_PINS if p.name == f"python{python_base.PYTHON}-minimal")
    return python_base.python_config(
        env=("PYTHONDONTWRITEBYTECODE=1",), Entrypoint=initializer.entrypoint, User=f"{USER}:{USER}",
        WorkingDir=f"/{APP}",
        Labels={"org.opencontainers.image.version": str(name.tag),
                "org.opencontainers.image.source": f"https://{MODULE.removesuffix('/v2')}",
                "dev.trainyard.built-from": f"{MODULE}@{VERSION} ({MODULE_SUM}): {initializer.directory}/Dockerfile, "
                                            f"{SOURCES}; {WHEEL_LOCK.name}: "
                                            + ", ".join(f"{p.name}=={p.version}" for p in pins),
                "dev.trainyard.python": f"CPython {python_base.PYTHON} (Debian bookworm python{python_base.PYTHON}-minimal "
                                        f"{python}) for upstream's {UPSTREAM_BASE}"})


def build_one(config: PlatformConfig, project: Path, cache: Path, initializer: Initializer, source: Path,
              locked: Sequence[wheels.WheelPin], root: Path = Path("/"), deb_cache: Path | None = None,
              wheel_cache: Path | None = None) -> BuiltImage:
    """One initializer image (or the cached one of the same inputs)."""
    name = target(config, project, initializer)
    dockerfile_facts(source, initializer)
    pins = image_pins(locked, source, initializer)
    image = image_config(name, initializer, pins)
    program = program_layer(source, initializer)
    parts = [*python_base.key_parts(root), {"wheels": wheels.pins_key(pins), "into": python_base.WHEEL_TARGET.site_packages},
             layer_key(program)]

    def layers() -> list[Layer]:
        return [*python_base.layers(root, deb_cache),
                wheels.wheels_layer(pins, python_base.WHEEL_TARGET, WHEEL_LOCK.name, wheel_cache), program]

    layout, digest, cached = cached_build(cache, recipe_key(parts, image), layers, image)
    return BuiltImage(initializer.component, name, initializer.upstream, layout, digest, cached,
                      note=f"CPython {python_base.PYTHON} for upstream's {UPSTREAM_BASE}")


def build(config: PlatformConfig, cache: Path, project: Path | None = None, root: Path = Path("/"),
          deb_cache: Path | None = None, wheel_cache: Path | None = None,
          source: Path | None = None) -> list[BuiltImage]:
    """Both initializer images, dataset then model (``source``: the module's directory; default ``module_dir()``)."""
    if project is None:
        from trainyard.config.load import project_root

        project = project_root()
    source = source or module_dir()
    locked = wheels.read_lock(WHEEL_LOCK)
    check_lock(locked, source)
    return [build_one(config, project, cache, initializer, source, locked, root, deb_cache, wheel_cache)
            for initializer in INITIALIZERS]


# ------------------------------------------------------------------------------------------ locking


def requirements(source: Path) -> tuple[str, str]:
    """(requirements, constraints) for pip: both pyproject.toml's dependencies, constrained to uv.lock's versions
    (the two locks must agree on every package they share)."""
    versions: dict[str, str] = {}
    for initializer in INITIALIZERS:
        for name, version in locked_versions(source, initializer).items():
            if versions.setdefault(name, version) != version:
                raise ImageError(f"the two uv.lock files pin {name} at {versions[name]} and {version}")
    top = dict.fromkeys(d for i in INITIALIZERS for d in dependencies(source, i))
    return ("".join(f"{d}\n" for d in top) + "-c constraints.txt\n",
            "".join(f"{name}=={version}\n" for name, version in sorted(versions.items())))


def lock(source: Path) -> str:
    """The wheel lock of both images: ``wheels.lock`` of ``requirements(source)`` for the base's interpreter."""
    wanted, constraints = requirements(source)
    with tempfile.TemporaryDirectory(prefix="trainyard-initializers-") as work:
        (Path(work) / "requirements.txt").write_text(wanted, encoding="utf-8")
        (Path(work) / "constraints.txt").write_text(constraints, encoding="utf-8")
        written = wheels.lock(Path(work) / "requirements.txt", python_base.WHEEL_TARGET)
    body = "".join(line + "\n" for line in written.splitlines() if not line.startswith("#"))
    target_ = python_base.WHEEL_TARGET
    return (f"# The wheels of Kubeflow Trainer's dataset and model initializers ({MODULE}@{VERSION}: "
            f"cmd/initializers/{{dataset,model}}/pyproject.toml\n# dependencies at their uv.lock versions, and "
            f"everything they need), for CPython {target_.python} on glibc {target_.glibc[0]}.{target_.glibc[1]} "
            "(x86-64).\n# Written by `python -m trainyard.rehearsal.initializer_image lock`; the image factory "
            "installs exactly these files\n# (each image the ones its own uv.lock names).\n" + body)


def main(argv: Sequence[str]) -> int:
    """``python -m trainyard.rehearsal.initializer_image lock``: rewrite pins/trainer-initializers.lock."""
    if list(argv) != ["lock"]:
        print("usage: python -m trainyard.rehearsal.initializer_image lock", file=sys.stderr)
        return 2
    try:
        WHEEL_LOCK.write_text(lock(module_dir()), encoding="utf-8")
    except (ImageError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{WHEEL_LOCK}: {len(wheels.read_lock(WHEEL_LOCK))} wheels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
