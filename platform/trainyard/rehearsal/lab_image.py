"""The lab's CPU image: the ``lora-peft`` runtime's program on Debian's CPU-only PyTorch, built here as a stand-in.

The production image (``registry.trainyard.internal/trainyard/lora-peft:<tag>``, runtimes/lora-peft.yaml's ``node``
container) is ``runtimes/programs/Containerfile``: ``FROM pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime``, ``pip
install -r requirements.txt`` (transformers, peft, mlflow-skinny, boto3; its torch pin is the base's), the program at
``/opt/trainyard/programs``, ``USER 1000:1000``. That base cannot be pulled here, and PyPI's x86-64 ``torch`` is the
CUDA build (torch + nvidia-* + triton wheels, 7.3 GB installed: docs/lab.md), which a real node's registry blob,
containerd content and snapshot would hold three times over. Debian trixie ships a CPU-only PyTorch
(``python3-torch 2.6.0+dfsg-7``, CPython 3.13): the rehearsal's image is made of it, and stands in for the production
image under the name the runtime pulls, saying so (labels, ``BuiltImage.note``), as SeaweedFS 4.53 stands in for
4.44 (``seaweedfs_image.STAND_INS``). ``STAND_INS`` names the one substitution allowed per tag; the build refuses a
Containerfile base, a requirements.txt torch pin or a Debian torch other than the record's (docs/architecture.md,
"The lab's image is a CPU stand-in").

What the image holds, bottom first (as ``postgres_image.py``, a trixie closure, not the bookworm Python base):

- **Debian** (one layer): ``pins/lab-torch-trixie.txt``, the ``--no-install-recommends`` closure of ``python3-torch``
  in trixie (``debian.PinFile``: 154 packages, each by sha256; ``python -m trainyard.rehearsal.debian PIN_FILE``
  re-pins), slim (``debian.slim_excluded``) and merged-/usr with the top-level links base-files would make (not in
  the closure). What maintainer scripts would have made and the program needs: the ``libblas.so.3`` and
  ``liblapack.so.3`` alternatives (``ALTERNATIVES``: libblas3's and liblapack3's postinst; libtorch links both, and
  they are the only candidates: no OpenBLAS, a Recommends). No ``ld.so.cache`` (no ldconfig runs): glibc's built-in
  multiarch directories hold every library, and ``/etc/ld.so.conf.d`` names no other (libc6's own file only).
- **Wheels** (one layer): ``pins/lab-torch.lock``, the wheels PyPI adds for CPython 3.13 on glibc 2.41: the program's
  requirements.txt pins but torch, at the same versions (``check_production_pins``), and their closure less what
  Debian's layer already provides (``lock``: pip resolves against stand-ins of Debian's distributions, so no wheel
  shadows one). Installed into ``/usr/local/lib/python3.13/dist-packages`` (``wheels.py``), on Debian's ``sys.path``
  before ``/usr/lib/python3/dist-packages``. ``check_closure`` refuses a lock whose wheels need what neither layer
  provides at a version they accept: Debian's ``python3-safetensors 0.5.2`` is why safetensors is a wheel
  (transformers 5.24.0 requires ``safetensors>=0.8.0``).
- **USE_LIBUV** (one small layer): Debian's torch is built without libuv, and torchrun's static rendezvous (what
  Trainer's torch plugin launches) and its workers' store client create ``TCPStore``s that ask for libuv whatever
  ``USE_LIBUV`` says; ``torch_use_libuv.py``, loaded by a ``.pth`` file, makes them follow it, and the config sets
  ``USE_LIBUV=0`` (the module says where and why). Without it the runtime's ``torchrun`` fails before any step.
- **The program** (one layer): what the Containerfile copies, ``requirements.txt``, ``lora_peft.py`` and
  ``trainyard_lora/*.py``, at ``/opt/trainyard/programs`` (root-owned, 0644).
- **The user** (one layer): ``/etc/passwd`` and ``/etc/group`` (distroless's entries and ``trainyard`` 1000:1000, the
  runtime's ``runAsUser``: ``getpass.getuser()``, which MLflow records as a run's user, raises OSError on Python 3.13
  for a uid without an entry, and mlflow-skinny 3.15.1 catches only ImportError there:
  mlflow/tracking/context/default_context.py:16-21), its home, ``/tmp``, ``/workspace`` (pytorch/pytorch's
  ``WORKDIR``, where the runtime mounts the initializers' volume), ``/etc/nsswitch.conf`` and the CA bundle
  ``update-ca-certificates`` would write from the closure's ``ca-certificates`` (every ``.crt`` it ships, sorted,
  concatenated: Debian's ``certifi`` points there).

Config: ``User 1000:1000`` (the Containerfile's), ``WorkingDir /workspace``, ``LANG=C.UTF-8``, ``USE_LIBUV=0``,
Debian's ``PATH`` (``/usr/bin/torchrun`` is python3-torch's, the runtime's command), ``TRAINYARD_CODE_VERSION`` the
Containerfile's default (``unrecorded``: the image pipeline's build argument is not given here). No byte code is
compiled into the image: every process compiles what it imports in memory at its start (measured in
docs/rehearsal.md).

Cached like the factory's other images (``image_cache.cached_build``), keyed by the pins, the program's bytes and
this recipe: a warm build reads neither a package nor a wheel.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from trainyard.config.model import PlatformConfig
from trainyard.manifests.runtimes import containers_of, read_runtime_file
from trainyard.rehearsal import base_layer, debian, wheels
from trainyard.rehearsal.debian_python import (
    CA_BUNDLE,
    DEBIAN_PATH,
    MULTIARCH,
    NSSWITCH,
    PythonOnDebian,
    lock_on_debian,
    wheel_target,
    write_lock,
)
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, layer_key, recipe_key
from trainyard.rehearsal.images import Entry, ImageError, Layer
from trainyard.rehearsal.torch_use_libuv import IMAGE_MODULE
from trainyard.supply.reference import ImageRef, ReferenceError

COMPONENT = "lora-peft"
IMAGE = "the lab image"  # how errors name it
RUNTIME, CONTAINER = "lora-peft", "node"  # runtimes/lora-peft.yaml: the container that runs the program
PINS = Path(__file__).resolve().parent / "pins"
DEBIAN_PIN_FILE = PINS / "lab-torch-trixie.txt"
WHEEL_LOCK = PINS / "lab-torch.lock"
PROGRAMS = "runtimes/programs"  # in the project: the program, its Containerfile and requirements.txt
PROGRAMS_IN_IMAGE = "opt/trainyard/programs"
USER = 1000  # the Containerfile's USER and the runtime's runAsUser/runAsGroup
PYTHON = "3.13"
INTERPRETER = f"/usr/bin/python{PYTHON}"
# The alternatives the closure's maintainer scripts would make (update-alternatives --install LINK NAME PATH):
# libblas3's and liblapack3's postinst (3.12.1-6). dpkg links LINK -> /etc/alternatives/NAME -> PATH.
ALTERNATIVES = ((f"{MULTIARCH}/libblas.so.3", "libblas.so.3-x86_64-linux-gnu", f"{MULTIARCH}/blas/libblas.so.3"),
                (f"{MULTIARCH}/liblapack.so.3", "liblapack.so.3-x86_64-linux-gnu", f"{MULTIARCH}/lapack/liblapack.so.3"))


@dataclass(frozen=True)
class StandIn:
    """What the rehearsal builds for one tag of the lora-peft image, and what the production image has there."""

    production_base: str  # the Containerfile's FROM: the production image's PyTorch
    production_torch: str  # requirements.txt's torch pin (the base's torch)
    debian_torch: str  # python3-torch's version in the pin file: what runs instead
    python: str  # the CPython minor version of Debian's python3 in the pin file


# The image tag the runtime pulls -> its CPU stand-in. transformers 5.24.0 accepts torch >= 2.6 (its METADATA:
# Requires-Dist torch>=2.6 under the torch extra; transformers/utils/import_utils.py:206-208 disables PyTorch below
# 2.6.0), peft 0.21.2 torch >= 1.13.0, accelerate 1.16.0 torch >= 2.6.0: Debian's 2.6.0 is the oldest all accept.
STAND_INS = {"0.1.0": StandIn("registry.trainyard.internal/pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime", "2.10.0",
                              "2.6.0+dfsg-7", "3.13")}


# ------------------------------------------------------------------------------------------ the production image


def runtime_image(project: Path, config: PlatformConfig) -> ImageRef:
    """The image the lora-peft runtime's ``node`` container names (by tag; the lock adds the digest)."""
    path = project / config.runtimes.directory / f"{RUNTIME}.yaml"
    return container_image(path, containers_of(read_runtime_file(path)), CONTAINER, "the lab image")


