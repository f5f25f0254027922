"""Air-gap completeness: every image any rendered object or chart value names is in the bill of materials.

The BOM is built from the places images are known to live (controllers, runtimes, chart templates,
operand fields). This test does not trust those places: it renders every stack file (``stacks/`` and
the fixture stacks) and scans every value of every object and of every installed chart's values with
``supply.image_scan`` (image-like strings, tokens of arguments and scripts, env vars holding images,
``repository``/``image``/``version`` triples), then fails naming each image the BOM does not list,
with the field it was found in. The chart tier does the same on what helm renders
(``tests/charts/test_chart_images.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.conftest import ROOT, rendered, stack
from trainyard.supply.bom import build_bom, lock_references, sync_groups, uncovered
from trainyard.supply.image_scan import bom_key, composed, find_images, platform_images

STACK_FILES = sorted([*(ROOT / "stacks").glob("Pulumi.*.yaml"), *(ROOT / "tests" / "fixtures" / "stacks").glob("Pulumi.*.yaml")])
NAMES = [p.name.removeprefix("Pulumi.").removesuffix(".yaml") if p.parent == ROOT / "stacks" else str(p)
         for p in STACK_FILES]
MIRROR = "registry.trainyard.internal/mirror/"


def _report(name: str) -> list[str]:
    bom = build_bom(stack(name), rendered(name))
    return [f"{image.reference} (at {image.where})" for image in uncovered(bom, platform_images(rendered(name)))]


@pytest.mark.parametrize("name", NAMES, ids=[Path(n).name for n in NAMES])
def test_every_image_the_render_names_is_in_the_bill_of_materials(name: str) -> None:
    missing = _report(name)
    assert not missing, "images rendered but not in the bill of materials:\n  " + "\n  ".join(missing)


def test_the_stacks_under_test_are_every_stack_file() -> None:
    assert {"local", "staging", "prod"} <= set(NAMES)
    assert len(NAMES) == len(list((ROOT / "stacks").glob("Pulumi.*.yaml"))) + len(
        list((ROOT / "tests" / "fixtures" / "stacks").glob("Pulumi.*.yaml")))


def test_an_operand_missing_from_the_bom_is_named_with_its_field() -> None:
    bom = build_bom(stack("prod"), rendered("prod"))
    toolkit = f"{MIRROR}nvidia/k8s/container-toolkit:v1.20.0"
    without = dataclasses.replace(bom, images=tuple(i for i in bom.images if i.reference != toolkit))
    missing = uncovered(without, platform_images(rendered("prod")))
    # The value carries the lock's digest; the BOM lists the image by its tagged reference.
    assert [(bom_key(m.reference), m.where) for m in missing] == [(toolkit, "chart:gpu-operator values.toolkit")]


def test_prod_lists_the_gpu_operator_operands_with_upstream_digest_and_puller() -> None:
    images = {i.reference: i for i in build_bom(stack("prod"), rendered("prod")).images}
    for repository, tag, source in (
        ("nvidia/driver", "595.91.07", "operand:gpu-operator:NVIDIADriver/h100.spec"),
        ("nvidia/cloud-native/k8s-driver-manager", "v0.12.0", "operand:gpu-operator:NVIDIADriver/h100.spec.manager"),
        ("nvidia/k8s/container-toolkit", "v1.20.0", "operand:gpu-operator:values.toolkit"),
        ("nvidia/cloud-native/k8s-mig-manager", "v0.15.0", "operand:gpu-operator:values.migManager"),
        ("nvidia/k8s/dcgm-exporter", "4.6.0-4.8.3-distroless", "operand:gpu-operator:values.dcgmExporter"),
        ("nvidia/k8s-device-plugin", "v0.20.0", "operand:gpu-operator:values.devicePlugin"),
    ):
        image = images[f"{MIRROR}{repository}:{tag}"]
        assert image.upstream == f"nvcr.io/{repository}:{tag}"
        assert image.digest is not None and image.status == "placeholder"
        assert source in image.sources


def test_prod_lists_the_other_operator_pulled_images() -> None:
    sources = {i.reference: i.sources for i in build_bom(stack("prod"), rendered("prod")).images}
    assert "operand:cnpg:Cluster/mlflow-db.spec.imageName" in sources[f"{MIRROR}cloudnative-pg/postgresql:18.4-system-trixie"]
    assert sources[f"{MIRROR}cloudnative-pg/plugin-barman-cloud-sidecar:v0.15.0"] == (
        "operand:barman-cloud-plugin:Cluster/mlflow-db.spec.plugins[barman-cloud.cloudnative-pg.io]:sidecar",)
    assert sources[f"{MIRROR}minio/operator-sidecar:v7.0.1"] == ("operand:minio:values.operator.sidecarImage",)
    assert sources[f"{MIRROR}kserve/storage-initializer:v0.20.0"] == ("operand:kserve:values.kserve.storage",)
    assert sources[f"{MIRROR}jetstack/cert-manager-acmesolver:v1.21.1"] == ("controller:cert-manager:acmesolver",)


def test_operands_are_in_the_sync_list_and_the_lock_references() -> None:
    bom = build_bom(stack("prod"), rendered("prod"))
    locked = {ref.tagged for ref in lock_references(bom)}
    synced = {f"{registry}/{repo}:{tag}" for group in sync_groups(bom) for registry, body in group.source.items()
              for repo, tags in body["images"].items() for tag in tags}
    for upstream, pulled in (("nvcr.io/nvidia/k8s/container-toolkit:v1.20.0", "nvidia/k8s/container-toolkit:v1.20.0"),
                             ("nvcr.io/nvidia/driver:595.91.07", "nvidia/driver:595.91.07"),
                             ("quay.io/minio/operator-sidecar:v7.0.1", "minio/operator-sidecar:v7.0.1"),
                             ("ghcr.io/cloudnative-pg/plugin-barman-cloud-sidecar:v0.15.0",
                              "cloudnative-pg/plugin-barman-cloud-sidecar:v0.15.0")):
        assert upstream in synced
        assert MIRROR + pulled in locked


def test_the_bom_takes_an_operand_tag_from_the_render_not_the_catalog() -> None:
    platform = rendered("prod")
    driver = next(o for o in platform.objects if o["kind"] == "NVIDIADriver")
    edited = [{**o, "spec": {**o["spec"], "version": "600.1.2"}} if o is driver else o for o in platform.objects]
    flat = type(platform).flat(platform.crds, tuple(edited), platform.releases)
    images = {i.reference: i for i in build_bom(stack("prod"), flat).images}
    assert images[f"{MIRROR}nvidia/driver:600.1.2"].upstream == "nvcr.io/nvidia/driver:600.1.2"


@pytest.mark.parametrize(("value", "expected"), [
    ({"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"}, ["nvcr.io/nvidia/driver:595.91.07"]),
    ({"repository": "r.io/x", "image": "y", "version": "sha256:" + "a" * 64}, ["r.io/x/y@sha256:" + "a" * 64]),
    ({"registry": "ghcr.io", "repository": "kubeflow/trainer", "tag": "v1"}, ["ghcr.io/kubeflow/trainer:v1"]),
    ({"image": "docker.io/kserve/agent", "tag": "v0.20.0"}, ["docker.io/kserve/agent:v0.20.0"]),
    ({"env": [{"name": "CACHE_IMAGE", "value": "kubeflow/data-cache:v2"}]}, ["kubeflow/data-cache:v2"]),
    ({"imageName": "postgres:18"}, ["postgres:18"]),
    ({"args": ["--acme-http01-solver-image=quay.io/jetstack/acmesolver:v1.21.1", "--v=2"]},
     ["quay.io/jetstack/acmesolver:v1.21.1"]),
    ({"data": {"storageInitializer": '{"image" : "registry.example.com/kserve/si:v1", "cpu": "1"}'}},
     ["registry.example.com/kserve/si:v1"]),
])
def test_the_scan_recognises_images_however_they_are_spelt(value: object, expected: list[str]) -> None:
    assert [f.reference for f in find_images(value)] == expected


@pytest.mark.parametrize("value", [
    {"labels": {"kueue.x-k8s.io/queue-name": "default", "trainyard.dev/pool": "h100"}},
    {"endpoint": "http://mlflow.mlflow.svc:5000/api", "bucket": "s3://team-a-models/"},
    {"name": "busybox:1.38"},  # a short name under a key that does not name an image
    {"resources": {"limits": {"nvidia.com/gpu": "8"}}},
    {"repository": "nvcr.io/nvidia", "image": "driver"},  # no version: not an image
])
def test_the_scan_ignores_what_only_looks_like_an_image(value: object) -> None:
    assert find_images(value) == []


def test_a_triple_needs_all_its_parts() -> None:
    assert composed({"repository": "nvcr.io/nvidia", "image": "driver", "version": ""}) is None
