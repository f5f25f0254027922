"""The program asks the mirror for every image before it declares anything (``images.verify_in_mirror``).

prod under the SDK's mocks, with a registry-filled lock and its own setting (unset: on, prod protects data).
``TRAINYARD_REGISTRY_ENDPOINTS`` points the mirror host at a stub registry on loopback (``tests/registry_stub.py``),
the one way the program learns another address for a host: one image missing there fails the program with a
clean ``pulumi.RunError`` naming it, the URL asked and the sync line, and nothing is declared; with the image
there, the program declares the platform. The registry tier does the same with a real registry through the CLI.
"""

from __future__ import annotations

import time

import pulumi
import pytest

from tests.conftest import ROOT, rendered, stack
from tests.program.test_program import Registered, run_program
from tests.registry_stub import serve_stub
from trainyard.manifests import image_lock
from trainyard.supply.bom import build_bom, sync_groups, sync_lines, to_sync_text
from trainyard.supply.endpoints import ENDPOINTS_ENV
from trainyard.supply.in_mirror import PulledImage, pulled_images

MIRROR_HOST = "registry.trainyard.internal"


def prod_images() -> list[PulledImage]:
    """What prod pulls, pinned by the committed lock (the registry-filled lock has the same digests)."""
    prod, platform = stack("prod"), rendered("prod")
    return pulled_images(platform, build_bom(prod, platform), image_lock(prod.config, ROOT))


def test_an_image_missing_from_the_mirror_fails_the_program_before_anything_is_declared(
        monkeypatch: pytest.MonkeyPatch) -> None:
    images = prod_images()
    kueue = next(i for i in images if i.ref.repository == "mirror/kueue/kueue")
    bom = build_bom(stack("prod"), rendered("prod"))
    entry, command = sync_lines(bom, next(b for b in bom.images if b.reference == kueue.ref.tagged), sync_groups(bom)) \
        or ("", "")
    with serve_stub() as registry:
        registry.hold(i.ref for i in images if i is not kueue)
        monkeypatch.setenv(ENDPOINTS_ENV, f"{MIRROR_HOST}=http://{registry.address}")  # loopback: plain http allowed
        registered = Registered()
        start = time.monotonic()
        with pytest.raises(pulumi.RunError) as caught:
            run_program("prod", monkeypatch, verify_in_mirror=None, registered=registered)
        seconds = time.monotonic() - start
    message = str(caught.value)
    print(f"\nprogram refused in {seconds:.2f} s ({len(images)} images asked):\n{message}")
    assert registered.resources == []  # nothing declared, so nothing applied
    assert message.startswith(f"stack 'prod': 1 of {len(images)} images it pulls are not in their registry")
    assert f"  {kueue.ref}\n" in message
    assert f"    asked:  http://{registry.address}/v2/mirror/kueue/kueue/manifests/{kueue.ref.digest}: HTTP 404" in message
    assert "    pulled: chart:kueue " in message
    # The sync line is one of what `trainyard bom prod --format sync` prints, for the file that lists the image.
    file = entry.split(":", 1)[0]
    printed = to_sync_text(bom).splitlines()
    assert entry == f"{file}: registry.k8s.io kueue/kueue [v0.19.2]"
    assert command in printed and command.endswith(f" {file} {MIRROR_HOST}/mirror/kueue")
    assert f"# file: {file} (destination {MIRROR_HOST}/mirror/kueue)" in printed
    assert f"    sync:   {entry}\n            {command}\n" in message
    assert "fill the mirror: trainyard bom prod --format sync --out DIR" in message
    assert "Traceback" not in message


def test_with_every_image_in_the_mirror_the_program_declares_the_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    images = prod_images()
    with serve_stub() as registry:
        registry.hold(i.ref for i in images)
        monkeypatch.setenv(ENDPOINTS_ENV, f"{MIRROR_HOST}=http://{registry.address}")
        start = time.monotonic()
        registered, _ = run_program("prod", monkeypatch, verify_in_mirror=None)
        seconds = time.monotonic() - start
    asked = [path for method, path in registry.requests if method == "HEAD"]
    print(f"\nprod: {len(images)} images asked, the program declared {len(registered.resources)} resources "
          f"in {seconds:.2f} s")
    assert sorted(asked) == sorted(f"/v2/{i.ref.repository}/manifests/{i.asked_as}" for i in images)  # once each
    assert [p for m, p in registry.requests if m == "GET"] == ["/v2/"]  # the host, once
    assert any(r.typ == "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue" for r in registered.resources)


def test_an_unreachable_mirror_is_a_clean_error_naming_the_host_and_how_to_turn_the_check_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with serve_stub() as registry:
        address = registry.address  # closed when the block ends: nothing listens there afterwards
    monkeypatch.setenv(ENDPOINTS_ENV, f"{MIRROR_HOST}=http://{address}")
    registered = Registered()
    with pytest.raises(pulumi.RunError) as caught:
        run_program("prod", monkeypatch, verify_in_mirror=None, registered=registered)
    message = str(caught.value)
    print(f"\n{message}")
    assert registered.resources == []
    assert f"  registry {MIRROR_HOST}, asked at http://{address}/v2/: cannot be reached (" in message
    assert f"{len(prod_images())} images not checked" in message
    assert "set images.verify_in_mirror: false in stacks/Pulumi.prod.yaml" in message
    assert f'{ENDPOINTS_ENV}="{MIRROR_HOST}=https://HOST:PORT"' in message


def test_a_plain_http_endpoint_off_loopback_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered("prod")
    monkeypatch.setenv(ENDPOINTS_ENV, f"{MIRROR_HOST}=http://mirror.example.com:5000")
    with pytest.raises(pulumi.RunError, match=f"{ENDPOINTS_ENV} .*plain http is accepted here only for a loopback"):
        run_program("prod", monkeypatch, verify_in_mirror=None)
