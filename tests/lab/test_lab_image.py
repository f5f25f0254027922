"""The lab's CPU image, run without a node: its root filesystem unpacked, the runtime's command in a chroot.

What is checked is what a pod of the ``lora-peft`` runtime would do with the image (``rehearsal/lab_image.py``): the
factory builds it (or takes it from its cache), the layers are unpacked in order into a fresh directory, and every
process runs as the runtime's user 1000:1000 with the image's environment (``Env`` of its config), ``/proc`` and
``/dev`` mounted and a writable ``/workspace`` (the initializers' volume in a pod), in a private mount namespace
(``unshare --mount``: the mounts go with the last process). No network is used: the dataset is a local file whose
digest is the pinned one (the program's "initializer" path), checkpoints go to a directory, MLflow is off.

The run is the lab test's (tests/lab/test_lab.py) on the same inputs: its tiny random Llama (made here by the lab
helper, inside the image) and its generated dataset, the same settings; an uninterrupted reference, then the same
job under the runtime's ``torchrun`` with SIGTERM sent to torchrun after step 4 (as the kubelet signals a container's
first process), a half-written newer checkpoint planted, and a resume. The resumed adapter and loss curve equal the
reference's bitwise (one CPU build, one thread: docs/lab.md).

Needs root (chroot, mounts), ``unshare`` and ~2.5 GB of disk (the cached image and its unpacked copy, removed after).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.lab.test_lab import WORDS, _dataset
from tests.loopback import free_port
from trainyard.project import open_stack
from trainyard.rehearsal import lab_image
from trainyard.rehearsal.image_cache import BuiltImage, cache_root

pytestmark = pytest.mark.lab

PROGRAM = f"/{lab_image.PROGRAMS_IN_IMAGE}/lora_peft.py"
MAX_STEPS, INTERRUPT_AT = 8, 4
ARGS = ["--max-steps", str(MAX_STEPS), "--checkpoint-every", "3", "--keep-checkpoints", "2", "--micro-batch-size", "2",
        "--grad-accumulation", "2", "--seq-len", "16", "--precision", "fp32", "--learning-rate", "0.02",
        "--warmup-steps", "2", "--lora-rank", "4", "--lora-alpha", "8", "--lora-dropout", "0.1"]
LOG: list[str] = []


@pytest.fixture(scope="module")
def image() -> BuiltImage:
    if os.geteuid() != 0:
        pytest.skip("the image is run in a chroot: needs root")
    missing = [tool for tool in ("unshare", "chroot", "mount") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"not found: {', '.join(missing)} (util-linux, coreutils)")
    stack = open_stack("local")
    started = time.monotonic()
    built = lab_image.build(stack.config, ROOT, cache_root())
    LOG.append(f"$ lab_image.build -> {built.reference} ({'cached' if built.cached else 'built'} in "
               f"{time.monotonic() - started:.1f}s; {built.note})")
    return built


def _blobs(image: BuiltImage) -> tuple[dict[str, Any], list[Path]]:
    blobs = image.layout / "blobs" / "sha256"
    manifest = json.loads((blobs / image.digest.removeprefix("sha256:")).read_bytes())
    config = json.loads((blobs / manifest["config"]["digest"].removeprefix("sha256:")).read_bytes())
    return config, [blobs / layer["digest"].removeprefix("sha256:") for layer in manifest["layers"]]


@pytest.fixture(scope="module")
def rootfs(image: BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The image's layers unpacked in order (numeric owners, modes, links: a container runtime's snapshot)."""
    root = tmp_path_factory.mktemp("lab-image") / "rootfs"
    root.mkdir()
    config, layers = _blobs(image)
    started = time.monotonic()
    for layer in layers:
        with tarfile.open(layer) as tar:
            tar.extractall(root, numeric_owner=True, filter="fully_trusted")
    for mount_point in ("proc", "dev"):  # what a container runtime creates for its mounts
        (root / mount_point).mkdir(exist_ok=True)
    LOG.append(f"  unpacked {len(layers)} layers into {root} in {time.monotonic() - started:.1f}s")
    yield root, config["config"]
    shutil.rmtree(root.parent, ignore_errors=True)