def container_image(path: Path, containers: Iterable[tuple[str, dict[str, Any]]], container: str,
                    image: str) -> ImageRef:
    """The image (without a digest) of the one container named ``container`` of a runtime file: what ``image`` (the
    factory's image of that runtime) is pushed as."""
    images = [c.get("image", "") for _, c in containers if c.get("name") == container]
    if len(images) != 1:
        raise ImageError(f"{path}: no single container named {container!r}: {image} is the one it runs")
    try:
        return ImageRef.parse(images[0]).with_digest(None)
    except ReferenceError as exc:
        raise ImageError(f"{path}: {exc}") from None


def requirement_pins(text: str, source: str) -> dict[str, str]:
    """``name==version`` lines of a requirements file (comments ignored): canonical name -> version."""
    out = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if match is None:
            raise ImageError(f"{source}:{number}: {line!r} is not an exact `name==version` pin")
        out[wheels.canonical(match.group(1))] = match.group(2)
    return out


def containerfile_base(text: str, source: str) -> str:
    """The image a Containerfile builds ``FROM`` (one stage)."""
    bases = [line.split()[1] for line in text.splitlines() if line.upper().startswith("FROM ") and len(line.split()) > 1]
    if len(bases) != 1:
        raise ImageError(f"{source}: {len(bases)} FROM lines; the lab image stands in for a one-stage build")
    return bases[0]


