"""``trainyard bom``, ``trainyard images lock`` and ``trainyard images verify``.

``bom STACK`` prints the bill of materials (Markdown, JSON, or the skopeo sync list; ``--out``
writes a file, or for ``--format sync`` a directory with one YAML per destination and
``sync.sh``). ``images lock STACK`` asks the mirror registry for the digest of every image the
stack uses and rewrites the lock (all or nothing: one image that cannot be resolved leaves the
file untouched). ``images verify STACK`` lists placeholder and missing digests and images that render
without a digest (``--render-charts``: in helm's output of every chart too): exit 1 on a stack that
protects data, warnings only elsewhere; with ``--in-mirror`` it also runs the program's mirror check
(``in_mirror.py``: every image the stack pulls asked of its registry), exit 1 with the program's message.
Every command that asks a registry reaches its hosts through ``endpoints.registry_client``
(``TRAINYARD_REGISTRY_ENDPOINTS``, then ``--endpoint``).

Importing this module registers the subcommands with ``trainyard.cli``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from trainyard.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATIONS, EXTRA_COMMANDS, UsageError
from trainyard.manifests import RenderedPlatform
from trainyard.project import Stack, open_stack
from trainyard.supply.bom import build_bom, sync_commands, sync_groups, to_json, to_markdown, to_sync_text
from trainyard.supply.chart_images import ChartRenderer
from trainyard.supply.endpoints import ENDPOINTS_ENV, EndpointError, parse_endpoint, registry_client
from trainyard.supply.gate import unlocked_images
from trainyard.supply.in_mirror import MirrorReport, mirror_report
from trainyard.supply.lock import LockFileError
from trainyard.supply.lock_refresh import refresh
from trainyard.supply.registry import RegistryClient, RegistryError, RegistryUnreachable

STACK_HELP = "stack name (prod = stacks/Pulumi.prod.yaml) or path"


@contextmanager
def _chart_renderer(stack: Stack, rendered: RenderedPlatform, wanted: bool) -> Iterator[ChartRenderer | None]:
    """``helm template`` of each release with the stack's values (``--render-charts``), or None."""
    if not wanted:
        yield None
        return
    from trainyard import charts

    directory, helm = charts.charts_dir(stack.root), charts.helm_binary()
    if directory is None or helm is None:
        raise UsageError("--render-charts needs the chart mirror (TRAINYARD_CHARTS_DIR) and helm (`make helm`)")
    renderer = charts.ChartRenderer(directory, helm, api_versions=charts.api_versions(rendered.crds))
    try:
        yield lambda release: renderer.render(release).objects
    finally:
        renderer.close()


def _cmd_bom(args: argparse.Namespace) -> int:
    if args.export or args.import_file:
        return _cmd_bom_airgap(args)
    stack = open_stack(args.stack)
    rendered = stack.render()
    with _chart_renderer(stack, rendered, args.render_charts) as renderer:
        bom = build_bom(stack, rendered, renderer=renderer)
    endpoints = _endpoints(args.endpoint)
    if args.format != "sync" and endpoints:
        raise UsageError("--endpoint: only --format sync (the destinations) and --export/--import reach a registry")
    if any(url.startswith("http://") for url in endpoints.values()) and not args.insecure:
        raise UsageError("--endpoint: a plain http endpoint needs --insecure (the sync commands then pass "
                         "--dest-tls-verify=false to skopeo)")
    if args.format == "sync" and args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        groups = sync_groups(bom)
        for group in groups:
            (out / group.file).write_text(yaml.safe_dump(group.source, sort_keys=False), encoding="utf-8")
        (out / "sync.sh").write_text("#!/bin/sh\nset -e\ncd \"$(dirname \"$0\")\"\n" + sync_commands(groups, endpoints),
                                     encoding="utf-8")
        print(f"wrote {len(groups)} skopeo sync files and sync.sh to {out}")
        return EXIT_OK
    text = to_sync_text(bom, endpoints) if args.format == "sync" else {"markdown": to_markdown, "json": to_json}[args.format](bom)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return EXIT_OK


