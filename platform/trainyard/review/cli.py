"""The review subcommands of ``trainyard``: ``diff``, ``preview-comment`` and ``status``.

Registered through ``trainyard.cli.EXTRA_COMMANDS`` when this module is imported. Bad input
(an unknown revision, a stack file missing, a preview file of another format) ends with
``error: ...`` on stderr and exit code 2, as everywhere in ``trainyard``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from trainyard.cli import EXIT_OK, EXTRA_COMMANDS, UsageError

if TYPE_CHECKING:
    from trainyard.config.model import Tenant
    from trainyard.review.diff import Review

# The review modules are imported by the commands that use them: every `trainyard` command
# registers these subcommands, and most never run them (start-up time is most of a render).

FORMATS = ("markdown", "text", "json")


def format_review(review: Review, fmt: str) -> str:
    from trainyard.review.diff import review_to_dict
    from trainyard.review.markdown import to_markdown, to_text

    if fmt == "json":
        return json.dumps(review_to_dict(review), indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
    if fmt == "text":
        return to_text(review)
    return to_markdown(review)


def _emit(text: str, out: str | None) -> None:
    if out:
        try:
            Path(out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{out}: --out: cannot write: {exc.strerror}") from None
    else:
        print(text, end="")


def _cmd_diff(args: argparse.Namespace) -> int:
    from trainyard.config.load import project_root
    from trainyard.review.diff import review_against_revision, review_against_stack
    from trainyard.review.policy_delta import default_evaluator
    from trainyard.review.revision import RevisionError

    evaluator = None if args.no_policy else default_evaluator()
    root = project_root()
    try:
        if args.against:
            review = review_against_stack(args.stack, args.against, root, evaluator=evaluator)
        else:
            review = review_against_revision(args.stack, args.base, root, evaluator=evaluator)
    except RevisionError as exc:
        raise UsageError(str(exc)) from None
    _emit(format_review(review, args.format), args.out)
    return EXIT_OK


def _cmd_preview_comment(args: argparse.Namespace) -> int:
    from trainyard.review.preview_comment import PreviewFormatError, load_preview, preview_review

    try:
        preview = load_preview(Path(args.file), Path(args.events) if args.events else None)
    except PreviewFormatError as exc:
        raise UsageError(str(exc)) from None
    try:
        review = preview_review(preview)
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError, RecursionError) as exc:
        # Values of the wrong type deep in a resource's state (see preview_comment._read_checked).
        raise UsageError(f"{args.file}: (document): not the shape of a Pulumi preview ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None
    _emit(format_review(review, args.format), args.out)
    return EXIT_OK


def _kubectl(args: argparse.Namespace) -> list[str]:
    """kubectl with the stack's kubeconfig and context (flags override); --kubectl, PATH, or the tools cache."""
    from trainyard.project import open_stack

    cluster = open_stack(args.stack).config.cluster
    tools = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools") / "bin"
    binary = args.kubectl or shutil.which("kubectl") or (str(tools / "kubectl") if (tools / "kubectl").is_file() else None)
    if binary is None:
        raise UsageError("kubectl not found: put it on PATH, pass --kubectl, or run `make tools`")
    kubeconfig = args.kubeconfig or cluster.kubeconfig
    return [binary, *(["--kubeconfig", kubeconfig] if kubeconfig else []), "--context", args.context or cluster.context]


def _tenant_namespace(args: argparse.Namespace, tenants: tuple[Tenant, ...]) -> str:
    """The namespace of ``--tenant NAME`` (from the stack's tenants), or ``--namespace``."""
    if args.namespace:
        return str(args.namespace)
    found = next((t for t in tenants if t.name == args.tenant), None)
    if found is None:
        raise UsageError(f"--tenant: {args.tenant!r} is not a tenant of stack {args.stack} "
                         f"({', '.join(t.name for t in tenants) or 'none'})")
    return found.namespace_name