def stand_in_for(tag: str, base: str, production: Mapping[str, str], pins: debian.PinFile) -> StandIn:
    """The stand-in of ``tag``, refused unless the production image and the Debian pins are still the record's."""
    stand_in = STAND_INS.get(tag)
    if stand_in is None:
        raise ImageError(f"no CPU stand-in for the lora-peft image {tag} (lab_image.STAND_INS has "
                         f"{', '.join(STAND_INS)}): record what runs instead, after checking transformers' and peft's "
                         "torch requirement against Debian's python3-torch")
    problems = []
    if base != stand_in.production_base:
        problems.append(f"the Containerfile builds FROM {base}, the record says {stand_in.production_base}")
    if production.get("torch") != stand_in.production_torch:
        problems.append(f"requirements.txt pins torch {production.get('torch', 'nowhere')}, the record says "
                        f"{stand_in.production_torch}")
    pinned = {p.name: p.version for p in pins.pins}
    if pinned.get("python3-torch") != stand_in.debian_torch:
        problems.append(f"{DEBIAN_PIN_FILE.name} pins python3-torch {pinned.get('python3-torch', 'nowhere')}, the "
                        f"record says {stand_in.debian_torch}")
    python = pinned.get(f"python{stand_in.python}")
    if python is None:
        problems.append(f"{DEBIAN_PIN_FILE.name} pins no python{stand_in.python}")
    if problems:
        raise ImageError(f"the CPU stand-in for lora-peft {tag} no longer matches what it stands in for: "
                         + "; ".join(problems) + " (review the stand-in, then update lab_image.STAND_INS)")
    return stand_in


