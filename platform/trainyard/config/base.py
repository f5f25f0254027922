"""The shared vocabulary of the stack configuration: field types, the base model and the field error.

Every section of ``config/`` builds on these and on nothing else of ``config/`` (so a section never
imports the platform model that assembles it): names, label keys and values, quantities, durations,
int32 counts, image prefixes, project paths; ``Model`` (frozen, unknown fields refused); and
``FieldError``, a cross-field violation that knows its field path. Each type carries the API server's
limit for the field it ends up in.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from trainyard.quantity import parse_quantity

# Ref: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A qualified label key: optional DNS-1123 subdomain prefix, then a name segment.
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$")
# A registry host (with an optional port) and at least the '/' that ends it.
_IMAGE_PREFIX = re.compile(
    r"^(?P<host>[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?)/(?P<path>([a-z0-9]([-a-z0-9._]*[a-z0-9])?/)*)$"
)
# Registries anyone can push to: the host alone approves every image of every user.
# Ref: https://docs.docker.com/reference/cli/docker/image/pull/ (docker.io is the default registry)
PUBLIC_REGISTRIES = frozenset({
    "docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com", "ghcr.io", "quay.io", "gcr.io",
    "nvcr.io", "registry.k8s.io", "k8s.gcr.io", "public.ecr.aws", "mcr.microsoft.com", "registry.gitlab.com",
})
# Kubernetes API integer fields (int32): priorities, thresholds, counts that become object fields.
# Ref: kueue CRDs (workloadpriorityclasses value, clusterqueues maxPriorityThreshold: format int32)
INT32_MAX = 2**31 - 1

HOSTNAME_LABEL = "kubernetes.io/hostname"


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS1123_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a valid DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )
    return value


def _label_key(value: str) -> str:
    prefix, _, name = value.rpartition("/")
    if len(name) > 63 or len(prefix) > 253 or not _LABEL_KEY.match(value):
        raise ValueError(f"{value!r} is not a valid label key (optional DNS prefix of at most 253 and '/', "
                         "then a name of at most 63)")
    return value


def _label_value(value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(f"{value!r} is not a valid label value")
    return value


def _quantity(value: int | str) -> int | str:
    # Kubernetes keeps quantities as scaled int64; Kueue reads them as int64 (Value/MilliValue).
    if parse_quantity(value) > 2**63 - 1:
        raise ValueError(f"{value!r} is out of range for a Kubernetes quantity (at most 2^63-1)")
    return value


def _project_relative(value: str) -> str:
    parts = PurePosixPath(value).parts
    if not value or value.startswith("/") or ".." in parts or "\\" in value:
        raise ValueError(f"{value!r} must be a directory inside the project (relative, no '..'): "
                         "runtimes are reviewed with the stack")
    return value


def _image_prefix(value: str) -> str:
    """An approved-registry or mirror prefix: a registry host, '/', then whole path segments."""
    if any(ch in value for ch in "*?[]"):
        raise ValueError(f"{value!r}: image prefixes are matched literally (startsWith); wildcards never match")
    match = _IMAGE_PREFIX.match(value)
    if not match:
        raise ValueError(
            f"{value!r} is not an image prefix: a registry host, '/', then optional path segments each ending in '/' "
            "(e.g. 'registry.example.com/ml/'); without the final '/' it would also match "
            f"'{value}-evil/...' or '{value}.evil.io/...'"
        )
    host = match["host"]
    if "." not in host and ":" not in host and host != "localhost":
        raise ValueError(f"{value!r}: {host!r} is not a registry host (a Docker Hub namespace would be docker.io/{host}/)")
    if host.split(":")[0] in PUBLIC_REGISTRIES and not match["path"]:
        raise ValueError(f"{value!r} approves every image anyone pushes to the public registry {host}; "
                         "name the organisation's path (e.g. 'nvcr.io/nvidia/')")
    return value


def _duration(value: str) -> str:
    if not _DURATION.match(value):
        raise ValueError(f"{value!r} is not a duration (examples: 10m, 1h30m, 90s)")
    return value


Name = Annotated[str, AfterValidator(_dns_label)]
LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
Quantity = Annotated[int | str, AfterValidator(_quantity)]
Duration = Annotated[str, AfterValidator(_duration)]
Labels = dict[LabelKey, LabelValue]
Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
ImagePrefix = Annotated[str, AfterValidator(_image_prefix)]
ProjectPath = Annotated[str, AfterValidator(_project_relative)]
# Free text that lands in an object (e.g. WorkloadPriorityClass.description, maxLength 2048 in the CRD).
Text = Annotated[str, Field(max_length=2048)]
# Identity-provider group bound by RoleBindings. 'system:' groups are Kubernetes' own (system:authenticated
# is every user, system:masters is cluster-admin): binding a tenant role to one hands the tenant to all of them.
# Ref: https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-subjects
Group = Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^\S(.*\S)?$")]


class Model(BaseModel):
    """Base of every config model: frozen, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)



class FieldError(ValueError):
    """A cross-field violation that knows the exact field path it is about."""

    def __init__(self, path: tuple[str | int, ...], reason: str) -> None:
        super().__init__(reason)
        self.path = path
        self.reason = reason


def unique(field: str, names: list[str]) -> None:
    """Refuse repeated names in a list field (``field`` names it in the message)."""
    dupes = sorted(n for n, c in Counter(names).items() if c > 1)
    if dupes:
        raise ValueError(f"{field}: names must be unique; repeated: {', '.join(dupes)}")
