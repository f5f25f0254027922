"""What changed between two sets of objects: per object added, removed or changed, per field old -> new.

The model is shared by ``trainyard diff`` (two rendered platforms) and ``trainyard
preview-comment`` (a Pulumi preview), so both print the same review. It never holds a
secret: values under credential-like keys, Secret data and Pulumi's ``[secret]``
placeholders are stored as ``<redacted>`` as the change is recorded; a rotated secret
still shows up as a change, but not its value.

Lists are compared item by item. Items that carry a unique ``name`` (containers, flavors,
resources, replicated jobs, volumes) are matched by that name, so a path reads
``flavors[h100].resources[nvidia.com/gpu].nominalQuota`` and reordering does not count as
a change; other lists are compared by position, as Kubernetes reads them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import yaml

from trainyard import yamlio
from trainyard.manifests import policy_params
from trainyard.manifests.installs import COMPONENT_LABEL
from trainyard.manifests.meta import TENANT_LABEL, Manifest, object_key
from trainyard.review.render import REDACTED, is_placeholder, is_secret_key, redact, secret_value_shown

Action = Literal["added", "removed", "changed", "replaced"]
ACTIONS: Final = ("added", "removed", "changed", "replaced")

QUEUES = "Queues and quotas"
RUNTIMES = "Runtimes"
TENANTS = "Tenants"
NETWORK = "Network and security"
INSTALLS = "Installs"
OTHER = "Other"
CONCERNS: Final = (QUEUES, RUNTIMES, TENANTS, NETWORK, INSTALLS, OTHER)

# Pulumi replaces secret values with this string in `preview --json`.
# Ref: pulumi/pulumi pkg/backend/display/json.go (massagePropertyValue).
PULUMI_SECRET = "[secret]"  # noqa: S105 - a placeholder, not a password

_RUNTIME_KINDS = frozenset({"ClusterTrainingRuntime", "TrainingRuntime", "ClusterServingRuntime", "ServingRuntime"})
_QUOTA_KINDS = frozenset({"ResourceQuota", "LimitRange"})
_SECURITY_KINDS = frozenset({
    "NetworkPolicy", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Secret",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "PodDisruptionBudget",
})
_SECURITY_GROUPS = frozenset({"networking.k8s.io", "rbac.authorization.k8s.io", "admissionregistration.k8s.io"})
_SIMPLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class _Absent:
    """The value of a field on the side where it does not exist."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Final = _Absent()


@dataclass(frozen=True)
class FieldChange:
    """One field: its path in the object, the value before and after (ABSENT where it did not exist)."""

    path: str
    old: Any
    new: Any


@dataclass(frozen=True)
class ObjectChange:
    """One object (or chart release, or Pulumi resource) that is added, removed, changed or replaced."""

    action: Action
    group: str
    kind: str
    namespace: str
    name: str
    concern: str
    tenant: str | None = None
    fields: tuple[FieldChange, ...] = ()
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"

    def sort_key(self) -> tuple[int, int, str, str, str, str]:
        return (CONCERNS.index(self.concern), ACTIONS.index(self.action), self.kind, self.group, self.namespace,
                self.name)


def concern_of(group: str, kind: str, labels: Mapping[str, Any] | None = None, name: str = "") -> str:
    """Which part of the review an object belongs to, as an admin reads it. A tenant's admission params
    (the ``trainyard-policy`` TenantPolicy) are security: they say what the tenant may read and run."""
    labels = labels or {}
    if group == "kueue.x-k8s.io" or kind in _QUOTA_KINDS:
        return QUEUES
    if kind in _RUNTIME_KINDS:
        return RUNTIMES
    if kind in _SECURITY_KINDS or group in _SECURITY_GROUPS or is_policy_params(kind, name):
        return NETWORK
    if TENANT_LABEL in labels:
        return TENANTS
    if kind in {"CustomResourceDefinition", "Chart"} or COMPONENT_LABEL in labels or group == "helm.sh":
        return INSTALLS
    return OTHER


