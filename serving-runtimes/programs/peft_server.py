"""An OpenAI-compatible completions server for a causal language model and its LoRA adapters, on CPU.

The ``peft-cpu`` serving runtime (serving-runtimes/peft-cpu.yaml) runs this program. It takes the command line of
vLLM's OpenAI server where the two overlap (``--port``, ``--served-model-name``, ``--model``, ``--enable-lora``,
``--max-loras``, ``--max-lora-rank``, ``--lora-modules NAME=PATH ...``), so the InferenceService ``trainyard promote`` writes for
``vllm-openai`` serves here unchanged, and answers the same requests:

- ``GET /health``: 200 once the base model and every adapter are loaded (vLLM's liveness endpoint);
- ``GET /v1/models``: the base model under its served name and each adapter with ``parent`` set to it;
- ``POST /v1/completions``: ``model`` (the served name or an adapter's), ``prompt`` (a string or a list of
  strings), ``max_tokens`` (default 16), ``temperature`` (0, the default, is greedy), ``seed``, ``logprobs``
  (an integer: each generated token's log-probability is returned; top alternatives are not).

It is for models a CPU serves in seconds (the lab's, small adapters in a rehearsal or a CPU-only site), not a
replacement for vLLM: one request generates at a time, with no batching or KV-cache paging. Adapters stay separate
from the base weights (PEFT's ``load_adapter``/``set_adapter``; the base model's requests run with the adapters
disabled), so every adapter answers exactly as the base model plus that adapter, as it was trained.

Only the standard library, torch, transformers and peft: the lora-peft training image's libraries, at the versions
the adapter was trained with (serving-runtimes/programs/Containerfile builds FROM that image).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULT_MAX_TOKENS = 16
MAX_BODY = 1 << 20  # bytes of one request


class RequestError(Exception):
    """A request the server refuses: the HTTP status and OpenAI's error type."""

    def __init__(self, status: HTTPStatus, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="peft_server", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 - the pod's address
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--model", required=True, help="the base model's directory (Hugging Face format)")
    parser.add_argument("--served-model-name", required=True, help="the name requests use for the base model")
    parser.add_argument("--enable-lora", action="store_true", help="serve the --lora-modules adapters")
    parser.add_argument("--max-loras", type=int, default=4)
    parser.add_argument("--max-lora-rank", type=int, default=16, help="refuse an adapter of a higher rank (its r)")
    parser.add_argument("--lora-modules", nargs="*", default=[], metavar="NAME=PATH")
    args = parser.parse_args(argv)
    adapters: dict[str, Path] = {}
    for item in args.lora_modules:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            parser.error(f"--lora-modules {item!r}: expected NAME=PATH")
        if name in adapters:
            parser.error(f"--lora-modules {item!r}: the name {name!r} is given twice")
        adapters[name] = Path(path)
    if adapters and not args.enable_lora:
        parser.error("--lora-modules needs --enable-lora")
    if len(adapters) > args.max_loras:
        parser.error(f"{len(adapters)} adapters given, --max-loras is {args.max_loras}")
    for name, path in adapters.items():
        try:
            rank = json.loads((path / "adapter_config.json").read_text(encoding="utf-8")).get("r")
        except (OSError, ValueError) as exc:
            parser.error(f"--lora-modules {name}={path}: no readable adapter_config.json ({exc})")
        if not isinstance(rank, int) or rank > args.max_lora_rank:
            parser.error(f"--lora-modules {name}={path}: rank {rank!r} exceeds --max-lora-rank {args.max_lora_rank}")
    args.adapters = adapters
    return args


class Models:
    """The base model and its adapters, loaded once; one generation at a time."""

    def __init__(self, base_dir: Path, served_name: str, adapters: dict[str, Path]) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.served_name = served_name
        self.adapters = dict(adapters)
        self.base_dir = base_dir
        self.tokenizer = AutoTokenizer.from_pretrained(base_dir)
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        if adapters:
            from peft import PeftModel

            first, *rest = adapters.items()
            model = PeftModel.from_pretrained(model, first[1], adapter_name=first[0])
            for name, path in rest:
                model.load_adapter(path, adapter_name=name)
        model.eval()
        self.model = model
        self.lock = threading.Lock()

    def base_requested(self, name: str) -> bool:
        """Whether ``name`` asks for the base model: an adapter named like it answers instead (as in vLLM, whose
        requests resolve LoRA names first), e.g. an InferenceService named after the model it serves."""
        return name == self.served_name and name not in self.adapters

    def cards(self) -> list[dict[str, Any]]:
        created = int(time.time())
        out = [{"id": self.served_name, "object": "model", "created": created, "owned_by": "trainyard",
                "root": str(self.base_dir), "parent": None}]
        out += [{"id": name, "object": "model", "created": created, "owned_by": "trainyard", "root": str(path),
                 "parent": self.served_name} for name, path in self.adapters.items()]
        return out

    def complete(self, name: str, prompt: str, max_tokens: int, temperature: float, seed: int | None,
                 logprobs: bool) -> dict[str, Any]:
        torch = self.torch
        inputs = self.tokenizer(prompt, return_tensors="pt")
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        sampling: dict[str, Any] = {"do_sample": False} if temperature == 0 else {"do_sample": True,
                                                                                  "temperature": temperature}
        with self.lock, torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            if not self.adapters:
                out = self._generate(inputs, max_tokens, pad, sampling)
            elif self.base_requested(name):
                with self.model.disable_adapter():
                    out = self._generate(inputs, max_tokens, pad, sampling)
            else:
                self.model.set_adapter(name)
                out = self._generate(inputs, max_tokens, pad, sampling)
        prompt_tokens = inputs["input_ids"].shape[1]
        new = out.sequences[0, prompt_tokens:].tolist()
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        eos = self.tokenizer.eos_token_id
        finish = "stop" if eos is not None and new and new[-1] == eos else "length"
        choice: dict[str, Any] = {"text": text, "finish_reason": finish, "logprobs": None,
                                  "completion_tokens": len(new), "prompt_tokens": prompt_tokens}
        if logprobs:
            scores = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)[0]
            tokens = self.tokenizer.convert_ids_to_tokens(new)
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": [float(v) for v in scores.tolist()],
                                  "top_logprobs": None, "text_offset": None}
        return choice

    def _generate(self, inputs: Any, max_tokens: int, pad: int | None, sampling: dict[str, Any]) -> Any:
        return self.model.generate(**inputs, max_new_tokens=max_tokens, pad_token_id=pad, output_scores=True,
                                   return_dict_in_generate=True, **sampling)