def _progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def _cmd_bom_airgap(args: argparse.Namespace) -> int:
    """``bom STACK --export FILE`` (connected side) or ``bom STACK --import FILE`` (air-gapped side)."""
    from trainyard import charts
    from trainyard.supply import airgap
    from trainyard.supply import archive as fmt

    if args.export and args.import_file:
        raise UsageError("--export and --import exclude each other (one side of the gap each)")
    host = (args.source_prefix or "").split("/", 1)[0]
    if args.source_prefix and not (args.source_prefix.endswith("/") and ("." in host or ":" in host or host == "localhost")):
        raise UsageError(f"--from {args.source_prefix!r}: expected a registry prefix ending in '/' "
                         "(e.g. mirror.example.com/upstream/)")
    stack = open_stack(args.stack)
    client = _client(args.endpoint, args.insecure)
    endpoints = dict(client.endpoints)
    try:
        if args.export:
            if args.crds_dir or args.expect_manifest:
                raise UsageError("--crds-dir and --expect-manifest belong to --import")
            rendered = stack.render()
            bom = build_bom(stack, rendered)
            print(f"exporting {stack.name}: {len(bom.images)} images from "
                  f"{args.source_prefix or 'their upstream registries'}, the charts, {len(bom.crds)} CRD files",
                  file=sys.stderr)
            written = airgap.export(stack, rendered, bom, Path(args.export), client, args.source_prefix,
                                    charts.charts_dir(stack.root), _progress)
            print(f"wrote {written.path}: {written.images} images ({written.blobs} blobs), {written.charts} charts, "
                  f"{written.crds} CRD files; {written.size} bytes\n"
                  f"archive sha256 {written.sha256}\nmanifest sha256 {written.manifest_sha256} "
                  f"(carry it apart from the archive: `--import FILE --expect-manifest {written.manifest_sha256}`)")
            return EXIT_OK
        if args.source_prefix:
            raise UsageError("--from belongs to --export")
        archive = fmt.open_archive(Path(args.import_file))
        try:
            charts_client = client
            mirror_host = stack.config.charts.mirror_host
            if stack.config.charts.plain_http and mirror_host and mirror_host not in endpoints:
                # The stack itself says its (loopback) chart mirror speaks plain HTTP.
                charts_client = RegistryClient({**endpoints, mirror_host: f"http://{mirror_host}"},
                                               client.credentials, insecure=True, plain_http=client.plain_http)
            print(f"importing {archive.path} ({archive.manifest.get('stack')}, exported "
                  f"{archive.manifest.get('created')}; manifest sha256 {fmt.manifest_sha256(archive)})", file=sys.stderr)
            result = airgap.import_archive(archive, stack, client, charts_client,
                                           airgap.crd_bundle_dir(stack, args.crds_dir), _progress, args.expect_manifest)
        finally:
            archive.close()
        print(f"imported into {stack.name}'s mirrors: {result.images} images ({result.blobs_pushed} blobs pushed, "
              f"{result.blobs_present} already there), {len(result.charts)} charts, {result.crds} CRD files"
              + (f" in {result.crds_dir}" if result.crds_dir else ""))
        for chart in result.charts:
            print(f"  chart {chart}")
        print(f"next: trainyard images lock {args.stack} (then images verify, pulumi up)")
        return EXIT_OK
    except fmt.ArchiveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_VIOLATIONS
    except airgap.AirgapError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_VIOLATIONS
    except RegistryUnreachable as exc:
        print(f"error: registry {exc.host} cannot be reached ({exc.reason}); nothing more was pushed\n"
              f"hint: --endpoint {exc.host}=https://HOST:PORT to reach it at another address", file=sys.stderr)
        return EXIT_VIOLATIONS
    except RegistryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_VIOLATIONS


def _client(endpoints: list[str], insecure: bool) -> RegistryClient:
    """The registry client of a command: TRAINYARD_REGISTRY_ENDPOINTS, then its --endpoint flags (endpoints.py)."""
    try:
        return registry_client(endpoints, insecure)
    except EndpointError as exc:
        raise UsageError(str(exc)) from None


def _endpoints(values: list[str]) -> dict[str, str]:
    """The --endpoint flags alone (``bom --format sync`` writes to them; the environment's mapping is for asking)."""
    try:
        return dict(parse_endpoint(value) for value in values)
    except EndpointError as exc:
        raise UsageError(str(exc)) from None


