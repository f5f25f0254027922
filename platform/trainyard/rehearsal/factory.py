"""The image factory: the images the rehearsal runs in its cluster, built here and pushed under the stack's names.

No container registry is reachable, so the images the charts pull are made on this machine, as an air-gapped site
fills its own mirror: the controllers' (below), SeaweedFS's (``seaweedfs_image.py``) and Trainyard's own object-store
provisioner (``provisioner_image.py``, on the factory's Python base, ``python_base.py``). ``build_images`` builds the
ones a list of chart components needs (for KServe's, its storage initializer too: ``storage_initializer_image.py``),
and on request (``LAB``, not a chart's) the lab's CPU stand-in for the
``lora-peft`` runtime's image (``lab_image.py``: Debian's CPU PyTorch, ~1 GB, so never built unasked) and the
barman-cloud CNPG-I plugin's two images (``barman_cloud_image.py``: the site installs that plugin; no chart) and
Trainer's dataset and model initializer images (``initializer_image.py``: what the lab's runtimes run first) and the
``peft-cpu`` serving runtime's image (``serving_image.py``: the lab image and its server program); where the
stack installs MLflow's chart, its tracking server (``mlflow_image.py``: mlflow[auth] on the Python base, several
hundred MB of wheels) and its init containers' busybox (``busybox_image.py``: compiled from source). ``STAND_INS``
gathers what the factory builds in place of the version a name says. The controller images are each laid out as its
upstream Dockerfile lays it out, on a base of distroless ``static:nonroot``'s files (``rehearsal/base_layer.py``):

- ``kueue/kueue``: binary ``kueue`` (sigs.k8s.io/kueue ``./cmd/kueue``); sigs.k8s.io/kueue@v0.19.2:Dockerfile:17-21
  (``WORKDIR /``, ``USER 65532:65532``, ``ENTRYPOINT ["/manager"]``, ``COPY ... /manager``).
- ``jobset/jobset``: binary ``jobset-controller`` (sigs.k8s.io/jobset ``main.go``); sigs.k8s.io/jobset@v0.12.0:
  Dockerfile:22-27, the same.
- ``kubeflow/trainer/trainer-controller-manager``: binary ``trainer-controller-manager``
  (``./cmd/trainer-controller-manager``); github.com/kubeflow/trainer/v2@v2.3.0:cmd/trainer-controller-manager/
  Dockerfile:31-34: ``/manager``, ``WORKDIR /``, no ``USER`` (the base's ``65532``).
- ``cloudnative-pg/cloudnative-pg``: binary ``cnpg-manager`` (``./cmd/manager``: the operator and the instance
  manager in one); cloudnative-pg@v1.30.0:Dockerfile: ``/operator/manager_amd64`` owned by nonroot, ``/manager`` a
  link to it, ``/licenses``, ``USER 65532:65532`` (the recipe below says why the link matters).
- ``kserve/kserve-controller``: binary ``kserve-manager`` (github.com/kserve/kserve ``./cmd/manager``);
  kserve@v0.20.0:Dockerfile:36-39: ``/manager``, ``ENTRYPOINT ["/manager"]``, no ``USER`` (the base's ``65532``). Its
  ``COPY --from=license /third_party`` (``go-licenses save`` of every dependency's licence) is not made here: no
  licence tool is built, and nothing reads that directory at run time (docs/tools.md).
- ``brancz/kube-rbac-proxy``: the sidecar kserve-resources v0.20.0 runs beside the manager (its ``rbac-proxy`` image);
  binary ``kube-rbac-proxy`` (``./cmd/kube-rbac-proxy``); kube-rbac-proxy@v0.18.0:Dockerfile:
  ``/usr/local/bin/kube-rbac-proxy``, ``EXPOSE 8080``, ``USER 65532:65532``, that path as ``ENTRYPOINT``.

The binaries are ``tools/build.sh``'s (CGO_ENABLED=0, -trimpath, the upstream Makefiles' -X version flags).
Every chart runs ``command: [/manager]`` (kueue 0.19.2 templates/manager/manager.yaml:59, jobset 0.12.0
templates/controller/deployment.yaml:50, kubeflow-trainer 2.3.0 templates/manager/deployment.yaml:53), with
``runAsNonRoot: true`` (Kueue, Trainer): the image's user must be a non-zero number, as 65532 is.

An image is two layers: the base (shared, the same digest in all three) and the binary at ``/manager`` (0755,
root-owned, as ``COPY`` leaves it). Layers are uncompressed tars written by ``images.write_image`` (sorted, mtime 0,
numeric owners, epoch ``created``), so the same binary and base files give the same digest on any machine. Only a
static x86-64 ELF is accepted (no libc in the image), and only the version the stack pins (``share/<tool>/VERSION``,
which ``tools/build.sh`` writes, must be the catalog image's tag).

Names: ``<images.registry_mirror><upstream repository>:<upstream tag>``, through the very functions the charts' values
use (``manifests.installs.upstream_image`` and ``supply.reference.mirrored``), so what is pushed is what the stack
renders. A stack without a mirror is refused: an image built here is not upstream's and must not carry its name.

Cache: a built layout is kept under ``$TRAINYARD_IMAGE_CACHE`` (default ``$XDG_CACHE_HOME/trainyard/images``) in a
directory named by a hash of everything it is made of (every entry's path, mode, owner and content hash, the
config, the history lines, the layout format), written to a temporary directory and renamed, so a second build of
the same inputs only hashes the binaries. A layer of pinned Debian packages or wheels enters the hash by its pins (each
a file's sha256), so a second build of an image made of them reads none of them. Push:
``supply.registry.RegistryClient`` (blobs the registry lacks, then the manifest under the tag; the registry verifies
every digest), the mirror host mapped to the loopback registry.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from trainyard.config.load import project_root
from trainyard.config.model import PlatformConfig
from trainyard.manifests.installs import upstream_image
from trainyard.project import Stack
from trainyard.rehearsal import (
    barman_cloud_image,
    busybox_image,
    initializer_image,
    lab_image,
    mlflow_image,
    postgres_image,
    provisioner_image,
    seaweedfs_image,
    serving_image,
    storage_initializer_image,
)
from trainyard.rehearsal.base_layer import ENV, base_layer
from trainyard.rehearsal.image_cache import (
    BuiltImage,
    cache_root,
    cached_layout,
    mirror_target,
    role_upstream,
)
from trainyard.rehearsal.image_cache import (
    targets as _targets,
)
from trainyard.rehearsal.images import MANIFEST, Entry, ImageError, Layer, tool_binary
from trainyard.supply.lock import DEFAULT_LOCK_FILE, LockFileError
from trainyard.supply.lock_refresh import LockRefresh, refresh
from trainyard.supply.reference import ImageRef
from trainyard.supply.registry import FetchedManifest, RegistryClient, RegistryError, RegistryUnreachable

ENTRYPOINT = "/manager"


@dataclass(frozen=True)
class Recipe:
    """How one controller image is made: which binary, and what its upstream Dockerfile sets."""

    component: str  # the catalog component (``versions.<component>``)
    tool: str  # tools/build.sh's tool: the binary's version is in share/<tool>/VERSION
    binary: str  # under tools/bin
    module: str
    package: str
    user: str  # the Dockerfile's USER, or the base's
    path: str = ENTRYPOINT.lstrip("/")  # where the Dockerfile COPYs the binary
    owner: int = 0  # COPY --chown's uid and gid (root without it)
    links: tuple[tuple[str, str], ...] = ()  # (path, target) symbolic links the Dockerfile makes
    version_prefix: str = ""  # share/<tool>/VERSION is the module version: "v" + the image tag where they differ
    share: tuple[str, ...] = ()  # files and directories of share/<tool> the Dockerfile COPYs (same path in the image)
    image: str = ""  # the catalog image role of the component's release (catalog.Release.images); "" = its controller
    entrypoint: str = ENTRYPOINT
    exposed_ports: tuple[str, ...] = ()  # the Dockerfile's EXPOSE lines, as the image config writes them ("8080/tcp")


RECIPES = (
    Recipe("kueue", "kueue", "kueue", "sigs.k8s.io/kueue", "./cmd/kueue", "65532:65532"),
    Recipe("jobset", "jobset", "jobset-controller", "sigs.k8s.io/jobset", ".", "65532:65532"),
    # No USER in Trainer's Dockerfile: distroless static:nonroot's user is "65532" (static/static.bzl, user = "%d" % uid).
    Recipe("trainer", "trainer", "trainer-controller-manager", "github.com/kubeflow/trainer/v2",
           "./cmd/trainer-controller-manager", "65532"),
    # cloudnative-pg@v1.30.0:Dockerfile:13-18: the binary at /operator/manager_amd64 (--chown=nonroot:nonroot,
    # --chmod=0755), /manager a link to it (made in the builder stage: `ln -sf operator/manager_${TARGETARCH} manager`),
    # /licenses, USER 65532:65532, WORKDIR /. The link matters: every PostgreSQL pod's init container runs
    # `/manager bootstrap /controller/manager` (pkg/specs/containers.go:39-43), which copies cmd.Root().Name(), the
    # relative path "manager", from the working directory / (internal/cmd/manager/bootstrap/cmd.go).
    Recipe("cnpg", "cnpg", "cnpg-manager", "github.com/cloudnative-pg/cloudnative-pg", "./cmd/manager", "65532:65532",
           path="operator/manager_amd64", owner=65532, links=(("manager", "operator/manager_amd64"),),
           version_prefix="v", share=("licenses", "LICENSE")),
    # kserve@v0.20.0:Dockerfile: FROM distroless/static:nonroot, COPY manager /manager, ENTRYPOINT ["/manager"], no USER.
    Recipe("kserve", "kserve", "kserve-manager", "github.com/kserve/kserve", "./cmd/manager", "65532"),
    # kube-rbac-proxy@v0.18.0:Dockerfile: COPY to /usr/local/bin/kube-rbac-proxy, EXPOSE 8080, USER 65532:65532.
    Recipe("kserve", "kube-rbac-proxy", "kube-rbac-proxy", "github.com/brancz/kube-rbac-proxy", "./cmd/kube-rbac-proxy",
           "65532:65532", path="usr/local/bin/kube-rbac-proxy", image="rbac-proxy",
           entrypoint="/usr/local/bin/kube-rbac-proxy", exposed_ports=("8080/tcp",)),
)
CONTROLLERS = tuple(dict.fromkeys(recipe.component for recipe in RECIPES))
SEAWEEDFS = "seaweedfs"
KSERVE = storage_initializer_image.COMPONENT
CNPG = "cnpg"
# Built only when asked for: the MLflow chart's server image and its init containers' busybox (mlflow_image.py,
# busybox_image.py); the rehearsal asks where the stack installs the chart (mlflow.enabled: mirror.installed_controllers).
MLFLOW = mlflow_image.COMPONENT
# The chart components whose images the factory builds: what the rehearsal with real nodes runs in its cluster (each
# only where the stack installs its chart).
COMPONENTS = (*CONTROLLERS, SEAWEEDFS, MLFLOW)
# Built only when asked for: the lab's image of the lora-peft runtime (a training image, not a chart's).
LAB = lab_image.COMPONENT
# Built only when asked for: the barman-cloud plugin's image and its sidecar's (not a chart's: the site installs it).
BARMAN_CLOUD = barman_cloud_image.COMPONENT
# Built only when asked for: Trainer's dataset and model initializer images, which the lab's runtimes run before
# the trainer (Python programs of Trainer's module on the factory's Python base; initializer_image.py).
INITIALIZERS = initializer_image.COMPONENT
# Built only when asked for: the peft-cpu serving runtime's image (serving_image.py: the lab image + its server).
SERVING = serving_image.COMPONENT
ON_REQUEST = (LAB, BARMAN_CLOUD, INITIALIZERS, SERVING)
# What the factory builds in place of what a name says, and why (each module's record; docs/architecture.md).
STAND_INS: dict[str, dict[str, object]] = {SEAWEEDFS: dict(seaweedfs_image.STAND_INS), LAB: dict(lab_image.STAND_INS),
                                           BARMAN_CLOUD: dict(barman_cloud_image.STAND_INS)}


def targets(config: PlatformConfig, components: Iterable[str] = CONTROLLERS) -> dict[str, ImageRef]:
    """The name each component's image is pushed under (the controllers' by default)."""
    return _targets(config, components)


def recipe_upstream(config: PlatformConfig, recipe: Recipe) -> ImageRef:
    """The upstream image ``recipe`` stands for: its component's controller image, or the release's image of that role."""
    if not recipe.image:
        return upstream_image(config, recipe.component)
    return role_upstream(config, recipe.component, recipe.image)


def recipe_target(config: PlatformConfig, recipe: Recipe) -> ImageRef:
    """The name ``recipe``'s image is pushed under: the upstream name under the stack's mirror (``targets``)."""
    return mirror_target(config, recipe_upstream(config, recipe))


def controller_binary(tools_dir: Path, recipe: Recipe, tag: str) -> bytes:
    """The binary tools/build.sh built for ``recipe``, refused unless it is a static x86-64 ELF of version ``tag``."""
    return tool_binary(tools_dir, recipe.binary, recipe.tool, recipe.version_prefix + tag, source=f"{recipe.module}@")


def image_config(recipe: Recipe, upstream: ImageRef) -> dict[str, object]:
    """The image's runtime config: the Dockerfile's ENTRYPOINT, USER and WORKDIR on the base's environment."""
    return {
        "Entrypoint": [recipe.entrypoint], "Env": list(ENV), "User": recipe.user, "WorkingDir": "/",
        **({"ExposedPorts": {port: {} for port in recipe.exposed_ports}} if recipe.exposed_ports else {}),
        "Labels": {"org.opencontainers.image.version": str(upstream.tag),
                   "dev.trainyard.built-from": f"{recipe.module}@{upstream.tag} {recipe.package}",
                   "dev.trainyard.upstream-image": str(upstream)},
    }