def completion(models: Models, body: Any) -> dict[str, Any]:
    """The response to one ``/v1/completions`` body, or RequestError."""
    if not isinstance(body, dict):
        raise RequestError(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
    name = body.get("model")
    served = [c["id"] for c in models.cards()]
    if name not in served:
        raise RequestError(HTTPStatus.NOT_FOUND, f"The model `{name}` does not exist. Served: {', '.join(served)}",
                           "NotFoundError")
    prompt = body.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise RequestError(HTTPStatus.BAD_REQUEST, "prompt: a non-empty string or list of non-empty strings")
    max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= 4096:
        raise RequestError(HTTPStatus.BAD_REQUEST, "max_tokens: an integer from 1 to 4096")
    temperature = body.get("temperature", 0)
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 2:
        raise RequestError(HTTPStatus.BAD_REQUEST, "temperature: a number from 0 to 2")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise RequestError(HTTPStatus.BAD_REQUEST, "seed: an integer")
    logprobs = body.get("logprobs")
    if logprobs is not None and (not isinstance(logprobs, int) or isinstance(logprobs, bool) or logprobs < 0):
        raise RequestError(HTTPStatus.BAD_REQUEST, "logprobs: a non-negative integer")
    if body.get("stream"):
        raise RequestError(HTTPStatus.BAD_REQUEST, "stream: not supported by this server")
    choices, prompt_tokens, completion_tokens = [], 0, 0
    for index, text in enumerate(prompts):
        choice = models.complete(name, text, max_tokens, float(temperature), seed, logprobs is not None)
        prompt_tokens += choice.pop("prompt_tokens")
        completion_tokens += choice.pop("completion_tokens")
        choices.append({"index": index, **choice})
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": name, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def handler(models: Models) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(HTTPStatus.OK, {})
            elif self.path == "/v1/models":
                self._send(HTTPStatus.OK, {"object": "list", "data": models.cards()})
            else:
                self._error(RequestError(HTTPStatus.NOT_FOUND, f"no route {self.path}", "NotFoundError"))

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self._error(RequestError(HTTPStatus.NOT_FOUND, f"no route {self.path}", "NotFoundError"))
                return
            started = time.monotonic()
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_BODY:
                    raise RequestError(HTTPStatus.BAD_REQUEST, f"a JSON body of 1 to {MAX_BODY} bytes is required")
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError as exc:
                    raise RequestError(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {exc}") from None
                response = completion(models, body)
            except RequestError as exc:
                self._error(exc)
                return
            self._send(HTTPStatus.OK, response)
            print(f"[peft-server] completion model={response['model']} choices={len(response['choices'])} "
                  f"tokens={response['usage']['completion_tokens']} in {time.monotonic() - started:.2f}s", flush=True)

        def _error(self, exc: RequestError) -> None:
            self._send(exc.status, {"error": {"message": str(exc), "type": exc.kind, "code": int(exc.status)}})

        def _send(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return  # probes every few seconds; completions are logged above

    return Handler


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    try:
        models = Models(Path(args.model), args.served_model_name, args.adapters)
    except (OSError, ValueError) as exc:
        print(f"[peft-server] error: cannot load {args.model} with adapters "
              f"{', '.join(f'{n}={p}' for n, p in args.adapters.items()) or 'none'}: {exc}", file=sys.stderr)
        return 1
    server = ThreadingHTTPServer((args.host, args.port), handler(models))
    print(f"[peft-server] serving {', '.join(c['id'] for c in models.cards())} on {args.host}:{args.port} "
          f"(loaded in {time.monotonic() - started:.1f}s)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
