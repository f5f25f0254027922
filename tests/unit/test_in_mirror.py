"""The mirror check: every image a stack pulls is asked of its registry; what is missing is named with its sync line.

A fake registry client answers from a set of references (no network); the CLI tests use the stub registry on
loopback (``tests/registry_stub.py``). The registry tier does the same with a real ``crane registry serve``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, rendered, stack
from tests.program.test_program import registry_filled_lock
from tests.registry_stub import serve_stub
from trainyard.cli import main
from trainyard.manifests import image_lock
from trainyard.supply.bom import build_bom, to_sync_text
from trainyard.supply.endpoints import ENDPOINTS_ENV, EndpointError, environment_endpoints, registry_client
from trainyard.supply.in_mirror import (
    MirrorCheckFailed,
    PulledImage,
    check_in_mirror,
    pulled_images,
    refuse_missing_in_mirror,
    verify_in_mirror_enabled,
)
from trainyard.supply.lock import ImageLock
from trainyard.supply.reference import ImageRef
from trainyard.supply.registry import RegistryClient, RegistryError, RegistryUnreachable

MIRROR_HOST = "registry.trainyard.internal"
ENDPOINT = "http://127.0.0.1:5999"


class FakeRegistry(RegistryClient):
    """Answers from ``served`` (``repository@digest-or-tag`` -> digest); counts what is asked, and how many at once."""

    def __init__(self, served: dict[str, str], down: frozenset[str] = frozenset(), delay: float = 0.0) -> None:
        super().__init__({MIRROR_HOST: ENDPOINT}, insecure=True)
        self.served, self.down, self.delay = served, down, delay
        self.asked: list[str] = []
        self.pinged: list[str] = []
        self.in_flight = self.most_in_flight = 0
        self._count = threading.Lock()

    def ping(self, registry: str) -> int:
        self.pinged.append(registry)
        if registry in self.down:
            raise RegistryUnreachable(f"{registry}: refused", registry, "Connection refused")
        return 200

    def has_manifest(self, ref: ImageRef, reference: str) -> bool:
        with self._count:
            self.asked.append(f"{ref.repository}@{reference}")
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(self.delay)
        with self._count:
            self.in_flight -= 1
        return f"{ref.repository}@{reference}" in self.served

    def digest(self, ref: ImageRef) -> str:
        found = self.served.get(f"{ref.repository}@{ref.tag}")
        if found is None:
            raise RegistryError(f"{ref}: not found in the registry")
        return found


def prod_images(filled: bool = True) -> list[PulledImage]:
    """What prod pulls, pinned by the committed lock; ``filled``: as after `images lock` (same digests, source
    registry), else with the committed placeholders."""
    prod, platform = stack("prod"), rendered("prod")
    lock = image_lock(prod.config, ROOT)
    if filled:
        lock = ImageLock({key: replace(entry, source="registry") for key, entry in lock.entries.items()})
    return pulled_images(platform, build_bom(prod, platform), lock)


def serving(images: list[PulledImage], leave_out: tuple[str, ...] = ()) -> dict[str, str]:
    """Every image by tag and digest, but the repositories in ``leave_out``."""
    out = {}
    for image in images:
        if image.ref.repository in leave_out:
            continue
        digest = image.ref.digest or ""
        out[f"{image.ref.repository}@{digest}"] = digest
        if image.ref.tag:
            out[f"{image.ref.repository}@{image.ref.tag}"] = digest
    return out


def test_prod_pulls_each_image_once_pinned_by_the_locks_digest() -> None:
    images = prod_images()
    lock = image_lock(stack("prod").config, ROOT)
    assert len(images) == len({i.ref for i in images}) >= 40
    for image in images:
        assert image.ref.digest is not None, image.ref  # asked by digest: what the nodes pull
        if image.ref.tag:
            entry = lock.entry(image.ref)
            assert entry is not None and entry.digest == image.ref.digest, image.ref


def test_every_image_there_passes_asking_each_once_on_a_small_pool() -> None:
    images = prod_images()
    client = FakeRegistry(serving(images), delay=0.02)
    report = check_in_mirror("prod", "stacks/Pulumi.prod.yaml", images, client)
    print(f"\n{report.summary()} (20 ms per answer: {len(images) * 0.02:.2f} s one after the other; "
          f"{client.most_in_flight} at once)")
    assert report.ok and report.message == ""
    assert sorted(client.asked) == sorted(f"{i.ref.repository}@{i.ref.digest}" for i in images)
    assert client.pinged == [MIRROR_HOST]  # the host once, before the images
    assert 1 < client.most_in_flight <= 8


def test_a_missing_image_is_named_with_the_url_asked_where_it_is_pulled_and_its_sync_line() -> None:
    images = prod_images()
    report = check_in_mirror("prod", "stacks/Pulumi.prod.yaml", images,
                             FakeRegistry(serving(images, leave_out=("mirror/jobset/jobset",))))
    (missing,) = report.missing
    jobset = missing.image.ref
    lines = report.message.splitlines()
    printed = to_sync_text(build_bom(stack("prod"), rendered("prod"))).splitlines()
    assert lines[0] == (f"stack 'prod': 1 of {len(images)} images it pulls are not in their registry; pods would wait "
                        "in ImagePullBackOff until a Deployment timed out (images.verify_in_mirror):")
    assert lines[1] == f"  {MIRROR_HOST}/mirror/jobset/jobset:v0.12.0@{jobset.digest}"
    assert lines[2] == f"    asked:  {ENDPOINT}/v2/mirror/jobset/jobset/manifests/{jobset.digest}: HTTP 404"
    assert lines[3].startswith("    pulled: chart:jobset ")
    file = lines[4].removeprefix("    sync:   ").split(":")[0]
    assert lines[4] == f"    sync:   {file}: registry.k8s.io jobset/jobset [v0.12.0]"
    assert f"# file: {file} (destination {MIRROR_HOST}/mirror/jobset)" in printed
    assert lines[5].strip() in printed and lines[5].strip().startswith("skopeo sync ")
    assert lines[6] == ("fill the mirror: trainyard bom prod --format sync --out DIR, then sh DIR/sync.sh "
                        "(or only the skopeo lines above, run in DIR)")
    assert len(lines) == 7


def test_a_digest_the_mirror_does_not_serve_under_its_tag_says_what_the_tag_serves() -> None:
    images = prod_images()
    served = serving(images, leave_out=("mirror/kueue/kueue",))
    other = "sha256:" + "ab" * 32
    served["mirror/kueue/kueue@v0.19.2"] = other  # the tag is there, with other content (synced without digests)
    report = check_in_mirror("prod", "stacks/Pulumi.prod.yaml", images, FakeRegistry(served))
    assert [m.tag_digest for m in report.missing] == [other]
    assert (f"    the tag v0.19.2 is there, with {other}: the mirror holds other content under it than the lock "
            "(synced without --preserve-digests, or the tag moved)") in report.message
    assert "then take the digests the mirror serves into the lock: trainyard images lock prod" in report.message


def test_a_placeholder_digest_is_said_to_be_one() -> None:
    images = prod_images(filled=False)  # images verify --in-mirror runs on a lock with placeholders too
    report = check_in_mirror("prod", "stacks/Pulumi.prod.yaml", images, FakeRegistry({}))
    assert len(report.missing) == len(images)
    placeholders = [m for m in report.missing if m.image.placeholder]
    assert placeholders and all(m.image.ref.tag for m in placeholders)
    assert "    the digest is the lock's placeholder, which no registry serves" in report.message
    assert report.message.endswith("then take the digests the mirror serves into the lock: trainyard images lock prod "
                                   "(and review the lock diff)")


def test_an_image_the_platform_builds_has_no_sync_line_and_is_to_be_pushed() -> None:
    images = prod_images()
    report = check_in_mirror("prod", "stacks/Pulumi.prod.yaml", images,
                             FakeRegistry(serving(images, leave_out=("trainyard/object-store-provisioner",))))
    (missing,) = report.missing
    assert missing.image.sync is None
    assert (f"    sync:   none: no upstream (an image the platform builds; BOM object-store:provisioner): push it to "
            f"{MIRROR_HOST}") in report.message
    assert "fill the mirror" not in report.message


def test_an_unreachable_registry_is_asked_once_and_named_with_the_images_it_leaves_unchecked() -> None:
    images = prod_images()
    client = FakeRegistry(serving(images), down=frozenset({MIRROR_HOST}))
    report = check_in_mirror("prod", "stacks/Pulumi.prod.yaml", images, client)
    assert not report.ok and client.asked == [] and client.pinged == [MIRROR_HOST]
    lines = report.message.splitlines()
    assert lines == [
        "stack 'prod': cannot check that the images it pulls are in their registry (images.verify_in_mirror):",
        f"  registry {MIRROR_HOST}, asked at {ENDPOINT}/v2/: cannot be reached (Connection refused); "
        f"{len(images)} images not checked",
        f"hint: run this where the registry answers, or map the host to an address that does: "
        f"{ENDPOINTS_ENV}=\"{MIRROR_HOST}=https://HOST:PORT\" (plain http only to a loopback address; "
        "docs/supply-chain.md); to deploy without this check, set images.verify_in_mirror: false in "
        "stacks/Pulumi.prod.yaml"]


def test_the_check_is_on_where_the_stack_protects_data_unless_the_stack_says_otherwise() -> None:
    local, prod = stack("local").config, stack("prod").config
    assert (verify_in_mirror_enabled(local), verify_in_mirror_enabled(prod)) == (False, True)
    for config in (local, prod):
        for setting in (True, False):
            changed = config.model_copy(update={"images": config.images.model_copy(update={"verify_in_mirror": setting})})
            assert verify_in_mirror_enabled(changed) is setting


def test_the_program_asks_no_registry_where_the_check_is_off() -> None:
    local = stack("local")
    client = FakeRegistry({})
    assert refuse_missing_in_mirror("local", local.config, ROOT, local.path.parent, client) is None
    assert client.pinged == client.asked == []
    prod = stack("prod")
    rendered("prod")
    with pytest.raises(MirrorCheckFailed, match="images it pulls are not in their registry"):
        refuse_missing_in_mirror("prod", prod.config, ROOT, prod.path.parent, client)


# --------------------------------------------------------------------------- endpoints: the one mapping


def test_the_endpoint_variable_maps_hosts_and_allows_plain_http_only_to_loopback() -> None:
    env = {ENDPOINTS_ENV: "trainyard.local=http://127.0.0.1:25000, registry.example.com=https://10.1.2.3:5000"}
    assert environment_endpoints(env) == {"trainyard.local": "http://127.0.0.1:25000",
                                          "registry.example.com": "https://10.1.2.3:5000"}
    client = registry_client(environ=env)
    assert client.base_url("trainyard.local") == "http://127.0.0.1:25000"  # no --insecure needed on loopback
    assert client.plain_http == frozenset({"127.0.0.1:25000"}) and not client.insecure
    for bad, reason in ((f"{MIRROR_HOST}=http://mirror.example.com:5000", "only for a loopback address"),
                        (f"{MIRROR_HOST}=ftp://127.0.0.1", "expected HOST=http(s)://"),
                        (f"{MIRROR_HOST}", "expected HOST=http(s)://"),
                        (f"{MIRROR_HOST}=http://127.0.0.1:1 {MIRROR_HOST}=http://127.0.0.1:2", "mapped twice")):
        with pytest.raises(EndpointError, match=re.escape(reason)) as caught:
            environment_endpoints({ENDPOINTS_ENV: bad})
        assert str(caught.value).startswith(ENDPOINTS_ENV)


def test_an_endpoint_flag_wins_over_the_variable_and_needs_insecure_for_plain_http() -> None:
    env = {ENDPOINTS_ENV: f"{MIRROR_HOST}=http://127.0.0.1:25000"}
    client = registry_client([f"{MIRROR_HOST}=http://127.0.0.1:5001"], environ=env)
    assert client.endpoints[MIRROR_HOST] == "http://127.0.0.1:5001" and client.plain_http == frozenset()
    with pytest.raises(RegistryError, match="pass --insecure"):
        client.base_url(MIRROR_HOST)


def test_images_lock_reads_the_variable_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with serve_stub() as registry:
        address = registry.address  # nothing listens there once the block ends
    monkeypatch.setenv(ENDPOINTS_ENV, f"{MIRROR_HOST}=http://{address}")
    assert main(["images", "lock", "prod", "--lock", str(tmp_path / "images.lock.yaml")]) == 1
    assert f"registry {MIRROR_HOST} cannot be reached (Connection refused)" in capsys.readouterr().err
    monkeypatch.setenv(ENDPOINTS_ENV, "not-a-mapping")
    assert main(["images", "lock", "prod", "--lock", str(tmp_path / "images.lock.yaml")]) == 2
    assert f"error: {ENDPOINTS_ENV} 'not-a-mapping': expected HOST=http(s)://" in capsys.readouterr().err


# --------------------------------------------------------------------------- trainyard images verify --in-mirror


def _prod_with_filled_lock(tmp_path: Path) -> Path:
    lock = registry_filled_lock(tmp_path)
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    doc["config"]["trainyard:platform"]["images"]["lock_file"] = str(lock)
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_images_verify_in_mirror_exits_1_with_the_programs_message(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    stack_file = _prod_with_filled_lock(tmp_path)
    images = prod_images()
    kueue = next(i for i in images if i.ref.repository == "mirror/kueue/kueue")
    with serve_stub() as registry:
        registry.hold(i.ref for i in images if i is not kueue)
        endpoint = ["--endpoint", f"{MIRROR_HOST}=http://{registry.address}", "--insecure"]
        assert main(["images", "verify", str(stack_file), "--in-mirror", *endpoint]) == 1
        out = capsys.readouterr()
        report = check_in_mirror("prod", "x", images, registry_client([endpoint[1]], insecure=True))
        assert main(["images", "verify", str(stack_file), "--in-mirror", "--format", "json", *endpoint]) == 1
        doc = json.loads(capsys.readouterr().out)
        registry.hold([kueue.ref])
        assert main(["images", "verify", str(stack_file), "--in-mirror", *endpoint]) == 0
        passed = capsys.readouterr()
    with capsys.disabled():
        print(out.err, out.out, passed.out, sep="\n")
    assert out.err == f"error: {report.message}\n"  # the program's message, word for word
    assert out.out.startswith("prod: 0 errors, 0 warnings")
    assert f"in the mirror: prod: {len(images)} of {len(images)} images asked at 1 registry in " in out.out
    assert doc["ok"] is False and doc["exit_code"] == 1 and doc["errors"] == 0
    (missing,) = doc["in_mirror"]["missing"]
    assert missing["reference"] == str(kueue.ref) and missing["sync"] == list(kueue.sync or ())
    assert missing["url"] == f"http://{registry.address}/v2/mirror/kueue/kueue/manifests/{kueue.ref.digest}"
    assert passed.out.rstrip().endswith(", 0 missing")


def test_endpoint_flags_without_in_mirror_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["images", "verify", "prod", "--endpoint", f"{MIRROR_HOST}=https://127.0.0.1:1"]) == 2
    assert "--endpoint and --insecure belong to --in-mirror" in capsys.readouterr().err


def test_a_plain_http_endpoint_without_insecure_is_not_asked_and_says_why() -> None:
    images = prod_images()
    report = check_in_mirror("prod", "stacks/Pulumi.prod.yaml", images,
                             registry_client([f"{MIRROR_HOST}=http://127.0.0.1:9"]))  # refused before any request
    (host,) = report.unchecked
    assert not host.unreachable and host.images == len(images)
    assert (f"  registry {MIRROR_HOST}, asked at http://127.0.0.1:9/v2/: not asked ({MIRROR_HOST}: endpoint "
            f"http://127.0.0.1:9 is plain http; pass --insecure to allow it); {len(images)} images not checked"
            ) in report.message.splitlines()
