"""The lab's CPU image recipe, offline: what it stands in for and refuses to stand in for, the pins it is made of,
how its Python distributions must fit Debian's, what the maintainer scripts it does not run would have made, its
user and labels, and the USE_LIBUV shim for Debian's torch."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from trainyard.project import open_stack
from trainyard.rehearsal import debian, debian_python, factory, lab_image, torch_use_libuv, wheels
from trainyard.rehearsal.images import Entry, ImageError
from trainyard.supply.reference import ImageRef

PROGRAMS = ROOT / "runtimes" / "programs"
STAND_IN = lab_image.STAND_INS["0.1.0"]


def _production() -> dict[str, str]:
    return lab_image.requirement_pins((PROGRAMS / "requirements.txt").read_text(), "requirements.txt")


def _base() -> str:
    return lab_image.containerfile_base((PROGRAMS / "Containerfile").read_text(), "Containerfile")


def test_the_runtime_pulls_the_image_the_stand_in_is_recorded_for() -> None:
    stack = open_stack("staging", ROOT)
    name = lab_image.runtime_image(ROOT, stack.config)
    assert str(name) == "registry.trainyard.internal/trainyard/lora-peft:0.1.0"
    assert str(name.tag) in lab_image.STAND_INS and factory.STAND_INS[factory.LAB] == dict(lab_image.STAND_INS)
    assert factory.LAB not in factory.COMPONENTS  # ~1 GB: built only when named
    pins = debian.read_pins(lab_image.DEBIAN_PIN_FILE)
    assert lab_image.stand_in_for("0.1.0", _base(), _production(), pins) == STAND_IN


def test_the_committed_debian_closure_is_python3_torch_without_safetensors() -> None:
    pins = debian.read_pins(lab_image.DEBIAN_PIN_FILE)
    versions = {p.name: p.version for p in pins.pins}
    assert pins.suite == "trixie" and pins.roots == ("python3-torch",)
    assert versions["python3-torch"] == versions["libtorch2.6"] == STAND_IN.debian_torch
    assert versions["python3.13"].startswith("3.13.") and versions["libc6"].startswith("2.41-")
    assert {"libblas3", "liblapack3", "ca-certificates", "python3-numpy"} <= set(versions)
    # Debian's python3-safetensors is 0.5.2: transformers 5.24.0 needs >= 0.8.0, so it is a wheel (not a root).
    assert "python3-safetensors" not in versions
    assert debian_python.wheel_target(pins, "3.13") == wheels.Target("3.13", "/usr/bin/python3.13", (2, 41))


def test_the_wheel_lock_is_requirements_txt_less_torch_at_the_same_versions() -> None:
    locked = wheels.read_lock(lab_image.WHEEL_LOCK)
    lab_image.check_production_pins(_production(), locked)
    names = {p.name for p in locked}
    assert "torch" not in names and not any(n.startswith("nvidia-") or n == "triton" for n in names)
    assert {"transformers", "peft", "mlflow-skinny", "boto3", "safetensors", "tokenizers"} <= names
    drifted = [wheels.WheelPin(p.name, "0.0.1" if p.name == "peft" else p.version, p.sha256) for p in locked]
    with pytest.raises(ImageError, match=r"lab-torch.lock is not the program's requirements.txt: peft 0.21.2 \(lock: 0.0.1\)"):
        lab_image.check_production_pins(_production(), drifted)


@pytest.mark.parametrize(("change", "message"), [
    ({"torch": "2.11.0"}, r"requirements.txt pins torch 2.11.0, the record says 2.10.0"),
    ({"base": "registry.trainyard.internal/pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime"},
     r"the Containerfile builds FROM .*2\.11\.0-cuda13\.0.*, the record says .*2\.10\.0-cuda12\.8"),
    ({"python3-torch": "2.7.1+dfsg-1"}, r"lab-torch-trixie.txt pins python3-torch 2.7.1\+dfsg-1, the record says 2.6.0"),
])
def test_a_production_image_or_debian_torch_other_than_the_record_is_refused(change: dict[str, str], message: str) -> None:
    pins = debian.read_pins(lab_image.DEBIAN_PIN_FILE)
    if "python3-torch" in change:
        pins = debian.PinFile(pins.suite, pins.roots, tuple(
            debian.DebianPin(p.name, change["python3-torch"], p.sha256) if p.name == "python3-torch" else p
            for p in pins.pins))
    production = {**_production(), **({"torch": change["torch"]} if "torch" in change else {})}
    with pytest.raises(ImageError, match=r"no longer matches what it stands in for: " + message):
        lab_image.stand_in_for("0.1.0", change.get("base", _base()), production, pins)


def test_a_tag_without_a_stand_in_is_refused_naming_the_record() -> None:
    pins = debian.read_pins(lab_image.DEBIAN_PIN_FILE)
    with pytest.raises(ImageError, match=r"no CPU stand-in for the lora-peft image 0\.2\.0 \(lab_image.STAND_INS has 0\.1\.0\)"):
        lab_image.stand_in_for("0.2.0", _base(), _production(), pins)


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "runtimes").mkdir(parents=True)
    shutil.copy(ROOT / "runtimes" / "lora-peft.yaml", project / "runtimes")
    shutil.copytree(PROGRAMS, project / "runtimes" / "programs")
    return project


def test_a_build_whose_requirements_moved_on_is_refused_before_anything_is_fetched(tmp_path: Path) -> None:
    project = _project(tmp_path)
    requirements = project / "runtimes" / "programs" / "requirements.txt"
    requirements.write_text(requirements.read_text().replace("transformers==5.24.0", "transformers==5.25.0"))
    config = open_stack("staging", ROOT).config
    with pytest.raises(ImageError, match=r"transformers 5.25.0 \(lock: 5.24.0\).*python -m trainyard.rehearsal.lab_image lock"):
        lab_image.build(config, project, tmp_path / "images", tmp_path / "debs", tmp_path / "wheels", tmp_path / "apt")
    assert not (tmp_path / "debs").exists() and not (tmp_path / "images").exists()
    requirements.write_text("torch>=2.6\n")
    with pytest.raises(ImageError, match=r"requirements.txt:1: 'torch>=2.6' is not an exact `name==version` pin"):
        lab_image.build(config, project, tmp_path / "images")


def _dist(name: str, version: str, *requires: str) -> debian_python.Distribution:
    return debian_python.Distribution(name, version, requires)


def test_wheels_must_fit_debians_distributions() -> None:
    debian_dists = {"numpy": _dist("numpy", "2.2.4"), "safetensors": _dist("safetensors", "0.5.2"),
                    "torch": _dist("torch", "2.6.0+debian")}
    transformers = _dist("transformers", "5.24.0", "numpy>=1.17", "safetensors>=0.8.0",
                         'torch>=2.6; extra == "torch"', 'tomli; python_version < "3.11"')
    # Debian's safetensors is too old for transformers: the reason it is a wheel.
    with pytest.raises(ImageError, match=r"transformers 5.24.0 needs 'safetensors>=0.8.0': Debian's safetensors is 0.5.2"):
        debian_python.check_closure([transformers], debian_dists, "3.13.5")
    # A wheel of safetensors where Debian has one would shadow it.
    with pytest.raises(ImageError, match=r"safetensors is both a wheel and Debian's 0.5.2: the wheel would shadow it"):
        debian_python.check_closure([transformers, _dist("safetensors", "0.8.0")], debian_dists, "3.13.5")
    without = {k: v for k, v in debian_dists.items() if k != "safetensors"}
    debian_python.check_closure([transformers, _dist("safetensors", "0.8.0")], without, "3.13.5")  # extras, markers skipped
    peft = _dist("peft", "0.21.2", "torch>=1.13.0", "accelerate>=0.21.0")
    with pytest.raises(ImageError, match=r"peft 0.21.2 needs 'accelerate>=0.21.0': neither a wheel nor Debian's"):
        debian_python.check_closure([peft], without, "3.13.5")
    accelerate = _dist("accelerate", "1.16.0", "torch>=2.6.0")
    debian_python.check_closure([peft, accelerate], without, "3.13.5")  # 2.6.0+debian is >= 2.6.0
    with pytest.raises(ImageError, match=r"accelerate 1.16.0 needs 'torch>=2.6.0': Debian's torch is 2.5.1"):
        debian_python.check_closure([peft, accelerate], {**without, "torch": _dist("torch", "2.5.1")}, "3.13.5")


def test_debians_python_distributions_are_read_from_dist_info_and_egg_info() -> None:
    site = debian_python.DEBIAN_SITE
    entries = [Entry(f"{site}/numpy-2.2.4.dist-info/METADATA", b"Metadata-Version: 2.1\nName: numpy\nVersion: 2.2.4\n"),
               Entry(f"{site}/torch-2.6.0+debian.egg-info/PKG-INFO", b"Name: torch\nVersion: 2.6.0+debian\n"),
               Entry(f"{site}/six-1.17.0.egg-info", b"Name: six\nVersion: 1.17.0\n"),
               Entry(f"{site}/PyYAML-6.0.2.dist-info/METADATA", b"Name: PyYAML\nVersion: 6.0.2\n"),
               Entry("usr/lib/python3.13/site-packages/x-1.dist-info/METADATA", b"Name: x\nVersion: 1\n")]
    found = debian_python.debian_distributions(entries)
    assert {n: d.version for n, d in found.items()} == {"numpy": "2.2.4", "torch": "2.6.0+debian", "six": "1.17.0",
                                                         "pyyaml": "6.0.2"}


def test_what_the_maintainer_scripts_would_have_made_is_made() -> None:
    entries = {e.path: e for e in lab_image.system_entries()}
    # libblas3's postinst: update-alternatives --install .../libblas.so.3 libblas.so.3-x86_64-linux-gnu .../blas/libblas.so.3
    assert entries["usr/lib/x86_64-linux-gnu/libblas.so.3"].link == "/etc/alternatives/libblas.so.3-x86_64-linux-gnu"
    assert entries["etc/alternatives/libblas.so.3-x86_64-linux-gnu"].link == "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"
    assert entries["usr/lib/x86_64-linux-gnu/liblapack.so.3"].link == "/etc/alternatives/liblapack.so.3-x86_64-linux-gnu"
    # base-files' merged-/usr links (base-files is not in the closure): the ELF interpreter is /lib64/ld-linux-x86-64.so.2
    assert {p: entries[p].link for p in ("bin", "sbin", "lib", "lib64")} == {
        "bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
    shipped = [Entry("usr/lib/x86_64-linux-gnu/blas/libblas.so.3", link="libblas.so.3.12.1"),
               Entry("usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3", link="liblapack.so.3.12.1")]
    lab_image.check_alternatives(shipped)
    with pytest.raises(ImageError, match=r"/usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3, which no pinned package ships"):
        lab_image.check_alternatives(shipped[:1])


def test_the_ca_bundle_is_every_certificate_sorted_as_update_ca_certificates_writes_it() -> None:
    entries = [Entry("usr/share/ca-certificates/mozilla/B.crt", b"-----B-----\n"),
               Entry("usr/share/ca-certificates/mozilla/A.crt", b"-----A-----"),
               Entry("usr/share/doc/ca-certificates/copyright", b"MPL")]
    assert debian_python.ca_bundle(entries) == b"-----A-----\n-----B-----\n"
    with pytest.raises(ImageError, match="ships no certificate"):
        debian_python.ca_bundle(entries[2:])


def test_the_image_runs_as_the_runtimes_user_and_says_what_it_stands_in_for() -> None:
    layer = {e.path: e for e in lab_image.user_layer(b"certs").entries}
    assert "trainyard:x:1000:1000::/home/trainyard:/sbin/nologin" in (layer["etc/passwd"].data or b"").decode()
    assert (layer["home/trainyard"].uid, layer["home/trainyard"].gid) == (1000, 1000)
    assert layer["tmp"].mode == 0o1777 and layer["etc/ssl/certs/ca-certificates.crt"].data == b"certs"
    pins = debian.read_pins(lab_image.DEBIAN_PIN_FILE)
    config: dict[str, Any] = lab_image.image_config(ImageRef.parse("registry.trainyard.internal/trainyard/lora-peft:0.1.0"),
                                                    STAND_IN, pins, wheels.read_lock(lab_image.WHEEL_LOCK), "ab" * 32)
    assert config["User"] == "1000:1000" and config["WorkingDir"] == "/workspace"
    assert "USE_LIBUV=0" in config["Env"]
    labels = config["Labels"]
    assert labels["dev.trainyard.stands-in-for"].startswith("registry.trainyard.internal/trainyard/lora-peft:0.1.0 as "
                                                            "built by runtimes/programs/Containerfile FROM ")
    assert "(torch 2.10.0, CUDA)" in labels["dev.trainyard.stands-in-for"]
    assert labels["dev.trainyard.torch"].startswith("2.6.0 CPU only: Debian trixie python3-torch 2.6.0+dfsg-7")
    assert "transformers==5.24.0" in labels["dev.trainyard.built-from"]


def test_the_program_layer_is_what_the_containerfile_copies_and_its_recorded_digest() -> None:
    layer = {e.path: e for e in lab_image.program_layer(PROGRAMS).entries}
    assert {"opt/trainyard/programs/requirements.txt", "opt/trainyard/programs/lora_peft.py",
            "opt/trainyard/programs/trainyard_lora/training.py"} <= set(layer)
    assert all(e.mode == 0o644 and e.uid == 0 for e in layer.values() if e.data is not None)
    sys.path.insert(0, str(PROGRAMS))
    try:
        from trainyard_lora.store import program_digest  # type: ignore[import-not-found]  # the program's own
    finally:
        sys.path.remove(str(PROGRAMS))
    assert lab_image.program_sha256(PROGRAMS) == program_digest(PROGRAMS)


@pytest.fixture
def fake_torch(tmp_path: Path) -> Iterator[list[dict[str, object]]]:
    """A ``torch.distributed.rendezvous`` whose TCPStore records its keyword arguments, and the shim's finder."""
    package = tmp_path / "torch" / "distributed"
    package.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("CALLS = []\ndef TCPStore(*args, **kwargs):\n    CALLS.append(kwargs)\n")
    (package / "rendezvous.py").write_text("from torch.distributed import TCPStore\n"
                                           "def store(**kwargs):\n    return TCPStore('h', 1, **kwargs)\n")
    sys.path.insert(0, str(tmp_path))
    before = list(sys.meta_path)
    torch_use_libuv.install()
    try:
        import torch.distributed  # type: ignore[import-not-found]

        yield torch.distributed.CALLS  # type: ignore[no-any-return]
    finally:
        sys.meta_path[:] = before
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
            del sys.modules[name]


