"""``trainyard charts STACK``: render every chart the stack installs and print its chart truth (``review/chart_truth.py``)."""

from __future__ import annotations

import argparse

from trainyard import charts
from trainyard.cli import EXIT_OK, EXIT_VIOLATIONS, EXTRA_COMMANDS, UsageError
from trainyard.project import open_stack
from trainyard.review.chart_truth import check_release, format_summary


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
    ok = True
    try:
        for release in platform.releases:
            try:
                truth = check_release(stack.name, stack.config, platform, release, renderer, Validator(crd_dir))
            except (charts.ChartUnavailable, charts.ChartRenderError) as exc:
                print(f"{stack.name} / {release.name}: FAILED: {exc}")
                ok = False
                continue
            print(format_summary(truth))
            ok = ok and truth.ok
    finally:
        renderer.close()
    print(f"{len(platform.releases)} charts, {renderer.helm_runs} helm renders")
    return EXIT_OK if ok else EXIT_VIOLATIONS


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    help_text = ("render every chart the stack installs with the built helm and check that Trainyard's values take "
                 "effect (images, CRDs off, modes, every value read, strict schemas)")
    cmd = subparsers.add_parser("charts", help=help_text, description=help_text)
    cmd.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
    cmd.set_defaults(func=_cmd_charts)


def _register() -> None:
    if register not in EXTRA_COMMANDS:
        EXTRA_COMMANDS.append(register)


_register()
