"""What a real rehearsal node needs from this machine, checked before anything starts.

A real node runs containerd, runc and the kubelet as root, mounts overlay filesystems, makes cgroups, a
bridge and veth pairs. When something is missing the check names each missing binary or kernel feature
(and the Debian package or build step that provides it) in one error, and nothing has been started or
written. ``Host`` is where the facts are read from, so a test can show the error on a host without them.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# Debian packages (bookworm) of the binaries a node runs besides the tools build (docs/rehearsal.md).
PACKAGE_OF = {
    "containerd": "containerd", "containerd-shim-runc-v2": "containerd", "ctr": "containerd", "runc": "runc",
    "ip": "iproute2", "mount": "mount", "umount": "mount", "gcc": "gcc libc6-dev", "strip": "binutils",
    "iptables": "iptables", "iptables-save": "iptables", "iptables-restore": "iptables", "ipset": "ipset",
}
CNI_PLUGINS = ("bridge", "host-local", "loopback")  # the pod network (bridge + host-local IPAM) and lo
# The cgroup controllers the kubelet's container manager needs (cgroup v1 hierarchies or v2 controllers).
CGROUP_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")
KERNEL_FEATURES = {  # kernel config symbol -> (module name in /sys/module, what needs it)
    "CONFIG_OVERLAY_FS": ("overlay", "containerd's overlayfs snapshotter"),
    "CONFIG_BRIDGE": ("bridge", "the pod network's bridge"),
    "CONFIG_VETH": ("veth", "the pods' network interfaces"),
    "CONFIG_NET_NS": ("", "the pods' network namespaces"),
}
# What the NetworkPolicy enforcer (kube-router's network policy controller, rehearsal/netpol.py) runs and needs.
# Ref: kube-router v2.10.0 pkg/controllers/netpol (the iptables matches and targets its rules use, ipset
# hash:ip/hash:net sets), pkg/utils/ipset.go and the go-iptables handlers (they run these binaries).
ENFORCER_BINARIES = ("iptables", "iptables-save", "iptables-restore", "ipset")
ENFORCER_KERNEL_FEATURES = {  # kernel config symbol -> (module name in /sys/module, what needs it)
    "CONFIG_IP_SET": ("ip_set", "the ipsets of the pods a NetworkPolicy selects"),
    "CONFIG_IP_SET_HASH_IP": ("ip_set_hash_ip", "the ipsets of pod addresses (hash:ip)"),
    "CONFIG_IP_SET_HASH_NET": ("ip_set_hash_net", "the ipsets of ipBlock CIDRs (hash:net)"),
    "CONFIG_NETFILTER_XT_SET": ("xt_set", "iptables rules matching those ipsets (-m set)"),
    "CONFIG_BRIDGE_NETFILTER": ("br_netfilter", "iptables seeing the traffic of pods on one bridge"),
    "CONFIG_NETFILTER_XT_MATCH_PHYSDEV": ("xt_physdev", "rules for bridged pod traffic (-m physdev)"),
    "CONFIG_NETFILTER_XT_MATCH_ADDRTYPE": ("xt_addrtype", "the rule for traffic from the node itself (-m addrtype)"),
    "CONFIG_NETFILTER_XT_MATCH_COMMENT": ("xt_comment", "the rules' comments (-m comment)"),
    "CONFIG_NETFILTER_XT_MATCH_CONNTRACK": ("xt_conntrack", "accepting established connections (-m conntrack)"),
    "CONFIG_NETFILTER_XT_MARK": ("xt_mark", "marking traffic a policy accepts (-j MARK, -m mark)"),
    "CONFIG_NETFILTER_XT_MATCH_LIMIT": ("xt_limit", "the rate limit of its drop log (-m limit)"),
    "CONFIG_NETFILTER_XT_TARGET_NFLOG": ("xt_NFLOG", "its log of refused packets (-j NFLOG)"),
    "CONFIG_NETFILTER_XT_MATCH_MULTIPORT": ("xt_multiport", "the node-port rules (-m multiport)"),
    "CONFIG_IP_NF_TARGET_REJECT": ("ipt_REJECT", "refusing what no policy allows (-j REJECT)"),
}


class PrerequisiteError(Exception):
    """The machine lacks what a real node needs; ``problems`` names each missing piece."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("cannot start a real node on this machine (nothing was started):\n"
                         + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class Host:
    """Where the facts about this machine are read from (the real ones by default)."""

    which: Callable[[str], str | None] = shutil.which
    euid: Callable[[], int] = os.geteuid
    proc: Path = Path("/proc")
    sys_module: Path = Path("/sys/module")
    extra_path: tuple[str, ...] = field(default=("/usr/sbin", "/sbin"))

    def find(self, binary: str) -> str | None:
        found = self.which(binary)
        if found is None:
            for directory in self.extra_path:
                candidate = Path(directory) / binary
                if candidate.is_file() and os.access(candidate, os.X_OK):
                    return str(candidate)
        return found

    def has_capability(self, number: int) -> bool:
        """Whether this process holds capability ``number`` (CapEff of /proc/self/status)."""
        try:
            status = (self.proc / "self" / "status").read_text()
        except OSError:
            return True
        for line in status.splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> number & 1)
        return True

    def filesystems(self) -> set[str]:
        try:
            text = (self.proc / "filesystems").read_text()
        except OSError:
            return set()
        return {line.split()[-1] for line in text.splitlines() if line.strip()}

    def kernel_config(self) -> dict[str, str] | None:
        """The running kernel's config (``/proc/config.gz``), or None where the kernel does not publish it."""
        try:
            text = gzip.decompress((self.proc / "config.gz").read_bytes()).decode(errors="replace")
        except OSError:
            return None
        return dict(line.split("=", 1) for line in text.splitlines() if line.startswith("CONFIG_") and "=" in line)

    def cgroup_controllers(self) -> set[str]:
        """Controllers of mounted cgroup v1 hierarchies, plus those the cgroup v2 root offers."""
        found: set[str] = set()
        try:
            mounts = (self.proc / "self" / "mountinfo").read_text().splitlines()
        except OSError:
            return found
        for line in mounts:
            left, _, right = line.partition(" - ")
            parts = right.split()
            if len(parts) < 3:
                continue
            if parts[0] == "cgroup":
                found.update(o for o in parts[2].split(",") if o in CGROUP_CONTROLLERS)
            elif parts[0] == "cgroup2":
                mount_point = left.split()[4]
                with contextlib.suppress(OSError):
                    found.update((Path(mount_point) / "cgroup.controllers").read_text().split())
        if "cpu" in found:
            found.add("cpuacct")  # v2 accounts CPU in the cpu controller
        return found


