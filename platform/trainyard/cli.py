"""The ``trainyard`` command: validate, render and report on stacks without an engine or cluster.

Exit codes: 0 success; 1 a check found mandatory violations; 2 bad input (stack file,
runtime file, CRD source, arguments). A user mistake never ends in a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainyard import __version__
from trainyard.config import ConfigError
from trainyard.manifests import RenderError
from trainyard.project import open_stack
from trainyard.review import capacity
from trainyard.review.render import OutputDirError, to_yaml, write_rendered

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(Exception):
    """Bad input that is not a stack file problem (e.g. an output directory)."""


def _cmd_validate(args: argparse.Namespace) -> int:
    stack = open_stack(args.stack)
    stack.render()  # runtime files and CRD sources are part of a valid stack
    config = stack.config
    if args.format == "json":
        print(json.dumps({"schema": "trainyard.validate/v1", "ok": True, "exit_code": EXIT_OK, "stack": stack.name,
                          "file": str(stack.path), "environment": config.environment,
                          "gpu_pools": [p.name for p in config.gpu_pools],
                          "cpu_pools": [p.name for p in config.cpu_pools], "tenants": [t.name for t in config.tenants],
                          "approved_runtimes": list(config.runtimes.approved)}, indent=2, sort_keys=True))
        return EXIT_OK
    cpu = f"{len(config.cpu_pools)} CPU pools, " if config.cpu_pools else ""
    print(f"{stack.path}: valid ({config.environment}: {len(config.gpu_pools)} GPU pools, {cpu}"
          f"{len(config.tenants)} tenants, {len(config.runtimes.approved)} approved runtimes)")
    return EXIT_OK


def _cmd_render(args: argparse.Namespace) -> int:
    stack = open_stack(args.stack)
    rendered = stack.render()
    out = Path(args.out) if args.out else stack.root / "out" / stack.name
    try:
        written = write_rendered(rendered, out)
    except OutputDirError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{exc.filename or out}: --out: cannot write: {exc.strerror}") from None
    counts: dict[str, int] = {"CustomResourceDefinition": rendered.crd_count} if rendered.crd_count else {}
    for obj in rendered.objects:
        counts[obj["kind"]] = counts.get(obj["kind"], 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"wrote {len(written)} files to {out} ({summary}; {len(rendered.releases)} charts)")
    return EXIT_OK


def _cmd_capacity(args: argparse.Namespace) -> int:
    stack = open_stack(args.stack)
    if args.format == "json":
        print(json.dumps(capacity.capacity_json(stack.name, stack.config), indent=2, sort_keys=True))
    else:
        print(capacity.format_capacity(stack.config), end="")
    return EXIT_OK


def _cmd_fake_nodes(args: argparse.Namespace) -> int:
    from trainyard.manifests.rehearsal import fake_nodes

    stack = open_stack(args.stack)
    nodes = fake_nodes(stack.config, every_pool=args.every_pool)
    print("".join("---\n" + to_yaml(node) for node in nodes), end="")
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    import json

    from trainyard.config.model import PlatformConfig
    from trainyard.config.reference import reference_markdown

    if args.markdown:
        print(reference_markdown(), end="")
    else:
        print(json.dumps(PlatformConfig.model_json_schema(), indent=2, sort_keys=True))
    return EXIT_OK


COMMANDS: dict[str, tuple[str, Callable[[argparse.Namespace], int]]] = {
    "validate": ("load and validate a stack; prints file, field path and reason on bad input", _cmd_validate),
    "render": ("write every manifest and chart release as YAML, one file per object", _cmd_render),
    "capacity": ("per GPU flavor: physical GPUs, nominal quotas, borrowing and lending", _cmd_capacity),
    "fake-nodes": ("rehearsal: fake Node objects (GPU capacity, or CPU pools' CPU) for the stack's fake pools", _cmd_fake_nodes),
    "schema": ("print the JSON schema of the stack config (stacks/schema.json)", _cmd_schema),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainyard", description="Trainyard: declare and review an LLM training platform.")
    parser.add_argument("--version", action="version", version=f"trainyard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, _) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if name != "schema":
            cmd.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
        if name == "schema":
            cmd.add_argument("--markdown", action="store_true", help="the settings reference (docs/stack-config.md) instead")
        if name in ("validate", "capacity"):
            schema = "trainyard.validate/v1" if name == "validate" else "trainyard.capacity/v1"
            cmd.add_argument("--format", choices=("text", "json"), default="text",
                             help=f"text (default) or json ({schema}; bad input: trainyard.error/v1)")
        if name == "render":
            cmd.add_argument("--out", metavar="DIR", help="output directory (default: out/<stack>)")
        if name == "fake-nodes":
            cmd.add_argument("--every-pool", action="store_true", help="nodes for real pools too, as `trainyard rehearse` makes")
    for register in EXTRA_COMMANDS:
        register(sub)
    return parser


# Other modules (policy, review.diff) add their subcommands here: fn(subparsers) -> None,
# each setting `func` on its parser via set_defaults.
EXTRA_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = []  # type: ignore[type-arg]


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # A core command needs none of the extensions' subcommands (or their imports: ~0.1 s a run), an
    # extension's command only its own module; help, or anything unknown, gets them all.
    if not words or words[0] not in COMMANDS:
        _load_extensions(EXTENSION_OF.get(words[0]) if words else None)
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    # argparse ends a `nargs="*"` positional at the first option, so `check prod -n team a.yaml`
    # would leave a.yaml over: the files after an option belong to the same list.
    files = getattr(args, "files", None)
    if extras and isinstance(files, list) and not any(extra.startswith("-") for extra in extras):
        files.extend(extras)
    elif extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    handler = getattr(args, "func", None) or COMMANDS[args.command][1]
    machine = getattr(args, "format", None) in MACHINE_FORMATS
    try:
        return handler(args)
    except ConfigError as exc:
        print(f"error: invalid stack {exc.file}", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem.render(exc.file)}", file=sys.stderr)
        if machine:
            _print_json_error([{"file": exc.file, "line": p.line, "path": p.path, "reason": p.reason,
                                "message": p.render(exc.file)} for p in exc.problems])
        return EXIT_BAD_INPUT
    except (RenderError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if machine:
            _print_json_error([_error_fields(str(exc))])
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return EXIT_OK


# A command given one of these formats reports bad input as a JSON document on stdout too (docs/review.md).
MACHINE_FORMATS = frozenset({"json", "sarif", "junit"})
ERROR_SCHEMA = "trainyard.error/v1"
_WHERE = re.compile(r"^(?P<file>[^:\n]+?)(?::(?P<line>\d+))?(?: \(document \d+\))?: (?P<path>[^:\n]+?): (?P<reason>.+)$", re.S)


def _error_fields(message: str) -> dict[str, Any]:
    """``FILE[:LINE]: PATH: reason`` as fields where a message has that shape; the whole message always."""
    match = _WHERE.match(message)
    if match is None:
        return {"file": None, "line": None, "path": None, "reason": message, "message": message}
    line = match["line"]
    return {"file": match["file"], "line": int(line) if line else None, "path": match["path"],
            "reason": match["reason"], "message": message}


def _print_json_error(errors: list[dict[str, Any]]) -> None:
    print(json.dumps({"schema": ERROR_SCHEMA, "ok": False, "exit_code": EXIT_BAD_INPUT, "errors": errors}, indent=2,
                     sort_keys=True, ensure_ascii=False))


EXTENSIONS = ("trainyard.policy.cli", "trainyard.review.cli", "trainyard.review.charts_cli", "trainyard.supply.cli",
              "trainyard.rehearsal.cli", "trainyard.serving.cli", "trainyard.deploy.cli")
# Which extension registers each of their commands (a unit test holds this to what they register).
EXTENSION_OF = {
    "check": "trainyard.policy.cli", "policy-config": "trainyard.policy.cli",
    "diff": "trainyard.review.cli", "preview-comment": "trainyard.review.cli", "status": "trainyard.review.cli",
    "charts": "trainyard.review.charts_cli",
    "bom": "trainyard.supply.cli", "images": "trainyard.supply.cli",
    "cluster": "trainyard.rehearsal.cli", "kind": "trainyard.rehearsal.cli", "rehearse": "trainyard.rehearsal.cli",
    "promote": "trainyard.serving.cli",
    "stack": "trainyard.deploy.cli",
}


def _load_extensions(only: str | None = None) -> None:
    """Import the modules that register extra subcommands (kept optional so each can land alone): ``only``
    that one, else all of them."""
    import importlib

    for module in (only,) if only else EXTENSIONS:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


if __name__ == "__main__":
    # Run through the importable module so extensions register where main() looks for them.
    from trainyard.cli import main as _main

    raise SystemExit(_main())