def is_policy_params(kind: str, name: str) -> bool:
    return kind == policy_params.KIND and name == policy_params.NAME


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    meta = (obj or {}).get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return dict(labels) if isinstance(labels, Mapping) else {}


def key_segment(key: str) -> str:
    return f".{key}" if _SIMPLE_KEY.match(key) else f"[{key}]"


def join_path(prefix: str, segment: str) -> str:
    return (prefix + segment).lstrip(".")


_EMPTY_LIKE: Final[dict[type, Any]] = {dict: {}, list: []}


def _named(items: Sequence[Any], id_keys: Sequence[str]) -> tuple[str, dict[str, Any]] | None:
    """Items keyed by the first of ``id_keys`` that every item (a mapping) carries as a unique string."""
    if not items or not all(isinstance(i, Mapping) for i in items):
        return None
    for key in id_keys:
        if all(isinstance(i.get(key), str) for i in items):
            named = {i[key]: i for i in items}
            if len(named) == len(items):
                return key, named
    return None


def _hidden(value: Any) -> Any:
    """A credential-like value as it may be shown: strings redacted, structures redacted inside."""
    if isinstance(value, str):
        return value if is_placeholder(value) else REDACTED
    return _safe(value)


def _safe(value: Any) -> Any:
    """A value fit to show: Pulumi's secret placeholder and credential-like keys inside it redacted."""
    if value is ABSENT:
        return value
    if value == PULUMI_SECRET:
        return REDACTED
    return redact(value)


def _yaml_mapping(text: str) -> dict[str, Any] | None:
    """The mapping an embedded document holds, or None. JSON first: the object store's plan and identities
    are JSON (600 KB on 200 tenants), which ``json`` reads ~20x faster than the YAML constructor."""
    doc: Any = None
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
    if doc is None:
        try:
            doc = yamlio.safe_load(text)
        except yaml.YAMLError:
            return None
    return doc if isinstance(doc, dict) else None


def _json_object(text: str) -> dict[str, Any] | None:
    """The JSON object a string holds whole, or None."""
    if not text.startswith("{"):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def diff_values(old: Any, new: Any, path: str = "", *, secret: bool = False,
                id_keys: Sequence[str] = ("name",)) -> list[FieldChange]:
    """Every leaf that differs between ``old`` and ``new`` (either may be ABSENT), values redacted.

    List items are matched by the first of ``id_keys`` they all carry uniquely, else by position.
    """
    if old == new:
        return []
    if secret and (isinstance(old, str) or isinstance(new, str)):
        # Same rule as ``render.redact``: strings under credential-like keys are never shown.
        return [FieldChange(path or "(value)", _hidden(old), _hidden(new))]
    # A structure added or removed whole is listed leaf by leaf, like one that changed.
    before = _EMPTY_LIKE.get(type(new), ABSENT) if old is ABSENT and new else old
    after = _EMPTY_LIKE.get(type(old), ABSENT) if new is ABSENT and old else new
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out: list[FieldChange] = []
        for key in sorted({*before, *after}, key=str):
            out += diff_values(before.get(key, ABSENT), after.get(key, ABSENT), join_path(path, key_segment(str(key))),
                               secret=is_secret_key(str(key)), id_keys=id_keys)
        return out
    if isinstance(before, list) and isinstance(after, list):
        return _diff_lists(before, after, path, whole=(old, new), id_keys=id_keys)
    if isinstance(old, str) and isinstance(new, str):
        embedded = _embedded_documents(old, new)
        if embedded is not None:
            return diff_values(embedded[0], embedded[1], join_path(path, embedded[2]), id_keys=id_keys)
    return [FieldChange(path or "(value)", _safe(old), _safe(new))]


def _embedded_documents(old: str, new: str) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    """Both sides' documents where two strings hold one each, and the path segment naming the format.

    Embedded YAML (e.g. the Kueue manager configuration handed to its chart) spans lines; a JSON object on
    one line is a CEL map literal of an admission policy (the flavors' nodes, the runtimes' figures) or a
    chart's JSON value. Both diff by field, so a change deep inside reads as its own path.
    """
    if "\n" in old and "\n" in new:
        old_doc, new_doc = _yaml_mapping(old), _yaml_mapping(new)
        if old_doc is not None and new_doc is not None:
            return old_doc, new_doc, "(yaml)"
    old_json, new_json = _json_object(old), _json_object(new)
    if old_json is not None and new_json is not None:
        return old_json, new_json, "(json)"
    return None