def missing(binaries: dict[str, Path | None], cni_bin_dir: Path, host: Host | None = None) -> list[str]:
    """Every missing prerequisite of a real node, as a sentence naming it (empty when none is missing).

    ``binaries``: name -> the built path to check (None: look it up on PATH, the Debian ones).
    """
    host = host or Host()
    problems: list[str] = []
    if host.euid() != 0:
        problems.append("root: a real node runs containerd and the kubelet as root (mounts, cgroups, network devices)")
    for name, path in binaries.items():
        if path is not None:
            if not (path.is_file() and os.access(path, os.X_OK)):
                problems.append(f"{name}: not built at {path} (run `tools/build.sh node`)")
        elif host.find(name) is None:
            problems.append(f"{name}: not found on PATH (Debian: apt-get install {PACKAGE_OF.get(name, name)})")
    for plugin in CNI_PLUGINS:
        if not (cni_bin_dir / plugin).is_file():
            problems.append(f"CNI plugin {plugin}: not in {cni_bin_dir} (Debian: apt-get install containernetworking-plugins;"
                            " TRAINYARD_CNI_BIN_DIR names another directory)")
    return problems + kernel_problems(host)


def kernel_problems(host: Host) -> list[str]:
    """Missing kernel features: overlayfs, bridge, veth, network namespaces, the cgroup controllers."""
    problems: list[str] = []
    if "overlay" not in host.filesystems():
        problems.append("kernel: the overlay filesystem is not available (/proc/filesystems), needed by containerd's"
                        " overlayfs snapshotter (modprobe overlay)")
    config = host.kernel_config()
    for symbol, (module, needed_by) in KERNEL_FEATURES.items():
        if config is not None:
            if config.get(symbol) not in {"y", "m"}:
                problems.append(f"kernel: {symbol} is not set in /proc/config.gz ({needed_by})")
        elif module and module != "overlay" and not (host.sys_module / module).exists():
            problems.append(f"kernel: module {module} is not loaded (/sys/module/{module}), needed by {needed_by}"
                            f" (modprobe {module})")
    absent = [c for c in CGROUP_CONTROLLERS if c not in host.cgroup_controllers()]
    if absent:
        problems.append(f"kernel: cgroup controller(s) {', '.join(absent)} not mounted (/proc/self/mountinfo), needed"
                        " by the kubelet's container manager")
    return problems


def check(binaries: dict[str, Path | None], cni_bin_dir: Path, host: Host | None = None) -> None:
    """Raise ``PrerequisiteError`` naming everything missing; return when a node can start here."""
    problems = missing(binaries, cni_bin_dir, host)
    if problems:
        raise PrerequisiteError(problems)


def enforcer_problems(host: Host | None = None) -> list[str]:
    """What the NetworkPolicy enforcer lacks on this machine: iptables and ipset, the netfilter features its rules
    use, and br_netfilter's switch (``/proc/sys/net/bridge``). Empty when it can run here."""
    host = host or Host()
    problems = [f"{name}: not found on PATH (Debian: apt-get install {PACKAGE_OF[name]}), run by the NetworkPolicy"
                " enforcer (kube-router)" for name in ENFORCER_BINARIES if host.find(name) is None]
    config = host.kernel_config()
    for symbol, (module, needed_by) in ENFORCER_KERNEL_FEATURES.items():
        if config is not None:
            if config.get(symbol) not in {"y", "m"}:
                problems.append(f"kernel: {symbol} is not set in /proc/config.gz, needed for {needed_by}")
        elif not (host.sys_module / module).exists():
            problems.append(f"kernel: module {module} is not loaded (/sys/module/{module}), needed for {needed_by}"
                            f" (modprobe {module})")
    if not (host.proc / "sys" / "net" / "bridge" / "bridge-nf-call-iptables").exists():
        problems.append("kernel: /proc/sys/net/bridge/bridge-nf-call-iptables is missing (br_netfilter not loaded:"
                        " modprobe br_netfilter), needed for iptables to see bridged pod traffic")
    iptables = host.find("iptables-save")
    if iptables is not None and not problems:
        probe = subprocess.run([iptables, "-t", "filter"], capture_output=True, text=True, check=False)  # noqa: S603
        if probe.returncode != 0:
            problems.append(f"iptables-save -t filter failed: {probe.stderr.strip()} (the enforcer's iptables cannot"
                            " read the filter table)")
    return problems
