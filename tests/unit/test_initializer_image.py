"""Kubeflow Trainer's initializer images, offline: the names the runtimes pull, the wheel lock against upstream's uv.lock,
the image config against upstream's Dockerfile and the runtimes' user, and a program layer that is the module's own
``pkg/initializers``. Everything but the naming needs the Go module download of github.com/kubeflow/trainer/v2@v2.3.0
(``go mod download``; the tests never fetch it) and is skipped, saying so, where it is absent."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from trainyard.project import open_stack
from trainyard.rehearsal import base_layer, factory, initializer_image, python_base, wheels
from trainyard.rehearsal.images import Entry, ImageError, Layer, layer_tar
from trainyard.supply.reference import ImageRef

DATASET, MODEL = initializer_image.DATASET, initializer_image.MODEL


@pytest.fixture(scope="module")
def source() -> Path:
    try:
        return initializer_image.module_dir(offline=True)
    except ImageError as exc:
        pytest.skip(f"Trainer's module source is not downloaded ({exc}); `go mod download "
                    f"{initializer_image.MODULE}@{initializer_image.VERSION}` brings it")


def _config() -> Any:
    return open_stack("staging", ROOT).config


def test_the_images_are_named_as_the_runtimes_pull_them_and_built_by_the_factory_on_request() -> None:
    config = _config()
    for initializer in (DATASET, MODEL):
        name = initializer_image.target(config, ROOT, initializer)
        assert str(name) == f"registry.trainyard.internal/kubeflow/trainer/{initializer.component}:v2.3.0"
        assert initializer.upstream == ImageRef("ghcr.io", f"kubeflow/trainer/{initializer.component}", "v2.3.0")
    # Not a chart's: built only when named (`images build --component trainer-initializers`), never by default.
    assert factory.INITIALIZERS == "trainer-initializers" in factory.ON_REQUEST
    assert factory.INITIALIZERS not in factory.COMPONENTS
    script = (ROOT / "tools" / "build.sh").read_text()
    assert f"TRAINER_VERSION={initializer_image.VERSION}\n" in script


def test_the_config_is_upstreams_entrypoint_and_workdir_run_as_the_runtimes_user() -> None:
    pins = wheels.read_lock(initializer_image.WHEEL_LOCK)
    runtime = yaml.safe_load((ROOT / "runtimes" / "lora-peft.yaml").read_text())
    for initializer in (DATASET, MODEL):
        job = next(j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == initializer.component)
        pod = job["template"]["spec"]["template"]["spec"]["securityContext"]
        name = ImageRef.parse(f"registry.trainyard.internal/kubeflow/trainer/{initializer.component}:v2.3.0")
        config: dict[str, Any] = initializer_image.image_config(name, initializer, pins)
        assert config["Entrypoint"] == ["python", "-m", f"pkg.initializers.{initializer.kind}"]
        assert config["WorkingDir"] == "/app" and "Cmd" not in config
        assert config["User"] == f"{pod['runAsUser']}:{pod['runAsGroup']}" == "1000:1000"
        assert config["Env"] == [*base_layer.ENV, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"]
        assert config["Env"] == [*python_base.ENV, "PYTHONDONTWRITEBYTECODE=1"]
        labels = config["Labels"]
        assert labels["org.opencontainers.image.version"] == "v2.3.0"
        assert labels["dev.trainyard.built-from"].startswith(
            f"github.com/kubeflow/trainer/v2@v2.3.0 ({initializer_image.MODULE_SUM}): "
            f"cmd/initializers/{initializer.kind}/Dockerfile, pkg/initializers; trainer-initializers.lock: ")
        assert all(f"{p.name}=={p.version}" in labels["dev.trainyard.built-from"] for p in pins)
        assert "CPython 3.11" in labels["dev.trainyard.python"] and "python:3.14-slim-bookworm" in labels["dev.trainyard.python"]
    # `python` of the entrypoint is the base's /usr/bin/python -> python3.11, on the base's PATH.
    assert {e.path: e.link for e in python_base._aliases() if e.link}["usr/bin/python"] == "python3.11"


def test_upstreams_dockerfiles_are_what_the_recipe_follows(source: Path) -> None:
    for initializer in (DATASET, MODEL):
        facts = initializer_image.dockerfile_facts(source, initializer)
        assert facts == {"FROM": "python:3.14-slim-bookworm", "WORKDIR": "/app",
                         "ENTRYPOINT": json.dumps(initializer.entrypoint)}
        dockerfile = (source / initializer.directory / "Dockerfile").read_text()
        assert "COPY pkg/initializers pkg/initializers" in dockerfile and "USER" not in dockerfile


def test_a_dockerfile_other_than_the_recipe_is_refused(source: Path, tmp_path: Path) -> None:
    directory = tmp_path / MODEL.directory
    directory.mkdir(parents=True)
    text = (source / MODEL.directory / "Dockerfile").read_text()
    (directory / "Dockerfile").write_text(text.replace("FROM python:3.14-slim-bookworm", "FROM python:3.15-slim") + "USER 1000\n")
    with pytest.raises(ImageError, match=r"Dockerfile no longer matches the recipe: FROM 'python:3.15-slim'"):
        initializer_image.dockerfile_facts(tmp_path, MODEL)


def test_the_lock_is_both_uv_locks_at_their_versions_and_each_image_installs_its_own_part(source: Path) -> None:
    locked = wheels.read_lock(initializer_image.WHEEL_LOCK)
    initializer_image.check_lock(locked, source)
    dataset = initializer_image.image_pins(locked, source, DATASET)
    model = initializer_image.image_pins(locked, source, MODEL)
    assert dataset == locked  # the dataset closure holds the model's
    names = {p.name: p.version for p in model}
    assert {"huggingface-hub": "1.24.0", "opendal": "0.47.3"}.items() <= names.items()
    assert "kubernetes" not in names and "aiohttp" not in names
    assert {p.name: p.version for p in dataset}["kubernetes"] == "36.0.3"
    # colorama is Windows-only in uv.lock (click's and tqdm's marker): not for this Linux image.
    assert "colorama" in initializer_image.locked_versions(source, DATASET) and "colorama" not in names
    drifted = [wheels.WheelPin(p.name, "1.23.0" if p.name == "huggingface-hub" else p.version, p.sha256) for p in locked]
    with pytest.raises(ImageError, match=r"trainer-initializers.lock is not cmd/initializers/model/uv.lock: "
                                         r"huggingface-hub 1.23.0 \(uv.lock: 1.24.0\)"):
        initializer_image.image_pins(drifted, source, MODEL)


def test_the_lock_is_written_from_both_pyprojects_under_uv_lock_constraints(source: Path) -> None:
    wanted, constraints = initializer_image.requirements(source)
    assert wanted.splitlines() == ["huggingface-hub>=1.24.0,<1.25", "opendal>=0.47.3", "kubernetes>=36.0.3",
                                   "-c constraints.txt"]
    assert "opendal==0.47.3" in constraints.splitlines() and "yarl==1.24.2" in constraints.splitlines()


def test_the_initializers_code_is_python_3_11(source: Path) -> None:
    """Upstream runs CPython 3.14 (requires-python >=3.12); the base's 3.11 parses all of it."""
    files = initializer_image.source_files(source)
    assert "pkg/initializers/dataset/__main__.py" in files and "pkg/initializers/model/__main__.py" in files
    for path, data in files.items():
        if path.endswith(".py"):
            ast.parse(data, path, feature_version=(3, 11))


