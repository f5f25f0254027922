"""``trainyard cluster up|down|status|env|smoke|kubeconfig`` and ``trainyard rehearse STACK SCENARIO...``.

Registered through ``trainyard.cli.EXTRA_COMMANDS``. Exit codes as everywhere in ``trainyard``:
0 success, 1 a scenario's expectations (or the smoke test) not met, 2 bad input (stack, scenario,
cluster that cannot start) with a message, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainyard.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATIONS, EXTRA_COMMANDS, UsageError
from trainyard.config.load import project_root
from trainyard.config.model import GpuPool
from trainyard.project import open_stack
from trainyard.rehearsal.cluster import ControlPlane
from trainyard.rehearsal.kube import KubeError
from trainyard.rehearsal.prerequisites import PrerequisiteError
from trainyard.rehearsal.processes import Processes
from trainyard.rehearsal.scenario import Job, ScenarioError, load_scenario, scenario_path
from trainyard.rehearsal.session import Rehearsal, host_processes, stop_everything
from trainyard.rehearsal.settings import ClusterError, Settings


def _rehearsal(stack: str, real_nodes: bool | None = None) -> Rehearsal:
    return Rehearsal(open_stack(stack), real_nodes=real_nodes)


def _cmd_cluster(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    try:
        if args.action in {"env", "status"}:
            return _env(settings) if args.action == "env" else _status(settings)
        if args.action == "down":
            stack_marker = settings.state_dir / "stack"
            if stack_marker.exists() and ControlPlane(settings).api_ready():
                _rehearsal(args.stack or stack_marker.read_text().strip()).down(purge=args.purge)
            else:
                stop_everything(settings)
                if args.purge:
                    import shutil

                    shutil.rmtree(settings.state_dir, ignore_errors=True)
            return EXIT_OK
        if args.action in {"node-up", "node-down"}:
            return _real_node(settings, args.action, args.node, args.proxy, args.network_policy, args.dns)
        rehearsal = _rehearsal(args.stack or "local", True if args.real_nodes else None)
        actions = {"up": lambda: _up(rehearsal), "deploy": lambda: _deploy(rehearsal), "smoke": lambda: _smoke(rehearsal),
                   "lab-images": lambda: _lab_images(rehearsal),
                   "kubeconfig": lambda: _tenant_kubeconfig(rehearsal, args.tenant)}
        if args.action in actions:
            return actions[args.action]()
    except (ClusterError, KubeError, TimeoutError, PrerequisiteError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    raise UsageError(f"unknown action {args.action}")


def _up(rehearsal: Rehearsal) -> int:
    rehearsal.up()
    return EXIT_OK


def _deploy(rehearsal: Rehearsal) -> int:
    """``pulumi up`` of the rehearsal overlay of the stack, then (with real nodes) every installed controller Ready."""
    run = rehearsal.deploy()
    print(run.output, end="")
    if run.returncode != 0:
        print(f"error: pulumi up failed (exit {run.returncode}) after {run.seconds:.0f}s", file=sys.stderr)
        waiting = rehearsal.pods_not_ready()
        if waiting:
            print("the platform's pods not Ready:\n" + "\n".join(f"    {line}" for line in waiting), file=sys.stderr)
        return EXIT_BAD_INPUT
    if rehearsal.real_nodes:
        print(rehearsal.wait_platform_ready())
    print(f"==> deployed in {run.seconds:.0f}s", flush=True)
    return EXIT_OK


def _lab_images(rehearsal: Rehearsal) -> int:
    """The lab's images (the lora-peft runtime's CPU stand-in, Trainer's initializers) into the real nodes' mirror."""
    for line in rehearsal.push_lab_images():
        print(f"    {line}", flush=True)
    print("==> pushed and locked; `trainyard cluster deploy` renders the runtimes with these digests", flush=True)
    return EXIT_OK


def _env(settings: Settings) -> int:
    for name, value in settings.env().items():
        print(f"export {name}={value}")
    return EXIT_OK


def _real_node(settings: Settings, action: str, name: str, proxy: bool, network_policy: bool, dns: bool) -> int:
    """A real node (containerd + CNI bridge + kubelet) beside the running control plane: docs/rehearsal.md "Real nodes"."""
    from trainyard.rehearsal.node import RealNode, real_node_names

    names = real_node_names(settings)
    index = names.index(name) if name in names else len(names)
    node = RealNode(settings, name, index, proxy=proxy, network_policy=network_policy, dns=dns)
    if action == "node-down":
        node.down()
        left = node.leftovers()
        for item in left:
            print(f"    left: {item}", file=sys.stderr)
        return EXIT_VIOLATIONS if left else EXIT_OK
    node.up()
    print(node.plane.kube().run("get", "node", name, "-o", "wide").stdout, end="")
    return EXIT_OK


def _tenant_kubeconfig(rehearsal: Rehearsal, tenant: str | None) -> int:
    if not tenant:
        raise UsageError("cluster kubeconfig needs --tenant NAME: a member of that tenant, nothing more")
    print(rehearsal.tenant_kubeconfig(tenant))
    return EXIT_OK


def _status(settings: Settings) -> int:
    processes = Processes(settings)
    plane = ControlPlane(settings)
    ok = True
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "jobset", "trainer", "kueue"):
        running = processes.running(name)
        print(f"{name}: {f'running (pid {processes.pid(name)})' if running else 'stopped'}")
    from trainyard.rehearsal.in_cluster_api import FORWARDER
    from trainyard.rehearsal.node import real_node_names

    for node in real_node_names(settings):
        for name in (f"containerd-{node}", f"kubelet-{node}"):
            print(f"{name}: {f'running (pid {processes.pid(name)})' if processes.running(name) else 'stopped'}")
    if real_node_names(settings):
        print(f"{FORWARDER}: {f'running (pid {processes.pid(FORWARDER)})' if processes.running(FORWARDER) else 'stopped'}")
    for host_process in host_processes():
        if processes.pid(host_process) is not None:
            running = processes.running(host_process)
            print(f"{host_process}: {f'running (pid {processes.pid(host_process)})' if running else 'stopped'}")
    if plane.api_ready():
        print(f"apiserver: ready at {plane.server}")
    else:
        print("apiserver: not ready")
        ok = False
    ok = ok and plane.healthy()
    print(f"kubeconfig: {settings.kubeconfig} (context trainyard-local)")
    return EXIT_OK if ok else EXIT_VIOLATIONS


def _smoke(rehearsal: Rehearsal) -> int:
    """One TrainJob per tenant through its LocalQueue: admitted, pods bound to the right pool, completed."""
    config = rehearsal.config
    failures = 0
    for tenant in config.tenants:
        quota = tenant.quotas[0]
        pool = config.pool(quota.flavor)
        name = f"smoke-{tenant.name}"[:63]
        namespace = tenant.namespace_name
        rehearsal.kube.delete("trainjobs.trainer.kubeflow.org", name, namespace=namespace, wait=True)
        job = Job(name=name, tenant=tenant.name, runtime=config.runtimes.approved[0], nodes=1,
                  gpus_per_node=min(pool.gpus_per_node, quota.gpus or 1) if isinstance(pool, GpuPool) else 0,
                  flavor=pool.name, run_for="3s")
        rehearsal.submit(job)
        try:
            rehearsal.wait_finished([name], namespace, timeout=180)
        except TimeoutError as exc:
            print(f"FAILED {namespace}/{name}: {exc}")
            failures += 1
            continue
        workload = next(w for w in rehearsal.workloads(namespace)
                        if any(r["name"] == name for r in w["metadata"].get("ownerReferences", [])))
        admission = workload["status"]["admission"]
        flavors = sorted({f for a in admission["podSetAssignments"] for f in a.get("flavors", {}).values()})
        pods = [p for p in rehearsal.kube.items("pods", namespace, selector=f"jobset.sigs.k8s.io/jobset-name={name}")]
        nodes = {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}
        node_pools = {n["metadata"]["name"]: n["metadata"]["labels"] for n in rehearsal.kube.items("nodes", None)}
        right_pool = bool(nodes) and all(
            all(node_pools.get(node, {}).get(k) == v for k, v in pool.node_labels.items()) for node in nodes.values())
        ok = right_pool and flavors == [pool.name]
        failures += 0 if ok else 1
        print(f"{'ok' if ok else 'FAILED'} {namespace}/{name}: admitted by ClusterQueue {admission['clusterQueue']} "
              f"(flavor {', '.join(flavors)}), pods {', '.join(f'{p}->{n}' for p, n in sorted(nodes.items()))} "
              f"{'on' if right_pool else 'NOT on'} pool {pool.name}, completed")
    return EXIT_OK if failures == 0 else EXIT_VIOLATIONS


def _cmd_rehearse(args: argparse.Namespace) -> int:
    root = project_root()
    try:
        scenarios = [load_scenario(scenario_path(name, root)) for name in args.scenarios]
    except ScenarioError as exc:
        print(f"error: invalid scenario {exc.file}", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {exc.file}: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    stack = open_stack(args.stack)
    for scenario in scenarios:
        if stack.name not in scenario.stacks:
            print(f"error: scenario {scenario.name} is written for {', '.join(scenario.stacks)}, not {stack.name}",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
    failed: list[str] = []
    base = Rehearsal(stack)
    try:
        base.up()
        for scenario in scenarios:
            rehearsal = base.with_overrides(scenario.platform)
            # Kueue restarts when the scenario changes its configuration (e.g. waitForPodsReady timeouts).
            rehearsal.controllers.up()
            run = rehearsal.deploy_if_changed()
            if run is not None:
                print(f"    deployed {stack.name} with the real engine in {run.seconds:.0f}s "
                      f"({'ok' if run.returncode == 0 else 'FAILED'}; log {rehearsal.settings.logs})", flush=True)
                if run.returncode != 0:
                    print(run.output[-4000:], file=sys.stderr)
                    return EXIT_BAD_INPUT
            rehearsal.reset_jobs()
            if rehearsal.run_scenario(scenario):
                failed.append(scenario.name)
            if not args.keep_jobs:
                rehearsal.reset_jobs()
    except (ClusterError, KubeError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if failed:
        print(f"\n{len(failed)} of {len(scenarios)} scenarios did not meet their expectations: {', '.join(failed)}")
        return EXIT_VIOLATIONS
    print(f"\nall {len(scenarios)} scenarios met their expectations")
    return EXIT_OK


def _cmd_kind(args: argparse.Namespace) -> int:
    from trainyard.config import ConfigError
    from trainyard.rehearsal.kind import kind_context, start_fake_nodes, write_kind_files

    stack = open_stack(args.stack)
    try:
        config, files = write_kind_files(stack.path, Path(args.out))
        if args.action == "config":
            for path in files:
                print(path)
            print(f"# kind create cluster --config {files[0]}  (context {kind_context(config)}); "
                  "then tools/kind-up.sh", file=sys.stderr)
            return EXIT_OK
        settings = Settings.from_env()
        if args.action == "nodes":
            count = start_fake_nodes(config, settings)
            print(f"==> {count} fake GPU nodes on {settings.kubeconfig}, kept by kwok (pid {Processes(settings).pid('kwok')})")
            return EXIT_OK
        Processes(settings).stop("kwok")  # down
        return EXIT_OK
    except (ConfigError, ClusterError, KubeError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    help_text = "the rehearsal cluster: control plane, real Kueue/JobSet/Trainer, kwok and fake GPU nodes on 127.0.0.1"
    cluster = subparsers.add_parser("cluster", help=help_text, description=help_text)
    cluster.add_argument("action", choices=["up", "deploy", "down", "status", "env", "smoke", "kubeconfig", "lab-images",
                                            "node-up", "node-down"],
                         help="up: start (idempotent); deploy: `pulumi up` of the stack's rehearsal overlay (with real "
                         "nodes: then every installed controller Ready); down: stop (webhooks removed first); status; "
                         "env: variables; "
                         "smoke: one TrainJob per tenant, admitted, placed on its pool and completed; "
                         "kubeconfig --tenant T: print the path of a kubeconfig of a member of tenant T; "
                         "lab-images: (real nodes) build, push and lock the lab's lora-peft CPU image, Trainer's "
                         "initializers and the peft-cpu serving image (~1.2 GB; then deploy); "
                         "node-up/node-down [--node NAME]: a real node (containerd, CNI bridge, kubelet; root) beside the "
                         "running control plane, and its clean stop")
    cluster.add_argument("stack", metavar="STACK", nargs="?", help="stack whose pools and Kueue settings to use (default local)")
    cluster.add_argument("--purge", action="store_true", help="down: also delete the cluster's state directory")
    cluster.add_argument("--real-nodes", action="store_true",
                         help="up: a real node (root; containerd, kubelet, kube-proxy) runs Kueue, JobSet and Trainer as pods "
                         "from their charts, images built here into the loopback mirror (docs/rehearsal.md)")
    cluster.add_argument("--tenant", metavar="NAME", help="kubeconfig: the tenant (a client certificate in its groups)")
    cluster.add_argument("--node", metavar="NAME", default="node-0", help="node-up/node-down: the real node's name")
    cluster.add_argument("--proxy", action="store_true", help="node-up: also run kube-proxy (nftables; one per machine)")
    cluster.add_argument("--network-policy", action="store_true",
                         help="node-up: also enforce NetworkPolicies for the node's pods (kube-router's firewall, iptables + "
                         "ipset; one per machine)")
    cluster.add_argument("--dns", action="store_true",
                         help="node-up: also run the cluster DNS (CoreDNS, the kube-dns Service at 10.96.0.10; needs "
                         "kube-proxy: --proxy on this node or an earlier one)")
    cluster.set_defaults(func=_cmd_cluster)

    help_text = ("write a kind cluster configuration and the stack's kind overlay (controllers from their charts, "
                 "fake GPU pools) for `make up-kind` where Docker exists")
    kind = subparsers.add_parser("kind", help=help_text, description=help_text)
    kind.add_argument("action", choices=["config", "nodes", "down"],
                      help="config: write the files; nodes: the fake GPU nodes and kwok on the cluster of "
                      "$TRAINYARD_CLUSTER_DIR/kubeconfig (kind's); down: stop that kwok")
    kind.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
    kind.add_argument("--out", metavar="DIR", default="out/kind", help="directory for kind-cluster.yaml and the stack file")
    kind.set_defaults(func=_cmd_kind)

    help_text = "rehearse a stack on fake GPU nodes with the real controllers: run scenarios, print Kueue's decisions"
    rehearse = subparsers.add_parser("rehearse", help=help_text, description=help_text)
    rehearse.add_argument("stack", metavar="STACK", help="stack name (prod = stacks/Pulumi.prod.yaml) or path")
    rehearse.add_argument("scenarios", metavar="SCENARIO", nargs="+",
                          help="scenario name (scenarios/NAME.yaml) or path to a scenario file")
    rehearse.add_argument("--keep-jobs", action="store_true", help="leave the last scenario's TrainJobs in place")
    rehearse.set_defaults(func=_cmd_rehearse)


if register not in EXTRA_COMMANDS:
    EXTRA_COMMANDS.append(register)
