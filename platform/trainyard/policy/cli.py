"""``trainyard check`` and ``trainyard policy-config``: the offline runner of the policy rules.

``check STACK [FILE...]`` renders the stack, adds the manifests in FILEs (a tenant's TrainJob in
a pull request, say) and prints every finding as a table. Exit 1 on a mandatory finding, 0
otherwise, 2 on bad input (a stack or a FILE that cannot be read), like every ``trainyard`` command.

``policy-config STACK`` prints the stack's enforcement levels as a CrossGuard config file:
``pulumi preview --policy-pack policies --policy-pack-config <(trainyard policy-config prod)``.

Importing this module registers both subcommands with ``trainyard.cli``.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path
from typing import Any

import yaml

from trainyard.cli import EXIT_OK, EXIT_VIOLATIONS, EXTRA_COMMANDS, UsageError
from trainyard.manifests.gpu_operator import pod_security_exceptions
from trainyard.manifests.meta import Manifest
from trainyard.policy.crossguard import policy_config
from trainyard.policy.engine import disabled_rules, evaluate
from trainyard.policy.model import Finding
from trainyard.policy.rules import RULES
from trainyard.project import open_stack

# Kinds without a namespace; --namespace is not applied to them.
CLUSTER_SCOPED = frozenset({
    "Namespace", "Node", "PersistentVolume", "StorageClass", "PriorityClass", "CustomResourceDefinition",
    "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ClusterQueue", "ResourceFlavor", "Cohort",
    "Topology", "WorkloadPriorityClass", "ClusterTrainingRuntime", "AdmissionCheck",
})
WRAP = {"message": 64, "hint": 56}
COLUMNS = ("rule", "severity", "object", "message", "hint")


def load_manifests(files: list[str], namespace: str | None = None) -> list[Manifest]:
    """Every document of every FILE; UsageError names the file, the document and what is wrong."""
    out: list[Manifest] = []
    for file in files:
        try:
            docs = list(yaml.safe_load_all(Path(file).read_text(encoding="utf-8")))
        except OSError as exc:
            raise UsageError(f"{file}: cannot read: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{file}:{mark.line + 1}" if mark is not None else file
            raise UsageError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
        for index, doc in enumerate(d for d in docs if d is not None):
            out.append(_manifest(doc, f"{file} (document {index + 1})", namespace))
    return out


def _manifest(doc: Any, where: str, namespace: str | None) -> Manifest:
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: a manifest is a mapping with apiVersion, kind and metadata")
    for field in ("apiVersion", "kind"):
        if not isinstance(doc.get(field), str) or not doc[field]:
            raise UsageError(f"{where}: {field}: required field is missing")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise UsageError(f"{where}: metadata.name: required field is missing")
    if namespace and doc["kind"] not in CLUSTER_SCOPED and not meta.get("namespace"):
        meta["namespace"] = namespace
    return doc


def format_table(findings: list[Finding]) -> str:
    rows = [(f.rule_id, f.severity, f.object_id, f.message, f.hint) for f in findings]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(COLUMNS[:3])]
    widths += [WRAP["message"], WRAP["hint"]]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip()]
    for row in rows:
        cells = [[text] for text in row[:3]] + [textwrap.wrap(row[3], WRAP["message"]) or [""],
                                                textwrap.wrap(row[4], WRAP["hint"]) or [""]]
        for n in range(max(len(c) for c in cells)):
            parts = [(c[n] if n < len(c) else "").ljust(w) for c, w in zip(cells, widths, strict=True)]
            lines.append("  ".join(parts).rstrip())
    return "\n".join(lines) + "\n"


def _cmd_check(args: argparse.Namespace) -> int:
    stack = open_stack(args.stack)
    extra = load_manifests(args.files, args.namespace)
    rendered = stack.render()
    findings = evaluate(stack.config, rendered, extra)
    if findings:
        print(format_table(findings), end="")
    mandatory = sum(f.severity == "mandatory" for f in findings)
    disabled = disabled_rules(stack.config)
    print(f"{stack.name}: {mandatory} mandatory, {len(findings) - mandatory} advisory findings "
          f"({len(RULES)} rules over {len(rendered.all_objects)} rendered + {len(extra)} extra objects"
          + (f"; disabled by the stack: {', '.join(disabled)}" if disabled else "") + ")")
    for exception in pod_security_exceptions(stack.config):
        print(f"reviewed exception: Namespace/{exception.namespace} enforces Pod Security {exception.level} "
              f"({exception.reason})")
    return EXIT_VIOLATIONS if mandatory else EXIT_OK


def _cmd_policy_config(args: argparse.Namespace) -> int:
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
    check.set_defaults(func=_cmd_check)
    config = subparsers.add_parser(
        "policy-config", help="print the stack's rule enforcement levels as a CrossGuard --policy-pack-config file")
    config.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
    config.set_defaults(func=_cmd_policy_config)


EXTRA_COMMANDS.append(register)
