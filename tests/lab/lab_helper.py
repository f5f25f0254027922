"""Runs inside the lab tool venv (tools/lab): the parts of the lab test that need torch, transformers, boto3, MLflow.

Each command prints one JSON object on its last line. No hub access: the base model is a tiny, randomly
initialised Llama built here, with a word-level tokenizer over the test's vocabulary.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

PROGRAM = Path(__file__).resolve().parents[2] / "runtimes" / "programs" / "lora_peft.py"


def program() -> Any:
    spec = importlib.util.spec_from_file_location("lora_peft", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lora_peft"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def make_base(out: str, words: str) -> dict[str, Any]:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<s>", "</s>"]
    vocab = {w: i for i, w in enumerate(specials + sorted(set(words.split())))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>",
                                        bos_token="<s>", eos_token="</s>")
    torch.manual_seed(7)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=2, eos_token_id=3)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"digest": program().directory_digest(Path(out)), "parameters": sum(p.numel() for p in model.parameters()),
            "vocab": len(vocab)}


def s3() -> Any:
    import boto3

    return boto3.client("s3")


def split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def put_versions(bucket: str, key: str, *files: str) -> dict[str, Any]:
    """Writes each file as a new version of ``key`` (the provisioning Job made the bucket versioned)."""
    client = s3()
    versions = []
    for path in files:
        data = Path(path).read_bytes()
        put = client.put_object(Bucket=bucket, Key=key, Body=data)
        versions.append({"version_id": put["VersionId"], "sha256": "sha256:" + hashlib.sha256(data).hexdigest()})
    return {"versions": versions}


def upload(local: str, uri: str) -> dict[str, Any]:
    bucket, prefix = split(uri)
    client = s3()
    for path in sorted(Path(local).rglob("*")):
        if path.is_file():
            client.put_object(Bucket=bucket, Key=prefix + str(path.relative_to(local)), Body=path.read_bytes())
    return {"uri": uri}


def keys_under(uri: str) -> list[str]:
    bucket, prefix = split(uri)
    pages = s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix):] for page in pages for o in page.get("Contents", []))


def download(*pairs: str) -> dict[str, Any]:
    """What Trainer's S3 initializers and KServe's storage initializer do: every current object under a prefix.

    ``pairs``: URI, directory, URI, directory, ...
    """
    client, files = s3(), []
    for uri, local in zip(pairs[::2], pairs[1::2], strict=True):
        bucket, prefix = split(uri)
        for key in keys_under(uri):
            target = Path(local) / key
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(client.get_object(Bucket=bucket, Key=prefix + key)["Body"].read())
            files.append(key)
    return {"files": files}


def list_keys(uri: str) -> dict[str, Any]:
    return {"keys": keys_under(uri)}


def put_object(uri: str, data: str) -> dict[str, Any]:
    bucket, key = split(uri)
    s3().put_object(Bucket=bucket, Key=key, Body=data.encode())
    return {"uri": uri}


def get_json(uri: str) -> dict[str, Any]:
    """One JSON object (a checkpoint's CHECKPOINT.json)."""
    bucket, key = split(uri)
    loaded: dict[str, Any] = json.loads(s3().get_object(Bucket=bucket, Key=key)["Body"].read())
    return loaded


def compare(first: str, second: str) -> dict[str, Any]:
    """The adapters' tensors: bitwise equal or not, and the largest absolute difference."""
    import torch
    from safetensors.torch import load_file

    a, b = load_file(f"{first}/adapter_model.safetensors"), load_file(f"{second}/adapter_model.safetensors")
    diff = max(float((a[k].double() - b[k].double()).abs().max()) for k in a) if a.keys() == b.keys() else float("inf")
    return {"tensors": len(a), "same_names": a.keys() == b.keys(),
            "bitwise_equal": a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a),
            "max_abs_diff": diff, "nonzero_lora_b": sum(int(bool(a[k].abs().sum() > 0)) for k in a if "lora_B" in k)}


def mlflow_run(experiment: str, trainjob: str) -> dict[str, Any]:
    """The run tagged with the TrainJob, its metric history and the registered versions of it, as a tenant reads them."""
    import mlflow
    from mlflow import MlflowClient

    client = MlflowClient()
    exp = client.get_experiment_by_name(experiment)
    runs = mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`trainyard.trainjob` = '{trainjob}'",
                              output_format="list")
    out: dict[str, Any] = {"runs": len(runs)}
    if not runs:
        return out
    run = runs[0]
    history = client.get_metric_history(run.info.run_id, "loss")
    versions = client.search_model_versions(f"run_id = '{run.info.run_id}'")
    out |= {"run_id": run.info.run_id, "status": run.info.status, "params": run.data.params,
            "tags": {k: v for k, v in run.data.tags.items() if k.startswith("trainyard.")},
            "loss_history": [[m.step, m.value] for m in history],
            "artifacts": sorted(a.path for a in client.list_artifacts(run.info.run_id, "adapter")),
            "versions": [{"name": v.name, "version": v.version, "source": v.source, "status": v.status,
                          "tags": v.tags} for v in versions]}
    return out


COMMANDS = {"make-base": make_base, "put-versions": put_versions, "upload": upload,
            "download": download, "list": list_keys, "put-object": put_object, "get-json": get_json, "compare": compare,
            "mlflow-run": mlflow_run}

if __name__ == "__main__":
    print(json.dumps(COMMANDS[sys.argv[1]](*sys.argv[2:])))
