"""The real Pulumi engine for a Trainyard stack against the local control plane (``tools/pulumi-local.sh``).

The shell script is the entry point; everything it does is here. Pulumi runs in a run directory
outside the repository, so that nothing it writes (the passphrase provider's ``encryptionsalt:``)
dirties the repository's stack file, with file state encrypted by a passphrase generated once, and a
Pulumi home of its own. The usage text (``USAGE``) says what each piece is and where it lives.

What ``up``/``preview``/``destroy``/``refresh``/``state`` do, in order: validate the stack (its
``cluster.context`` must be the local control plane's), prepare the environment and the run
directory, start the rehearsal cluster with the stack's fake nodes unless it is up (or external),
log in, select (or create) the stack, keep its salt, set the config secrets, refresh when the state
was written against another cluster, run ``pulumi``, and print the engine's own time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainyard.config import ConfigError, load_stack

CONTEXT = "trainyard-local"
COMMANDS = ("up", "preview", "destroy", "refresh", "state", "env", "rundir")
_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_SECRET_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
# What `env` prints, in this order.
ENV_SHOWN = ("PATH", "KUBECONFIG", "PULUMI_HOME", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE_FILE",
             "PULUMI_SKIP_UPDATE_CHECK", "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "PULUMI_SKIP_CHECKPOINTS",
             "TRAINYARD_CRDS_DIR")

USAGE = """\
Run the real Pulumi engine for a Trainyard stack against the local control plane.

  tools/pulumi-local.sh up|preview|destroy|refresh [STACK] [extra pulumi args...]
  tools/pulumi-local.sh state STACK SUBCOMMAND [args...]  `pulumi state` on the stack (e.g. local unprotect --all --yes)
  tools/pulumi-local.sh env [STACK]     print the environment it runs Pulumi with
  tools/pulumi-local.sh rundir [STACK]  prepare the run directory and print its path

