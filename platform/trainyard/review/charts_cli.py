"""``trainyard charts STACK``: render every chart the stack installs and print its chart truth (``review/chart_truth.py``).

Progress per chart goes to stderr (a prod run takes minutes); ``--format json`` prints ``trainyard.charts/v1``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from trainyard import charts
from trainyard.cli import EXIT_OK, EXIT_VIOLATIONS, EXTRA_COMMANDS, UsageError
from trainyard.manifests.chart_release import ChartRelease
from trainyard.project import open_stack
from trainyard.review.chart_truth import ChartTruth, check_release, format_summary


def _cmd_charts(args: argparse.Namespace) -> int:
    from trainyard.schemas import Validator  # jsonschema: ~0.1 s, for this command only

    stack = open_stack(args.stack)
    platform = stack.render()
    directory, helm = charts.charts_dir(stack.root), charts.helm_binary()
    if directory is None or helm is None:
        raise UsageError(f"chart truth needs the chart mirror ({charts.CHARTS_DIR_ENV}, default ../shared/charts) and "
                         "helm (tools/build.sh helm, or TRAINYARD_HELM)")
    crd_dir = charts.crd_mirror(stack.root)
    if crd_dir is None:
        raise UsageError("chart truth needs the upstream CRD mirror (TRAINYARD_CRDS_DIR, default ../shared/crds)")
    try:
        renderer = charts.ChartRenderer(directory, helm, api_versions=charts.api_versions(platform.crds))
    except charts.ChartUnavailable as exc:
        raise UsageError(str(exc)) from None
    ok, reports = True, []
    total = len(platform.releases)
    try:
        for n, release in enumerate(platform.releases, 1):
            # A prod run takes minutes: say which chart is being rendered (stderr, so stdout stays the report).
            print(f"[{n}/{total}] {release.name}: {release.chart_name} {release.version} ...", file=sys.stderr,
                  flush=True)
            started = time.monotonic()
            try:
                truth = check_release(stack.name, stack.config, platform, release, renderer, Validator(crd_dir))
            except (charts.ChartUnavailable, charts.ChartRenderError) as exc:
                print(f"[{n}/{total}] {release.name}: FAILED ({time.monotonic() - started:.0f} s)", file=sys.stderr)
                reports.append(_release_json(release, None, str(exc)))
                if args.format != "json":
                    print(f"{stack.name} / {release.name}: FAILED: {exc}")
                ok = False
                continue
            print(f"[{n}/{total}] {release.name}: {'ok' if truth.ok else 'FAILED'} "
                  f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
            reports.append(_release_json(release, truth, None))
            if args.format != "json":
                print(format_summary(truth))
            ok = ok and truth.ok
    finally:
        renderer.close()
    if args.format == "json":
        print(json.dumps({"schema": "trainyard.charts/v1", "stack": stack.name, "ok": ok,
                          "exit_code": EXIT_OK if ok else EXIT_VIOLATIONS, "helm_runs": renderer.helm_runs,
                          "charts": reports}, indent=2, sort_keys=True))
    else:
        print(f"{len(platform.releases)} charts, {renderer.helm_runs} helm renders")
    return EXIT_OK if ok else EXIT_VIOLATIONS


def _release_json(release: ChartRelease, truth: ChartTruth | None, error: str | None) -> dict[str, Any]:
    """One chart of ``trainyard charts --format json`` (``trainyard.charts/v1``, docs/review.md)."""
    out: dict[str, Any] = {"release": release.name, "chart": release.chart_name, "version": release.version,
                           "namespace": release.namespace, "external": release.external, "error": error,
                           "ok": truth.ok if truth is not None else False}
    if truth is not None:
        out.update({
            "objects": len(truth.rendered.objects), "kinds": dict(truth.rendered.kinds()), "images": truth.images,
            "crds_dropped": len(truth.rendered.dropped), "stubs": list(truth.rendered.stubs),
            "values": [{"path": p.path, "evidence": p.evidence, "read": p.read}
                       for p in truth.probes.probes],
            "problems": {check: problems for check, problems in truth.problems.items()},
        })
    return out


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    help_text = ("render every chart the stack installs with the built helm and check that Trainyard's values take "
                 "effect (images, CRDs off, modes, every value read, strict schemas)")
    cmd = subparsers.add_parser("charts", help=help_text, description=help_text)
    cmd.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
    cmd.add_argument("--format", choices=("text", "json"), default="text",
                     help="text (default) or json (trainyard.charts/v1); progress per chart goes to stderr either way")
    cmd.set_defaults(func=_cmd_charts)


def _register() -> None:
    if register not in EXTRA_COMMANDS:
        EXTRA_COMMANDS.append(register)


_register()
