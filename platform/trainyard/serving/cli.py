"""``trainyard promote``: registers the subcommand with ``trainyard.cli`` (see ``trainyard.serving.promote``)."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from trainyard.cli import EXIT_OK, EXIT_VIOLATIONS, EXTRA_COMMANDS, UsageError
from trainyard.manifests.runtimes import RuntimeFileError
from trainyard.policy.cli import format_table
from trainyard.policy.engine import evaluate
from trainyard.project import open_stack
from trainyard.serving.promote import (
    DEFAULT_REGISTRY_TIMEOUT,
    ModelRef,
    PromoteError,
    Resources,
    apply,
    base_from_tags,
    bound_registry_requests,
    inference_service,
    resolve,
    to_file,
)

TOOLS_KUBECTL = Path(os.environ.get("TRAINYARD_TOOLS_DIR") or Path.home() / ".cache" / "trainyard" / "tools") / "bin" / "kubectl"


def _model_ref(client: object, spec: str) -> ModelRef:
    """NAME:VERSION or NAME@ALIAS."""
    if "@" in spec:
        name, alias = spec.split("@", 1)
        return resolve(client, name, None, alias)
    name, sep, version = spec.partition(":")
    if not sep or not version:
        raise PromoteError(f"--base-model {spec!r}: give NAME:VERSION or NAME@ALIAS")
    return resolve(client, name, version, None)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{value!r}: give more than 0 and at most 3600 seconds")
    return seconds


def _cmd_promote(args: argparse.Namespace) -> int:
    from mlflow.tracking import MlflowClient

    stack = open_stack(args.stack)
    config = stack.config
    if config.serving is None:
        raise UsageError(f"stack {stack.name} has no serving section")
    tenant = next((t for t in config.tenants if t.name == args.tenant), None)
    if tenant is None:
        raise UsageError(f"--tenant {args.tenant!r} is not a tenant of {stack.name} "
                         f"({', '.join(t.name for t in config.tenants)})")
    tracking_uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not tracking_uri:
        raise UsageError("no MLflow server: set --tracking-uri or MLFLOW_TRACKING_URI (credentials: "
                         "MLFLOW_TRACKING_USERNAME/PASSWORD, the tenant's trainyard-mlflow Secret)")
    try:
        bound_registry_requests(tracking_uri, args.timeout)
    except PromoteError as exc:
        raise UsageError(str(exc)) from None
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    try:
        ref = resolve(client, args.model, args.version, args.alias)
        # An adapter the lab's program registered names its base model in its tags (docs/lab.md).
        base = _model_ref(client, args.base_model) if args.base_model else base_from_tags(ref)
        name = args.name or args.model.lower().replace("_", "-").replace(".", "-")
        isvc = inference_service(config, stack.root, tenant, ref, name=name, runtime=args.runtime,
                                 resources=Resources(gpus=args.gpus, cpu=args.cpu, memory=args.memory),
                                 base=base, expose=args.expose, pool=args.pool)
    except (PromoteError, RuntimeFileError) as exc:
        raise UsageError(str(exc)) from None
    print(f"{args.model} version {ref.version}" + (f" (alias {ref.alias})" if ref.alias else "")
          + f": {ref.location}")
    findings = evaluate(config, stack.render(), [isvc])
    mandatory = [f for f in findings if f.severity == "mandatory"]
    if findings:
        print(format_table(findings), end="")
    if mandatory:
        print(f"not written: {len(mandatory)} mandatory findings")
        return EXIT_VIOLATIONS
    out = Path(args.out) if args.out else stack.root / "out" / "promote" / f"{tenant.name}-{name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_file(isvc, ref, base), encoding="utf-8")
    print(f"wrote {out} (InferenceService {tenant.namespace_name}/{name}, runtime "
          f"{isvc['spec']['predictor']['model']['runtime']}; {len(findings)} policy findings)")
    if args.apply:
        kubectl = args.kubectl or (str(TOOLS_KUBECTL) if TOOLS_KUBECTL.is_file() else shutil.which("kubectl") or "kubectl")
        try:
            print(apply(out, kubectl, args.kubeconfig, args.context))
        except PromoteError as exc:
            raise UsageError(str(exc)) from None
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cmd = subparsers.add_parser(
        "promote", help="write (and optionally apply) an InferenceService for a registered MLflow model version",
        description="Resolve a registered model version (or alias) in MLflow to its s3:// location in the tenant's "
                    "model bucket and write a reviewed InferenceService for it. Exit 1 on a mandatory policy finding, "
                    "2 on bad input (unknown model, location outside the tenant's bucket, unapproved runtime).")
    cmd.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
    cmd.add_argument("--tenant", required=True, help="the tenant whose model and namespace these are")
    cmd.add_argument("--model", required=True, help="registered model name")
    which = cmd.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", help="model version number")
    which.add_argument("--alias", help="model version alias (e.g. champion)")
    cmd.add_argument("--base-model", metavar="NAME:VERSION|NAME@ALIAS",
                     help="the promoted version is a LoRA adapter: serve it on this registered base model "
                          "(default: the base its trainyard.base_model.* tags name, as lora-peft registers them)")
    cmd.add_argument("--name", help="InferenceService name (default: the model name)")
    cmd.add_argument("--runtime", help="approved ClusterServingRuntime (default: the stack's serving.default_runtime)")
    cmd.add_argument("--gpus", type=int, default=1, help="nvidia.com/gpu limit (default 1; 0 for CPU)")
    cmd.add_argument("--cpu", default="4", help="CPU request and limit (default 4)")
    cmd.add_argument("--memory", default="32Gi", help="memory request and limit (default 32Gi)")
    cmd.add_argument("--pool", help="the node pool the predictor runs in: its node labels as nodeSelector, its taints "
                                    "tolerated (default with --gpus 0: the stack's first CPU pool)")
    cmd.add_argument("--expose", action="store_true",
                     help="no cluster-local label (only for serving.exposure.public_tenants)")
    cmd.add_argument("--tracking-uri", help="MLflow server (default: $MLFLOW_TRACKING_URI)")
    cmd.add_argument("--timeout", type=_seconds, default=DEFAULT_REGISTRY_TIMEOUT, metavar="SECONDS",
                     help=f"give up on an unreachable or silent registry after SECONDS per request (default "
                          f"{DEFAULT_REGISTRY_TIMEOUT})")
    cmd.add_argument("--out", metavar="FILE",
                     help="where to write the InferenceService (default out/promote/<tenant>-<name>.yaml)")
    cmd.add_argument("--apply", action="store_true", help="apply the written file with the tenant's kubeconfig/context")
    cmd.add_argument("--kubeconfig", help="the tenant's kubeconfig (with --apply)")
    cmd.add_argument("--context", help="the tenant's kubeconfig context (with --apply)")
    cmd.add_argument("--kubectl", help="kubectl binary (default: the tools' kubectl, else PATH)")
    cmd.set_defaults(func=_cmd_promote)


EXTRA_COMMANDS.append(register)
