"""``trainyard stack preflight|init``: a stack on the site's own backend, secrets provider and cluster.

Registered through ``trainyard.cli.EXTRA_COMMANDS``. Exit codes: 0 ready (or initialised), 2 bad
input or a failed preflight (each finding with its fix), never a traceback. docs/operators.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from trainyard.cli import EXIT_BAD_INPUT, EXIT_OK, EXTRA_COMMANDS
from trainyard.deploy.stack_init import DeployError, init_stack, preflight, redact
from trainyard.project import open_stack


def _cmd_stack(args: argparse.Namespace) -> int:
    stack = open_stack(args.stack)
    environ = dict(os.environ)
    backend = args.backend or environ.get("PULUMI_BACKEND_URL")
    if args.action == "preflight":
        checks = preflight(stack, backend, args.secrets_provider, environ)
        if args.format == "json":
            print(json.dumps({"schema": "trainyard.stack-preflight/v1", "ok": checks.ok, "stack": stack.name,
                              "file": str(stack.path), "findings": [f.as_json() for f in checks.findings]},
                             indent=2, sort_keys=True))
        else:
            print(f"{stack.path}: preflight for `pulumi preview --stack {stack.name}`\n{checks.report()}")
        return EXIT_OK if checks.ok else EXIT_BAD_INPUT
    if not backend or not args.secrets_provider:
        print("error: stack init needs --backend URL (or PULUMI_BACKEND_URL) and --secrets-provider URL",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        result = init_stack(stack, backend, args.secrets_provider, environ)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.format == "json":
        print(json.dumps(result.as_json(), indent=2, sort_keys=True))
        return EXIT_OK
    where = redact(backend)
    if result.created:
        print(f"created stack {stack.name} in {where}, secrets through {args.secrets_provider}")
        print(f"{stack.path}: appended {', '.join(result.added)} (the rest of the file is unchanged; commit it)")
    else:
        print(f"stack {stack.name} already exists in {where} and opens with {stack.path}: nothing to do")
    print(f"next: PULUMI_BACKEND_URL='{where}' pulumi preview --diff --stack {stack.name}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    text = "a stack on the site's backend and secrets provider: preflight (what preview needs), init"
    cmd = sub.add_parser("stack", help=text, description=text)
    cmd.add_argument("action", choices=("preflight", "init"))
    cmd.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
    cmd.add_argument("--backend", metavar="URL", help="state backend (default: PULUMI_BACKEND_URL), e.g. "
                     "s3://pulumi-state?region=eu-central-1&endpoint=https://s3.example.internal")
    cmd.add_argument("--secrets-provider", metavar="URL", help="e.g. awskms://alias/trainyard-prod?region=..., "
                     "hashivault://trainyard-prod, azurekeyvault://..., gcpkms://...")
    cmd.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    cmd.set_defaults(func=_cmd_stack)


EXTRA_COMMANDS.append(register)