def binary_layer(recipe: Recipe, binary: bytes, tag: str, tools_dir: Path | None = None) -> Layer:
    """The binary where the Dockerfile puts it (with the directories COPY makes for it), its links, and the files of
    ``share/<tool>`` it copies (read from ``tools_dir``)."""
    parents = [str(p) for p in reversed(Path(recipe.path).parents) if str(p) != "."]
    entries = [*(Entry(d, mode=0o755, uid=recipe.owner, gid=recipe.owner) for d in parents),
               Entry(recipe.path, binary, mode=0o755, uid=recipe.owner, gid=recipe.owner),
               *(Entry(path, link=target, mode=0o777) for path, target in recipe.links)]
    for name in recipe.share:
        if tools_dir is None:
            raise ImageError(f"the {recipe.component} image copies share/{recipe.tool}/{name}: no tools directory given")
        entries += _shared_tree(tools_dir / "share" / recipe.tool, name, recipe.tool)
    return Layer(tuple(entries), f"COPY /{recipe.path}: {recipe.binary} built by tools/build.sh from "
                                 f"{recipe.module}@{tag} {recipe.package} (CGO_ENABLED=0, -trimpath)")


def _shared_tree(share: Path, name: str, tool: str) -> list[Entry]:
    """``share/<tool>/<name>`` (a file or a directory tree) as root-owned entries under ``/<name>``."""
    top = share / name
    if not top.exists():
        raise ImageError(f"{top} not found: run `tools/build.sh {tool}` (it copies {name} out of the module)")
    paths = [top, *sorted(top.rglob("*"))] if top.is_dir() else [top]
    out = []
    for path in paths:
        relative = str(path.relative_to(share))
        if path.is_symlink():
            out.append(Entry(relative, link=os.readlink(path), mode=0o777))
        elif path.is_dir():
            out.append(Entry(relative, mode=0o755))
        else:
            out.append(Entry(relative, path.read_bytes(), mode=0o644))
    return out


