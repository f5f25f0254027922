"""The image factory's layouts, offline: controller images made from tiny hand-made static ELF files and a fake
Debian tree, laid out as the upstream Dockerfiles say, named as the stack renders them, reproducible, cached by
content; dynamic binaries, binaries of another version and locally changed package files are refused."""

from __future__ import annotations

import hashlib
import json
import re
import struct
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from trainyard.cli import main
from trainyard.config import PlatformConfig
from trainyard.manifests import installs
from trainyard.project import open_stack
from trainyard.rehearsal import factory
from trainyard.rehearsal.base_layer import NONROOT
from trainyard.rehearsal.images import Entry, ImageError, Layer, is_static_elf, write_image, write_layout
from trainyard.rehearsal.stack import InCluster, write_rehearsal_stack
from trainyard.supply.lock import ImageLock

MIRROR = "trainyard.local/mirror/"
CERTS = {"mozilla/B_Root.crt": b"-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n",
         "mozilla/A_Root.crt": b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}
NSSWITCH = b"passwd: files\ngroup: files\nhosts: files dns\n"


def tiny_elf(interpreter: bool = False, machine: int = 62, payload: bytes = b"") -> bytes:
    """A minimal x86-64 ELF executable: its header, one PT_LOAD, and a PT_INTERP (a dynamic binary) when asked."""
    count = 2 if interpreter else 1
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) + struct.pack(
        "<HHIQQQIHHHHHH", 2, machine, 1, 0x400000, 64, 0, 0, 64, 56, count, 0, 0, 0)
    program = struct.pack("<IIQQQQQQ", 1, 5, 0, 0x400000, 0x400000, 256, 256, 0x1000)
    if interpreter:
        program += struct.pack("<IIQQQQQQ", 3, 4, 0, 0, 0, 28, 28, 1)
    return header + program + payload


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


ZONE = b"TZif2 Europe/Paris, as zic wrote it\n"


@pytest.fixture
def debian(tmp_path: Path) -> Path:
    """A tree with the Debian packages the base layer reads: dpkg's status, .list and md5sums files, and the files."""
    root = tmp_path / "debian"
    files = {"ca-certificates": {f"usr/share/ca-certificates/{name}": data for name, data in CERTS.items()}
             | {"usr/share/doc/ca-certificates/copyright": b"MPL-2.0\n"},
             "libc-bin": {"usr/share/libc-bin/nsswitch.conf": NSSWITCH},
             "tzdata": {"usr/share/zoneinfo/Europe/Paris": ZONE, "usr/share/doc/tzdata/copyright": b"public domain\n"}}
    versions = {"ca-certificates": "20250419~deb12u2", "libc-bin": "2.36-9+deb12u14", "tzdata": "2026f-0+deb12u1"}
    info = root / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    for package, owned in files.items():
        for path, data in owned.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
        (info / f"{package}.md5sums").write_text("".join(f"{_md5(d)}  {p}\n" for p, d in owned.items()))
        listed = {"/.", *(f"/{p}" for p in owned), *(f"/{parent}" for p in owned for parent in map(str, Path(p).parents)
                                                     if parent != ".")}
        if package == "tzdata":
            (root / "usr/share/zoneinfo/CET").symlink_to("Europe/Paris")
            listed.add("/usr/share/zoneinfo/CET")
        (info / f"{package}.list").write_text("".join(f"{p}\n" for p in sorted(listed)))
    (root / "var/lib/dpkg/status").write_text("\n".join(
        f"Package: {p}\nStatus: install ok installed\nVersion: {v}\n" for p, v in [("bash", "5.2"), *versions.items()]))
    return root


@pytest.fixture
def config() -> PlatformConfig:
    """The local stack with the rehearsal's mirror prefix."""
    local = open_stack("local").config
    return local.model_copy(update={"images": local.images.model_copy(update={"registry_mirror": MIRROR})})


