"""A stack in its project: where the stack file, runtimes and CRD mirror are found."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainyard.config import PlatformConfig, load_stack, stack_path
from trainyard.config.load import ConfigError, project_root
from trainyard.config.workers import check_workers
from trainyard.manifests import RenderedPlatform, render_platform


@dataclass(frozen=True)
class Stack:
    name: str
    path: Path
    root: Path
    config: PlatformConfig

    def render(self) -> RenderedPlatform:
        return render_platform(self.config, self.root, self.path.parent)


def open_stack(stack: str, root: Path | None = None) -> Stack:
    """Load and validate ``stack`` (a name or a path); raises ConfigError."""
    base = root if root is not None else project_root()
    path = stack_path(stack, base)
    config = load_stack(path)
    check_multikueue_peers(config, path)
    name = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    return Stack(name=name, path=path, root=base, config=config)


def check_multikueue_peers(config: PlatformConfig, path: Path) -> None:
    """A MultiKueue manager's worker stacks must carry the same tenant queues; raises ConfigError."""
    problems = check_workers(config, path)
    if problems:
        raise ConfigError(str(path), problems)