def test_every_tcpstore_of_the_rendezvous_modules_follows_use_libuv(fake_torch: list[dict[str, object]],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed import rendezvous  # type: ignore[import-not-found]

    monkeypatch.setenv("USE_LIBUV", "0")
    rendezvous.store()
    rendezvous.store(use_libuv=True)  # a caller's own choice is kept
    monkeypatch.delenv("USE_LIBUV")
    rendezvous.store()  # torch's default where the variable is unset
    assert fake_torch == [{"use_libuv": False}, {"use_libuv": True}, {"use_libuv": True}]
    assert "torch.distributed.rendezvous" in torch_use_libuv.MODULES


def test_the_shim_is_installed_only_under_its_image_name() -> None:
    # Imported as trainyard.rehearsal.torch_use_libuv (here, and by lab_image), it changes no import of this process.
    assert not any(type(f).__module__ == torch_use_libuv.__name__ for f in sys.meta_path)
    assert torch_use_libuv.IMAGE_MODULE == "trainyard_use_libuv"
    layer = {e.path: e for e in lab_image.libuv_layer("usr/local/lib/python3.13/dist-packages").entries}
    assert layer["usr/local/lib/python3.13/dist-packages/trainyard-use-libuv.pth"].data == b"import trainyard_use_libuv\n"
    assert layer["usr/local/lib/python3.13/dist-packages/trainyard_use_libuv.py"].data == \
        (ROOT / "platform" / "trainyard" / "rehearsal" / "torch_use_libuv.py").read_bytes()
