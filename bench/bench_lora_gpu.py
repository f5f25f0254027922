"""LoRA fine-tuning throughput on one GPU: tokens/s, peak GPU memory and model FLOPs utilisation (MFU).

Runs the reference program's own pieces (runtimes/programs/lora_peft.py: model + LoRA setup, the
optimizer step with gradient accumulation and autocast) on a randomly initialised Llama of a chosen
shape, or on a model directory (--model-dir, e.g. what the model initializer fetched). Prints figures;
asserts nothing. Where no CUDA device exists it says so and exits 0 (`make bench` on a CPU machine).

FLOPs per token for LoRA: the frozen base does a forward (2N) and a backward for activations only
(2N, no weight gradients), the adapters are negligible, and attention adds 4 * layers * seq * hidden
(forward + backward of the score and value products, counted as in the PaLM paper's appendix B).
MFU = that times tokens/s, over the GPU's dense bf16 peak (--peak-tflops, or the table below).

Usage (in the lab venv or the lora-peft image): python bench/bench_lora_gpu.py [--layers 16 --hidden 2048 ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROGRAM = Path(__file__).resolve().parents[1] / "runtimes" / "programs" / "lora_peft.py"
# Dense bf16 tensor-core peaks, TFLOP/s (vendor data sheets; no sparsity).
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0}


def load_program() -> Any:
    spec = importlib.util.spec_from_file_location("lora_peft", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lora_peft"] = module
    spec.loader.exec_module(module)
    return module


def peak_for(name: str, given: float | None) -> float | None:
    if given is not None:
        return given
    return next((v for k, v in PEAK_TFLOPS.items() if k in name.upper()), None)


def main() -> None:  # noqa: PLR0915 - a linear benchmark script
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", help="a Hugging Face model directory; default: a random Llama of the shape below")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--micro-batch-size", type=int, default=4)
    p.add_argument("--grad-accumulation", type=int, default=2)
    p.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--peak-tflops", type=float, help="the GPU's dense peak for --precision (default: table by name)")
    args = p.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("bench_lora_gpu: skipped, no CUDA device (torch.cuda.is_available() is False)")
        return
    program = load_program()
    device = torch.device("cuda:0")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model_dir) if args.model_dir else Path(tmp)
        if not args.model_dir:
            from tokenizers import Tokenizer, models
            from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

            config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=int(args.hidden * 8 / 3),
                                 num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                 num_key_value_heads=args.heads, max_position_embeddings=args.seq_len)
            LlamaForCausalLM(config).save_pretrained(model_dir)
            vocab = {"<pad>": 0, "<unk>": 1, "</s>": 2}
            PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>")),
                                    pad_token="<pad>", unk_token="<unk>", eos_token="</s>").save_pretrained(model_dir)
        settings = program.Settings(
            dataset_uri="s3://bench/none", dataset_version="-", dataset_digest="sha256:-", dataset_name="random",
            base_model_uri=str(model_dir), base_model_revision="", base_model_name="bench", max_steps=args.steps,
            micro_batch_size=args.micro_batch_size, grad_accumulation=args.grad_accumulation, seq_len=args.seq_len,
            precision=args.precision, lora_rank=args.lora_rank, lora_alpha=2 * args.lora_rank, lora_dropout=0.0)
        places = program.Places(dataset_dir=Path(tmp), model_dir=model_dir, checkpoint_uri=tmp, output_dir=Path(tmp),
                                checkpoint_every=10**9, keep_checkpoints=1, experiment="", registered_model="",
                                models_uri="", trainjob="bench", namespace="bench")
        model, _ = program.build_model(settings, places, device)
        base_params = sum(p.numel() for p in model.parameters() if not p.requires_grad)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=1e-4)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, program.lr_lambda(settings))
        scaler = torch.amp.GradScaler("cuda") if args.precision == "fp16" else None
        trainer = program.Trainer(settings, places, model, optimizer, scheduler, scaler, 0, 1, program.Store(tmp))
        vocab_size = model.config.vocab_size
        rows = args.micro_batch_size * args.grad_accumulation * (args.steps + args.warmup)
        ids = torch.randint(3, vocab_size, (rows, args.seq_len))
        mask = torch.ones_like(ids)
        model.train()
        for _ in range(args.warmup):
            program.optimizer_step(trainer, ids, mask, device)
            trainer.step += 1
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        for _ in range(args.steps):
            program.optimizer_step(trainer, ids, mask, device)
            trainer.step += 1
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    cfg = model.config
    tokens = args.steps * args.micro_batch_size * args.grad_accumulation * args.seq_len
    flops_per_token = 4 * base_params + 4 * cfg.num_hidden_layers * args.seq_len * cfg.hidden_size
    achieved = flops_per_token * tokens / seconds
    name = torch.cuda.get_device_name(0)
    peak = peak_for(name, args.peak_tflops)
    print(f"GPU                 {name} (torch {torch.__version__}, CUDA {torch.version.cuda})")
    print(f"model               {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, {base_params / 1e6:.1f}M frozen + "
          f"{sum(p.numel() for p in trainable) / 1e6:.2f}M LoRA (rank {args.lora_rank}) parameters")
    print(f"batch               {args.micro_batch_size} x {args.seq_len} tokens, grad accumulation {args.grad_accumulation}, "
          f"{args.precision}")
    print(f"tokens/s            {tokens / seconds:,.0f}  ({args.steps} steps in {seconds:.2f}s after {args.warmup} warm-up)")
    print(f"peak GPU memory     {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB allocated, "
          f"{torch.cuda.max_memory_reserved() / 2**30:.2f} GiB reserved")
    print(f"achieved            {achieved / 1e12:.1f} TFLOP/s")
    print(f"MFU                 {100 * achieved / (peak * 1e12):.1f}% of {peak:.0f} TFLOP/s" if peak
          else "MFU                 unknown peak for this GPU: pass --peak-tflops")


if __name__ == "__main__":
    main()