def build_images(config: PlatformConfig, tools_dir: Path, cache: Path | None = None,
                 components: Iterable[str] = COMPONENTS, root: Path = Path("/"),
                 project: Path | None = None) -> list[BuiltImage]:
    """Every image the charts of ``components`` need in the cluster: the controllers'; for ``seaweedfs`` the server's
    and the provisioning Job's (Trainyard's own, on the Python base), which creates the buckets on it; for ``cnpg``,
    where the stack declares MLflow's database, the PostgreSQL operand (``postgres_image.py``); for ``lora-peft`` the
    lab's CPU image of that runtime (``lab_image.py``; ``project``: where runtimes/ is, default the project root); for
    ``peft-cpu`` that serving runtime's, on the lab image (``serving_image.py``); for
    ``barman-cloud`` the plugin's and its sidecar's (``barman_cloud_image.py``); for ``trainer-initializers`` Trainer's
    dataset and model initializers (``initializer_image.py``); for ``mlflow`` the chart's server (``mlflow_image.py``)
    and its init containers' busybox (``busybox_image.py``)."""
    wanted = list(components)
    unknown = sorted(set(wanted) - {*COMPONENTS, *ON_REQUEST})
    if unknown:
        raise ImageError(f"no image recipe for {', '.join(unknown)} (the factory builds "
                         f"{', '.join((*COMPONENTS, *ON_REQUEST))})")
    directory = cache or cache_root()
    out = build_controller_images(config, tools_dir, directory, [c for c in wanted if c in CONTROLLERS], root)
    if KSERVE in wanted:
        # The chart's ClusterStorageContainer: every predictor pod's storage-initializer.
        out.append(storage_initializer_image.build(config, directory, root))
    if SEAWEEDFS in wanted:
        out.append(seaweedfs_image.build(config, tools_dir, directory, root))
        out.append(provisioner_image.build(config, directory, root))
    if CNPG in wanted and config.mlflow.enabled:
        # The stack's PostgreSQL Cluster runs here: its operand, from Debian's packages.
        out.append(postgres_image.build(config, directory))
    if LAB in wanted:
        out.append(lab_image.build(config, project or project_root(), directory))
    if SERVING in wanted:
        out.append(serving_image.build(config, project or project_root(), directory))
    if BARMAN_CLOUD in wanted:
        out.extend(barman_cloud_image.build(config, tools_dir, directory))
    if INITIALIZERS in wanted:
        out.extend(initializer_image.build(config, directory, project or project_root(), root))
    if MLFLOW in wanted:
        out.append(mlflow_image.build(config, directory, root))
        out.append(busybox_image.build(config, directory))
    return out