def _cmd_tenant_status(args: argparse.Namespace) -> int:
    from trainyard.project import open_stack
    from trainyard.review.status import ClusterReadError
    from trainyard.review.tenant_status import read_namespace, tenant_report, to_json, to_markdown

    config = open_stack(args.stack).config
    namespace = _tenant_namespace(args, config.tenants)
    if args.from_file:
        try:
            snapshot = json.loads(Path(args.from_file).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"{args.from_file}: cannot read a recorded snapshot: {exc}") from None
        if not isinstance(snapshot, dict) or snapshot.get("namespace") != namespace:
            raise UsageError(f"{args.from_file}: not a recorded snapshot of namespace {namespace} (see --save)")
        context = f"{args.stack} (recorded: {Path(args.from_file).name})"
    else:
        kubectl = _kubectl(args)
        try:
            snapshot = read_namespace(kubectl, namespace)
        except ClusterReadError as exc:
            raise UsageError(str(exc)) from None
        context = kubectl[-1]
    if args.save:
        Path(args.save).write_text(json.dumps(snapshot, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    requeuing = config.kueue.wait_for_pods_ready.requeuing.timestamp
    try:
        report = tenant_report(snapshot, context, requeuing)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{args.from_file or 'the cluster'}: not the shape of Kueue's LocalQueues, Workloads and "
                         f"visibility answers ({type(exc).__name__}: {str(exc)[:200]})") from None
    _emit(to_json(report) if args.format == "json" else to_markdown(report, not args.all_resources), args.out)
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    if args.tenant or args.namespace:
        return _cmd_tenant_status(args)
    from trainyard.review.status import ClusterReadError, read_cluster, status_report
    from trainyard.review.status import to_json as status_json
    from trainyard.review.status import to_markdown as status_markdown

    if args.from_file:
        try:
            snapshot = json.loads(Path(args.from_file).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"{args.from_file}: cannot read a recorded snapshot: {exc}") from None
        context = f"{args.stack} (recorded: {Path(args.from_file).name})"
    else:
        kubectl = _kubectl(args)
        try:
            snapshot = read_cluster(kubectl)
        except ClusterReadError as exc:
            raise UsageError(str(exc)) from None
        context = kubectl[-1]
    if args.save:
        Path(args.save).write_text(json.dumps(snapshot, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    report = status_report(snapshot, context)
    _emit(status_json(report) if args.format == "json" else status_markdown(report, not args.all_resources), args.out)
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    help_text = "review a change: per-object diff, capacity, charts and policy results, as Markdown for a pull request"
    diff = subparsers.add_parser("diff", help=help_text, description=help_text)
    diff.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
    base = diff.add_mutually_exclusive_group(required=True)
    base.add_argument("--base", metavar="REV", help="git revision to compare the work tree against (e.g. origin/main)")
    base.add_argument("--against", metavar="STACK", help="another stack of this tree as the base (promotion review)")
    diff.add_argument("--format", choices=FORMATS, default="markdown", help="output format (default: markdown)")
    diff.add_argument("--out", metavar="FILE", help="write the review to FILE instead of stdout")
    diff.add_argument("--no-policy", action="store_true", help="leave out the policy results")
    diff.set_defaults(func=_cmd_diff)

    help_text = "turn `pulumi preview --diff --json` output into the same review, for CI to post on a pull request"
    comment = subparsers.add_parser("preview-comment", help=help_text, description=help_text)
    comment.add_argument("file", metavar="FILE", help="JSON of `pulumi preview --json`, or an engine event log")
    comment.add_argument("--events", metavar="FILE",
                         help="engine event log of the same preview (`pulumi preview --event-log FILE`) for policy events")
    comment.add_argument("--format", choices=FORMATS, default="markdown", help="output format (default: markdown)")
    comment.add_argument("--out", metavar="FILE", help="write the review to FILE instead of stdout")
    comment.set_defaults(func=_cmd_preview_comment)

    help_text = ("read the live cluster: quota, usage and borrowing per ClusterQueue and flavor, and the pending "
                 "workloads with the reason Kueue gives, oldest first; with --tenant, one tenant's queue, positions and "
                 "reasons, read with the tenant's own rights")
    status = subparsers.add_parser("status", help=help_text, description=help_text)
    status.add_argument("stack", metavar="STACK", help="stack name (its cluster.kubeconfig and cluster.context are used)")
    status.add_argument("--context", help="kubeconfig context (default: the stack's cluster.context)")
    status.add_argument("--kubeconfig", help="kubeconfig file (default: the stack's cluster.kubeconfig, else kubectl's)")
    status.add_argument("--kubectl", help="kubectl binary (default: PATH, then the tools cache)")
    status.add_argument("--from", dest="from_file", metavar="FILE", help="report on a recorded snapshot (see --save)")
    status.add_argument("--save", metavar="FILE", help="also write the objects read as a snapshot for --from")
    status.add_argument("--all-resources", action="store_true", help="list cpu and memory too, not only GPU resources")
    status.add_argument("--format", choices=("markdown", "json"), default="markdown", help="output format")
    status.add_argument("--out", metavar="FILE", help="write the report to FILE instead of stdout")
    scope = status.add_mutually_exclusive_group()
    scope.add_argument("--tenant", metavar="NAME",
                       help="one tenant's view with only its own RBAC: its LocalQueues, its Workloads' positions and why "
                            "each waits (Kueue's visibility API, else estimated from the Workloads)")
    scope.add_argument("--namespace", "-n", metavar="NS", help="as --tenant, for the namespace NS")
    status.set_defaults(func=_cmd_status)


if register not in EXTRA_COMMANDS:
    EXTRA_COMMANDS.append(register)