def _cmd_images_lock(args: argparse.Namespace) -> int:
    stack = open_stack(args.stack)
    if args.lock:
        images = stack.config.images.model_copy(update={"lock_file": str(Path(args.lock).resolve())})
        config = stack.config.model_copy(update={"images": images})
        stack = Stack(stack.name, stack.path, stack.root, config)
    client = _client(args.endpoint, args.insecure)
    try:
        result = refresh(stack, client, only=tuple(args.only_registry))
    except LockFileError as exc:
        raise UsageError(str(exc)) from None
    if args.only_registry and not result.asked:
        raise UsageError(f"--only-registry {', '.join(args.only_registry)}: no image of {stack.name} is under "
                         f"{'that host' if len(args.only_registry) == 1 else 'those hosts'} (its images are under "
                         f"{', '.join(sorted({ref.registry for ref in result.kept}))})")
    for ref, old, entry in result.changes:
        print(f"{ref.tagged}: {old.digest if old else '(none)'} ({old.source if old else 'missing'}) -> {entry.digest}")
    if not result.ok:
        print(f"error: {result.path}: not changed; {result.unresolved} of {len(result.asked)} images could not be "
              "resolved", file=sys.stderr)
        for host, (reason, count) in sorted(result.unreachable.items()):
            print(f"  registry {host} cannot be reached ({reason}): {count} images not resolved", file=sys.stderr)
        for error in result.errors:
            print(f"  {error}", file=sys.stderr)
        if result.unreachable:
            hosts = sorted(result.unreachable)
            print(f"hint: ask a reachable copy of the mirror: trainyard images lock {args.stack} --endpoint "
                  f"{hosts[0]}=https://HOST:PORT (--insecure for plain http); fill the mirror first with "
                  f"trainyard bom {args.stack} --format sync --out DIR (then run DIR/sync.sh)", file=sys.stderr)
        return EXIT_VIOLATIONS
    result.path.write_text(result.lock.dump(), encoding="utf-8")
    kept = f"; {len(result.kept)} images outside {', '.join(args.only_registry)} kept as they were" if result.kept else ""
    print(f"{result.path}: {len(result.asked)} images of {stack.name} locked from the registry "
          f"({len(result.changes)} changed){kept}")
    return EXIT_OK


def _cmd_images_verify(args: argparse.Namespace) -> int:
    stack = open_stack(args.stack)
    if (args.endpoint or args.insecure) and not args.in_mirror:
        raise UsageError("--endpoint and --insecure belong to --in-mirror (the lock checks ask no registry)")
    client = _client(args.endpoint, args.insecure) if args.in_mirror else None
    rendered = stack.render()
    with _chart_renderer(stack, rendered, args.render_charts) as renderer:
        found = unlocked_images(stack, renderer, rendered)
        # The program's mirror check (images.verify_in_mirror), the same images and the same message.
        mirror = mirror_report(stack, client, rendered, renderer) if client is not None else None
    errors = sum(p.error for p in found)
    failed = bool(errors) or (mirror is not None and not mirror.ok)
    code = EXIT_VIOLATIONS if failed else EXIT_OK
    if args.format == "json":
        doc = {"schema": "trainyard.images-verify/v1", "stack": stack.name, "ok": not failed, "exit_code": code,
               "protect_data": stack.config.lifecycle.protect_data, "errors": errors,
               "warnings": len(found) - errors,
               "problems": [{"reference": p.reference, "status": p.status,
                             "severity": "error" if p.error else "warning", "message": p.message,
                             "where": p.where or None}
                            for p in found]}
        if mirror is not None:
            doc["in_mirror"] = _mirror_json(mirror)
        print(json.dumps(doc, indent=2, sort_keys=True))
        return code
    for problem in found:
        print(f"{'error' if problem.error else 'warning'}: {problem.message}", file=sys.stderr)
    print(f"{stack.name}: {errors} errors, {len(found) - errors} warnings"
          + (" (stack protects data: placeholder and missing digests and images without one are refused)"
             if stack.config.lifecycle.protect_data else " (stack does not protect data: placeholders only warn)"))
    if mirror is not None:
        if not mirror.ok:
            print(f"error: {mirror.message}", file=sys.stderr)
        print(f"in the mirror: {mirror.summary()}")
    return code


