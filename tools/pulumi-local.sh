#!/usr/bin/env bash
# Run the real Pulumi engine for a Trainyard stack against the local control plane.
#
#   tools/pulumi-local.sh up|preview|destroy|refresh [STACK] [extra pulumi args...]
#   tools/pulumi-local.sh state STACK SUBCOMMAND [args...]  `pulumi state` on the stack (e.g. local unprotect --all --yes)
#   tools/pulumi-local.sh env [STACK]     print the environment it runs Pulumi with
#   tools/pulumi-local.sh rundir [STACK]  prepare the run directory and print its path
#
# STACK defaults to `local`. Pulumi runs in a run directory outside the repository
# (${TRAINYARD_RUN_DIR:-~/.cache/trainyard/run/STACK}) so that nothing it writes (the
# passphrase provider's `encryptionsalt:`) dirties the repo's stack file:
#   Pulumi.yaml                copied from the repo
#   platform -> REPO/platform  the program (it finds runtimes/ and stacks/ in the repo)
#   .venv -> REPO/.venv        Pulumi.yaml says `virtualenv: .venv`
#   stacks/Pulumi.STACK.yaml   the repo's stack file (or $TRAINYARD_STACK_FILE) plus the
#                              persisted `encryptionsalt:` line (kept in .encryptionsalt)
# State: file backend in ${TRAINYARD_STATE_DIR:-~/.cache/trainyard/state}, encrypted with a
# random passphrase generated once into STATE/passphrase (0600). Pulumi's own home
# (login, workspace) is ${TRAINYARD_PULUMI_HOME:-~/.cache/trainyard/pulumi-home}, so the
# user's ~/.pulumi is left alone. The rehearsal cluster (`trainyard cluster up`, same
# TRAINYARD_CLUSTER_DIR and port variables) is started with the stack's fake nodes if it is not up.
# TRAINYARD_CONFIG_SECRETS: lines KEY=FILE; before the command each FILE's content is set as the
# Pulumi config secret trainyard:KEY (`pulumi config set --secret`, value on stdin, so it is only
# ever in the stack file encrypted); used for a MultiKueue manager's worker kubeconfigs.
# See docs/rehearsal.md.
# Checkpoints: Pulumi writes the whole state after every resource step unless
# PULUMI_SKIP_CHECKPOINTS=true; this script sets it (only the final state is written; the
# per-step cost grows with the state's size, so the total with the square of the stack's).
# PULUMI_SKIP_CHECKPOINTS=false keeps the per-step checkpoints. See docs/rehearsal.md, "Engine speed".
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="${TRAINYARD_TOOLS_DIR:-$HOME/.cache/trainyard/tools}"
BIN_DIR="$TOOLS_DIR/bin"
CLUSTER_DIR="${TRAINYARD_CLUSTER_DIR:-$HOME/.cache/trainyard/cluster}"
STATE_DIR="${TRAINYARD_STATE_DIR:-$HOME/.cache/trainyard/state}"
PULUMI_HOME_DIR="${TRAINYARD_PULUMI_HOME:-$HOME/.cache/trainyard/pulumi-home}"
VENV="$REPO/.venv"
CONTEXT=trainyard-local

log() { printf '%s\n' "$*" >&2; }
die() { log "pulumi-local.sh: $*"; exit 2; }
usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

# The stack file the run uses: $TRAINYARD_STACK_FILE, or the repo's stacks/Pulumi.STACK.yaml.
source_stack_file() {
  local stack="$1"
  if [[ -n "${TRAINYARD_STACK_FILE:-}" ]]; then echo "$TRAINYARD_STACK_FILE"
  else echo "$REPO/stacks/Pulumi.$stack.yaml"
  fi
}

