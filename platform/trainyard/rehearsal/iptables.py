"""This machine's iptables tables, read and cleaned: what the real node's kubelet and the NetworkPolicy enforcer
leave behind is removed through here, one way (``remove_chains``).

Ref: iptables-save(8) (``:CHAIN`` declarations, rules as the ``-A`` arguments that add them), iptables(8)
(``-D`` with the same arguments deletes a rule; ``-X`` refuses a chain still referenced or not empty).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterable

FAMILIES = ("iptables", "ip6tables")


def save(table: str, family: str = "iptables") -> str:
    """``<family>-save -t TABLE`` (empty where the command is missing or fails)."""
    listed = subprocess.run([f"{family}-save", "-t", table], capture_output=True, text=True, check=False)  # noqa: S603
    return listed.stdout if listed.returncode == 0 else ""


def declared_chains(text: str) -> list[str]:
    """The chains an iptables-save listing declares (``:NAME POLICY [counters]``)."""
    return [line[1:].split()[0] for line in text.splitlines() if line.startswith(":") and len(line) > 1]


def rules(text: str) -> list[list[str]]:
    """Every rule of a listing as its ``-A`` arguments, split as a shell would (comments are double-quoted)."""
    return [shlex.split(line) for line in text.splitlines() if line.startswith("-A ")]


def remove_chains(table: str, chains: Iterable[str], family: str = "iptables") -> None:
    """Delete ``chains`` from ``table``: first every rule elsewhere that jumps to one of them (the same words after
    ``-D`` delete it), then each chain flushed and deleted. What iptables refuses stays, for the caller's
    ``leftovers``."""
    gone = set(chains) & set(declared_chains(save(table, family)))
    if not gone:
        return

    def run(*args: str) -> None:
        subprocess.run([family, "-w", "5", "-t", table, *args], capture_output=True, check=False)  # noqa: S603

    for rule in rules(save(table, family)):
        if rule[1] not in gone and rule[-2:-1] == ["-j"] and rule[-1] in gone:
            run("-D", *rule[1:])
    for chain in sorted(gone):
        run("-F", chain)
    for chain in sorted(gone):
        run("-X", chain)
