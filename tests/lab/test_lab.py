"""The fine-tuning lab end to end on CPU: pinned dataset, LoRA, SIGTERM and resume, provenance, registry, promote, serve.

What runs: the reference program ``runtimes/programs/lora_peft.py`` (the ``lora-peft`` runtime) in the
lab tool venv (tools/lab: torch, transformers, peft from PyPI), against the data plane of the dataplane
tier: a real S3 server (SeaweedFS ``weed mini``, or moto while weed is absent), a real MLflow server with
Trainyard's settings on a real PostgreSQL, and a tenant's ``trainyard-mlflow`` credentials.

What is made here, not fetched: the base model is a tiny randomly initialised Llama (2 layers, hidden 32)
with a word-level tokenizer, saved in Hugging Face format and put in the tenant's models bucket; the
dataset is two versions of one JSON Lines object in the tenant's (versioned) datasets bucket. The
approved entry pins the OLDER version id and its digest, as the stack's lineage section would: the
TrainJob's ``spec.trainer.env`` is what ``Lineage.pins`` gives for that entry (name, URI, version,
digest, licence, classification, and the base model's), and the MLflow run must carry it.

What stands in for the cluster: each "attempt" is a fresh pod: the dataset and model initializers'
download (every current object under the storageUri, as Trainer's S3 initializers do, so the dataset
directory holds the NEWER version) into a fresh directory, then the program. The Kueue workload, queue
and flavor reach the program as the environment the runtime wiring sets; here they are stand-in values.
The S3 server holds exactly the rendered identities and the buckets the provisioning program makes from
the rendered plan (the dataplane fixtures); every S3 call here is the tenant's: its rendered
``trainyard-object-store`` Secret, filled with the test's keys.

The handover: ``trainyard promote`` of the registered version (the CLI, as the tenant in MLflow) writes
the InferenceService (base model + adapter from the version's tags), which passes ``trainyard check``
and the CRD schema; KServe's storage initializer code (``kserve_storage``, the data-plane venv) downloads
its ``storageUris`` with the tenant's rendered serving Secret (the read-only serving identity the
``kserve-predictor`` ServiceAccount names, never an admin key), is refused the checkpoints bucket, and the
downloaded adapter and base model are served by the ``peft-cpu`` runtime's program (serving-runtimes/programs/
peft_server.py, vllm-openai's command line and completions API) with the InferenceService's arguments: the adapter
answers, and its token log-probabilities differ from the base model's.

Two ranks: the same program under ``torchrun`` with the environment Trainer's torch plugin gives a node
(``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR/PORT``), DDP over gloo on
CPU; SIGTERM goes to torchrun, as the kubelet sends it to the container's first process.

Equality, and why it holds: the interrupted-and-resumed run and the uninterrupted one take the same
optimizer steps on the same samples (the order is a function of seed and epoch, the position is saved),
with the same dropout masks (every RNG state is saved and restored) and the same AdamW moments
(optimizer state saved exactly by torch.save; adapter weights by safetensors). Both run single-threaded
on the same CPU build, so every floating-point operation is the same in the same order: the adapter
tensors are compared BITWISE (torch.equal), and so is the loss curve (the same float64 values). No
tolerance is needed on one machine; across CPU types or thread counts, reductions may reorder and only
a tolerance would hold (docs/lab.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import CRDS_DIR, ROOT, rendered, stack
from tests.dataplane.test_mlflow_server import (  # noqa: F401 - module-scoped fixtures of the dataplane tier
    TOOLS,
    identity_keys,
    object_store_keys,
    postgres,
    s3,
    server,
    tenants,
    workdir,
)
from tests.lab.outage import Outage
from tests.loopback import free_port
from tests.serving import promotion
from tests.serving.conftest import serving_python
from trainyard.config.lineage import Lineage
from trainyard.manifests import generated, object_store
from trainyard.manifests.meta import OBJECT_STORE_SECRET
from trainyard.manifests.serving import SERVICE_ACCOUNT
from trainyard.schemas import Validator

pytestmark = pytest.mark.lab

HERE = Path(__file__).parent
PROGRAM = ROOT / "runtimes" / "programs" / "lora_peft.py"

REQUIREMENTS = (ROOT / "runtimes" / "programs" / "requirements.txt").read_text()
TORCH = re.search(r"^torch==(\S+)$", REQUIREMENTS, re.MULTILINE).group(1)  # type: ignore[union-attr]
LAB_PYTHON = TOOLS / f"lab-torch-{TORCH}" / "bin" / "python"
TORCHRUN = LAB_PYTHON.parent / "torchrun"
STACK = "staging"
WORDS = ["the", "a", "cat", "dog", "bird", "sat", "ran", "flew", "on", "under", "over", "mat", "log", "tree", "red", "big",
         "small", "quickly", "slowly", "home"]
MAX_STEPS, CHECKPOINT_EVERY, INTERRUPT_AT = 8, 3, 4
RANKS, DDP_STEPS, DDP_INTERRUPT_AT = 2, 6, 2
# The stack's lineage entry for the lab's dataset, as a platform team would approve it.
DATASET_ENTRY = {"name": "lab-chat", "licence": "CC-BY-4.0", "source": "tests/lab: generated sentences",
                 "classification": "internal"}
LOG: list[str] = []


def program_sha256() -> str:
    """What the program records as its code: sha256 of ``sha256sum lora_peft.py trainyard_lora/*.py`` in its directory."""
    files = [PROGRAM, *sorted((PROGRAM.parent / "trainyard_lora").glob("*.py"))]
    listing = "".join(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.relative_to(PROGRAM.parent).as_posix()}\n"
                      for f in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def _lab_python() -> Path:
    if not LAB_PYTHON.is_file():
        pytest.skip(f"lab venv not found at {LAB_PYTHON.parent.parent}: run tools/lab/install.sh (`make tools`)")
    return LAB_PYTHON


def _dataset(seed: int, lines: int) -> str:
    # Deterministic sentences without the random module: a linear congruential walk over WORDS.
    state, out = seed, []
    for _ in range(lines):
        words = []
        for _ in range(10):
            state = (state * 1103515245 + 12345) % 2**31
            words.append(WORDS[state % len(WORDS)])
        out.append(json.dumps({"text": " ".join(words)}))
    return "\n".join(out) + "\n"


def _runtime_image() -> str:
    runtime = next(o for o in rendered(STACK).concern("runtimes").objects if o["metadata"]["name"] == "lora-peft")
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    node = next(j for j in jobs if j["name"] == "node")
    image: str = node["template"]["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def _tenant_store_env(tenant: str, keys: dict[str, str], endpoint: str) -> dict[str, str]:
    """The tenant's rendered ``trainyard-object-store`` Secret (what its pods get), filled with the test's keys."""
    secret = next(o for o in rendered(STACK).tenant_objects(tenant)
                  if o["kind"] == "Secret" and o["metadata"]["name"] == OBJECT_STORE_SECRET)
    env: dict[str, str] = generated.substitute(secret["stringData"], keys)
    env["AWS_ENDPOINT_URL"] = endpoint  # the one deploy-specific value: this machine's S3 server
    return env


class Lab:
    """The tenant's view: its S3 and MLflow environment, and the helper that runs in the lab venv."""

    def __init__(self, root: Path, store_env: dict[str, str], mlflow_env: dict[str, str], tenant: str) -> None:
        self.root, self.tenant = root, tenant
        config = stack(STACK).config
        self.buckets = {p: object_store.bucket_name(config, tenant, p) for p in ("datasets", "checkpoints", "models")}
        self.env = {"PATH": os.environ["PATH"], "HOME": str(root), "OMP_NUM_THREADS": "1", **store_env,
                    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
                    "DO_NOT_TRACK": "true"}
        self.mlflow_env = mlflow_env

    def helper(self, *args: str, mlflow: bool = False) -> dict[str, Any]:
        env = {**self.env, **(self.mlflow_env if mlflow else {})}
        run = subprocess.run([str(_lab_python()), str(HERE / "lab_helper.py"), *args], env=env, capture_output=True,
                             text=True, timeout=600, check=False)
        assert run.returncode == 0, run.stderr[-4000:]
        result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
        return result

    def attempt(self, name: str, job: str, args: list[str], *, mlflow: bool, trainer_env: dict[str, str],
                interrupt_at: int | None = None, extra_env: dict[str, str] | None = None,
                processes: int = 1, on_line: Callable[[str], None] | None = None) -> tuple[int, list[str]]:
        """One pod of TrainJob ``job``: the two initializers into a fresh /workspace, then the program.

        ``trainer_env`` is the TrainJob's spec.trainer.env (the approved entries); the initializers fetch its
        URIs. ``processes`` > 1: the runtime's ``torchrun`` with the PET_* environment of Trainer's torch plugin.
        ``on_line`` sees each line of the program's output as it comes.
        """
        workspace = self.root / name
        dataset_uri, model_uri = trainer_env["TRAINYARD_DATASET_URI"], trainer_env["TRAINYARD_BASE_MODEL_URI"]
        self.helper("download", dataset_uri.rsplit("/", 1)[0] + "/", str(workspace / "dataset"), model_uri,
                    str(workspace / "model"))
        env = {**self.env, **(self.mlflow_env if mlflow else {}), "TRAIN_JOB_NAME": job, **trainer_env,
               **(extra_env or {})}
        launcher = [str(_lab_python())]
        if processes > 1:
            launcher = [str(TORCHRUN)]
            env |= {"PET_NNODES": "1", "PET_NPROC_PER_NODE": str(processes), "PET_NODE_RANK": "0",
                    "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(free_port())}
        command = [*launcher, str(PROGRAM), *args, "--dataset-dir", str(workspace / "dataset"),
                   "--model-dir", str(workspace / "model"), "--output-dir", str(workspace / "output"),
                   "--checkpoint-uri", f"s3://{self.buckets['checkpoints']}/{job}/"]
        started = time.monotonic()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            if on_line is not None:
                on_line(line.rstrip())
            if interrupt_at is not None and line.startswith(f"[lora-peft] step {interrupt_at}/"):
                proc.send_signal(signal.SIGTERM)  # what the kubelet sends on Kueue preemption or a drain
                LOG.append(f"  [{name}] SIGTERM sent after: {line.strip()}")
        code = proc.wait(timeout=600)
        launched = f"torchrun ({processes} processes) lora_peft.py" if processes > 1 else "lora_peft.py"
        LOG.append(f"$ [{name}] TRAIN_JOB_NAME={job} {launched} ... -> exit {code} ({time.monotonic() - started:.0f}s)")
        LOG.extend(f"    {line}" for line in lines if line.startswith(("[lora-peft]", "lora-peft: error")))
        return code, lines


@pytest.fixture(scope="module")
def lab(workdir: Path, s3: dict[str, str], tenants: dict[str, dict[str, str]],  # noqa: F811
        object_store_keys: dict[str, str]) -> Lab:  # noqa: F811
    tenant = sorted(tenants)[0]
    root = workdir / "lab"
    root.mkdir()
    return Lab(root, _tenant_store_env(tenant, object_store_keys, s3["endpoint"]), tenants[tenant], tenant)


@pytest.fixture(scope="module")
def inputs(lab: Lab) -> dict[str, Any]:
    """The base model and the two dataset versions in the tenant's buckets, and the TrainJob env approving them."""
    tenant = lab.tenant
    # The base model, made here and put where the model initializer fetches it from.
    base = lab.helper("make-base", str(lab.root / "base"), " ".join(WORDS))
    model_uri = f"s3://{lab.buckets['models']}/base/tiny-llama/"
    lab.helper("upload", str(lab.root / "base"), model_uri)
    LOG.append(f"$ base model: tiny Llama, {base['parameters']} parameters, vocab {base['vocab']}, "
               f"{base['digest']} -> {model_uri}")

    # Two versions of the dataset; the approved entry pins the first.
    (lab.root / "v1.jsonl").write_text(_dataset(1, 48))
    (lab.root / "v2.jsonl").write_text(_dataset(2, 48))
    key = "lab/chat.jsonl"
    pinned, newer = lab.helper("put-versions", lab.buckets["datasets"], key, str(lab.root / "v1.jsonl"),
                               str(lab.root / "v2.jsonl"))["versions"]
    assert pinned["sha256"] == "sha256:" + hashlib.sha256((lab.root / "v1.jsonl").read_bytes()).hexdigest()
    assert pinned["version_id"] != newer["version_id"]
    dataset_uri = f"s3://{lab.buckets['datasets']}/{key}"
    LOG.append(f"$ dataset {dataset_uri}: version {pinned['version_id']} ({pinned['sha256']}) pinned, "
               f"version {newer['version_id']} ({newer['sha256']}) current")

    # The stack's lineage entries for both, and the TrainJob env they give (what Trainyard's rehearsal submits).
    lineage = Lineage.model_validate({"tenants": {tenant: {
        "datasets": [{**DATASET_ENTRY, "uri": dataset_uri, "version": pinned["version_id"], "digest": pinned["sha256"]}],
        "base_models": [{"name": "tiny-llama", "uri": model_uri, "revision": base["digest"], "licence": "Apache-2.0",
                         "source": "tests/lab: random initialisation", "classification": "public"}]}}})
    trainer_env = lineage.pins(tenant, dataset_uri, model_uri)
    LOG.append(f"$ spec.trainer.env (Lineage.pins of the approved entries): {json.dumps(trainer_env)}")
    return {"base": base, "model_uri": model_uri, "dataset_uri": dataset_uri, "pinned": pinned,
            "trainer_env": trainer_env}


def _provenance_env(namespace: str, workload: str) -> dict[str, str]:
    """What the runtime wiring gives every pod besides the TrainJob's env; Kueue's part as stand-ins."""
    return {
        "TRAINYARD_NAMESPACE": namespace, "TRAINYARD_RUNTIME_NAME": "lora-peft",
        "TRAINYARD_RUNTIME_IMAGE": _runtime_image(),
        "TRAINYARD_CODE_VERSION": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                                 text=True, check=False).stdout.strip() or "unknown",
        # Stand-ins for what the runtime wiring reads from the pod (Kueue's annotation, the queue label, and the
        # flavor annotation the platform's admission policy writes: one of the stack's pools).
        "TRAINYARD_KUEUE_WORKLOAD": workload, "TRAINYARD_KUEUE_QUEUE": "default",
        "TRAINYARD_KUEUE_FLAVOR": stack(STACK).config.gpu_pools[0].name}


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


SERVER = ROOT / "serving-runtimes" / "programs" / "peft_server.py"


def _serve_and_ask(served_name: str, base_dir: Path, model_args: list[str], mnt: Path, adapter: str) -> dict[str, Any]:
    """The peft-cpu server (lab venv) on ``base_dir`` with the InferenceService's ``--lora-modules`` (its ``/mnt`` paths
    under ``mnt``); one greedy completion of 8 tokens with log-probabilities from the adapter and from the base model."""
    import urllib.request

    port = free_port()
    args = [arg.replace("=/mnt/", f"={mnt}/mnt/") for arg in model_args]
    process = subprocess.Popen([str(_lab_python()), str(SERVER), f"--port={port}", "--host=127.0.0.1",
                               f"--served-model-name={served_name}", f"--model={base_dir}", "--enable-lora", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with opener.open(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the server did not start: {process.communicate()[0][-3000:]}") from None
                time.sleep(0.5)
        out = {}
        for model in (adapter, served_name):
            body = json.dumps({"model": model, "prompt": "the cat sat on the", "max_tokens": 8, "logprobs": 1}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            with opener.open(request, timeout=60) as response:
                choice = json.loads(response.read())["choices"][0]
            out[model] = {"text": choice["text"], "tokens": choice["logprobs"]["tokens"],
                          "logprobs": [round(v, 4) for v in choice["logprobs"]["token_logprobs"]]}
        return out
    finally:
        process.terminate()
        process.wait(timeout=30)


def handover(lab: Lab, version: dict[str, Any], *, base_model_uri: str, adapter_uri: str, base_digest: str,
             trained_adapter: Path, keys: dict[str, str], store: dict[str, str]) -> None:
    """``trainyard promote`` of the registered version, ``trainyard check``, KServe's storage initializer, the server."""
    tenant, config, started = lab.tenant, stack(STACK).config, time.monotonic()
    out = lab.root / "promote" / f"{tenant}-lab-adapter.yaml"
    promoted = promotion.promote(STACK, tenant, lab.mlflow_env["MLFLOW_TRACKING_URI"], out, "--model", version["name"],
                                 "--version", version["version"], "--name", "lab-assistant", "--gpus", "0", "--cpu",
                                 "2", "--memory", "8Gi",
                                 env=lab.mlflow_env)  # as the tenant: its trainyard-mlflow Secret
    LOG.append(f"$ trainyard promote {STACK} --tenant {tenant} --model {version['name']} --version {version['version']} "
               f"--name lab-assistant --gpus 0 --cpu 2 --memory 8Gi --out {out.name} -> exit {promoted.returncode}")
    LOG.extend(f"    {line}" for line in (promoted.stdout + promoted.stderr).splitlines())
    assert promoted.returncode == 0, promoted.stderr
    isvc = yaml.safe_load(out.read_text())
    LOG.append(f"  {out.name}:")
    LOG.extend(f"    {line}" for line in out.read_text().splitlines())
    predictor, metadata = isvc["spec"]["predictor"], isvc["metadata"]
    name = version["name"]
    # The adapter on the base model its tags name; both in the tenant's models bucket.
    assert predictor["storageUris"] == [{"uri": base_model_uri, "mountPath": "/mnt/models"},
                                        {"uri": adapter_uri, "mountPath": f"/mnt/adapters/{name}"}]
    assert predictor["model"]["args"] == ["--lora-modules", f"{name}=/mnt/adapters/{name}"]
    assert predictor["model"]["runtime"] == "vllm-openai" and predictor["serviceAccountName"] == SERVICE_ACCOUNT
    assert metadata["namespace"] == next(t for t in config.tenants if t.name == tenant).namespace_name
    assert metadata["annotations"]["trainyard.dev/base-model"] == "tiny-llama"
    assert metadata["annotations"]["trainyard.dev/base-model-version"] == base_digest
    if CRDS_DIR is not None:
        assert [str(e) for e in Validator(CRDS_DIR).errors(isvc)] == []
        LOG.append("  InferenceService CRD schema (strict): 0 errors")
    checked = promotion.check(STACK, out)
    verdict = next((line for line in checked.stdout.splitlines() if line.startswith(f"{STACK}: ")), checked.stdout[-300:])
    LOG.append(f"$ trainyard check {STACK} {out.name} -> exit {checked.returncode}: {verdict}")
    assert checked.returncode == 0, checked.stdout
    assert verdict.startswith(f"{STACK}: 0 mandatory")

    # The predictor pod's storage initializer: the Secret the ServiceAccount names, the serving identity's keys.
    serving = object_store.serving_identity(config, next(t for t in config.tenants if t.name == tenant))
    env = promotion.predictor_storage_env(STACK, tenant, keys, store["endpoint"])
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == identity_keys(keys, serving)
    LOG.append(f"  storage initializer env: {serving.name} ({serving.access}: {', '.join(serving.buckets)}); "
               + ", ".join(f"{k}={'<redacted>' if 'SECRET' in k else v}" for k, v in sorted(env.items())))
    mnt = lab.root / "predictor"
    # A neighbour of the base model's directory whose name extends it: not part of what the predictor fetches.
    lab.helper("put-object", base_model_uri.rstrip("/") + "-draft/config.json", "{}")
    pairs = [x for u in predictor["storageUris"] for x in (u["uri"], str(mnt / u["mountPath"].lstrip("/")))]
    downloaded = serving_python(promotion.DOWNLOAD, env, *pairs)
    LOG.append(f"$ kserve_storage.Storage.download_files({pairs[0::2]}) -> exit {downloaded.returncode}")
    assert downloaded.returncode == 0, downloaded.stderr[-3000:]
    base_dir, adapter_dir = mnt / "mnt" / "models", mnt / "mnt" / "adapters" / name
    LOG.append(f"  /mnt/models: {_files(base_dir)}")
    LOG.append(f"  /mnt/adapters/{name}: {_files(adapter_dir)}")
    assert _files(base_dir) == _files(lab.root / "base")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(_files(adapter_dir))
    # The bytes are the trained ones: the resumed run's adapter, as it left the program.
    assert _sha256(adapter_dir / "adapter_model.safetensors") == _sha256(trained_adapter / "adapter_model.safetensors")
    refused = serving_python(promotion.DOWNLOAD, env, f"s3://{lab.buckets['checkpoints']}/lab-sft", str(mnt / "refused"))
    last = (refused.stderr.strip().splitlines() or [""])[-1]
    LOG.append(f"$ the same, s3://{lab.buckets['checkpoints']}/lab-sft (not the serving identity's bucket) -> exit "
               f"{refused.returncode}: {last[:200]}")
    if store["server"].startswith("SeaweedFS"):  # moto, the stopgap, enforces no identity
        assert refused.returncode != 0 and ("AccessDenied" in refused.stderr or "403" in refused.stderr), refused.stderr
        assert not (mnt / "refused").exists() or _files(mnt / "refused") == []

    # What a LoRA runtime does with the two mounts: the serving program of peft-cpu (vllm-openai's command line and
    # completions API), given the runtime's arguments with the InferenceService's, on the downloaded directories.
    answers = _serve_and_ask(isvc["metadata"]["name"], base_dir, predictor["model"]["args"], mnt, name)
    LOG.append(f"$ peft_server.py --served-model-name={isvc['metadata']['name']} --model=/mnt/models --enable-lora "
               f"{' '.join(predictor['model']['args'])}; POST /v1/completions 'the cat sat on the' (8 tokens):")
    LOG.extend(f"    {model}: {json.dumps(answer)}" for model, answer in answers.items())
    adapter, base = answers[name], answers[isvc["metadata"]["name"]]
    assert len(adapter["tokens"]) == 8 and adapter["logprobs"] != base["logprobs"], answers  # the adapter is applied
    LOG.append(f"  (handover: promote, check, download, refusal, serve in {time.monotonic() - started:.0f}s)")


def test_lora_lab_pinned_data_sigterm_resume_provenance_registry_promote_and_serve(
        lab: Lab, inputs: dict[str, Any], s3: dict[str, str], object_store_keys: dict[str, str],  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    tenant = lab.tenant
    namespace = next(t for t in stack(STACK).config.tenants if t.name == tenant).namespace_name
    try:
        models, checkpoints = lab.buckets["models"], lab.buckets["checkpoints"]
        base, model_uri, dataset_uri, pinned = inputs["base"], inputs["model_uri"], inputs["dataset_uri"], inputs["pinned"]
        trainer_env = inputs["trainer_env"]
        args = ["--max-steps", str(MAX_STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY), "--keep-checkpoints", "2",
                "--micro-batch-size", "2", "--grad-accumulation", "2", "--seq-len", "16", "--precision", "fp32",
                "--learning-rate", "0.02", "--warmup-steps", "2", "--lora-rank", "4", "--lora-alpha", "8",
                "--lora-dropout", "0.1", "--experiment", f"{tenant}/lab", "--registered-model", f"{tenant}-lab-adapter",
                "--models-uri", f"s3://{models}/"]
        provenance_env = _provenance_env(namespace, "trainjob-lab-sft-3f2a1")

        # The uninterrupted reference run.
        code, _ = lab.attempt("reference", "lab-reference", args, mlflow=False, trainer_env=trainer_env,
                              extra_env=provenance_env)
        assert code == 0

        # The same TrainJob interrupted with SIGTERM after step INTERRUPT_AT (the pause holds it there).
        code, first = lab.attempt("attempt-1", "lab-sft", args, mlflow=True, trainer_env=trainer_env,
                                  interrupt_at=INTERRUPT_AT, extra_env={**provenance_env, "TRAINYARD_PAUSE_AFTER_STEP": "2"})
        assert code == 143
        assert f"[lora-peft] checkpoint step {INTERRUPT_AT} (SIGTERM) complete at s3://{checkpoints}/lab-sft/" \
               f"step-{INTERRUPT_AT:08d}/" in first
        assert f"[lora-peft] step {INTERRUPT_AT + 1}/{MAX_STEPS}" not in "\n".join(first)
        # The pinned version, not the current one the initializer fetched, was read.
        assert any("(s3-version)" in line and pinned["version_id"] in line for line in first)

        # A checkpoint a crash left half-written, newer than the SIGTERM one: never resumed from.
        lab.helper("put-object", f"s3://{checkpoints}/lab-sft/step-{INTERRUPT_AT + 1:08d}/adapter_model.safetensors",
                   "half-written")
        code, second = lab.attempt("attempt-2", "lab-sft", args, mlflow=True, trainer_env=trainer_env,
                                   extra_env=provenance_env)
        assert code == 0
        assert f"[lora-peft] resumed from checkpoint step {INTERRUPT_AT} at s3://{checkpoints}/lab-sft/" in second
        assert f"[lora-peft] step {INTERRUPT_AT + 1}/{MAX_STEPS}" in "\n".join(second)

        # Equality with the uninterrupted run: adapter tensors and loss curve, bitwise.
        compared = lab.helper("compare", str(lab.root / "reference" / "output" / "adapter"),
                              str(lab.root / "attempt-2" / "output" / "adapter"))
        curve_ref = json.loads((lab.root / "reference" / "output" / "loss_curve.json").read_text())
        curve = json.loads((lab.root / "attempt-2" / "output" / "loss_curve.json").read_text())
        LOG.append(f"$ compare adapters: {compared}")
        LOG.append(f"  loss curve uninterrupted: {curve_ref}")
        LOG.append(f"  loss curve resumed:       {curve}")
        assert compared["same_names"] and compared["bitwise_equal"] and compared["max_abs_diff"] == 0.0
        assert compared["nonzero_lora_b"] > 0, "training moved the adapter (lora_B starts at zero)"
        assert curve == curve_ref and len(curve) == MAX_STEPS and curve[-1] < curve[0]

        # Retention: the newest two complete checkpoints; the abandoned half one and older ones are gone.
        keys = lab.helper("list", f"s3://{checkpoints}/lab-sft/")["keys"]
        steps = sorted({k.split("/")[0] for k in keys})
        LOG.append(f"$ checkpoints left under s3://{checkpoints}/lab-sft/: {steps}")
        assert steps == [f"step-{6:08d}", f"step-{MAX_STEPS:08d}"]

        # Provenance: one run for the TrainJob across both attempts, read with the tenant's credentials.
        run = lab.helper("mlflow-run", f"{tenant}/lab", f"{namespace}/lab-sft", mlflow=True)
        tags = run["tags"]
        LOG.append(f"$ [{tenant}] MLflow run {run.get('run_id')}: status {run.get('status')}, "
                   f"runs for the TrainJob: {run['runs']}")
        LOG.extend(f"  tag {k} = {v}" for k, v in sorted(tags.items()))
        LOG.append(f"  params: {json.dumps(run['params'], sort_keys=True)}")
        LOG.append(f"  adapter artifacts: {run['artifacts']}")
        assert run["runs"] == 1 and run["status"] == "FINISHED" and tags["trainyard.attempts"] == "2"
        # The approved dataset entry, as the TrainJob's env carried it: name, version, licence, classification.
        assert tags["trainyard.dataset.name"] == DATASET_ENTRY["name"]
        assert tags["trainyard.dataset.uri"] == dataset_uri and tags["trainyard.dataset.version"] == pinned["version_id"]
        assert tags["trainyard.dataset.licence"] == DATASET_ENTRY["licence"]
        assert tags["trainyard.dataset.classification"] == DATASET_ENTRY["classification"]
        assert tags["trainyard.dataset.digest"] == pinned["sha256"] and tags["trainyard.dataset.read_from"] == "s3-version"
        assert tags["trainyard.base_model.uri"] == model_uri and tags["trainyard.base_model.revision"] == base["digest"]
        assert tags["trainyard.base_model.digest"] == base["digest"]
        assert tags["trainyard.trainjob.name"] == "lab-sft" and tags["trainyard.trainjob.namespace"] == namespace
        assert tags["trainyard.runtime.name"] == "lora-peft" and "@sha256:" in tags["trainyard.runtime.image"]
        assert tags["trainyard.code.version"] == provenance_env["TRAINYARD_CODE_VERSION"]
        assert tags["trainyard.code.program_sha256"] == program_sha256()
        assert tags["trainyard.kueue.workload"] == "trainjob-lab-sft-3f2a1" and tags["trainyard.kueue.queue"] == "default"
        assert tags["trainyard.kueue.flavor"] == provenance_env["TRAINYARD_KUEUE_FLAVOR"]
        assert tags["trainyard.world_size"] == "1"
        assert run["params"]["lora_rank"] == "4" and run["params"]["grad_accumulation"] == "2"
        assert "adapter/adapter_model.safetensors" in run["artifacts"]
        # The metric history holds every step once: the resumed attempt starts after the checkpoint.
        history = {step: value for step, value in run["loss_history"]}
        assert len(run["loss_history"]) == MAX_STEPS and [history[s + 1] for s in range(MAX_STEPS)] == curve

        # The registered model version: its source in the tenant's models bucket, the inputs as tags.
        (version,) = run["versions"]
        adapter_uri = f"s3://{models}/{namespace}/lab-sft/adapter"
        LOG.append(f"$ [{tenant}] model version {version['name']} v{version['version']} ({version['status']}): "
                   f"source {version['source']}")
        LOG.extend(f"  tag {k} = {v}" for k, v in sorted(version["tags"].items()) if not k.startswith("trainyard.kueue"))
        assert version["name"] == f"{tenant}-lab-adapter" and version["version"] == "1" and version["source"] == adapter_uri
        assert version["tags"]["trainyard.adapter.uri"] == adapter_uri
        assert version["tags"]["trainyard.base_model.uri"] == model_uri
        assert version["tags"]["trainyard.base_model.revision"] == base["digest"]
        assert version["tags"]["trainyard.dataset.version"] == pinned["version_id"]
        assert {k: version["tags"][f"trainyard.dataset.{k}"] for k in ("name", "licence", "classification")} == {
            k: DATASET_ENTRY[k] for k in ("name", "licence", "classification")}

        # The handover: promote, check, the storage initializer with the serving identity, the server.
        handover(lab, version, base_model_uri=model_uri, adapter_uri=adapter_uri, base_digest=base["digest"],
                 trained_adapter=lab.root / "attempt-2" / "output" / "adapter", keys=object_store_keys, store=s3)
    finally:
        with capsys.disabled():
            print("\n==== lab run log (" + s3["server"] + ") ====\n" + "\n".join(LOG))


def test_lora_lab_two_ranks_train_as_one_under_torchrun_gloo(
        lab: Lab, inputs: dict[str, Any], s3: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """The runtime's ``torchrun`` with 2 processes on one CPU node: DDP over gloo, SIGTERM to torchrun, resume."""
    tenant, checkpoints = lab.tenant, lab.buckets["checkpoints"]
    namespace = next(t for t in stack(STACK).config.tenants if t.name == tenant).namespace_name
    start = len(LOG)
    try:
        args = ["--max-steps", str(DDP_STEPS), "--checkpoint-every", "3", "--keep-checkpoints", "2",
                "--micro-batch-size", "2", "--grad-accumulation", "2", "--seq-len", "16", "--precision", "fp32",
                "--learning-rate", "0.02", "--warmup-steps", "2", "--lora-rank", "4", "--lora-alpha", "8",
                "--lora-dropout", "0.1", "--experiment", f"{tenant}/lab", "--registered-model", f"{tenant}-lab-ddp",
                "--models-uri", f"s3://{lab.buckets['models']}/"]
        trainer_env, provenance_env = inputs["trainer_env"], _provenance_env(namespace, "trainjob-lab-ddp-7c1d2")

        code, reference = lab.attempt("ddp-reference", "lab-ddp-reference", args, mlflow=False, trainer_env=trainer_env,
                                      extra_env=provenance_env, processes=RANKS)
        assert code == 0, "\n".join(reference[-30:])

        # SIGTERM to torchrun (the container's first process): it passes it to both ranks, which agree on the
        # step to stop at, checkpoint together and exit 143; torchrun itself then exits 1 (its SignalException).
        code, first = lab.attempt("ddp-attempt-1", "lab-ddp", args, mlflow=True, trainer_env=trainer_env,
                                  interrupt_at=DDP_INTERRUPT_AT, processes=RANKS,
                                  extra_env={**provenance_env, "TRAINYARD_PAUSE_AFTER_STEP": "2"})
        assert code == 1, "\n".join(first[-30:])
        prefix = f"s3://{checkpoints}/lab-ddp/step-{DDP_INTERRUPT_AT:08d}/"
        assert f"[lora-peft] checkpoint step {DDP_INTERRUPT_AT} (SIGTERM) complete at {prefix}" in first
        assert f"[lora-peft] stopped at step {DDP_INTERRUPT_AT} on SIGTERM; the next attempt resumes here" in first
        manifest = lab.helper("get-json", prefix + "CHECKPOINT.json")
        LOG.append(f"$ {prefix}CHECKPOINT.json: step {manifest['step']}, samples {manifest['samples_consumed']}, "
                   f"files {sorted(manifest['files'])}")
        # Both ranks wrote their RNG state; the data position counts both ranks' samples.
        assert {f"rng-rank{r:05d}.pt" for r in range(RANKS)} <= set(manifest["files"])
        assert manifest["samples_consumed"] == DDP_INTERRUPT_AT * 2 * 2 * RANKS

        code, second = lab.attempt("ddp-attempt-2", "lab-ddp", args, mlflow=True, trainer_env=trainer_env,
                                   extra_env=provenance_env, processes=RANKS)
        assert code == 0, "\n".join(second[-30:])
        assert f"[lora-peft] resumed from checkpoint step {DDP_INTERRUPT_AT} at s3://{checkpoints}/lab-ddp/" in second
        # Every rank ends with the adapter rank 0 saved in the final checkpoint (DDP kept them bitwise equal).
        agreed = next(line for line in second if line.startswith(f"[lora-peft] all {RANKS} ranks at step {DDP_STEPS}"))
        final = lab.helper("get-json", f"s3://{checkpoints}/lab-ddp/step-{DDP_STEPS:08d}/CHECKPOINT.json")
        assert agreed.endswith(f"with the same adapter (sha256:{final['files']['adapter_model.safetensors']})"), agreed

        # The interrupted and resumed 2-rank run equals the uninterrupted one, bitwise; it moved the adapter.
        compared = lab.helper("compare", str(lab.root / "ddp-reference" / "output" / "adapter"),
                              str(lab.root / "ddp-attempt-2" / "output" / "adapter"))
        curve_ref = json.loads((lab.root / "ddp-reference" / "output" / "loss_curve.json").read_text())
        curve = json.loads((lab.root / "ddp-attempt-2" / "output" / "loss_curve.json").read_text())
        LOG.append(f"$ compare 2-rank adapters: {compared}; loss curve {curve}")
        assert compared["bitwise_equal"] and compared["nonzero_lora_b"] > 0
        assert curve == curve_ref and len(curve) == DDP_STEPS

        # Rank 0 alone wrote to MLflow: one run, each step's metrics once, one registered version.
        recorded = lab.helper("mlflow-run", f"{tenant}/lab", f"{namespace}/lab-ddp", mlflow=True)
        LOG.append(f"$ [{tenant}] MLflow run {recorded.get('run_id')}: {recorded.get('status')}, runs {recorded['runs']}, "
                   f"world_size {recorded.get('tags', {}).get('trainyard.world_size')}, "
                   f"attempts {recorded.get('tags', {}).get('trainyard.attempts')}, versions "
                   f"{[(v['name'], v['version']) for v in recorded.get('versions', [])]}")
        assert recorded["runs"] == 1 and recorded["status"] == "FINISHED"
        assert recorded["tags"]["trainyard.world_size"] == str(RANKS) and recorded["tags"]["trainyard.attempts"] == "2"
        assert [value for _, value in sorted(recorded["loss_history"])] == curve
        assert [(v["name"], v["version"]) for v in recorded["versions"]] == [(f"{tenant}-lab-ddp", "1")]

        # One process cannot continue what two started (the data slices and RNG states are per rank).
        code, alone = lab.attempt("ddp-attempt-3", "lab-ddp", args, mlflow=False, trainer_env=trainer_env,
                                  extra_env=provenance_env)
        assert code == 2 and any(f"was written by {RANKS} processes, this attempt has 1" in line for line in alone), alone
    finally:
        with capsys.disabled():
            print(f"\n==== lab 2-rank run log ({s3['server']}) ====\n" + "\n".join(LOG[start:]))


def _runtime_env(name: str) -> dict[str, str]:
    """The literal env the platform's wiring gives the lora-peft runtime's trainer container (this stack)."""
    runtime = next(o for o in rendered(STACK).concern("runtimes").objects if o["metadata"]["name"] == "lora-peft")
    node = next(j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == "node")
    env = node["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e["value"] for e in env if e["name"].startswith(name) and "value" in e}


def test_lora_lab_trains_through_an_mlflow_outage_and_the_run_holds_every_step(
        lab: Lab, inputs: dict[str, Any], s3: dict[str, str], server: dict[str, Any],  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    """MLflow unreachable from step 2 until a checkpoint's flush has failed: the attempt trains on, the next flush
    sends what the failed one kept, and the run holds every step's metrics once; the adapter is registered.

    The program reaches MLflow through a forwarder that, while "down", cuts every connection (what a restarting
    server's Service does), with the client bounds the platform sets on approved runtimes (``mlflow.client_*``).
    """
    tenant = lab.tenant
    namespace = next(t for t in stack(STACK).config.tenants if t.name == tenant).namespace_name
    start = len(LOG)
    bounds = _runtime_env("MLFLOW_HTTP_REQUEST_")
    assert set(bounds) == {"MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"}, bounds
    try:
        args = ["--max-steps", str(MAX_STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY), "--keep-checkpoints", "2",
                "--micro-batch-size", "2", "--grad-accumulation", "2", "--seq-len", "16", "--precision", "fp32",
                "--learning-rate", "0.02", "--warmup-steps", "2", "--lora-rank", "4", "--lora-alpha", "8",
                "--lora-dropout", "0.1", "--experiment", f"{tenant}/lab", "--registered-model", f"{tenant}-lab-outage",
                "--models-uri", f"s3://{lab.buckets['models']}/"]
        events: list[tuple[float, str]] = []
        # On the port the server also answers to (the dataplane fixture's front_port: a Service's name).
        with Outage(lab.mlflow_env["MLFLOW_TRACKING_URI"], server["front_port"]) as outage:

            def on_line(line: str) -> None:
                if line.startswith("[lora-peft] step 2/") and not outage.down:
                    outage.cut()
                    events.append((time.monotonic(), "MLflow cut"))
                elif line.startswith("[lora-peft] MLflow did not take the metrics") and outage.down:
                    outage.restore()
                    events.append((time.monotonic(), "MLflow back"))

            mlflow_env = {**lab.mlflow_env, "MLFLOW_TRACKING_URI": outage.url}
            started = time.monotonic()
            code, lines = lab.attempt("outage", "lab-outage", args, mlflow=False, on_line=on_line,
                                      trainer_env=inputs["trainer_env"],
                                      extra_env={**_provenance_env(namespace, "trainjob-lab-outage-5e9b0"),
                                                 **mlflow_env, **bounds})
            refused = outage.refused
        LOG.append(f"  client bounds (the rendered runtime's env): {bounds}; connections cut while down: {refused}")
        LOG.extend(f"  +{when - started:.1f}s {what}" for when, what in events)
        assert code == 0, "\n".join(lines[-30:])
        assert [what for _, what in events] == ["MLflow cut", "MLflow back"], events
        # The failed flush gave up within the bounds: every try timing out, plus urllib3's backoff (2, 4, 8 ... s);
        # MLflow's own defaults (120 s, 7 retries) would hold it for minutes.
        timeout, retries = int(bounds["MLFLOW_HTTP_REQUEST_TIMEOUT"]), int(bounds["MLFLOW_HTTP_REQUEST_MAX_RETRIES"])
        assert events[1][0] - events[0][0] < (retries + 1) * timeout + 2 ** (retries + 1), events
        # The flush at the first checkpoint failed within the client's bounds, and training went on.
        warned = next(line for line in lines if line.startswith("[lora-peft] MLflow did not take the metrics"))
        assert warned.startswith(f"[lora-peft] MLflow did not take the metrics of steps 1-{CHECKPOINT_EVERY} ("), warned
        assert refused > 0
        curve = json.loads((lab.root / "outage" / "output" / "loss_curve.json").read_text())
        recorded = lab.helper("mlflow-run", f"{tenant}/lab", f"{namespace}/lab-outage", mlflow=True)
        LOG.append(f"$ [{tenant}] MLflow run {recorded.get('run_id')}: {recorded.get('status')}, loss history "
                   f"{len(recorded.get('loss_history', []))} points, versions "
                   f"{[(v['name'], v['version']) for v in recorded.get('versions', [])]}")
        assert recorded["runs"] == 1 and recorded["status"] == "FINISHED"
        # Every step once, in order, with the values the program computed.
        assert sorted(step for step, _ in recorded["loss_history"]) == list(range(1, MAX_STEPS + 1))
        assert [value for _, value in sorted(recorded["loss_history"])] == curve
        assert [(v["name"], v["version"]) for v in recorded["versions"]] == [(f"{tenant}-lab-outage", "1")]
    finally:
        with capsys.disabled():
            print(f"\n==== lab MLflow outage log ({s3['server']}) ====\n" + "\n".join(LOG[start:]))
