"""The object store with real nodes, offline: SeaweedFS's image laid out as the chart's all-in-one container needs it
and saying which weed it holds, the provisioner image running as the Job's user, the volume the rehearsal gives the
claim on the real node, and the server and its Job placed there."""

from __future__ import annotations

import re
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.unit.test_factory import tiny_elf
from trainyard import chart_mirror
from trainyard.config import validate_platform
from trainyard.manifests import object_store
from trainyard.project import open_stack
from trainyard.rehearsal import factory, image_cache, provisioner_image, python_base, seaweedfs_image, volumes, wheels
from trainyard.rehearsal.cluster import REHEARSAL_STORAGE_CLASS
from trainyard.rehearsal.images import ImageError, Layer, write_image
from trainyard.rehearsal.mirror import registry_hosts
from trainyard.rehearsal.settings import REAL_NODE_LABELS
from trainyard.rehearsal.stack import InCluster, read_platform, rehearsal_platform

STAND_IN = seaweedfs_image.STAND_INS["4.44"]


def _in_cluster(tmp_path: Path) -> Any:
    platform = rehearsal_platform(read_platform(open_stack("local").path), None,
                                  InCluster(factory.COMPONENTS, tmp_path / "images.lock.yaml"))
    return validate_platform(platform, "local (rehearsal overlay, real nodes)")


def _layer_files(layer: Layer) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=BytesIO(_tar(layer))) as tar:
        return {m.name: m for m in tar.getmembers()}


def _tar(layer: Layer) -> bytes:
    from trainyard.rehearsal.images import layer_tar

    return layer_tar(layer.entries)


def test_the_seaweedfs_layer_is_what_the_charts_all_in_one_command_needs() -> None:
    top = seaweedfs_image.seaweedfs_layer(tiny_elf(payload=b"weed"), b'[leveldb2]\nenabled = true\n', STAND_IN)
    files = _layer_files(top)
    weed = files["usr/bin/weed"]
    assert (weed.mode, weed.uid, weed.gid) == (0o755, 0, 0)  # COPY leaves it root's
    for owned in ("data", "data/filerldb2", "etc/seaweedfs", "etc/seaweedfs/filer.toml", "home/seaweed"):
        assert (files[owned].uid, files[owned].gid) == (1000, 1000), owned  # Dockerfile.go_build's chown seaweed
    passwd = {e.path: e.data for e in top.entries}["etc/passwd"] or b""
    assert b"seaweed:x:1000:1000:" in passwd and passwd.startswith(b"root:x:0:0:")  # the base's entries kept
    config = seaweedfs_image.image_config(STAND_IN, "docker.io/chrislusf/seaweedfs:4.44")
    assert config["User"] == "1000:1000" and config["WorkingDir"] == "/data" and config["Volumes"] == {"/data": {}}
    labels: Any = config["Labels"]
    assert labels["org.opencontainers.image.version"] == "4.53"  # what is inside, not the tag it stands in for
    assert labels["dev.trainyard.stands-in-for"] == "docker.io/chrislusf/seaweedfs:4.44"
    # The chart runs `/bin/sh -ec "/usr/bin/weed ..."` (templates/all-in-one/all-in-one-deployment.yaml).
    charts = chart_mirror.charts_dir()
    if charts is not None:
        text = (charts / "seaweedfs" / "4.44.0" / "templates" / "all-in-one" / "all-in-one-deployment.yaml").read_text()
        assert '"/bin/sh"' in text and "/usr/bin/weed" in text and "mountPath: /data" in text


def test_only_the_recorded_stand_in_is_built_for_the_stacks_seaweedfs_tag(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    (tools / "share" / "seaweedfs").mkdir(parents=True)
    (tools / "bin" / "weed").write_bytes(tiny_elf())
    (tools / "share" / "seaweedfs" / "VERSION").write_text("v0.0.0-20250101000000-000000000000\n")
    with pytest.raises(ImageError, match=r"built from github.com/seaweedfs/seaweedfs@v0.0.0-20250101000000-000000000000, "
                                         r"but the image recipe expects v0.0.0-20261109003541-7506e5f91cd6"):
        seaweedfs_image.weed_binary(tools, STAND_IN)
    (tools / "share" / "seaweedfs" / "VERSION").write_text(STAND_IN.module_version + "\n")
    (tools / "bin" / "weed").write_bytes(tiny_elf(interpreter=True))
    with pytest.raises(ImageError, match=r"weed is not a static x86-64 ELF executable"):
        seaweedfs_image.weed_binary(tools, STAND_IN)
    config = _in_cluster(tmp_path)
    assert seaweedfs_image.stand_in_for(config) == ("4.44", STAND_IN)


def test_the_stand_in_is_the_module_tools_build_sh_builds() -> None:
    script = (ROOT / "tools" / "build.sh").read_text()
    assert f"SEAWEEDFS_VERSION={STAND_IN.module_version}\n" in script
    assert f'SEAWEEDFS_MODSUM="{STAND_IN.module_sum}"' in script


def test_the_provisioner_image_runs_as_the_jobs_user_with_the_locked_wheels(tmp_path: Path) -> None:
    pins = wheels.read_lock(provisioner_image.REQUIREMENTS_LOCK)
    config = provisioner_image.image_config(provisioner_image.target(_in_cluster(tmp_path)), pins)
    job = object_store.provisioning_objects(_in_cluster(tmp_path))[-1]
    pod = job["spec"]["template"]["spec"]["securityContext"]
    assert config["User"] == f"{pod['runAsUser']}:{pod['runAsGroup']}"
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"] and "LANG=C.UTF-8" in config["Env"]  # read-only root
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][0] == "python3"  # /usr/bin/python3 -> 3.11
    # Every top-level pin of requirements.txt is in the lock at the same version, and nothing is unpinned.
    top = dict(re.findall(r"^([a-z0-9-]+)==(\S+)", (provisioner_image.IMAGE_DIR / "requirements.txt").read_text(), re.M))
    locked = {p.name: p.version for p in pins}
    assert top and all(locked[name] == version for name, version in top.items())
    assert {"botocore", "s3transfer", "urllib3"} <= set(locked)