def build_controller_images(config: PlatformConfig, tools_dir: Path, cache: Path | None = None,
                            components: Iterable[str] = CONTROLLERS, root: Path = Path("/")) -> list[BuiltImage]:
    """Build (or take from the cache) the controller images of ``components`` at the stack's versions.

    ``root`` is where the Debian packages of the base layer are read (``/``; tests use a fake tree).
    """
    wanted = list(components)
    unknown = sorted(set(wanted) - set(CONTROLLERS))
    if unknown:
        raise ImageError(f"no controller image recipe for {', '.join(unknown)} (one of {', '.join(CONTROLLERS)})")
    if not wanted:
        return []
    targets(config, wanted)  # a stack without a mirror is refused before anything is read
    base = base_layer(root)
    out = []
    for recipe in (r for r in RECIPES if r.component in wanted):
        upstream = recipe_upstream(config, recipe)
        tag = str(upstream.tag)
        layers = [base, binary_layer(recipe, controller_binary(tools_dir, recipe, tag), tag, tools_dir)]
        layout, digest, cached = cached_layout(cache or cache_root(), layers, image_config(recipe, upstream))
        out.append(BuiltImage(recipe.component, recipe_target(config, recipe), upstream, layout, digest, cached))
    return out


def loopback_client(images: Iterable[BuiltImage], registry: str) -> RegistryClient:
    """A client that reaches every mirror host of ``images`` at the plain-http loopback registry ``registry`` (host:port)."""
    return RegistryClient({host: f"http://{registry}" for host in {image.target.registry for image in images}},
                          insecure=True)