def _diff_lists(old: list[Any], new: list[Any], path: str, whole: tuple[Any, Any],
                id_keys: Sequence[str]) -> list[FieldChange]:
    old_named, new_named = _named(old, id_keys), _named(new, id_keys)
    # One side empty (or absent): key the other side's items as it would be keyed.
    if not old and new_named is not None:
        old_named = (new_named[0], {})
    if not new and old_named is not None:
        new_named = (old_named[0], {})
    if old_named is not None and new_named is not None and old_named[0] == new_named[0]:
        key, old_items, new_items = old_named[0], old_named[1], new_named[1]
        out: list[FieldChange] = []
        for name in sorted({*old_items, *new_items}):
            item_path = f"{path}[{name}]"
            changes = diff_values(old_items.get(name, ABSENT), new_items.get(name, ABSENT), item_path, id_keys=id_keys)
            whole_item = name not in old_items or name not in new_items
            # The identity of an item added or removed whole is already in its path.
            out += [c for c in changes if not (whole_item and c.path == f"{item_path}.{key}")]
        return out
    if all(not isinstance(i, Mapping | list) for i in (*old, *new)):
        return [FieldChange(path, _safe(whole[0]), _safe(whole[1]))]  # a list of scalars reads best whole
    out = []
    for index in range(max(len(old), len(new))):
        before = old[index] if index < len(old) else ABSENT
        after = new[index] if index < len(new) else ABSENT
        out += diff_values(before, after, f"{path}[{index}]", id_keys=id_keys)
    return out


def diff_manifests(old: Manifest, new: Manifest) -> list[FieldChange]:
    """Field changes of one object. A Secret's data is compared by value and always recorded redacted."""
    if "Secret" not in (old.get("kind"), new.get("kind")):
        return diff_values(old, new)
    hidden = ("data", "stringData")
    out = diff_values({k: v for k, v in old.items() if k not in hidden}, {k: v for k, v in new.items() if k not in hidden})
    for field in hidden:
        before, after = old.get(field) or {}, new.get(field) or {}
        for key in sorted({*before, *after}):
            old_value, new_value = before.get(key, ABSENT), after.get(key, ABSENT)
            # Placeholders and configuration keys are shown; anything else only as <redacted>.
            shown = all(v is ABSENT or secret_value_shown(o, str(key), v)
                        for o, v in ((old, old_value), (new, new_value)))
            out += diff_values(old_value, new_value, field + key_segment(str(key)), secret=not shown)
    return sorted(out, key=lambda c: c.path)


def object_change(action: Action, obj: Manifest, fields: Iterable[FieldChange] = (), note: str = "") -> ObjectChange:
    group, kind, namespace, name = object_key(obj)
    labels = labels_of(obj)
    return ObjectChange(action, group, kind, namespace, name, concern_of(group, kind, labels, name),
                        labels.get(TENANT_LABEL), tuple(fields), note)


def diff_objects(base: Iterable[Manifest], head: Iterable[Manifest]) -> tuple[list[ObjectChange], int]:
    """Changes from ``base`` to ``head`` matched by object identity, sorted; and the count of unchanged objects."""
    before = {object_key(o): o for o in base}
    after = {object_key(o): o for o in head}
    changes: list[ObjectChange] = []
    unchanged = 0
    for key in sorted({*before, *after}):
        old, new = before.get(key), after.get(key)
        if old is None and new is not None:
            changes.append(object_change("added", new))
        elif new is None and old is not None:
            changes.append(object_change("removed", old))
        elif old is not None and new is not None:
            fields = diff_manifests(old, new)
            if fields:
                changes.append(object_change("changed", new, fields))
            else:
                unchanged += 1
    return sorted(changes, key=ObjectChange.sort_key), unchanged
