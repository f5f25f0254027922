"""Helpers for review tests: real configs and renders changed in memory, and small git projects."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, stack
from trainyard.config.model import PlatformConfig
from trainyard.manifests import RenderedPlatform, render_platform
from trainyard.review.diff import Side


def changed_config(config: PlatformConfig, edit: Any) -> PlatformConfig:
    """``config`` with ``edit(data)`` applied to its plain form, validated again."""
    data = config.model_dump(mode="json")
    edit(data)
    return PlatformConfig.model_validate(data)


def prod_config() -> PlatformConfig:
    return stack("prod").config


def side(label: str, config: PlatformConfig) -> Side:
    return Side(label, config, render_platform(config, ROOT, ROOT / "stacks"))


def with_objects(rendered: RenderedPlatform, edit: Any) -> RenderedPlatform:
    objects = copy.deepcopy(list(rendered.objects))
    edit(objects)
    return RenderedPlatform.flat(rendered.crds, tuple(objects), rendered.releases)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(cwd), "-c", "user.name=Test", "-c", "user.email=test@example.invalid",
                           "-c", "commit.gpgsign=false", *args], capture_output=True, text=True, check=True)
    return done.stdout


DEMO_STACK = """\
config:
  trainyard:platform:
    environment: demo
    cluster:
      name: demo
      context: demo-admin
    gpu_pools:
      - name: a100
        gpu_product: NVIDIA-A100-SXM4-80GB
        gpus_per_node: 8
        nodes: {nodes}
        cpu_per_node: 96
        memory_per_node: 1000Gi
        node_labels:
          trainyard.dev/pool: a100
    cohorts:
      - name: shared
    tenants:
{tenants}
    runtimes:
      approved: [torch-distributed]
      approved_registries: [registry.trainyard.internal/]
"""

TENANT = """\
      - name: {name}
        cohort: shared
        quotas:
          - flavor: a100
            gpus: {gpus}
            borrowing_limit: 8
            lending_limit: 4
        groups: [{name}-engineers]
"""


def demo_stack(nodes: int = 2, tenants: tuple[tuple[str, int], ...] = (("team-a", 8), ("team-b", 8))) -> str:
    return DEMO_STACK.format(nodes=nodes, tenants="".join(TENANT.format(name=n, gpus=g) for n, g in tenants).rstrip("\n"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository with a Trainyard project: one demo stack, one runtime and the image lock, committed."""
    root = tmp_path / "repo"
    (root / "stacks").mkdir(parents=True)
    (root / "runtimes").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copy(ROOT / "runtimes" / "torch-distributed.yaml", root / "runtimes" / "torch-distributed.yaml")
    shutil.copy(ROOT / "images.lock.yaml", root / "images.lock.yaml")  # runtimes name images by tag; the lock pins them
    (root / "stacks" / "Pulumi.demo.yaml").write_text(demo_stack())
    git(root, "init", "--quiet")
    git(root, "add", ".")
    git(root, "commit", "--quiet", "-m", "demo project")
    return root
