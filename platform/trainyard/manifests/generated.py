"""Values generated at deploy time (passwords, access keys): named placeholders in pure manifests.

Builders never see a secret. Where a manifest needs a generated value (a tenant's object-store
secret key, MLflow's admin password, the PostgreSQL password), the builder writes a placeholder
string such as ``${generated:object-store/team-a/secret-key}``; it may stand alone or inside a
longer string (a JSON identities file, a connection URI). ``trainyard render`` and ``diff`` show
the placeholder, which names the value but is not the value. The Pulumi component of the
concern generates each named value once (kept only as a Pulumi secret in the state) and
substitutes it, marking the object's inputs secret. See ``trainyard.components.generated``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

_PLACEHOLDER = re.compile(r"\$\{generated:([a-z0-9][a-z0-9./-]*[a-z0-9])\}")
_NAME = re.compile(r"^[a-z0-9][a-z0-9./-]*[a-z0-9]$")

Alphabet = Literal["password", "access-key"]


@dataclass(frozen=True)
class GeneratedValue:
    """What to generate: a name unique in the stack, a length and an alphabet.

    ``access-key``: upper-case letters and digits (S3 access key ids); ``password``: letters and digits
    (safe in URIs, YAML, JSON and htpasswd files without escaping).
    """

    name: str
    length: int = 40
    alphabet: Alphabet = "password"

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"generated value name {self.name!r} must be lower-case letters, digits, '.', '/' or '-'")

    @property
    def placeholder(self) -> str:
        return "${generated:" + self.name + "}"


def placeholder(name: str) -> str:
    """The placeholder text for the generated value ``name``."""
    return GeneratedValue(name).placeholder


def names_in(value: Any) -> Iterator[str]:
    """Every generated-value name referenced anywhere in a manifest (dict/list/str tree)."""
    if isinstance(value, str):
        yield from (m.group(1) for m in _PLACEHOLDER.finditer(value))
    elif isinstance(value, dict):
        for item in value.values():
            yield from names_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from names_in(item)


def substitute(value: Any, values: dict[str, str]) -> Any:
    """A copy of ``value`` with every placeholder replaced by ``values[name]`` (KeyError if one is missing)."""
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], value)
    if isinstance(value, dict):
        return {k: substitute(v, values) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [substitute(v, values) for v in value]
    return value


def restore(template: Any, value: Any) -> Any:
    """``value`` with generated values put back as the placeholders of ``template``, where it matches.

    For checks that see deployed objects (the CrossGuard pack sees what Pulumi registers, generated
    values substituted): a string that is ``template`` with each placeholder filled by a generated
    value (letters and digits) reads as ``template`` again; anything else, including a value changed
    by hand, is returned unchanged, so it is still judged as it is.
    """
    if isinstance(template, str):
        if not isinstance(value, str) or not _PLACEHOLDER.search(template):
            return value
        pattern = "".join(re.escape(part) if i % 2 == 0 else "[A-Za-z0-9]+"
                          for i, part in enumerate(_PLACEHOLDER.split(template)))
        return template if re.fullmatch(pattern, value) else value
    if isinstance(template, dict) and isinstance(value, dict):
        return {k: restore(template[k], v) if k in template else v for k, v in value.items()}
    if isinstance(template, list | tuple) and isinstance(value, list) and len(template) == len(value):
        return [restore(t, v) for t, v in zip(template, value, strict=True)]
    return value