def check_production_pins(production: Mapping[str, str], locked: Sequence[wheels.WheelPin]) -> None:
    """Every requirements.txt pin but torch is in the wheel lock at the same version."""
    have = {p.name: p.version for p in locked}
    drift = [f"{name} {version} (lock: {have.get(name, 'absent')})" for name, version in sorted(production.items())
             if name != "torch" and have.get(name) != version]
    if drift:
        raise ImageError(f"{WHEEL_LOCK.name} is not the program's requirements.txt: {', '.join(drift)}; re-lock with "
                         "`python -m trainyard.rehearsal.lab_image lock`")


# ------------------------------------------------------------------------------------------ layers


def system_entries() -> list[Entry]:
    """What a package's maintainer scripts would add that the program needs: merged-/usr links and alternatives."""
    links = debian.merged_usr_links([])
    alternatives = [Entry("etc", mode=0o755), Entry("etc/alternatives", mode=0o755)]
    for link, name, path in ALTERNATIVES:
        alternatives += [Entry(f"etc/alternatives/{name}", link=f"/{path}", mode=0o777),
                         Entry(link, link=f"/etc/alternatives/{name}", mode=0o777)]
    return [*links, *alternatives]


def check_alternatives(entries: Iterable[Entry]) -> None:
    files = {e.path for e in entries if e.data is not None or e.link is not None}
    missing = [path for _, _, path in ALTERNATIVES if path not in files]
    if missing:
        raise ImageError(f"the alternatives point at {', '.join('/' + p for p in missing)}, which no pinned package "
                         "ships: ALTERNATIVES follows libblas3's and liblapack3's postinst")


def user_layer(bundle: bytes) -> Layer:
    home = "home/trainyard"
    passwd = base_layer.PASSWD + f"trainyard:x:{USER}:{USER}::/{home}:/sbin/nologin\n"
    group = base_layer.GROUP + f"trainyard:x:{USER}:\n"
    entries = (Entry("etc", mode=0o755), Entry("etc/passwd", passwd.encode(), mode=0o644),
               Entry("etc/group", group.encode(), mode=0o644), Entry("etc/nsswitch.conf", NSSWITCH, mode=0o644),
               Entry("etc/ssl", mode=0o755), Entry("etc/ssl/certs", mode=0o755),
               Entry(CA_BUNDLE, bundle, mode=0o644), Entry("home", mode=0o755),
               Entry(home, mode=0o755, uid=USER, gid=USER), Entry("tmp", mode=0o1777), Entry("workspace", mode=0o755))
    return Layer(entries, f"user trainyard {USER}:{USER} (the runtime's runAsUser), /{home}, /workspace, /tmp, "
                          "nsswitch.conf, the CA bundle of the pinned ca-certificates")


def libuv_layer(site_packages: str) -> Layer:
    """``torch_use_libuv.py`` as ``trainyard_use_libuv`` and the ``.pth`` file that loads it at interpreter start."""
    source = (Path(__file__).resolve().parent / "torch_use_libuv.py").read_bytes()
    parents = [str(p) for p in reversed(PurePosixPath(site_packages).parents) if str(p) != "."]
    entries = (*(Entry(d, mode=0o755) for d in [*parents, site_packages]),
               Entry(f"{site_packages}/{IMAGE_MODULE}.py", source, mode=0o644),
               Entry(f"{site_packages}/trainyard-use-libuv.pth", f"import {IMAGE_MODULE}\n".encode(), mode=0o644))
    return Layer(entries, f"{IMAGE_MODULE}: every TCPStore torch makes follows USE_LIBUV (Debian's torch has no libuv; "
                          "rehearsal/torch_use_libuv.py)")


def program_files(programs: Path) -> list[Path]:
    """The program's code as it records it (``trainyard.code.program_sha256``): lora_peft.py, trainyard_lora/*.py."""
    return [programs / "lora_peft.py", *sorted((programs / "trainyard_lora").glob("*.py"))]