STACK defaults to `local`. Pulumi runs in a run directory outside the repository
(${TRAINYARD_RUN_DIR:-~/.cache/trainyard/run/STACK}) so that nothing it writes (the
passphrase provider's `encryptionsalt:`) dirties the repo's stack file:
  Pulumi.yaml                copied from the repo
  platform -> REPO/platform  the program (it finds runtimes/ and stacks/ in the repo)
  .venv -> REPO/.venv        Pulumi.yaml says `virtualenv: .venv`
  stacks/Pulumi.STACK.yaml   the repo's stack file (or $TRAINYARD_STACK_FILE) plus the
                             persisted `encryptionsalt:` line (kept in .encryptionsalt)
State: file backend in ${TRAINYARD_STATE_DIR:-~/.cache/trainyard/state}, encrypted with a
random passphrase generated once into STATE/passphrase (0600). Pulumi's own home
(login, workspace) is ${TRAINYARD_PULUMI_HOME:-~/.cache/trainyard/pulumi-home}, so the
user's ~/.pulumi is left alone. The rehearsal cluster (`trainyard cluster up`, same
TRAINYARD_CLUSTER_DIR and port variables) is started with the stack's fake nodes if it is not up.
TRAINYARD_CONFIG_SECRETS: lines KEY=FILE; before the command each FILE's content is set as the
Pulumi config secret trainyard:KEY (`pulumi config set --secret`, value on stdin, so it is only
ever in the stack file encrypted); used for a MultiKueue manager's worker kubeconfigs.
See docs/rehearsal.md.
Checkpoints: Pulumi writes the whole state after every resource step unless
PULUMI_SKIP_CHECKPOINTS=true; this script sets it (only the final state is written; the
per-step cost grows with the state's size, so the total with the square of the stack's).
PULUMI_SKIP_CHECKPOINTS=false keeps the per-step checkpoints. See docs/rehearsal.md, "Engine speed".
"""


class EngineError(Exception):
    """A reason not to run the engine; printed as ``pulumi-local.sh: <reason>``, exit 2."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class LocalEngine:
    """One repository's engine settings, from the environment the script was started with."""

    def __init__(self, repo: Path, environ: Mapping[str, str]) -> None:
        home = Path(environ.get("HOME") or Path.home())
        cache = home / ".cache" / "trainyard"
        self.repo = repo
        self.environ = dict(environ)
        self.bin_dir = Path(environ.get("TRAINYARD_TOOLS_DIR") or cache / "tools") / "bin"
        self.cluster_dir = Path(environ.get("TRAINYARD_CLUSTER_DIR") or cache / "cluster")
        self.state_dir = Path(environ.get("TRAINYARD_STATE_DIR") or cache / "state")
        self.pulumi_home = Path(environ.get("TRAINYARD_PULUMI_HOME") or cache / "pulumi-home")
        self.venv = repo / ".venv"
        self.home = home

    # ------------------------------------------------------------------ preparation

    def source_stack_file(self, stack: str) -> Path:
        """The stack file the run uses: $TRAINYARD_STACK_FILE, or the repo's stacks/Pulumi.STACK.yaml."""
        given = self.environ.get("TRAINYARD_STACK_FILE")
        return Path(given) if given else self.repo / "stacks" / f"Pulumi.{stack}.yaml"

    def env(self) -> dict[str, str]:
        """The environment Pulumi runs with."""
        env = dict(self.environ)
        env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '')}"
        env["KUBECONFIG"] = str(self.cluster_dir / "kubeconfig")
        env["PULUMI_HOME"] = str(self.pulumi_home)
        env["PULUMI_BACKEND_URL"] = f"file://{self.state_dir}"
        env["PULUMI_CONFIG_PASSPHRASE_FILE"] = str(self.state_dir / "passphrase")
        env.pop("PULUMI_CONFIG_PASSPHRASE", None)
        env["PULUMI_SKIP_UPDATE_CHECK"] = "true"
        env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] = "true"
        # Only the final state is saved (pulumi/pulumi#10668): a per-step checkpoint serialises and
        # writes the whole state (7 MB for the local stack, mostly the CRDs) twice per resource. What a
        # crash then loses is this run's record of what it did; the provider's server-side apply upserts,
        # so the next `up` adopts what was created and re-applies the rest (docs/rehearsal.md).
        env["PULUMI_SKIP_CHECKPOINTS"] = env.get("PULUMI_SKIP_CHECKPOINTS") or "true"
        env.pop("PULUMI_IGNORE_AMBIENT_PLUGINS", None)
        # The upstream CRD mirror next to the repo, if there is one (else the program uses its cache
        # or downloads the pinned release files).
        shared = self.repo / ".." / "shared" / "crds"
        if not env.get("TRAINYARD_CRDS_DIR") and shared.is_dir():
            env["TRAINYARD_CRDS_DIR"] = os.path.normpath(shared)  # as `cd DIR && pwd` names it: symlinks kept
        return env

    def checkpoint(self, stack: str) -> Path:
        return self.state_dir / ".pulumi" / "stacks" / "trainyard" / f"{stack}.json"

    def salt_from_state(self, stack: str) -> str:
        """The ``encryptionsalt:`` line of an existing stack, read from its checkpoint; empty if there is none."""
        checkpoint = self.checkpoint(stack)
        if not checkpoint.is_file():
            return ""
        deployment = json.loads(checkpoint.read_text()).get("checkpoint", {}).get("latest") or {}
        salt = ((deployment.get("secrets_providers") or {}).get("state") or {}).get("salt")
        return f"encryptionsalt: {salt}" if salt else ""

    def run_dir(self, stack: str) -> Path:
        given = self.environ.get("TRAINYARD_RUN_DIR")
        return Path(given) if given else self.home / ".cache" / "trainyard" / "run" / stack

    def prepare_run_dir(self, stack: str, source: Path) -> Path:
        """Create the run directory (idempotent) and write its stack file."""
        run = self.run_dir(stack)
        for directory in (run / "stacks", self.state_dir, self.pulumi_home):
            directory.mkdir(parents=True, exist_ok=True)
        (run / "Pulumi.yaml").write_bytes((self.repo / "Pulumi.yaml").read_bytes())
        _link(run / "platform", self.repo / "platform")
        _link(run / ".venv", self.venv)
        # The Python dynamic provider starts in the program directory (REPO/platform, resolved) and looks
        # for `virtualenv: .venv` there; `make setup` makes this link too (Makefile, setup).
        program_venv = self.repo / "platform" / ".venv"
        if not program_venv.exists():
            _link(program_venv, Path("../.venv"))
        passphrase = self.state_dir / "passphrase"
        if not passphrase.is_file() or passphrase.stat().st_size == 0:
            if any((self.state_dir / ".pulumi" / "stacks").glob("*/*.json")):
                raise EngineError(f"{self.state_dir} holds stacks but its passphrase file is gone; reset with: "
                                  f"rm -rf {self.state_dir} (see docs/rehearsal.md)")
            fd = os.open(passphrase, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32) + "\n")
        passphrase.chmod(0o600)
        # The salt must belong to this state's passphrase: the stack's checkpoint has the one in use;
        # without a checkpoint the stack is new and Pulumi writes a fresh salt on `stack select --create`.
        salt = ""
        if self.checkpoint(stack).is_file():
            salt = self.salt_from_state(stack)
            kept = run / ".encryptionsalt"
            if not salt and kept.is_file() and kept.stat().st_size:
                salt = kept.read_text().rstrip("\n")
        target = run / "stacks" / f"Pulumi.{stack}.yaml"
        partial = target.with_name(target.name + ".tmp")
        partial.write_bytes((f"{salt}\n".encode() if salt else b"") + source.read_bytes())
        partial.replace(target)
        return run

    @staticmethod
    def persist_salt(run: Path, stack: str) -> None:
        """Keep the salt Pulumi wrote into the run's stack file, for the next regeneration."""
        lines = (run / "stacks" / f"Pulumi.{stack}.yaml").read_text().splitlines()
        line = next((line for line in lines if line.startswith("encryptionsalt:")), "")
        if line:
            (run / ".encryptionsalt").write_text(line + "\n")

    # ------------------------------------------------------------------ the cluster and the engine

    @staticmethod
    def pulumi(env: Mapping[str, str], *args: str, stdin: Path | None = None, to_stderr: bool = True) -> int:
        """``pulumi ARGS`` (found on the prepared PATH); the preparatory commands' output goes to stderr."""
        out = 2 if to_stderr else None  # `>&2`: the file descriptor, whatever sys.stderr is
        try:
            if stdin is None:
                return subprocess.run(["pulumi", *args], env=dict(env), stdout=out, check=False).returncode  # noqa: S603, S607
            with stdin.open("rb") as handle:
                return subprocess.run(["pulumi", *args], env=dict(env), stdin=handle, stdout=out,  # noqa: S603, S607
                                      check=False).returncode
        except FileNotFoundError:
            log("pulumi-local.sh: pulumi: command not found")
            return 127  # what the shell returns for a command it cannot find

    def set_config_secrets(self, env: Mapping[str, str], stack: str) -> None:
        """TRAINYARD_CONFIG_SECRETS (KEY=FILE lines) as Pulumi config secrets of the run's stack file. The run's
        stack file is regenerated from its source on every run, so they are set again every time."""
        for line in (env.get("TRAINYARD_CONFIG_SECRETS") or "").splitlines():
            if not line:
                continue
            key, _, file = line.partition("=")
            if not _SECRET_KEY.match(key) or "=" not in line:
                raise EngineError(f"TRAINYARD_CONFIG_SECRETS: bad line (want KEY=FILE): {key}=...")
            path = Path(file)
            if not (path.is_file() and os.access(path, os.R_OK)):
                raise EngineError(f"TRAINYARD_CONFIG_SECRETS: {key}: cannot read {file}")
            rc = self.pulumi(env, "config", "set", "--secret", "--non-interactive", "--stack", stack,
                             f"trainyard:{key}", stdin=path)
            if rc != 0:
                raise SystemExit(rc)
            log(f"==> config secret trainyard:{key} set from {file} (encrypted in the stack file)")

    def cluster_uid(self, env: Mapping[str, str]) -> str:
        """The cluster's identity: the UID of its kube-system namespace."""
        done = subprocess.run([str(self.bin_dir / "kubectl"), "--kubeconfig", env["KUBECONFIG"], "get", "namespace",  # noqa: S603
                               "kube-system", "-o", "jsonpath={.metadata.uid}"], env=dict(env), stdout=subprocess.PIPE,
                              text=True, check=False)
        if done.returncode != 0:
            raise EngineError(f"cannot read namespace kube-system from the cluster ({env['KUBECONFIG']})")
        return done.stdout

    def ensure_cluster(self, env: Mapping[str, str], stack: str) -> None:
        # A cluster someone else runs (tools/kind-up.sh: kind) is used as it is.
        if env.get("TRAINYARD_CLUSTER_EXTERNAL") == "1":
            log(f"==> cluster: external ({env['KUBECONFIG']})")
            return
        from trainyard.rehearsal.cluster import ControlPlane, Settings

        try:
            healthy = ControlPlane(Settings.from_env(env)).healthy()
        except Exception:  # as the script's check did: any failure means "start it"
            healthy = False
        if healthy:
            log(f"==> cluster: up ({env['KUBECONFIG']})")
            return
        # The rehearsal cluster (trainyard/rehearsal): control plane, real controllers, kwok, the stack's fake nodes.
        rc = subprocess.run([str(self.venv / "bin" / "trainyard"), "cluster", "up", stack], env=dict(env),  # noqa: S603
                            stdout=2, check=False).returncode
        if rc != 0:
            raise SystemExit(rc)

    def main(self, argv: Sequence[str]) -> int:
        words = list(argv)
        command = words.pop(0) if words else ""
        if command in ("-h", "--help", "help", ""):
            print(USAGE, end="")
            return 0
        if command not in COMMANDS:
            raise EngineError(f"unknown command '{command}' ({'|'.join(COMMANDS)})")
        stack = "local"
        if words and not words[0].startswith("-"):
            stack = words.pop(0)
        if not _STACK_NAME.match(stack):
            raise EngineError(f"bad stack name '{stack}' (a name like local, not a path)")
        # `pulumi state` takes its subcommand first (`pulumi state unprotect --stack S ...`).
        pulumi_command = [command]
        if command == "state":
            if not words or words[0].startswith("-"):
                raise EngineError(f"state needs a subcommand (e.g. state {stack} unprotect --all --yes)")
            pulumi_command.append(words.pop(0))
        source = self.preflight(stack)
        if source is None:
            return 2
        env = self.env()
        run = self.prepare_run_dir(stack, source)
        if command == "env":
            for name in ENV_SHOWN:
                if name in env:  # TRAINYARD_CRDS_DIR only where there is a mirror
                    print(f"export {name}={shlex.quote(env[name])}")
            print(f"cd {shlex.quote(str(run))}")
            return 0
        if command == "rundir":
            print(run)
            return 0
        return self.engine(env, run, stack, pulumi_command, words)

    def preflight(self, stack: str) -> Path | None:
        """The stack file, once the venv and the engine's tools are there and the stack targets the local
        control plane; None (after printing the problems) if the stack is invalid."""
        if not os.access(self.venv / "bin" / "python", os.X_OK):
            raise EngineError(f"{self.venv} missing: run make setup")
        # The engine's tools; `trainyard cluster up` checks the cluster's own when it has to start one.
        checked = subprocess.run([str(self.repo / "tools" / "build.sh"), "--check", "pulumi", "pulumi-kubernetes"],  # noqa: S603
                                 env=self.environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if checked.returncode != 0:
            raise EngineError("tools not built or stale: run make tools (tools/build.sh)")
        source = self.source_stack_file(stack)
        if not source.is_file():
            raise EngineError(f"no stack file {source}")
        try:
            context = load_stack(source).cluster.context
        except ConfigError as exc:
            log(f"invalid stack {exc.file}")
            for problem in exc.problems:
                log(f"  {problem.render(exc.file)}")
            return None
        if context != CONTEXT:
            raise EngineError(f"stack {stack} targets cluster.context '{context}'; this script only deploys to the "
                              f"local control plane (context {CONTEXT})")
        return source

    def engine(self, env: dict[str, str], run: Path, stack: str, pulumi_command: list[str], extra: list[str]) -> int:
        """Start the cluster if needed, select the stack, then run ``pulumi PULUMI_COMMAND EXTRA`` in ``run``."""
        command = pulumi_command[0]
        try:
            version = subprocess.run([str(self.bin_dir / "pulumi"), "version"], env=env, stdout=subprocess.PIPE,  # noqa: S603
                                     text=True, check=False).stdout.strip()
        except OSError as exc:
            log(f"pulumi-local.sh: {exc}")
            version = ""
        log("==> path: local control plane built from Go modules (etcd, kube-apiserver, kube-controller-manager, "
            "kube-scheduler,")
        log("    kwok and the real Kueue, JobSet and Trainer on 127.0.0.1; kind/Docker is not used: not implemented).")
        log(f"    Engine: {version}, provider kubernetes from {self.bin_dir}")
        self.ensure_cluster(env, self.environ.get("TRAINYARD_STACK_FILE") or stack)
        log(f"==> run dir {run}, state {env['PULUMI_BACKEND_URL']}")
        os.chdir(run)
        for args in (("login", "--non-interactive", env["PULUMI_BACKEND_URL"]),
                     ("stack", "select", "--non-interactive", "--create", "--secrets-provider", "passphrase", stack)):
            rc = self.pulumi(env, *args)
            if rc != 0:
                return rc
        self.persist_salt(run, stack)
        self.set_config_secrets(env, stack)
        # A state deployed to another cluster (this one was purged or recreated since) would make `up`
        # report "unchanged" and deploy nothing: refresh the state from the cluster first.
        uid = self.cluster_uid(env)
        uid_file = self.state_dir / f"cluster-uid.{stack}"
        known = uid_file.read_text().rstrip("\n") if uid_file.is_file() else ""
        checkpoint = self.checkpoint(stack)
        refresh: list[str] = []
        if (command not in ("refresh", "state") and known != uid and checkpoint.is_file()
                and '"urn"' in checkpoint.read_text(errors="replace")):
            log(f"==> the state was not written against this cluster (recreated or purged since?): {command} --refresh")
            refresh = ["--refresh"]
        log(f"==> pulumi {' '.join(pulumi_command)} --stack {stack}{' ' + ' '.join(refresh) if refresh else ''} "
            f"{' '.join(extra)}")
        start = time.monotonic_ns()
        rc = self.pulumi(env, *pulumi_command, "--non-interactive", "--stack", stack, *refresh, *extra, to_stderr=False)
        self.persist_salt(run, stack)
        if rc == 0 and command not in ("preview", "state"):
            uid_file.write_text(uid + "\n")
        log(f"==> pulumi {command}: exit {rc}, engine time {(time.monotonic_ns() - start) // 1_000_000} ms")
        return rc


def _link(path: Path, target: Path) -> None:
    """``ln -sfn target path``: a symlink at ``path``, replacing a link (or file) already there."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    path.symlink_to(target)


def main(argv: Sequence[str] | None = None, repo: str | Path | None = None) -> int:
    """``tools/pulumi-local.sh ARGS``: ``repo`` is the repository the script found itself in."""
    root = Path(repo) if repo else Path(__file__).resolve().parents[3]
    try:
        return LocalEngine(root, os.environ).main(sys.argv[1:] if argv is None else argv)
    except EngineError as exc:
        log(f"pulumi-local.sh: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
