"""``trainyard check`` and ``trainyard policy-config``: the offline runner of the policy rules.

``check STACK [FILE...]`` renders the stack, adds the manifests in FILEs (a tenant's TrainJob in
a pull request, say), gives each TrainJob the labels the cluster adds on create (Kueue's queue,
the tenant's default priority class: ``manifests/trainjob_defaults.py``, printed as ASSUMED) and
prints every finding: one block per finding for a terminal, or with
``--format json|sarif|junit`` a document for CI (``policy/report.py``). Exit 1 on a mandatory finding,
0 otherwise, 2 on bad input (a stack or a FILE that cannot be read), like every ``trainyard`` command,
whatever the format.

``policy-config STACK`` prints the stack's enforcement levels as a CrossGuard config file:
``pulumi preview --policy-pack policies --policy-pack-config <(trainyard policy-config prod)``.

Importing this module registers both subcommands with ``trainyard.cli``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from trainyard.cli import EXIT_OK, EXIT_VIOLATIONS, EXTRA_COMMANDS, UsageError
from trainyard.config.load import YamlLoader, yaml_shape_problem
from trainyard.manifests.gpu_operator import pod_security_exceptions
from trainyard.manifests.meta import Manifest
from trainyard.policy.data_cache import reviewed_exceptions as data_cache_exceptions
from trainyard.policy.report import CheckReport, Source, format_blocks, to_json, to_junit, to_sarif, to_text
from trainyard.project import open_stack

if TYPE_CHECKING:
    from trainyard.policy.model import Finding

# The rules are imported by the commands that run them: every `trainyard` command registers
# these subcommands, and start-up time is most of a render.

# Kinds without a namespace; --namespace is not applied to them.
CLUSTER_SCOPED = frozenset({
    "Namespace", "Node", "PersistentVolume", "StorageClass", "PriorityClass", "CustomResourceDefinition",
    "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ClusterQueue", "ResourceFlavor", "Cohort",
    "Topology", "WorkloadPriorityClass", "ClusterTrainingRuntime", "AdmissionCheck",
})
# Deeper than any manifest (a CRD's schema nests ~40 levels), shallow enough for recursive rules.
MAX_MANIFEST_DEPTH = 120
FORMATS = ("text", "json", "sarif", "junit")


def load_manifests(files: list[str], namespace: str | None = None) -> list[Manifest]:
    """Every document of every FILE; UsageError names the file, the document and what is wrong."""
    return [manifest for _, manifest in load_sourced_manifests(files, namespace)]


def load_sourced_manifests(files: list[str], namespace: str | None = None) -> list[tuple[str, Manifest]]:
    """(where, manifest) for every document of every FILE; where is ``FILE (document N)``."""
    return [(where, manifest) for where, _, manifest in load_located_manifests(files, namespace)]


def load_located_manifests(files: list[str], namespace: str | None = None) -> list[tuple[str, Source, Manifest]]:
    """(where, source, manifest) for every document of every FILE; source is the file and the document's first line."""
    out: list[tuple[str, Source, Manifest]] = []
    for file in files:
        try:
            docs = _documents(Path(file).read_bytes().decode("utf-8"), file)
        except OSError as exc:
            raise UsageError(f"{file}: (file): cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"{file}: (file): not UTF-8 text (byte {exc.start})") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{file}:{mark.line + 1}" if mark is not None else file
            raise UsageError(f"{where}: (yaml): not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
        except (ValueError, RecursionError) as exc:  # e.g. an integer of more than 4300 digits
            raise UsageError(f"{file}: (yaml): not valid YAML: {exc}") from None
        for index, (line, doc) in enumerate((line, d) for line, d in docs if d is not None):
            where = f"{file} (document {index + 1})"
            out.append((where, Source(file, line), _manifest(doc, where, namespace)))
    return out


_PLAIN_SEGMENT = re.compile(r"^[A-Za-z_][-\w./]*$")


def field_path(parts: Iterable[str | int]) -> str:
    """``spec.nodeLabels["odd key"][0]``: names as dotted segments, odd keys quoted, indices in brackets."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_SEGMENT.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


def check_schemas(sourced: list[tuple[str, Manifest]], crds: Sequence[Manifest]) -> None:
    """Refuse extra manifests the API server would refuse: ObjectMeta of every one, and custom resources
    of the stack's CRDs against their schemas (the rules read such fields and trust their types)."""
    from trainyard.schemas import crd_validators, object_meta_errors

    validators = crd_validators(crds)
    for where, manifest in sourced:
        problems = [(field_path(path), message) for path, message in object_meta_errors(manifest)]
        validator = validators.get((manifest["apiVersion"], manifest["kind"]))
        if validator is not None:
            problems += [(field_path(e.absolute_path), e.message) for e in validator.iter_errors(manifest)]
        if problems:
            path, message = sorted(problems)[0]
            raise UsageError(f"{where}: {path or '(document)'}: {message[:300]} (the API server would refuse it)")


def _documents(text: str, file: str) -> list[tuple[int, Any]]:
    """(first line, document) of every document of a multi-document YAML text, refusing what a manifest cannot be
    (see parse_yaml)."""
    loader = YamlLoader(text)
    docs = []
    try:
        while loader.check_node():
            node = loader.get_node()
            problem = yaml_shape_problem(node, max_depth=MAX_MANIFEST_DEPTH) if node is not None else None
            if problem is not None:
                raise UsageError(problem.render(file))
            line = node.start_mark.line + 1 if node is not None else 0
            docs.append((line, loader.construct_document(node)))
    finally:
        loader.dispose()
    return docs


def _manifest(doc: Any, where: str, namespace: str | None) -> Manifest:
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: (document): a manifest is a mapping with apiVersion, kind and metadata")
    for field in ("apiVersion", "kind"):
        if not isinstance(doc.get(field), str) or not doc[field]:
            raise UsageError(f"{where}: {field}: required field is missing")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise UsageError(f"{where}: metadata.name: required field is missing")
    if meta.get("namespace") is not None and not isinstance(meta["namespace"], str):
        raise UsageError(f"{where}: metadata.namespace: must be a string")
    # The rules read manifests as the API server would accept them: JSON data, string keys.
    problem = _non_json_value(doc)
    if problem:
        raise UsageError(f"{where}: {problem[0] or '(document)'}: {problem[1]}")
    if namespace and doc["kind"] not in CLUSTER_SCOPED and not meta.get("namespace"):
        meta["namespace"] = namespace
    return doc


def _non_json_value(doc: Any) -> tuple[str, str] | None:
    """(field path, reason) of the first value the API server could not receive as JSON, if any."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    return f"{path}[{key!r}]".lstrip("."), "keys are strings"
                stack.append((f"{path}.{key}", item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            return path.lstrip("."), f"{value} is not a number"
        elif not (value is None or isinstance(value, str | int | float | bool)):
            return path.lstrip("."), f"a {type(value).__name__} value (YAML tag) is not JSON"
    return None


def format_table(findings: list[Finding]) -> str:
    """The findings for a terminal (``policy.report.format_blocks``: one block per finding, nothing cut)."""
    return format_blocks(findings)


def _cmd_check(args: argparse.Namespace) -> int:
    from trainyard.manifests.trainjob_defaults import AddedLabel, labels_added_on_create, with_labels
    from trainyard.policy.engine import evaluate, safe_object_id
    from trainyard.policy.model import Context
    from trainyard.policy.rules import RULES

    stack = open_stack(args.stack)
    located = load_located_manifests(args.files, args.namespace)
    rendered = stack.render()
    check_schemas([(where, manifest) for where, _, manifest in located], rendered.crds)
    # The rules see each TrainJob as the API server stores it: with the labels Kueue and Trainyard's
    # admission add on create (manifests/trainjob_defaults.py), each one named in the report.
    given = [manifest for _, _, manifest in located]
    cluster = [*rendered.all_objects, *given]
    assumed: dict[str, tuple[AddedLabel, ...]] = {}
    extra = []
    for manifest in given:
        added = labels_added_on_create(stack.config, cluster, manifest)
        if added:
            assumed[safe_object_id(manifest)] = added
        extra.append(with_labels(manifest, added))
    findings = evaluate(stack.config, rendered, extra)
    ctx = Context(stack.config)
    exceptions = [f"Namespace/{e.namespace} enforces Pod Security {e.level} ({e.reason})"
                  for e in pod_security_exceptions(stack.config)]
    report = CheckReport(
        stack.name, stack.path, stack.root, tuple(findings), tuple((rule, ctx.level(rule)) for rule in RULES),
        len(rendered.all_objects), len(extra), {safe_object_id(m): source for _, source, m in located},
        (*exceptions, *data_cache_exceptions(stack.config)), assumed)
    if args.format == "json":
        text = json.dumps(to_json(report), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    elif args.format == "sarif":
        text = json.dumps(to_sarif(report), indent=2, ensure_ascii=False) + "\n"
    elif args.format == "junit":
        text = to_junit(report)
    else:
        text = to_text(report)
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{args.out}: --out: cannot write: {exc.strerror}") from None
        print(report.summary_line())
    else:
        print(text, end="")
    return EXIT_VIOLATIONS if report.mandatory else EXIT_OK


def _cmd_policy_config(args: argparse.Namespace) -> int:
    from trainyard.policy.crossguard import policy_config

    stack = open_stack(args.stack)
    print(json.dumps(policy_config(stack.config), indent=2, sort_keys=True))
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    check = subparsers.add_parser(
        "check", help="run the policy rules on the rendered stack (and extra manifests); exit 1 on a mandatory finding",
        description="Render STACK, add the manifests in FILEs (e.g. a tenant's TrainJob in a pull request), run every "
                    "policy rule and print the findings. Exit 1 on a mandatory finding, 2 on bad input, else 0.")
    check.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
    check.add_argument("files", metavar="FILE", nargs="*", help="extra manifests (YAML, multi-document) to check too")
    check.add_argument("-n", "--namespace", help="namespace for extra namespaced manifests that name none")
    check.add_argument("--format", choices=FORMATS, default="text",
                       help="text (default: one block per finding), json (trainyard.check/v1), sarif (SARIF 2.1.0) "
                            "or junit (JUnit XML); the exit code is the same for every format")
    check.add_argument("--out", metavar="FILE", help="write the report to FILE (the summary line still goes to stdout)")
    check.set_defaults(func=_cmd_check)
    config = subparsers.add_parser(
        "policy-config", help="print the stack's rule enforcement levels as a CrossGuard --policy-pack-config file")
    config.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
    config.set_defaults(func=_cmd_policy_config)


EXTRA_COMMANDS.append(register)
