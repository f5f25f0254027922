"""The real node's pure parts: its images are reproducible, its configurations stay in its directory, and a
machine that lacks a prerequisite gets an error naming it before anything starts."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trainyard.rehearsal import images, prerequisites
from trainyard.rehearsal.cluster import Settings
from trainyard.rehearsal.node import NodeLayout, RealNode, cni_config, containerd_config, kubelet_config

STATIC_BUSYBOX = images.BUSYBOX.is_file() and images.is_static_elf(images.BUSYBOX.read_bytes())


def test_a_layer_lists_its_files_sorted_with_no_time_and_no_owner() -> None:
    tar = images.layer_tar([images.Entry("b", b"2"), images.Entry("a", b"1"), images.Entry("d"), images.Entry("c", link="a")])
    with tarfile.open(fileobj=BytesIO(tar)) as listing:
        members = listing.getmembers()
    assert [m.name for m in members] == ["a", "b", "c", "d"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert members[2].issym() and members[2].linkname == "a" and members[3].isdir()


def test_the_same_files_give_the_same_image_digest(tmp_path: Path) -> None:
    entries = [images.Entry("hello", b"hi\n")]
    first = images.write_layout(tmp_path / "one", entries, {"Cmd": ["/hello"]}, "test")
    second = images.write_layout(tmp_path / "two", entries, {"Cmd": ["/hello"]}, "test")
    other = images.write_layout(tmp_path / "three", [images.Entry("hello", b"ho\n")], {"Cmd": ["/hello"]}, "test")
    assert first == second != other
    index = json.loads((tmp_path / "one" / "index.json").read_text())
    assert index["manifests"][0]["digest"] == first
    assert (tmp_path / "one" / "blobs" / "sha256" / first.removeprefix("sha256:")).is_file()


@pytest.mark.skipif(not STATIC_BUSYBOX, reason="Debian's busybox-static is not installed (/bin/busybox)")
def test_the_busybox_image_is_reproducible_and_runs_without_a_loader(tmp_path: Path) -> None:
    one, two = images.build_busybox(tmp_path / "a"), images.build_busybox(tmp_path / "b")
    assert one.digest == two.digest
    assert one.reference == f"trainyard.local/rehearsal/busybox:{one.tag}"
    assert re.fullmatch(r"\d+\.\d+\.\d+", one.tag)


KUBECTL = Settings.from_env().binary("kubectl")


@pytest.mark.skipif(not KUBECTL.is_file(), reason="kubectl not built (tools/build.sh kube-apiserver)")
def test_the_kubectl_image_is_the_built_static_kubectl_reproducibly(tmp_path: Path) -> None:
    one, two = images.build_kubectl(KUBECTL, tmp_path / "a"), images.build_kubectl(KUBECTL, tmp_path / "b")
    assert one.digest == two.digest
    assert one.reference == "trainyard.local/rehearsal/kubectl:v1.36.3"
    blobs = one.layout / "blobs" / "sha256"
    manifest = json.loads((blobs / one.digest.removeprefix("sha256:")).read_text())
    config = json.loads((blobs / manifest["config"]["digest"].removeprefix("sha256:")).read_text())
    assert config["config"]["Entrypoint"] == ["/bin/kubectl"]  # as build/server-image/kubectl/Dockerfile
    with tarfile.open(blobs / manifest["layers"][0]["digest"].removeprefix("sha256:")) as layer:
        assert layer.getnames() == ["bin", "bin/kubectl", "tmp"]
        kubectl = layer.extractfile("bin/kubectl")
        assert kubectl is not None and kubectl.read() == KUBECTL.read_bytes()


def test_an_image_of_one_binary_refuses_a_dynamically_linked_one(tmp_path: Path) -> None:
    python = Path("/proc/self/exe").resolve()
    with pytest.raises(images.ImageError, match=r"not a static executable .* CGO_ENABLED=0"):
        images.static_binary_image(python, "bin/python", "rehearsal/python", "x", tmp_path, {}, "test")
    assert not (tmp_path / "python").exists()


def test_a_dynamic_executable_is_not_taken_for_a_static_one() -> None:
    python = Path("/proc/self/exe").resolve().read_bytes()
    assert not images.is_static_elf(python)
    assert not images.is_static_elf(b"#!/bin/sh\n")


def test_the_mirror_sends_every_pull_to_the_loopback_registry_only() -> None:
    text = images.mirror_hosts_toml("127.0.0.1:5000")
    assert text.startswith('server = "http://127.0.0.1:5000"\n')
    assert '[host."http://127.0.0.1:5000"]' in text


def layout(tmp_path: Path, index: int = 0) -> NodeLayout:
    return NodeLayout(Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path)}), f"node-{index}", index)


def test_each_node_gets_its_own_subnet_bridge_cgroup_root_and_ports(tmp_path: Path) -> None:
    zero, one = layout(tmp_path, 0), layout(tmp_path, 1)
    assert (str(zero.subnet), zero.address, str(one.subnet), one.address) == (
        "10.244.0.0/24", "10.244.0.1", "10.244.1.0/24", "10.244.1.1")
    assert zero.tag != one.tag and len(zero.tag) <= 15 and zero.cgroup_root == f"/{zero.tag}"
    assert one.kubelet_port == zero.kubelet_port  # each listens on its own address


def test_the_node_configurations_keep_every_path_under_the_node_directory(tmp_path: Path) -> None:
    node = layout(tmp_path)
    config = containerd_config(node, "trainyard.local/rehearsal/pause:3.10.2", "/usr/sbin/runc")
    paths = re.findall(r'"(/[^"]*)"', config)
    outside = [p for p in paths if not p.startswith(str(node.directory)) and p not in {"/usr/sbin/runc", "/usr/lib/cni"}]
    assert outside == []
    assert "netns_mounts_under_state_dir = true" in config and 'sandbox_image = "trainyard.local/' in config
    kubelet = kubelet_config(node, tmp_path / "ca.crt", (tmp_path / "s.crt", tmp_path / "s.key"))
    assert kubelet["podLogsDir"].startswith(str(node.directory)) and kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["authentication"]["anonymous"] == {"enabled": False} and kubelet["authorization"] == {"mode": "Webhook"}
    bridge = cni_config(node)["plugins"][0]
    assert (bridge["bridge"], bridge["ipMasq"], bridge["ipam"]["dataDir"]) == (node.tag, False, str(node.path("cni", "ipam")))


def fake_host(tmp_path: Path, filesystems: str, config: str, cgroups: str, missing: set[str]) -> prerequisites.Host:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "filesystems").write_text(filesystems)
    (proc / "config.gz").write_bytes(gzip.compress(config.encode()))
    (proc / "self" / "mountinfo").write_text(cgroups)
    return prerequisites.Host(which=lambda name: None if name in missing else f"/usr/bin/{name}", euid=lambda: 0,
                              proc=proc, sys_module=tmp_path / "sys-module", extra_path=())


CGROUP_V1 = "".join(f"3{i} 1 0:2{i} / /sys/fs/cgroup/{c} rw - cgroup cgroup rw,{c}\n"
                    for i, c in enumerate(("cpu", "cpuacct", "cpuset", "memory")))


def test_the_prerequisite_error_names_each_missing_binary_and_kernel_feature(tmp_path: Path) -> None:
    host = fake_host(tmp_path, "nodev\tcgroup\n\text4\n", "CONFIG_BRIDGE=y\nCONFIG_NET_NS=y\nCONFIG_OVERLAY_FS=y\n",
                     CGROUP_V1, missing={"containerd", "runc"})
    cni = tmp_path / "cni"
    cni.mkdir()
    (cni / "bridge").write_text("")
    problems = prerequisites.missing({"containerd": None, "runc": None, "ctr": None,
                                      "kubelet": tmp_path / "bin" / "kubelet"}, cni, host)
    text = "\n".join(problems)
    assert "containerd: not found on PATH (Debian: apt-get install containerd)" in text
    assert "runc: not found on PATH (Debian: apt-get install runc)" in text
    assert "ctr:" not in text
    assert f"kubelet: not built at {tmp_path / 'bin' / 'kubelet'} (run `tools/build.sh node`)" in text
    assert "CNI plugin host-local" in text and "CNI plugin loopback" in text and "CNI plugin bridge" not in text
    assert "the overlay filesystem is not available" in text
    assert "CONFIG_VETH is not set" in text and "CONFIG_BRIDGE" not in text
    assert "cgroup controller(s) pids not mounted" in text
    assert len(problems) == 8


def test_a_node_on_a_machine_without_its_prerequisites_starts_nothing(tmp_path: Path) -> None:
    host = fake_host(tmp_path, "nodev\toverlay\n", "", CGROUP_V1, missing={"containerd"})
    state = tmp_path / "cluster"
    node = RealNode(Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(state), "TRAINYARD_TOOLS_DIR": str(tmp_path / "t")}),
                    cni_bin_dir=tmp_path / "no-cni", host=host)
    with pytest.raises(prerequisites.PrerequisiteError) as caught:
        node.up()
    message = str(caught.value)
    assert message.startswith("cannot start a real node on this machine (nothing was started):")
    assert "containerd: not found on PATH" in message and "kubelet: not built" in message
    assert "CONFIG_OVERLAY_FS is not set" in message
    assert not state.exists()


def test_the_node_tool_group_builds_what_a_real_node_starts() -> None:
    script = (ROOT / "tools" / "build.sh").read_text()
    group = re.search(r"^NODE_TOOLS=\(([^)]*)\)", script, re.M)
    assert group is not None
    listed = subprocess.run([str(ROOT / "tools" / "build.sh"), "--list"], capture_output=True, text=True, check=True,
                            timeout=60).stdout
    binaries = {line.split(":")[0]: set(line.split()[1:]) for line in listed.splitlines()}
    built = set().union(*(binaries[t] for t in group.group(1).split()))
    started = {name for name, path in RealNode(Settings.from_env({})).required_binaries().items() if path is not None}
    assert started <= built, sorted(started - built)
    assert "kube-proxy" in binaries["kubelet"]


def test_without_cap_sys_resource_containerd_clamps_the_sandboxes_oom_score(tmp_path: Path) -> None:
    """Root without CAP_SYS_RESOURCE (this VM) may not lower oom_score_adj: runc's init died on the kubelet's -998."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "status").write_text("Name:\tx\nCapEff:\t000001fffeffffff\n")  # every capability but bit 24
    host = prerequisites.Host(proc=proc)
    assert not host.has_capability(24) and host.has_capability(21)
    node = layout(tmp_path)
    assert "restrict_oom_score_adj = true" in containerd_config(node, "p", "runc", restrict_oom_score_adj=True)
    assert "restrict_oom_score_adj = false" in containerd_config(node, "p", "runc")


def test_cluster_down_stops_every_real_node_before_the_control_plane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``trainyard cluster down --purge`` deletes the state directory: no node may still have mounts in it."""
    from trainyard.rehearsal import node as node_module
    from trainyard.rehearsal import session

    settings = Settings.from_env({"TRAINYARD_CLUSTER_DIR": str(tmp_path)})
    for name in ("node-1", "node-0"):
        (tmp_path / "nodes" / name).mkdir(parents=True)
    stopped: list[str] = []
    monkeypatch.setattr(node_module.RealNode, "down", lambda self, grace=60: stopped.append(self.name))
    monkeypatch.setattr(node_module.Processes, "stop", lambda self, name, grace=10: stopped.append(name))
    session.stop_everything(settings)
    assert stopped[:2] == ["node-0", "node-1"] and stopped[-1] == "etcd"