def program_sha256(programs: Path) -> str:
    """What the program records as its code: sha256 of ``sha256sum lora_peft.py trainyard_lora/*.py`` in its directory
    (runtimes/programs/trainyard_lora/store.py ``program_digest``)."""
    listing = "".join(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.relative_to(programs).as_posix()}\n"
                      for f in program_files(programs))
    return hashlib.sha256(listing.encode()).hexdigest()


def program_layer(programs: Path) -> Layer:
    """What the Containerfile COPYs: requirements.txt, lora_peft.py, trainyard_lora/*.py, root-owned, 0644."""
    files = [programs / "requirements.txt", *program_files(programs)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing or len(files) < 4:
        raise ImageError(f"the program is not complete under {programs}: {', '.join(missing) or 'no trainyard_lora/'}")
    parents = ["opt", "opt/trainyard", PROGRAMS_IN_IMAGE, f"{PROGRAMS_IN_IMAGE}/trainyard_lora"]
    entries = [*(Entry(d, mode=0o755) for d in parents),
               *(Entry(f"{PROGRAMS_IN_IMAGE}/{f.relative_to(programs).as_posix()}", f.read_bytes(), mode=0o644)
                 for f in files)]
    return Layer(tuple(entries), f"COPY the program to /{PROGRAMS_IN_IMAGE} (runtimes/programs/Containerfile)")


def image_config(name: ImageRef, stand_in: StandIn, pins: debian.PinFile, locked: Sequence[wheels.WheelPin],
                 program_sha256: str) -> dict[str, object]:
    versions = {p.name: p.version for p in pins.pins}
    top = ("transformers", "peft", "mlflow-skinny", "boto3", "safetensors", "tokenizers", "accelerate")
    return {
        "Env": [f"PATH={DEBIAN_PATH}", "LANG=C.UTF-8", "USE_LIBUV=0", "TRAINYARD_CODE_VERSION=unrecorded"],
        "User": f"{USER}:{USER}", "WorkingDir": "/workspace", "Cmd": ["python3"],
        "Labels": {
            "org.opencontainers.image.version": str(name.tag),
            "dev.trainyard.stands-in-for": f"{name.tagged} as built by runtimes/programs/Containerfile FROM "
                                           f"{stand_in.production_base} (torch {stand_in.production_torch}, CUDA)",
            "dev.trainyard.torch": f"{stand_in.debian_torch.split('+')[0]} CPU only: Debian trixie python3-torch "
                                   f"{stand_in.debian_torch}, built without libuv (USE_LIBUV=0, {IMAGE_MODULE})",
            "dev.trainyard.python": f"CPython {stand_in.python}: Debian trixie python{stand_in.python} "
                                    f"{versions[f'python{stand_in.python}']}",
            "dev.trainyard.built-from": f"{DEBIAN_PIN_FILE.name} ({len(pins.pins)} Debian packages), {WHEEL_LOCK.name} "
                                        f"({len(locked)} wheels: " + ", ".join(f"{p.name}=={p.version}" for p in locked
                                                                             if p.name in top) + ")",
            "dev.trainyard.program-sha256": program_sha256},
    }


@dataclass(frozen=True)
class Recipe:
    """How the lab image is made: what ``build`` caches, and what an image built FROM it (``serving_image``) extends."""

    name: ImageRef
    parts: list[object]  # the cache key's parts (with ``config``: ``image_cache.recipe_key``)
    layers: Callable[[], list[Layer]]  # made only on a cache miss
    config: dict[str, object]
    note: str


def recipe(config: PlatformConfig, project: Path, deb_cache: Path | None = None, wheel_cache: Path | None = None,
           apt_cache: Path | None = None) -> Recipe:
    """The lab's CPU image of the lora-peft runtime, checked against what it stands in for, not yet built."""
    name = runtime_image(project, config)
    programs = project / PROGRAMS
    try:
        requirements = (programs / "requirements.txt").read_text(encoding="utf-8")
        containerfile = (programs / "Containerfile").read_text(encoding="utf-8")
    except OSError as exc:
        raise ImageError(f"{programs}: {exc.strerror}: the lab image is the program of runtimes/programs") from None
    production = requirement_pins(requirements, str(programs / "requirements.txt"))
    pins = debian.read_pins(DEBIAN_PIN_FILE)
    stand_in = stand_in_for(str(name.tag), containerfile_base(containerfile, str(programs / "Containerfile")),
                            production, pins)
    locked = wheels.read_lock(WHEEL_LOCK)
    check_production_pins(production, locked)
    base = PythonOnDebian(pins, DEBIAN_PIN_FILE.name, tuple(locked), WHEEL_LOCK.name, stand_in.python, IMAGE,
                          tuple(system_entries()), apt_cache)
    target, ca_pin = base.target, base.ca_pin
    program = program_layer(programs)
    config_doc = image_config(name, stand_in, pins, locked, program_sha256(programs))

    def layers() -> list[Layer]:
        return [*base.layers(deb_cache, wheel_cache, check_alternatives), libuv_layer(target.site_packages), program,
                user_layer(base.ca_bundle(deb_cache))]

    parts = [*base.key_parts(), layer_key(libuv_layer(target.site_packages)), layer_key(program),
             {"user": layer_key(user_layer(b"")), "ca-bundle-of": debian.pins_key([ca_pin])}]
    return Recipe(name, parts, layers, config_doc,
                  note=f"CPU stand-in: Debian torch {stand_in.debian_torch} for torch {stand_in.production_torch} "
                       f"CUDA, CPython {stand_in.python}")


def build(config: PlatformConfig, project: Path, cache: Path, deb_cache: Path | None = None,
          wheel_cache: Path | None = None, apt_cache: Path | None = None) -> BuiltImage:
    """The lab's CPU image of the lora-peft runtime (or the cached one of the same inputs)."""
    return built(recipe(config, project, deb_cache, wheel_cache, apt_cache), cache)


def built(made: Recipe, cache: Path) -> BuiltImage:
    """The image of ``made`` from ``cache``, built there first when absent."""
    layout, digest, cached = cached_build(cache, recipe_key(made.parts, made.config), made.layers, made.config)
    return BuiltImage(COMPONENT, made.name, None, layout, digest, cached, note=made.note)


# ------------------------------------------------------------------------------------------ locking


def lock(project: Path, deb_cache: Path | None = None, apt_cache: Path | None = None) -> str:
    """The wheel lock: requirements.txt less torch, resolved by pip for the image's CPython with Debian's
    distributions as installed (``debian_python.lock_on_debian``)."""
    pins = debian.read_pins(DEBIAN_PIN_FILE)
    python = next(iter(STAND_INS.values())).python
    target = wheel_target(pins, python, DEBIAN_PIN_FILE.name)
    production = requirement_pins((project / PROGRAMS / "requirements.txt").read_text(encoding="utf-8"),
                                  "requirements.txt")
    body = lock_on_debian([f"{n}=={v}" for n, v in production.items() if n != "torch"], pins, python, IMAGE,
                          deb_cache, apt_cache)
    return (f"# The wheels the lab image (rehearsal/lab_image.py) adds to Debian {pins.suite}'s python3-torch: "
            f"runtimes/programs/requirements.txt\n# less torch, and what they need that Debian's layer "
            f"({DEBIAN_PIN_FILE.name}) does not provide, for CPython {python} on glibc "
            f"{target.glibc[0]}.{target.glibc[1]} (x86-64).\n# Written by `python -m trainyard.rehearsal.lab_image "
            "lock`; the image factory installs exactly these files.\n" + body)


def main(argv: Sequence[str]) -> int:
    """``python -m trainyard.rehearsal.lab_image lock``: rewrite pins/lab-torch.lock."""
    from trainyard.config.load import project_root

    if list(argv) != ["lock"]:
        print("usage: python -m trainyard.rehearsal.lab_image lock", file=sys.stderr)
        return 2
    return write_lock(WHEEL_LOCK, lambda: lock(project_root()))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