def _tar_files(layer: Layer) -> dict[str, tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(fileobj=io.BytesIO(layer_tar(layer.entries))) as tar:
        return {m.name: (m, (f.read() if (f := tar.extractfile(m)) else None)) for m in tar.getmembers()}


def test_the_program_layer_is_the_modules_pkg_initializers_copied_to_app(source: Path) -> None:
    for initializer in (DATASET, MODEL):
        files = _tar_files(initializer_image.program_layer(source, initializer))
        expected = {f"app/{p.relative_to(source).as_posix()}": p.read_bytes()
                    for p in (source / "pkg" / "initializers").rglob("*") if p.is_file()}
        expected |= {f"app/{name}": (source / initializer.directory / name).read_bytes()
                     for name in ("pyproject.toml", "uv.lock")}
        regular = {name: data for name, (info, data) in files.items() if info.isfile()}
        assert regular == expected
        assert all(info.uid == info.gid == 0 for info, _ in files.values())
        assert all(info.mode == (0o644 if info.isfile() else 0o755) for info, _ in files.values())
        assert {"app", "app/pkg", "app/pkg/initializers", f"app/pkg/initializers/{initializer.kind}"} <= set(files)
        assert not (source / "pkg" / "__init__.py").exists()  # a namespace package: found from WORKDIR /app


def test_build_gives_both_images_reproducibly_and_from_the_cache(source: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe's shape with the base and wheel layers stubbed (no Debian package or wheel is read)."""
    monkeypatch.setattr(python_base, "layers", lambda root, cache=None: [Layer((Entry("usr", mode=0o755),), "base")])
    seen: list[list[str]] = []

    def wheels_layer(pins: list[wheels.WheelPin], target: wheels.Target, created_by: str, cache: Path | None = None) -> Layer:
        seen.append([p.name for p in pins])
        return Layer((), f"{created_by}: {len(pins)} wheels")

    monkeypatch.setattr(wheels, "wheels_layer", wheels_layer)
    monkeypatch.setattr(initializer_image, "module_dir", lambda offline=False: source)
    built = factory.build_images(_config(), tmp_path / "tools", tmp_path / "a", [factory.INITIALIZERS], project=ROOT)
    again = initializer_image.build(_config(), tmp_path / "a", ROOT, source=source)
    elsewhere = initializer_image.build(_config(), tmp_path / "b", ROOT, source=source)
    assert [b.component for b in built] == ["dataset-initializer", "model-initializer"]
    assert [b.digest for b in built] == [b.digest for b in again] == [b.digest for b in elsewhere]
    assert [b.cached for b in built] == [False, False] and [b.cached for b in again] == [True, True]
    assert len(seen) == 4 and "kubernetes" in seen[0] and "kubernetes" not in seen[1]
    for image in built:
        index = json.loads((image.layout / "index.json").read_text())
        blobs = image.layout / "blobs" / "sha256"
        manifest = json.loads((blobs / index["manifests"][0]["digest"].removeprefix("sha256:")).read_bytes())
        config = json.loads((blobs / manifest["config"]["digest"].removeprefix("sha256:")).read_bytes())
        assert config["config"]["User"] == "1000:1000" and len(manifest["layers"]) == 3
        program = (blobs / manifest["layers"][-1]["digest"].removeprefix("sha256:")).read_bytes()
        with tarfile.open(fileobj=io.BytesIO(program)) as tar:
            main = tar.extractfile(f"app/pkg/initializers/{image.component.split('-')[0]}/__main__.py")
            assert main is not None
            module_main = source / "pkg" / "initializers" / image.component.split("-")[0] / "__main__.py"
            assert hashlib.sha256(main.read()).digest() == hashlib.sha256(module_main.read_bytes()).digest()


def test_runtime_files_naming_two_images_for_one_initializer_are_refused(tmp_path: Path) -> None:
    config = _config()
    directory = tmp_path / config.runtimes.directory
    directory.mkdir(parents=True)
    for name in ("lora-peft.yaml", "lora-finetune.yaml"):
        shutil.copy(ROOT / "runtimes" / name, directory / name)
    text = (directory / "lora-finetune.yaml").read_text()
    (directory / "lora-finetune.yaml").write_text(text.replace("dataset-initializer:v2.3.0", "dataset-initializer:v2.2.0"))
    with pytest.raises(ImageError, match=r"the dataset-initializer containers name .*v2\.2\.0 \(lora-finetune\.yaml\); "
                                         r".*v2\.3\.0 \(lora-peft\.yaml\)"):
        initializer_image.target(config, tmp_path, DATASET)
    (directory / "lora-peft.yaml").unlink()
    with pytest.raises(ImageError, match=r"the runtimes pull .*dataset-initializer:v2\.2\.0, but the factory builds"):
        initializer_image.target(config, tmp_path, DATASET)
