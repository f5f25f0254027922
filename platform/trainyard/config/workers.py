"""Between stacks: a MultiKueue manager and the worker stacks it names must agree.

The manager's stack names each worker's stack file (``config/multikueue.py``); this loads them and
compares: every tenant of the manager exists on every worker with the same namespace and priority
classes, and a worker has no tenants the manager does not dispatch. ``trainyard.project`` runs it
when it opens a manager stack.
"""

from __future__ import annotations

from pathlib import Path

from trainyard.config.load import ConfigError, Problem, load_stack
from trainyard.config.model import PlatformConfig


def check_workers(manager: PlatformConfig, manager_file: Path) -> list[Problem]:
    """Problems between a manager stack and its worker stacks (empty when they match, or not a manager)."""
    if manager.multikueue is None or manager.multikueue.role != "manager":
        return []
    problems: list[Problem] = []
    base = "trainyard:platform.multikueue.workers"
    for i, worker in enumerate(manager.multikueue.workers):
        where = f"{base}[{i}].stack"
        path = Path(worker.stack) if Path(worker.stack).is_absolute() else manager_file.parent / worker.stack
        try:
            other = load_stack(path)
        except ConfigError as exc:
            problems.append(Problem(where, f"worker stack {worker.stack} is not valid: "
                                    + "; ".join(p.render(exc.file) for p in exc.problems)))
            continue
        if other.multikueue is None or other.multikueue.role != "worker":
            problems.append(Problem(where, f"{worker.stack} is not a MultiKueue worker (set multikueue.role: worker)"))
        theirs = {t.name: t for t in other.tenants}
        for tenant in manager.tenants:
            match = theirs.get(tenant.name)
            if match is None:
                problems.append(Problem(where, f"tenant {tenant.name!r} has no queue on worker {worker.name} "
                                        f"({worker.stack}): its dispatched jobs would find no LocalQueue there"))
                continue
            if match.namespace_name != tenant.namespace_name:
                problems.append(Problem(where, f"tenant {tenant.name!r} uses namespace {tenant.namespace_name!r} here "
                                        f"but {match.namespace_name!r} on worker {worker.name}"))
            missing = sorted(set(tenant.priority_classes) - {p.name for p in other.priority_classes})
            if missing:
                problems.append(Problem(where, f"tenant {tenant.name!r}: priority classes {', '.join(missing)} are not "
                                        f"defined on worker {worker.name}"))
        extra = sorted(set(theirs) - {t.name for t in manager.tenants})
        if extra:
            problems.append(Problem(where, f"worker {worker.name} has tenants the manager does not dispatch: "
                                    f"{', '.join(extra)}"))
    return problems
