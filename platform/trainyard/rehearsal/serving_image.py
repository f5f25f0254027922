"""The ``peft-cpu`` serving runtime's image, built here: the lab image with the server program on top.

The production image (``registry.trainyard.internal/trainyard/peft-server:<tag>``, the ``kserve-container`` of
serving-runtimes/peft-cpu.yaml) is ``serving-runtimes/programs/Containerfile``: ``FROM`` the lora-peft training image
(runtimes/programs/Containerfile: torch, transformers, peft at the versions adapters are trained with), ``COPY
peft_server.py /opt/trainyard/serving/``, ``USER 1000:1000``, ``WORKDIR /tmp``, ``ENTRYPOINT ["python3",
"/opt/trainyard/serving/peft_server.py"]``. The rehearsal makes the same from what it has: its own lora-peft image (the
CPU stand-in, ``lab_image.py``: every layer and the config, unchanged) and one layer with the program. Its layers are
the lab image's blobs, so a node that ran the lab pulls only the program's few kilobytes.

The build refuses a Containerfile whose ``FROM`` is not the lora-peft runtime's image: then the rehearsal's image
would serve with other libraries than production's.

Cached like the factory's other images (``image_cache.cached_build``), keyed by the lab image's recipe, the program's
bytes and this config. Built when asked for (``trainyard images build STACK --component peft-cpu``; the node tier's
serving test), as the lab image is.
"""

from __future__ import annotations

from pathlib import Path

from trainyard.config.model import PlatformConfig
from trainyard.manifests.runtimes import read_runtime_file
from trainyard.manifests.serving import runtime_containers
from trainyard.rehearsal import lab_image
from trainyard.rehearsal.image_cache import BuiltImage, cached_build, layer_key, recipe_key
from trainyard.rehearsal.images import Entry, ImageError, Layer
from trainyard.supply.reference import ImageRef, ReferenceError

COMPONENT = "peft-cpu"  # the serving runtime, and the factory's name for its image (``images build --component``)
CONTAINER = "kserve-container"
PROGRAMS = "serving-runtimes/programs"  # in the project: the server and its Containerfile
PROGRAM = "peft_server.py"
IN_IMAGE = "opt/trainyard/serving"
ENTRYPOINT = ["python3", f"/{IN_IMAGE}/{PROGRAM}"]
USER = lab_image.USER  # the Containerfile's USER, the runtime's runAsUser
WORKDIR = "/tmp"  # noqa: S108 - the Containerfile's WORKDIR: the one writable directory of the image


def runtime_image(project: Path, config: PlatformConfig) -> ImageRef:
    """The image the peft-cpu runtime's ``kserve-container`` names (by tag; the lock adds the digest)."""
    directory = config.serving.runtimes_directory if config.serving else "serving-runtimes"
    path = project / directory / f"{COMPONENT}.yaml"
    doc = read_runtime_file(path, directory)
    containers = runtime_containers(doc) if isinstance(doc, dict) else []
    return lab_image.container_image(path, containers, CONTAINER, "the serving image")


def check_base(containerfile: str, source: str, lab: ImageRef) -> None:
    """The Containerfile builds FROM the lora-peft image the rehearsal builds (its tag, any digest)."""
    base = lab_image.containerfile_base(containerfile, source)
    try:
        ref = ImageRef.parse(base).with_digest(None)
    except ReferenceError as exc:
        raise ImageError(f"{source}: FROM {base}: {exc}") from None
    if ref.tagged != lab.tagged:
        raise ImageError(f"{source} builds FROM {base}, not the lora-peft runtime's image {lab.tagged}: the rehearsal "
                         "builds the serving image on its own lora-peft image and would serve with other libraries")


def program_layer(programs: Path) -> Layer:
    path = programs / PROGRAM
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageError(f"{path}: {exc.strerror}: the serving image's program") from None
    parents = ["opt", "opt/trainyard", IN_IMAGE]
    return Layer((*(Entry(d, mode=0o755) for d in parents), Entry(f"{IN_IMAGE}/{PROGRAM}", data, mode=0o644)),
                 f"COPY {PROGRAM} /{IN_IMAGE}/{PROGRAM} (serving-runtimes/programs/Containerfile)")


def image_config(name: ImageRef, lab: lab_image.Recipe) -> dict[str, object]:
    labels = dict(lab.config.get("Labels") or {})  # type: ignore[call-overload]
    labels["org.opencontainers.image.version"] = str(name.tag)
    labels["dev.trainyard.built-on"] = f"{lab.name.tagged} (rehearsal/lab_image.py: {lab.note})"
    labels.pop("dev.trainyard.program-sha256", None)  # the training program's; this image runs the server
    return {**lab.config, "Entrypoint": list(ENTRYPOINT), "Cmd": [], "User": f"{USER}:{USER}", "WorkingDir": WORKDIR,
            "ExposedPorts": {"8080/tcp": {}}, "Labels": labels}


def build(config: PlatformConfig, project: Path, cache: Path, deb_cache: Path | None = None,
          wheel_cache: Path | None = None, apt_cache: Path | None = None) -> BuiltImage:
    """The peft-cpu runtime's image (or the cached one of the same inputs), on the lab image (built or cached first)."""
    name = runtime_image(project, config)
    lab = lab_image.recipe(config, project, deb_cache, wheel_cache, apt_cache)
    programs = project / PROGRAMS
    try:
        containerfile = (programs / "Containerfile").read_text(encoding="utf-8")
    except OSError as exc:
        raise ImageError(f"{programs / 'Containerfile'}: {exc.strerror}") from None
    check_base(containerfile, str(programs / "Containerfile"), lab.name)
    program = program_layer(programs)
    config_doc = image_config(name, lab)
    built_lab = lab_image.built(lab, cache)
    parts = [{"on": built_lab.digest}, layer_key(program)]
    layout, digest, cached = cached_build(cache, recipe_key(parts, config_doc), lambda: [program], config_doc,
                                          base=built_lab.layout)
    return BuiltImage(COMPONENT, name, None, layout, digest, cached, note=f"on the lab image {built_lab.digest[:19]}: "
                                                                          f"{lab.note}")