def _in_image(rootfs: tuple[Path, dict[str, Any]], workspace: Path, argv: list[str],
              env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``argv`` in the image as user 1000:1000 with the image's Env (plus ``env``), /workspace = ``workspace``."""
    root, config = rootfs
    environment = dict(item.split("=", 1) for item in config["Env"])
    environment |= {"HOME": "/home/trainyard", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                    "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    user = config["User"]
    script = " && ".join([
        f"mount -t proc proc {shlex.quote(str(root / 'proc'))}",
        f"mount --rbind /dev {shlex.quote(str(root / 'dev'))}",
        f"mount --bind {shlex.quote(str(workspace))} {shlex.quote(str(root / 'workspace'))}",
        "exec env -i " + shlex.join([f"{k}={v}" for k, v in sorted(environment.items())])
        + f" chroot --userspec={user} {shlex.quote(str(root))} " + shlex.join(argv)])
    return subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _run(rootfs: tuple[Path, dict[str, Any]], workspace: Path, name: str, argv: list[str],
         env: dict[str, str] | None = None, interrupt_at: int | None = None) -> tuple[int, list[str]]:
    started = time.monotonic()
    proc = _in_image(rootfs, workspace, argv, env)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip())
        if interrupt_at is not None and line.startswith(f"[lora-peft] step {interrupt_at}/"):
            proc.send_signal(signal.SIGTERM)  # to torchrun: unshare, sh and chroot exec'd it
            LOG.append(f"  [{name}] SIGTERM sent after: {line.strip()}")
    code = proc.wait(timeout=900)
    LOG.append(f"$ [{name}] {' '.join(argv[:2])} ... -> exit {code} ({time.monotonic() - started:.1f}s)")
    shown = [line for line in lines if line.startswith(("[lora-peft]", "lora-peft: error", "{"))]
    LOG.extend(f"    {line}" for line in (shown if shown or code == 0 else lines[-40:]))
    return code, lines


def _pet(processes: int) -> dict[str, str]:
    """What Trainer's torch plugin gives the node's container (torchrun reads PET_<FLAG>)."""
    return {"PET_NNODES": "1", "PET_NPROC_PER_NODE": str(processes), "PET_NODE_RANK": "0",
            "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(free_port())}


def _helper(rootfs: tuple[Path, dict[str, Any]], workspace: Path, *args: str) -> dict[str, Any]:
    """tests/lab/lab_helper.py, run by the image's Python (its program path resolved to the image's program)."""
    code, lines = _run(rootfs, workspace, f"helper {args[0]}",
                       ["python3", "/workspace/src/tests/lab/lab_helper.py", *args])
    assert code == 0, "\n".join(lines[-30:])
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def test_the_lab_image_trains_checkpoints_and_resumes_bitwise_in_a_chroot_as_user_1000(
        rootfs: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workspace = tmp_path / "workspace"
    try:
        # The lab helper beside a link to the image's program (lab_helper finds the program at ../../runtimes/programs).
        (workspace / "src" / "tests" / "lab").mkdir(parents=True)
        shutil.copy(ROOT / "tests" / "lab" / "lab_helper.py", workspace / "src" / "tests" / "lab")
        (workspace / "src" / "runtimes").mkdir()
        (workspace / "src" / "runtimes" / "programs").symlink_to(f"/{lab_image.PROGRAMS_IN_IMAGE}")
        os.chown(workspace, lab_image.USER, lab_image.USER)
        for path in workspace.rglob("*"):
            os.lchown(path, lab_image.USER, lab_image.USER)

        # What the image's Python is, and what it imports.
        probe = ("import json, time; t = time.monotonic(); import torch, transformers, peft, safetensors, tokenizers, "
                 "mlflow, boto3; import importlib.metadata as m; print(json.dumps({'import_s': round(time.monotonic() "
                 "- t, 1), 'torch': torch.__version__, 'cuda': torch.cuda.is_available(), **{d: m.version(d) for d in "
                 "('transformers', 'peft', 'safetensors', 'tokenizers', 'mlflow-skinny', 'boto3', 'numpy')}}))")
        code, lines = _run(rootfs, workspace, "imports", ["python3", "-c", probe])
        assert code == 0, "\n".join(lines[-30:])
        versions = json.loads(lines[-1])
        assert versions["torch"].startswith("2.6.0") and versions["cuda"] is False
        assert (versions["transformers"], versions["peft"], versions["mlflow-skinny"]) == ("5.24.0", "0.21.2", "3.15.1")
        code, lines = _run(rootfs, workspace, "whoami", ["python3", "-c", "import getpass, os; print(getpass.getuser(), "
                                                                      "os.getuid(), os.getgid())"])
        assert lines[-1] == f"trainyard {lab_image.USER} {lab_image.USER}"

        # The lab's inputs: the tiny Llama (made in the image) and the dataset, pinned by digest.
        base = _helper(rootfs, workspace, "make-base", "/workspace/model", " ".join(WORDS))
        (workspace / "dataset").mkdir()
        data = _dataset(1, 48).encode()
        (workspace / "dataset" / "chat.jsonl").write_bytes(data)
        env = {"TRAINYARD_DATASET_URI": "s3://lab-datasets/lab/chat.jsonl", "TRAINYARD_DATASET_VERSION": "v1",
               "TRAINYARD_DATASET_DIGEST": "sha256:" + hashlib.sha256(data).hexdigest(),
               "TRAINYARD_BASE_MODEL_URI": "s3://lab-models/base/tiny-llama/", "TRAINYARD_BASE_MODEL_REVISION":
               base["digest"], "TRAINYARD_DATASET_DIR": "/workspace/dataset", "TRAINYARD_MODEL_DIR": "/workspace/model"}
        LOG.append(f"  base model: tiny Llama, {base['parameters']} parameters, {base['digest']}")

        def job(name: str) -> list[str]:
            return [*ARGS, "--checkpoint-uri", f"/workspace/{name}/checkpoints", "--output-dir", f"/workspace/{name}/out"]

        code, reference = _run(rootfs, workspace, "reference", ["python3", PROGRAM, *job("reference")], env)
        assert code == 0, "\n".join(reference[-30:])
        assert "[lora-peft] dataset s3://lab-datasets/lab/chat.jsonl version v1 " + env["TRAINYARD_DATASET_DIGEST"] + \
               " (initializer); base model s3://lab-models/base/tiny-llama/ " + base["digest"] in reference

        # The runtime's command, torchrun with Trainer's PET_* environment; SIGTERM to it after step 4 (the pause
        # holds the run there).
        torchrun = ["torchrun", PROGRAM, *job("job")]
        code, first = _run(rootfs, workspace, "attempt-1", torchrun,
                           {**env, **_pet(1), "TRAINYARD_PAUSE_AFTER_STEP": "2"}, interrupt_at=INTERRUPT_AT)
        assert code == 1, "\n".join(first[-30:])  # torchrun's own exit after its rank checkpointed and exited 143
        assert f"[lora-peft] checkpoint step {INTERRUPT_AT} (SIGTERM) complete at /workspace/job/checkpoints/" \
               f"step-{INTERRUPT_AT:08d}/" in first
        assert not any(line.startswith(f"[lora-peft] step {INTERRUPT_AT + 1}/") for line in first)
        # A half-written newer checkpoint, as a crash leaves one: never resumed from.
        half = workspace / "job" / "checkpoints" / f"step-{INTERRUPT_AT + 1:08d}"
        half.mkdir()
        (half / "adapter_model.safetensors").write_bytes(b"half-written")
        os.chown(half, lab_image.USER, lab_image.USER)

        code, second = _run(rootfs, workspace, "attempt-2", torchrun, {**env, **_pet(1)})
        assert code == 0, "\n".join(second[-30:])
        assert f"[lora-peft] resumed from checkpoint step {INTERRUPT_AT} at /workspace/job/checkpoints/" in second

        compared = _helper(rootfs, workspace, "compare", "/workspace/reference/out/adapter", "/workspace/job/out/adapter")
        curve_ref = json.loads((workspace / "reference" / "out" / "loss_curve.json").read_text())
        curve = json.loads((workspace / "job" / "out" / "loss_curve.json").read_text())
        LOG.append(f"  loss curve uninterrupted: {curve_ref}")
        LOG.append(f"  loss curve resumed:       {curve}")
        assert compared["bitwise_equal"] and compared["nonzero_lora_b"] > 0, compared
        assert curve == curve_ref and len(curve) == MAX_STEPS and curve[-1] < curve[0]
        kept = sorted(p.name for p in (workspace / "job" / "checkpoints").iterdir())
        LOG.append(f"  checkpoints left: {kept}")
        assert kept == [f"step-{6:08d}", f"step-{MAX_STEPS:08d}"]

        # Two processes on the node: DDP over gloo, the ranks' TCPStore and process group without libuv.
        code, ddp = _run(rootfs, workspace, "2 ranks", ["torchrun", PROGRAM, *job("ddp")], {**env, **_pet(2)})
        assert code == 0, "\n".join(ddp[-30:])
        assert any(line.startswith(f"[lora-peft] all 2 ranks at step {MAX_STEPS} with the same adapter") for line in ddp)
    finally:
        with capsys.disabled():
            print("\n==== lab image, chroot run log ====\n" + "\n".join(LOG))
        shutil.rmtree(workspace, ignore_errors=True)