def test_the_python_base_is_distroless_python3_debian12_from_pinned_packages() -> None:
    names = [p.name for p in python_base.PYTHON_PINS]
    assert {"python3.11-minimal", "libpython3.11-stdlib", "libssl3"} <= set(names) | {
        p.name for p in python_base.RUNTIME_PINS}
    assert all(re.fullmatch(r"[0-9a-f]{64}", p.sha256) for p in (*python_base.RUNTIME_PINS, *python_base.PYTHON_PINS))
    aliases = {e.path: e.link for e in python_base._aliases() if e.link}
    assert aliases == {"usr/bin/python": "python3.11", "usr/bin/python3": "python3.11"}


def test_a_key_made_of_pins_names_the_same_cached_layout_and_builds_only_on_a_miss(tmp_path: Path) -> None:
    calls = []

    def build() -> list[Layer]:
        calls.append(1)
        return [Layer((), "empty")]

    first = image_cache.cached_build(tmp_path, "k" * 64, build, {"User": "1000"})
    second = image_cache.cached_build(tmp_path, "k" * 64, build, {"User": "1000"})
    assert calls == [1] and first[1] == second[1] and (first[2], second[2]) == (False, True)
    assert first[1] == write_image(tmp_path / "again", [Layer((), "empty")], {"User": "1000"})


def test_with_real_nodes_the_object_store_runs_on_the_real_node_from_its_own_volume(tmp_path: Path) -> None:
    config = _in_cluster(tmp_path)
    assert "seaweedfs" not in config.rehearsal.external_controllers
    concern = object_store.build(config)
    (release,) = concern.releases
    assert not release.external
    # The chart renders allInOne.nodeSelector with `tpl`: it takes YAML text.
    assert yaml.safe_load(release.values["allInOne"]["nodeSelector"]) == REAL_NODE_LABELS
    (job,) = concern.after_releases
    assert job["spec"]["template"]["spec"]["nodeSelector"] == REAL_NODE_LABELS
    assert "pulumi.com/skipAwait" not in job["metadata"].get("annotations", {})  # deploy waits for it to complete
    claim = next(o for o in concern.objects if o["kind"] == "PersistentVolumeClaim")
    assert "pulumi.com/skipAwait" not in claim["metadata"].get("annotations", {})  # ... and for the claim to bind
    volume = volumes.object_store_volume(config, tmp_path / "state", "node-0")
    assert volume is not None
    pv = volume.manifest()
    assert pv["spec"]["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "object-store",
                                      "name": "seaweedfs-data"}
    assert pv["spec"]["local"]["path"] == str(tmp_path / "state" / "volumes" / "object-store" / "seaweedfs-data")
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["storageClassName"] == REHEARSAL_STORAGE_CLASS  # the class the claim gets at admission
    assert pv["spec"]["capacity"]["storage"] == claim["spec"]["resources"]["requests"]["storage"]
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-0"]}]
    assert registry_hosts(config, InCluster(factory.COMPONENTS, tmp_path / "l")) == ("registry.trainyard.internal",)


def test_without_real_nodes_nothing_changes_for_the_object_store(tmp_path: Path) -> None:
    platform = rehearsal_platform(read_platform(open_stack("local").path))
    config = validate_platform(platform, "local (rehearsal overlay)")
    assert volumes.object_store_volume(config, tmp_path, "node-0") is None
    (job,) = object_store.build(config).after_releases
    assert "nodeSelector" not in job["spec"]["template"]["spec"]
    before = object_store.build(open_stack("local").config).after_releases[0]["metadata"]["name"]
    assert job["metadata"]["name"] == before  # no placement: the Job's name hashes what it did before


def test_a_stack_with_system_pods_places_seaweedfs_and_its_job_on_them() -> None:
    staging = open_stack("staging").config
    concern = object_store.build(staging)
    selector = dict(staging.system_pods.node_selector)
    assert selector and yaml.safe_load(concern.releases[0].values["allInOne"]["nodeSelector"]) == selector
    assert concern.after_releases[0]["spec"]["template"]["spec"]["nodeSelector"] == selector