def _mirror_json(report: MirrorReport) -> dict[str, object]:
    return {"ok": report.ok, "images": len(report.images), "registries": report.registries,
            "seconds": round(report.seconds, 3), "message": None if report.ok else report.message,
            "missing": [{"reference": str(m.image.ref), "url": m.url, "where": list(m.image.where),
                         "tag_digest": m.tag_digest, "sync": list(m.image.sync) if m.image.sync else None}
                        for m in report.missing],
            "unchecked": [{"host": h.host, "endpoint": h.endpoint, "reason": h.reason, "images": h.images,
                           "unreachable": h.unreachable} for h in report.unchecked],
            "errors": report.errors}


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def _cmd_images_build(args: argparse.Namespace) -> int:
    """``images build STACK``: the rehearsal's image factory (``rehearsal/factory.py``), then push and lock."""
    import time

    from trainyard.rehearsal import factory
    from trainyard.rehearsal.images import ImageError
    from trainyard.rehearsal.settings import Settings

    if args.lock and not args.push:
        raise UsageError("--lock needs --push: the lock takes the digests the registry serves")
    if args.push and args.push.rsplit(":", 1)[0] not in LOOPBACK_HOSTS:
        raise UsageError(f"--push {args.push}: the factory pushes over plain http to a loopback registry only "
                         "(127.0.0.1:PORT, e.g. the real nodes' registry)")
    stack = open_stack(args.stack)
    try:
        started = time.monotonic()
        built = factory.build_images(stack.config, Settings.from_env().tools_dir,
                                     Path(args.cache) if args.cache else None, args.component or factory.COMPONENTS,
                                     project=stack.root)
        for image in built:
            note = f"; {image.note}" if image.note else ""
            print(f"{image.reference} ({'cached' if image.cached else 'built'}: {image.layout}{note})")
        print(f"built {len(built)} images in {time.monotonic() - started:.1f}s", file=sys.stderr)
        if args.push:
            started = time.monotonic()
            factory.push_images(built, args.push)
            print(f"pushed to {args.push} in {time.monotonic() - started:.1f}s", file=sys.stderr)
            endpoints = " ".join(f"--endpoint {e}" for e in factory.endpoint_argument(built, args.push))
            if args.lock:
                result = factory.lock_pushed(stack, built, args.push)
                print(f"{result.path}: {len(result.asked)} images locked from {args.push} ({len(result.changes)} changed)")
            else:
                hosts = " ".join(f"--only-registry {h}" for h in sorted({b.target.registry for b in built}))
                print(f"next: trainyard images lock {args.stack} {hosts} {endpoints} --insecure")
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    help_text = "bill of materials: every image (upstream, mirror, digest), chart and CRD file of a stack"
    bom = subparsers.add_parser("bom", help=help_text, description=help_text)
    bom.add_argument("stack", metavar="STACK", help=STACK_HELP)
    bom.add_argument("--format", choices=("markdown", "json", "sync"), default="markdown",
                     help="markdown (default), json, or sync: the skopeo `sync --src yaml` list")
    bom.add_argument("--render-charts", action="store_true",
                     help="take each chart's images from `helm template` with the stack's values (needs helm)")
    bom.add_argument("--out", metavar="PATH", help="write to PATH (for --format sync: a directory of YAML files + sync.sh)")
    gap = bom.add_argument_group("air gap (docs/supply-chain.md, \"Air gap\")")
    gap.add_argument("--export", metavar="FILE", help="write every image, chart and CRD file of STACK to one archive")
    gap.add_argument("--from", dest="source_prefix", metavar="REGISTRY/PREFIX/",
                     help="with --export: pull images from this connected-side mirror (<prefix><upstream repository>) "
                          "instead of the upstream registries")
    gap.add_argument("--import", dest="import_file", metavar="FILE",
                     help="verify an archive, then push its images under STACK's mirror names, its charts to "
                          "charts.mirror, and write its CRDs to crds.mirror_dir")
    gap.add_argument("--crds-dir", metavar="DIR", help="with --import: write the CRD bundle here instead of crds.mirror_dir")
    gap.add_argument("--expect-manifest", metavar="SHA256",
                     help="with --import: refuse unless the archive's manifest has this sha256 (printed by --export)")
    gap.add_argument("--endpoint", action="append", default=[], metavar="HOST=URL",
                     help="reach registry HOST at URL (e.g. registry.example.com=http://127.0.0.1:5000), over "
                          f"{ENDPOINTS_ENV}; repeatable; with --format sync: the sync commands write to URL")
    gap.add_argument("--insecure", action="store_true", help="allow plain http endpoints and unverified TLS")
    bom.set_defaults(func=_cmd_bom)

    images = subparsers.add_parser("images", help="the image lock: fill it from the mirror, or verify it",
                                   description="The image lock (images.lock.yaml): reference -> digest in the mirror.")
    actions = images.add_subparsers(dest="images_command", required=True, metavar="ACTION")
    lock = actions.add_parser("lock", help="ask the mirror registry for every image's digest and rewrite the lock",
                              description="Ask the registry (OCI distribution API) for the digest of every image STACK "
                                          f"uses and rewrite the lock. Credentials: ${'{'}TRAINYARD_REGISTRY_USERNAME{'}'}, "
                                          f"${'{'}TRAINYARD_REGISTRY_PASSWORD{'}'}.")
    lock.add_argument("stack", metavar="STACK", help=STACK_HELP)
    lock.add_argument("--endpoint", action="append", default=[], metavar="HOST=URL",
                      help="ask URL for registry HOST (e.g. registry.example.com=http://127.0.0.1:5000), over "
                           f"{ENDPOINTS_ENV}; repeatable")
    lock.add_argument("--insecure", action="store_true", help="allow plain http endpoints and unverified TLS")
    lock.add_argument("--lock", metavar="FILE", help="lock file to write (default: the stack's images.lock_file)")
    lock.add_argument("--only-registry", action="append", default=[], metavar="HOST",
                      help="ask only for the images under registry HOST (e.g. the mirror host the rehearsal's image "
                           "factory filled); the other entries are kept as they are; repeatable")
    lock.set_defaults(func=_cmd_images_lock)
    build = actions.add_parser(
        "build", help="build the images the rehearsal runs in its cluster here (Kueue's, JobSet's, Trainer's, "
                      "SeaweedFS's and the object-store provisioner's), named as the stack renders them",
        description="The rehearsal's image factory (docs/supply-chain.md, \"The image factory\"): the controller images "
                    "from the binaries tools/build.sh built, laid out as upstream's Dockerfiles; SeaweedFS's from its "
                    "weed; the provisioner on the factory's Python base (pinned Debian packages and wheels); cached "
                    "by content; optionally pushed to a loopback registry and locked.")
    build.add_argument("stack", metavar="STACK", help=STACK_HELP + " (with images.registry_mirror)")
    build.add_argument("--component", action="append",
                       choices=("kueue", "jobset", "trainer", "cnpg", "seaweedfs", "kserve", "lora-peft", "barman-cloud",
                                "trainer-initializers", "mlflow", "peft-cpu"),
                       help="only this component's images (repeatable; seaweedfs: the server and the provisioner; "
                            "kserve: the controller and its chart's kube-rbac-proxy sidecar; lora-peft: the lab's CPU "
                            "stand-in for that runtime's image, ~1 GB, barman-cloud: the CNPG-I plugin's image and "
                            "its sidecar's (tools/build.sh barman-cloud), and trainer-initializers: Trainer's dataset "
                            "and model initializer images (from its Go module's Python code), mlflow: the MLflow chart's server "
                            "image (MLflow and its drivers from a wheel lock), peft-cpu: that serving runtime's image (the "
                            "lab image and its server), built only when named; "
                            "default all charts')")
    build.add_argument("--cache", metavar="DIR", help="layout cache (default $TRAINYARD_IMAGE_CACHE or "
                                                      "$XDG_CACHE_HOME/trainyard/images)")
    build.add_argument("--push", metavar="HOST:PORT", help="push to this plain-http loopback registry under the mirror names")
    build.add_argument("--lock", action="store_true",
                       help="with --push: fill the stack's lock for the mirror host from that registry")
    build.set_defaults(func=_cmd_images_build)
    verify = actions.add_parser("verify", help="list placeholder and missing digests and images rendered without one "
                                               "(exit 1 where the stack protects data)")
    verify.add_argument("stack", metavar="STACK", help=STACK_HELP)
    verify.add_argument("--render-charts", action="store_true",
                        help="also scan `helm template` of every chart with the stack's values (needs helm)")
    verify.add_argument("--format", choices=("text", "json"), default="text",
                        help="text (default) or json (trainyard.images-verify/v1); the exit code is the same")
    verify.add_argument("--in-mirror", action="store_true",
                        help="also ask each registry for every image the stack pulls, by the lock's digest (the "
                             "program's images.verify_in_mirror check): exit 1 naming each missing image and its "
                             "sync line")
    verify.add_argument("--endpoint", action="append", default=[], metavar="HOST=URL",
                        help=f"with --in-mirror: ask URL for registry HOST (over {ENDPOINTS_ENV}); repeatable")
    verify.add_argument("--insecure", action="store_true",
                        help="with --in-mirror: allow plain http endpoints and unverified TLS")
    verify.set_defaults(func=_cmd_images_verify)


if register not in EXTRA_COMMANDS:
    EXTRA_COMMANDS.append(register)
