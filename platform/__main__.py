"""Pulumi entry point: load this stack's typed config and declare the platform.

All logic lives in the ``trainyard`` package; this file only connects Pulumi's config
to it and turns a bad stack into a clean error (no traceback, nothing applied).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pulumi

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from trainyard.components import Platform  # noqa: E402
from trainyard.config import ConfigError, validate_platform  # noqa: E402
from trainyard.manifests import RenderError  # noqa: E402
from trainyard.project import check_multikueue_peers  # noqa: E402
from trainyard.supply.gate import UnlockedImages, refuse_unlocked  # noqa: E402
from trainyard.supply.in_mirror import MirrorCheckFailed, refuse_missing_in_mirror  # noqa: E402

ROOT = HERE.parent
stack = pulumi.get_stack()
stack_file = ROOT / "stacks" / f"Pulumi.{stack}.yaml"

try:
    config = validate_platform(pulumi.Config("trainyard").require_object("platform"), str(stack_file.relative_to(ROOT)))
    check_multikueue_peers(config, stack_file)
    # A stack that protects data deploys only digests its mirror reported (images.lock.yaml).
    refuse_unlocked(stack, config, ROOT, stack_file.parent)
    # Every image it pulls is in its registry now (images.verify_in_mirror), not ImagePullBackOff until a timeout.
    in_mirror = refuse_missing_in_mirror(stack, config, ROOT, stack_file.parent)
    platform = Platform("trainyard", config, root=ROOT, stack_dir=stack_file.parent)
except ConfigError as exc:
    raise pulumi.RunError(f"invalid stack configuration:\n{exc}") from None
except RenderError as exc:
    raise pulumi.RunError(f"cannot render the platform: {exc}") from None
except (UnlockedImages, MirrorCheckFailed) as exc:
    raise pulumi.RunError(str(exc)) from None

if in_mirror is not None:
    pulumi.log.info(f"images in the mirror: {in_mirror.summary()}")

pulumi.export("environment", config.environment)
pulumi.export("tenants", [t.name for t in config.tenants])
pulumi.export("flavors", {p.name: p.gpus for p in config.gpu_pools})