def _open_blob(path: Path) -> IO[bytes]:
    return path.open("rb")


def push_images(images: Sequence[BuiltImage], registry: str) -> None:
    """Push each layout under its target name to the loopback registry at ``registry``; the registry must report the
    built digest."""
    client = loopback_client(images, registry)
    for image in images:
        blobs = image.layout / "blobs" / "sha256"
        manifest = (blobs / image.digest.removeprefix("sha256:")).read_bytes()
        parsed = json.loads(manifest)
        try:
            for descriptor in [parsed["config"], *parsed["layers"]]:
                digest, size = str(descriptor["digest"]), int(descriptor["size"])
                if not client.has_blob(image.target, digest):
                    client.push_blob(image.target, digest, size,
                                     functools.partial(_open_blob, blobs / digest.removeprefix("sha256:")))
            reported = client.push_manifest(image.target, str(image.target.tag), FetchedManifest(MANIFEST, manifest))
        except RegistryUnreachable as exc:
            raise ImageError(f"no registry answers at {registry} ({exc.reason}): the loopback registry runs with a "
                             "real node (`trainyard cluster node-up`)") from None
        except RegistryError as exc:
            raise ImageError(f"pushing {image.target} to {registry}: {exc}") from None
        if reported != image.digest:
            raise ImageError(f"{registry} stored {image.target} as {reported}, the built image is {image.digest}")


