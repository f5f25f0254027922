"""The peft-cpu serving runtime's image (rehearsal/serving_image.py): the lab image with the server, FROM as built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trainyard.project import open_stack
from trainyard.rehearsal import factory, lab_image, serving_image
from trainyard.rehearsal.images import Entry, ImageError, Layer, write_image, write_image_on
from trainyard.supply.reference import ImageRef


def _config() -> object:
    return open_stack("local", ROOT).config


def test_the_runtime_names_the_image_by_tag_and_the_containerfile_builds_it_from_the_lab_image() -> None:
    config = _config()
    assert serving_image.runtime_image(ROOT, config) == ImageRef.parse(
        "registry.trainyard.internal/trainyard/peft-server:0.1.0")
    containerfile = (ROOT / serving_image.PROGRAMS / "Containerfile").read_text()
    serving_image.check_base(containerfile, "Containerfile", lab_image.runtime_image(ROOT, config))
    assert "COPY peft_server.py /opt/trainyard/serving/peft_server.py" in containerfile
    assert 'ENTRYPOINT ["python3", "/opt/trainyard/serving/peft_server.py"]' in containerfile
    runtime = (ROOT / "serving-runtimes" / "peft-cpu.yaml").read_text()
    assert "- /opt/trainyard/serving/peft_server.py" in runtime and "- --enable-lora" in runtime


def test_a_containerfile_from_another_image_is_refused_naming_both() -> None:
    lab = lab_image.runtime_image(ROOT, _config())
    with pytest.raises(ImageError, match=r"Containerfile builds FROM .*pytorch/pytorch:2.10.0.*, not the lora-peft "
                                         r"runtime's image registry.trainyard.internal/trainyard/lora-peft:0.1.0"):
        serving_image.check_base("FROM registry.trainyard.internal/pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime\n",
                                 "Containerfile", lab)
    # A digest on the FROM line is the same image.
    serving_image.check_base(f"FROM {lab.tagged}@sha256:{'0' * 64}\n", "Containerfile", lab)


def test_the_image_runs_the_server_as_the_runtimes_user_and_says_what_it_is_built_on() -> None:
    config = _config()
    lab = lab_image.recipe(config, ROOT)
    made = serving_image.image_config(serving_image.runtime_image(ROOT, config), lab)
    assert made["Entrypoint"] == ["python3", "/opt/trainyard/serving/peft_server.py"] and made["Cmd"] == []
    assert (made["User"], made["WorkingDir"]) == ("1000:1000", "/tmp")
    assert made["Env"] == lab.config["Env"]  # the lab image's environment: Debian's PATH, USE_LIBUV=0
    labels = made["Labels"]
    assert isinstance(labels, dict)
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["dev.trainyard.built-on"].startswith("registry.trainyard.internal/trainyard/lora-peft:0.1.0 ")
    assert "dev.trainyard.program-sha256" not in labels
    layer = serving_image.program_layer(ROOT / serving_image.PROGRAMS)
    assert [e.path for e in layer.entries] == ["opt", "opt/trainyard", "opt/trainyard/serving",
                                               "opt/trainyard/serving/peft_server.py"]
    assert layer.entries[-1].data == (ROOT / serving_image.PROGRAMS / "peft_server.py").read_bytes()


def test_the_factory_builds_it_only_when_asked() -> None:
    assert serving_image.COMPONENT in factory.ON_REQUEST and serving_image.COMPONENT not in factory.COMPONENTS


def test_an_image_built_on_a_layout_is_the_image_of_all_its_layers_with_the_base_blobs_linked(tmp_path: Path) -> None:
    below = [Layer((Entry("etc", mode=0o755), Entry("etc/a", b"a", mode=0o644)), "first"),
             Layer((Entry("etc", mode=0o755), Entry("etc/b", b"b", mode=0o644)), "second")]
    above = [Layer((Entry("opt", mode=0o755), Entry("opt/c", b"c", mode=0o644)), "third")]
    config: dict[str, object] = {"User": "1000:1000"}
    write_image(tmp_path / "base", below, {"User": "0"})
    whole = write_image(tmp_path / "whole", [*below, *above], config)
    assert write_image_on(tmp_path / "base", tmp_path / "on", above, config) == whole
    blobs = sorted(p.name for p in (tmp_path / "whole" / "blobs" / "sha256").iterdir())
    assert sorted(p.name for p in (tmp_path / "on" / "blobs" / "sha256").iterdir()) == blobs
    index = json.loads((tmp_path / "on" / "index.json").read_bytes())
    manifest = json.loads((tmp_path / "on" / "blobs" / "sha256" / index["manifests"][0]["digest"][7:]).read_bytes())
    first = manifest["layers"][0]["digest"][7:]
    assert (tmp_path / "on" / "blobs" / "sha256" / first).stat().st_ino == \
        (tmp_path / "base" / "blobs" / "sha256" / first).stat().st_ino


def test_building_on_what_is_not_a_layout_names_it(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="not an OCI layout of one image"):
        write_image_on(tmp_path / "nothing", tmp_path / "out", [], {})