def _tools(directory: Path, config: PlatformConfig, **overrides: bytes) -> Path:
    """A tools directory as tools/build.sh leaves it: bin/<binary> and share/<tool>/VERSION of the stack's version."""
    for recipe in factory.RECIPES:
        (directory / "bin").mkdir(parents=True, exist_ok=True)
        data = overrides.get(recipe.binary if recipe.image else recipe.component,
                             tiny_elf(payload=recipe.binary.encode()))
        (directory / "bin" / recipe.binary).write_bytes(data)
        (directory / "share" / recipe.tool).mkdir(parents=True, exist_ok=True)
        tag = factory.recipe_upstream(config, recipe).tag
        (directory / "share" / recipe.tool / "VERSION").write_text(f"{recipe.version_prefix}{tag}\n")
        for name in recipe.share:  # what build.sh copies out of the module: a LICENSE file, a licenses/ tree
            if "." in name or name.isupper():
                (directory / "share" / recipe.tool / name).write_text(f"{name} of {recipe.module}\n")
            else:
                (directory / "share" / recipe.tool / name / "example.com/lib").mkdir(parents=True, exist_ok=True)
                (directory / "share" / recipe.tool / name / "example.com/lib/LICENSE").write_text("MIT\n")
    return directory


def _blob(layout: Path, digest: str) -> bytes:
    return (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


Files = dict[str, tuple[tarfile.TarInfo, bytes]]


def _files(layer: bytes) -> Files:
    """A layer's entries by name: the header and the content (empty for a directory)."""
    with tarfile.open(fileobj=BytesIO(layer)) as tar:
        out = {}
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() else None
            out[member.name] = (member, handle.read() if handle else b"")
        return out


def _image(built: factory.BuiltImage) -> tuple[dict[str, Any], list[Files], list[str]]:
    """The image's config, the files of each layer, and the layers' digests."""
    manifest = json.loads(_blob(built.layout, built.digest))
    digests = [layer["digest"] for layer in manifest["layers"]]
    return (json.loads(_blob(built.layout, manifest["config"]["digest"])),
            [_files(_blob(built.layout, digest)) for digest in digests], digests)


def test_the_hand_made_elf_files_are_what_they_stand_for() -> None:
    assert is_static_elf(tiny_elf()) and not is_static_elf(tiny_elf(interpreter=True))
    assert not is_static_elf(tiny_elf(machine=183))  # aarch64


def test_each_controller_image_is_laid_out_as_its_upstream_dockerfile(tmp_path: Path, debian: Path,
                                                                      config: PlatformConfig) -> None:
    images = factory.build_controller_images(config, _tools(tmp_path / "tools", config), tmp_path / "cache", root=debian)
    built = {b.component: b for b in images if not b.target.repository.endswith("brancz/kube-rbac-proxy")}
    assert sorted(built) == ["cnpg", "jobset", "kserve", "kueue", "trainer"]
    users = {"kueue": "65532:65532", "jobset": "65532:65532", "trainer": "65532",  # Trainer's Dockerfile has no USER
             "cnpg": "65532:65532", "kserve": "65532"}  # nor KServe's (kserve@v0.20.0:Dockerfile)
    base_digests = set()
    for component, image in built.items():
        if component == "cnpg":
            continue  # its own layout: the next test
        doc, (_, binary), digests = _image(image)
        assert doc["config"]["Entrypoint"] == ["/manager"]  # the charts' `command: [/manager]`
        assert doc["config"]["User"] == users[component] and doc["config"]["WorkingDir"] == "/"
        assert "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" in doc["config"]["Env"]
        assert (doc["architecture"], doc["os"], doc["created"]) == ("amd64", "linux", "1970-01-01T00:00:00Z")
        assert len(doc["history"]) == 2 and "tools/build.sh" in doc["history"][1]["created_by"]
        assert list(binary) == ["manager"]
        manager, content = binary["manager"]
        assert (manager.mode, manager.uid, manager.gid) == (0o755, 0, 0)
        recipe = next(r for r in factory.RECIPES if r.component == component)
        assert content == tiny_elf(payload=recipe.binary.encode())
        base_digests.add(digests[0])
    assert len(base_digests) == 1  # one base layer, shared by the three images


def test_kserve_gets_its_controller_and_the_rbac_proxy_sidecar_its_chart_runs(tmp_path: Path, debian: Path,
                                                                              config: PlatformConfig) -> None:
    images = factory.build_controller_images(config, _tools(tmp_path / "tools", config), tmp_path / "cache",
                                             components=["kserve"], root=debian)
    by_name = {str(image.target): image for image in images}
    # The names kserve-resources v0.20.0 renders under the mirror (values kserve.controller.image, rbacProxyImage).
    assert sorted(by_name) == [f"{MIRROR}brancz/kube-rbac-proxy:v0.18.0", f"{MIRROR}kserve/kserve-controller:v0.20.0"]
    proxy = by_name[f"{MIRROR}brancz/kube-rbac-proxy:v0.18.0"]
    doc, (_, layer), _ = _image(proxy)
    # kube-rbac-proxy@v0.18.0:Dockerfile: COPY to /usr/local/bin, EXPOSE 8080, USER 65532:65532, that ENTRYPOINT.
    assert doc["config"]["Entrypoint"] == ["/usr/local/bin/kube-rbac-proxy"]
    assert doc["config"]["User"] == "65532:65532" and doc["config"]["ExposedPorts"] == {"8080/tcp": {}}
    assert sorted(layer) == ["usr", "usr/local", "usr/local/bin", "usr/local/bin/kube-rbac-proxy"]
    assert layer["usr/local/bin/kube-rbac-proxy"][1] == tiny_elf(payload=b"kube-rbac-proxy")
    assert str(proxy.upstream) == "quay.io/brancz/kube-rbac-proxy:v0.18.0"


def test_the_cloudnative_pg_image_has_the_binary_under_operator_and_manager_linked_in_the_working_directory(
        tmp_path: Path, debian: Path, config: PlatformConfig) -> None:
    """Every PostgreSQL pod's init container runs `/manager bootstrap /controller/manager`, which copies the relative
    path "manager" from the working directory: /manager must resolve to the binary (cloudnative-pg@v1.30.0:Dockerfile)."""
    (cnpg,) = factory.build_controller_images(config, _tools(tmp_path / "tools", config), tmp_path / "cache",
                                              components=["cnpg"], root=debian)
    doc, (_, layer), _ = _image(cnpg)
    assert str(cnpg.target) == f"{MIRROR}cloudnative-pg/cloudnative-pg:1.30.0"
    assert doc["config"]["Entrypoint"] == ["/manager"] and doc["config"]["WorkingDir"] == "/"
    assert doc["config"]["User"] == "65532:65532"
    binary, content = layer["operator/manager_amd64"]
    assert (binary.mode, binary.uid, binary.gid) == (0o755, NONROOT, NONROOT)  # COPY --chown=nonroot:nonroot
    assert content == tiny_elf(payload=b"cnpg-manager")
    assert layer["operator"][0].isdir() and layer["operator"][0].uid == NONROOT
    link = layer["manager"][0]
    assert link.issym() and link.linkname == "operator/manager_amd64"
    assert layer["LICENSE"][1].startswith(b"LICENSE of github.com/cloudnative-pg/cloudnative-pg")
    assert layer["licenses/example.com/lib/LICENSE"][1] == b"MIT\n"


def test_a_cloudnative_pg_binary_of_another_version_is_refused(tmp_path: Path, debian: Path,
                                                              config: PlatformConfig) -> None:
    tools = _tools(tmp_path / "tools", config)
    (tools / "share" / "cnpg" / "VERSION").write_text("v1.29.1\n")
    with pytest.raises(ImageError, match=r"cloudnative-pg@v1.29.1, but the stack pins v1.30.0"):
        factory.build_controller_images(config, tools, tmp_path / "cache", components=["cnpg"], root=debian)


def test_the_base_layer_is_distroless_nonroot_made_from_the_debian_packages(tmp_path: Path, debian: Path,
                                                                            config: PlatformConfig) -> None:
    kueue = factory.build_controller_images(config, _tools(tmp_path / "tools", config), tmp_path / "cache",
                                            components=["kueue"], root=debian)[0]
    _, (base, _), _ = _image(kueue)
    members = {name: member for name, (member, _) in base.items()}

    def text(name: str) -> bytes:
        return base[name][1]

    assert f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin" in text("etc/passwd").decode()
    assert f"nonroot:x:{NONROOT}:" in text("etc/group").decode()
    home, tmp = members["home/nonroot"], members["tmp"]
    assert (home.mode, home.uid, home.gid) == (0o700, NONROOT, NONROOT) and tmp.mode == 0o1777
    assert text("etc/nsswitch.conf") == NSSWITCH  # libc-bin's file, as Debian installs it
    # Every certificate of the package, sorted by path and concatenated (rules_distroless cacerts.sh).
    assert text("etc/ssl/certs/ca-certificates.crt") == CERTS["mozilla/A_Root.crt"] + CERTS["mozilla/B_Root.crt"]
    assert text("usr/share/doc/ca-certificates/copyright") == b"MPL-2.0\n"
    # tzdata as installed: the zone files (checked against dpkg's md5sums), their links and directories.
    assert text("usr/share/zoneinfo/Europe/Paris") == ZONE and members["usr/share/zoneinfo/Europe"].isdir()
    assert members["usr/share/zoneinfo/CET"].issym() and members["usr/share/zoneinfo/CET"].linkname == "Europe/Paris"
    assert text("usr/share/doc/tzdata/copyright") == b"public domain\n"
    assert {m.mtime for m in members.values()} == {0}
    assert "ca-certificates 20250419~deb12u2" in _image(kueue)[0]["history"][0]["created_by"]


def test_same_inputs_give_the_same_digest_in_two_directories(tmp_path: Path, debian: Path, config: PlatformConfig) -> None:
    tools = _tools(tmp_path / "tools", config)
    first = factory.build_controller_images(config, tools, tmp_path / "one", root=debian)
    second = factory.build_controller_images(config, tools, tmp_path / "two", root=debian)
    assert [b.digest for b in first] == [b.digest for b in second]
    assert not any(b.cached for b in first + second)
    for a, b in zip(first, second, strict=True):
        files = sorted(p.relative_to(a.layout) for p in a.layout.rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(b.layout) for p in b.layout.rglob("*") if p.is_file())
        assert all((a.layout / f).read_bytes() == (b.layout / f).read_bytes() for f in files)
    # Another Kueue binary: another Kueue image, the same JobSet and Trainer images and the same base layer.
    other = factory.build_controller_images(config, _tools(tmp_path / "tools2", config, kueue=tiny_elf(payload=b"v2")),
                                            tmp_path / "one", root=debian)
    assert other[0].digest != first[0].digest and [b.digest for b in other[1:]] == [b.digest for b in first[1:]]
    assert _image(other[0])[2][0] == _image(first[0])[2][0]


def test_a_second_build_is_taken_from_the_cache_and_a_damaged_entry_is_rebuilt(tmp_path: Path, debian: Path,
                                                                                config: PlatformConfig) -> None:
    tools, cache = _tools(tmp_path / "tools", config), tmp_path / "cache"
    cold = factory.build_controller_images(config, tools, cache, root=debian)
    warm = factory.build_controller_images(config, tools, cache, root=debian)
    assert [b.cached for b in cold] == [False] * 6 and [b.cached for b in warm] == [True] * 6
    assert [b.layout for b in warm] == [b.layout for b in cold] and [b.digest for b in warm] == [b.digest for b in cold]
    layer = json.loads(_blob(cold[0].layout, cold[0].digest))["layers"][1]["digest"]
    (cold[0].layout / "blobs" / "sha256" / layer.removeprefix("sha256:")).write_bytes(b"truncated")
    again = factory.build_controller_images(config, tools, cache, root=debian)
    assert [b.cached for b in again] == [False, True, True, True, True, True] and again[0].digest == cold[0].digest
    assert not list(cache.glob(".tmp-*"))


def test_a_dynamic_or_foreign_binary_is_refused(tmp_path: Path, debian: Path, config: PlatformConfig) -> None:
    dynamic = _tools(tmp_path / "dynamic", config, jobset=tiny_elf(interpreter=True))
    with pytest.raises(ImageError, match=r"jobset-controller is not a static x86-64 ELF executable.*CGO_ENABLED=0"):
        factory.build_controller_images(config, dynamic, tmp_path / "cache", root=debian)
    arm64 = _tools(tmp_path / "arm64", config, trainer=tiny_elf(machine=183))
    with pytest.raises(ImageError, match=r"trainer-controller-manager is not a static x86-64 ELF"):
        factory.build_controller_images(config, arm64, tmp_path / "cache", root=debian)
    script = _tools(tmp_path / "script", config, kueue=b"#!/bin/sh\nexec true\n")
    with pytest.raises(ImageError, match="kueue is not a static x86-64 ELF"):
        factory.build_controller_images(config, script, tmp_path / "cache", root=debian)


def test_a_binary_of_another_version_or_no_binary_names_the_build_command(tmp_path: Path, debian: Path,
                                                                           config: PlatformConfig) -> None:
    tools = _tools(tmp_path / "tools", config)
    (tools / "share" / "kueue" / "VERSION").write_text("v0.18.0\n")
    with pytest.raises(ImageError, match=r"built from sigs.k8s.io/kueue@v0.18.0, but the stack pins v0.19.2.*"
                                         r"tools/build.sh kueue"):
        factory.build_controller_images(config, tools, tmp_path / "cache", root=debian)
    (tools / "bin" / "trainer-controller-manager").unlink()
    with pytest.raises(ImageError, match=r"trainer-controller-manager not found: build it with `tools/build.sh trainer`"):
        factory.build_controller_images(config, tools, tmp_path / "cache", components=["trainer"], root=debian)


def test_a_package_file_changed_since_dpkg_installed_it_is_refused(tmp_path: Path, debian: Path,
                                                                   config: PlatformConfig) -> None:
    (debian / "usr/share/ca-certificates/mozilla/A_Root.crt").write_bytes(b"a locally added root\n")
    with pytest.raises(ImageError, match=r"/usr/share/ca-certificates/mozilla/A_Root.crt differs from what the Debian "
                                         r"package ca-certificates 20250419~deb12u2 installed.*--reinstall ca-certificates"):
        factory.build_controller_images(config, _tools(tmp_path / "tools", config), tmp_path / "cache", root=debian)
    (debian / "usr/share/ca-certificates/mozilla/A_Root.crt").write_bytes(CERTS["mozilla/A_Root.crt"])
    (debian / "usr/share/zoneinfo/CET").unlink()
    with pytest.raises(ImageError, match=r"/usr/share/zoneinfo/CET of the Debian package tzdata .* is missing"):
        factory.build_controller_images(config, _tools(tmp_path / "tools", config), tmp_path / "cache", root=debian)
    (debian / "var/lib/dpkg/info/libc-bin.md5sums").unlink()
    with pytest.raises(ImageError, match=r"the Debian package libc-bin is not installed.*apt-get install libc-bin"):
        factory.build_controller_images(config, _tools(tmp_path / "tools", config), tmp_path / "cache", root=debian)


def test_images_are_named_exactly_as_the_stack_renders_them(config: PlatformConfig) -> None:
    names = factory.targets(config)
    for component, target in names.items():
        assert target == installs.controller_image(config, component, ImageLock())  # no lock entry: no digest
        assert str(target).startswith(MIRROR)
    kueue_values = next(r for r in installs.releases(config) if r.component == "kueue").values
    image = kueue_values["controllerManager"]["manager"]["image"]
    assert f"{image['repository']}:{image['tag']}" == str(names["kueue"]) == "trainyard.local/mirror/kueue/kueue:v0.19.2"


def test_a_stack_without_a_mirror_is_refused() -> None:
    with pytest.raises(ImageError, match=r"no images\.registry_mirror: the factory's images are pushed under a mirror"):
        factory.targets(open_stack("local").config)


def test_a_one_layer_image_keeps_the_digest_it_had_before_layers_were_shared(tmp_path: Path) -> None:
    """write_layout (pause, busybox) is write_image with one layer: the same bytes as before this change."""
    entries = [Entry("bin", mode=0o755), Entry("bin/tool", b"not really a binary"), Entry("bin/sh", link="tool", mode=0o777),
               Entry("tmp", mode=0o1777)]
    config = {"Entrypoint": ["/bin/tool"], "User": "65535:65535"}
    before = "sha256:a33a3c2e2614db4014005113fa2ecae5958eecd9d8939815f06918407af78bdd"  # main's write_layout, same input
    assert write_layout(tmp_path / "one", entries, config, "a one-layer image") == before
    assert write_image(tmp_path / "two", [Layer(tuple(entries), "a one-layer image")], config) == before


def _rehearsal_stack(tmp_path: Path) -> Path:
    target = tmp_path / "Pulumi.rehearsal.yaml"
    write_rehearsal_stack(ROOT / "stacks" / "Pulumi.local.yaml", target,
                          in_cluster=InCluster(factory.COMPONENTS, ROOT / "images.lock.yaml"))
    return target


def test_the_sync_list_writes_to_the_loopback_registry_given_as_endpoint(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    stack_file = _rehearsal_stack(tmp_path)
    endpoint = "trainyard.local=http://127.0.0.1:25000"
    assert main(["bom", str(stack_file), "--format", "sync", "--endpoint", endpoint, "--insecure",
                 "--out", str(tmp_path / "sync")]) == 0
    script = (tmp_path / "sync" / "sync.sh").read_text()
    assert re.search(r"skopeo sync --all --preserve-digests --dest-tls-verify=false --src yaml --dest docker "
                     r"sync-\d\d-mirror-kueue\.yaml 127\.0\.0\.1:25000/mirror/kueue\n", script), script
    assert " 127.0.0.1:25000/mirror/chrislusf\n" in script  # SeaweedFS's server runs in the cluster too
    # Destinations on other hosts are left alone (the runtimes' registry.trainyard.internal).
    assert " registry.trainyard.internal/pytorch\n" in script and "trainyard.local" not in script
    capsys.readouterr()
    assert main(["bom", str(stack_file), "--format", "sync", "--endpoint", endpoint]) == 2
    assert "a plain http endpoint needs --insecure" in capsys.readouterr().err


def test_lock_only_for_a_registry_the_stack_does_not_use_says_which_it_uses(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["images", "lock", str(_rehearsal_stack(tmp_path)), "--lock", str(tmp_path / "lock.yaml"),
                 "--only-registry", "registry.example.com"]) == 2
    err = capsys.readouterr().err
    assert "--only-registry registry.example.com: no image of rehearsal is under that host" in err
    assert "registry.trainyard.internal, trainyard.local" in err
    assert not (tmp_path / "lock.yaml").exists()


def test_images_build_refuses_a_stack_without_a_mirror_and_a_registry_off_loopback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["images", "build", "local"]) == 2
    assert "error: the stack has no images.registry_mirror" in capsys.readouterr().err
    stack_file = str(_rehearsal_stack(tmp_path))
    assert main(["images", "build", stack_file, "--push", "registry.example.com:5000"]) == 2
    assert "to a loopback registry only" in capsys.readouterr().err
    assert main(["images", "build", stack_file, "--lock"]) == 2
    assert "--lock needs --push" in capsys.readouterr().err


def test_the_kserve_tools_build_the_versions_the_catalog_pins(config: PlatformConfig) -> None:
    """tools/build.sh's KServe controller and kube-rbac-proxy are the catalog's controller image and its chart's
    rbac-proxy image: the factory refuses a binary of another version, so the two must move together."""
    script = (ROOT / "tools" / "build.sh").read_text()
    for recipe in (r for r in factory.RECIPES if r.component == "kserve"):
        prefix = recipe.tool.upper().replace("-", "_")
        assert re.search(rf"^{prefix}_MODULE={re.escape(recipe.module)}$", script, re.M), recipe.tool
        tag = factory.recipe_upstream(config, recipe).tag
        assert re.search(rf"^{prefix}_VERSION={re.escape(str(tag))}$", script, re.M), (recipe.tool, tag)