def lock_pushed(stack: Stack, images: Sequence[BuiltImage], registry: str) -> LockRefresh:
    """Fill ``stack``'s image lock with what the loopback registry serves for exactly ``images`` and write it: what
    ``trainyard images lock STACK --only-registry HOST --endpoint HOST=http://REGISTRY --insecure`` does for the mirror
    host (the provisioner's host also names images the factory does not build: those are not asked). A lock file
    that does not exist yet starts as a copy of the project's lock, so every other image (the runtimes') keeps its
    entry and the stack renders. Raises ImageError when the registry does not serve exactly the
    built digests."""
    path = Path(stack.config.images.lock_file)
    path = path if path.is_absolute() else stack.root / path
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stack.root / DEFAULT_LOCK_FILE, path)
    hosts = sorted({image.target.registry for image in images})
    try:
        result = refresh(stack, loopback_client(images, registry), only=hosts, images=[i.target for i in images])
    except LockFileError as exc:
        raise ImageError(str(exc)) from None
    if not result.ok:
        reasons = [*result.errors, *(f"{host}: {why}" for host, (why, _) in result.unreachable.items())]
        raise ImageError(f"{path}: not changed, {result.unresolved} images under {', '.join(hosts)} not resolved at "
                         f"{registry}:\n  " + "\n  ".join(reasons))
    for image in images:
        entry = result.lock.entry(image.target)
        if entry is None or entry.digest != image.digest:
            raise ImageError(f"{registry} serves {image.target} as {entry.digest if entry else 'nothing'}, "
                             f"the built image is {image.digest}")
    path.write_text(result.lock.dump(), encoding="utf-8")
    return result


def endpoint_argument(images: Iterable[BuiltImage], registry: str) -> list[str]:
    """The ``--endpoint HOST=URL`` arguments with which ``trainyard images lock`` / ``bom --format sync`` reach the
    loopback registry under the mirror host (with ``--insecure``: it speaks plain http)."""
    return [f"{host}=http://{registry}" for host in sorted({image.target.registry for image in images})]