# Validate the stack with Trainyard itself and print its cluster.context.
stack_context() {
  local file="$1"
  "$VENV/bin/python" - "$file" <<'EOF'
import sys
from pathlib import Path
from trainyard.config import ConfigError, load_stack
try:
    config = load_stack(Path(sys.argv[1]))
except ConfigError as exc:
    print(f"invalid stack {exc.file}", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {problem.render(exc.file)}", file=sys.stderr)
    sys.exit(2)
print(config.cluster.context)
EOF
}

prepare_env() {
  export PATH="$BIN_DIR:$PATH"
  export KUBECONFIG="$CLUSTER_DIR/kubeconfig"
  export PULUMI_HOME="$PULUMI_HOME_DIR"
  export PULUMI_BACKEND_URL="file://$STATE_DIR"
  export PULUMI_CONFIG_PASSPHRASE_FILE="$STATE_DIR/passphrase"
  unset PULUMI_CONFIG_PASSPHRASE
  export PULUMI_SKIP_UPDATE_CHECK=true
  export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
  # Only the final state is saved (pulumi/pulumi#10668): a per-step checkpoint serialises and
  # writes the whole state (7 MB for the local stack, mostly the CRDs) twice per resource. What a
  # crash then loses is this run's record of what it did; the provider's server-side apply upserts,
  # so the next `up` adopts what was created and re-applies the rest (docs/rehearsal.md).
  export PULUMI_SKIP_CHECKPOINTS="${PULUMI_SKIP_CHECKPOINTS:-true}"
  unset PULUMI_IGNORE_AMBIENT_PLUGINS
  # The upstream CRD mirror next to the repo, if there is one (else the program uses its cache
  # or downloads the pinned release files).
  if [[ -z "${TRAINYARD_CRDS_DIR:-}" && -d "$REPO/../shared/crds" ]]; then
    TRAINYARD_CRDS_DIR="$(cd "$REPO/../shared/crds" && pwd)"
  fi
  if [[ -n "${TRAINYARD_CRDS_DIR:-}" ]]; then export TRAINYARD_CRDS_DIR; fi
}

# The salt of an existing stack, read from its checkpoint in the state; empty if there is none.
salt_from_state() {
  local checkpoint="$STATE_DIR/.pulumi/stacks/trainyard/$1.json"
  [[ -f "$checkpoint" ]] || return 0
  "$VENV/bin/python" - "$checkpoint" <<'PY'
import json, sys
deployment = json.load(open(sys.argv[1])).get("checkpoint", {}).get("latest") or {}
salt = ((deployment.get("secrets_providers") or {}).get("state") or {}).get("salt")
if salt:
    print(f"encryptionsalt: {salt}")
PY
}

# Create the run directory (idempotent) and write its stack file; print its path.
prepare_run_dir() {
  local stack="$1" src="$2" run salt
  run="${TRAINYARD_RUN_DIR:-$HOME/.cache/trainyard/run/$stack}"
  mkdir -p "$run/stacks" "$STATE_DIR" "$PULUMI_HOME_DIR"
  cp "$REPO/Pulumi.yaml" "$run/Pulumi.yaml"
  ln -sfn "$REPO/platform" "$run/platform"
  ln -sfn "$VENV" "$run/.venv"
  # The Python dynamic provider starts in the program directory (REPO/platform, resolved) and looks
  # for `virtualenv: .venv` there; `make setup` makes this link too (Makefile, setup).
  [[ -e "$REPO/platform/.venv" ]] || ln -sfn ../.venv "$REPO/platform/.venv"
  if [[ ! -s "$STATE_DIR/passphrase" ]]; then
    if compgen -G "$STATE_DIR/.pulumi/stacks/*/*.json" >/dev/null; then
      die "$STATE_DIR holds stacks but its passphrase file is gone; reset with: rm -rf $STATE_DIR (see docs/rehearsal.md)"
    fi
    (umask 077; openssl rand -hex 32 > "$STATE_DIR/passphrase")
  fi
  chmod 600 "$STATE_DIR/passphrase"
  # The salt must belong to this state's passphrase: the stack's checkpoint has the one in use;
  # without a checkpoint the stack is new and Pulumi writes a fresh salt on `stack select --create`.
  salt=""
  if [[ -f "$STATE_DIR/.pulumi/stacks/trainyard/$stack.json" ]]; then
    salt="$(salt_from_state "$stack")"
    if [[ -z "$salt" && -s "$run/.encryptionsalt" ]]; then salt="$(cat "$run/.encryptionsalt")"; fi
  fi
  { [[ -n "$salt" ]] && echo "$salt"; cat "$src"; } > "$run/stacks/Pulumi.$stack.yaml.tmp"
  mv -f "$run/stacks/Pulumi.$stack.yaml.tmp" "$run/stacks/Pulumi.$stack.yaml"
  echo "$run"
}

# Keep the salt Pulumi wrote into the run's stack file, for the next regeneration.
persist_salt() {
  local run="$1" stack="$2" line
  line="$(grep -m1 '^encryptionsalt:' "$run/stacks/Pulumi.$stack.yaml" || true)"
  if [[ -n "$line" ]]; then printf '%s\n' "$line" > "$run/.encryptionsalt"; fi
}

# TRAINYARD_CONFIG_SECRETS (KEY=FILE lines) as Pulumi config secrets of the run's stack file. The run's
# stack file is regenerated from its source on every run, so they are set again every time.
set_config_secrets() {
  local stack="$1" line key file
  [[ -n "${TRAINYARD_CONFIG_SECRETS:-}" ]] || return 0
  while IFS= read -r line; do
    [[ -n "$line" ]] || continue
    key="${line%%=*}" file="${line#*=}"
    [[ "$key" =~ ^[A-Za-z][A-Za-z0-9_-]*$ && "$line" == *=* ]] || die "TRAINYARD_CONFIG_SECRETS: bad line (want KEY=FILE): ${line%%=*}=..."
    [[ -r "$file" ]] || die "TRAINYARD_CONFIG_SECRETS: $key: cannot read $file"
    pulumi config set --secret --non-interactive --stack "$stack" "trainyard:$key" < "$file" >&2
    log "==> config secret trainyard:$key set from $file (encrypted in the stack file)"
  done <<< "$TRAINYARD_CONFIG_SECRETS"
}

# The cluster's identity: the UID of its kube-system namespace.
cluster_uid() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG" get namespace kube-system -o 'jsonpath={.metadata.uid}'; }

# The control plane is up and healthy (what `trainyard cluster status` checks, without its CLI's imports).
cluster_healthy() {
  "$VENV/bin/python" - <<'EOF'
import sys
from trainyard.rehearsal.cluster import ControlPlane, Settings
sys.exit(0 if ControlPlane(Settings.from_env()).healthy() else 1)
EOF
}

ensure_cluster() {
  local stack="$1"
  # A cluster someone else runs (tools/kind-up.sh: kind) is used as it is.
  if [[ "${TRAINYARD_CLUSTER_EXTERNAL:-}" == 1 ]]; then
    log "==> cluster: external ($KUBECONFIG)"
    return 0
  fi
  if cluster_healthy >/dev/null 2>&1; then
    log "==> cluster: up ($KUBECONFIG)"
    return 0
  fi
  # The rehearsal cluster (trainyard/rehearsal): control plane, real controllers, kwok, the stack's fake nodes.
  "$VENV/bin/trainyard" cluster up "$stack" >&2
}

main() {
  local cmd="${1:-}"
  case "$cmd" in
    up|preview|destroy|refresh|state|env|rundir) shift ;;
    -h|--help|help|"") usage; return 0 ;;
    *) die "unknown command '$cmd' (up|preview|destroy|refresh|state|env|rundir)" ;;
  esac
  local stack=local
  if [[ $# -gt 0 && "$1" != -* ]]; then stack="$1"; shift; fi
  [[ "$stack" =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad stack name '$stack' (a name like local, not a path)"
  # `pulumi state` takes its subcommand first (`pulumi state unprotect --stack S ...`).
  local pulumi_cmd=("$cmd")
  if [[ "$cmd" == state ]]; then
    [[ $# -gt 0 && "$1" != -* ]] || die "state needs a subcommand (e.g. state $stack unprotect --all --yes)"
    pulumi_cmd+=("$1"); shift
  fi

  [[ -x "$VENV/bin/python" ]] || die "$VENV missing: run make setup"
  # The engine's tools; `trainyard cluster up` checks the cluster's own when it has to start one.
  "$REPO/tools/build.sh" --check pulumi pulumi-kubernetes >/dev/null 2>&1 \
    || die "tools not built or stale: run make tools (tools/build.sh)"
  local src; src="$(source_stack_file "$stack")"
  [[ -f "$src" ]] || die "no stack file $src"
  local context; context="$(stack_context "$src")" || exit 2
  [[ "$context" == "$CONTEXT" ]] \
    || die "stack $stack targets cluster.context '$context'; this script only deploys to the local control plane (context $CONTEXT)"

  prepare_env
  local run; run="$(prepare_run_dir "$stack" "$src")"
  if [[ "$cmd" == env ]]; then
    local v
    for v in PATH KUBECONFIG PULUMI_HOME PULUMI_BACKEND_URL PULUMI_CONFIG_PASSPHRASE_FILE PULUMI_SKIP_UPDATE_CHECK \
             PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION PULUMI_SKIP_CHECKPOINTS TRAINYARD_CRDS_DIR; do
      printf 'export %s=%q\n' "$v" "${!v}"
    done
    printf 'cd %q\n' "$run"
    return 0
  fi
  if [[ "$cmd" == rundir ]]; then echo "$run"; return 0; fi

  log "==> path: local control plane built from Go modules (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,"
  log "    kwok and the real Kueue, JobSet and Trainer on 127.0.0.1; kind/Docker is not used: not implemented)."
  log "    Engine: $("$BIN_DIR/pulumi" version), provider kubernetes from $BIN_DIR"
  ensure_cluster "${TRAINYARD_STACK_FILE:-$stack}"
  log "==> run dir $run, state $PULUMI_BACKEND_URL"
  cd "$run"
  pulumi login --non-interactive "$PULUMI_BACKEND_URL" >&2
  pulumi stack select --non-interactive --create --secrets-provider passphrase "$stack" >&2
  persist_salt "$run" "$stack"
  set_config_secrets "$stack"
  # A state deployed to another cluster (this one was purged or recreated since) would make `up`
  # report "unchanged" and deploy nothing: refresh the state from the cluster first.
  local uid uid_file="$STATE_DIR/cluster-uid.$stack" refresh=()
  uid="$(cluster_uid)" || die "cannot read namespace kube-system from the cluster ($KUBECONFIG)"
  if [[ "$cmd" != refresh && "$cmd" != state && "$(cat "$uid_file" 2>/dev/null)" != "$uid" ]] \
      && grep -q '"urn"' "$STATE_DIR/.pulumi/stacks/trainyard/$stack.json" 2>/dev/null; then
    log "==> the state was not written against this cluster (recreated or purged since?): $cmd --refresh"
    refresh=(--refresh)
  fi
  log "==> pulumi ${pulumi_cmd[*]} --stack $stack${refresh:+ ${refresh[*]}} $*"
  local rc=0 start
  start=$(date +%s%N)
  pulumi "${pulumi_cmd[@]}" --non-interactive --stack "$stack" "${refresh[@]}" "$@" || rc=$?
  persist_salt "$run" "$stack"
  if [[ $rc == 0 && "$cmd" != preview && "$cmd" != state ]]; then echo "$uid" > "$uid_file"; fi
  log "==> pulumi $cmd: exit $rc, engine time $(( ($(date +%s%N) - start) / 1000000 )) ms"
  return $rc
}

main "$@"; exit $?
