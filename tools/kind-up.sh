#!/usr/bin/env bash
# `make up-kind` / `make down-kind`: the stack on a kind cluster, where Docker exists (docs/rehearsal.md, "kind").
#
#   tools/kind-up.sh up [STACK]     kind cluster from the stack, fake GPU nodes (kwok), `pulumi up` with the
#                                   controllers' charts from their upstream registries, then the smoke test
#   tools/kind-up.sh down [STACK]   `pulumi destroy`, stop kwok, delete the kind cluster
#
# Not run on the machine this was written on (no Docker there): what is checked there is that the generated
# kind configuration loads and validates with kind's own packages (tests/unit/test_kind.py, built by
# `tools/build.sh kind`) and that the kind overlay of every stack validates and renders.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ACTION="${1:-up}"; STACK="${2:-local}"
TOOLS_BIN="${TRAINYARD_TOOLS_DIR:-$HOME/.cache/trainyard/tools}/bin"
KIND="$TOOLS_BIN/kind"
TRAINYARD="$ROOT/.venv/bin/trainyard"
OUT="${TRAINYARD_KIND_DIR:-$HOME/.cache/trainyard/kind/$STACK}"
# The kind cluster gets its own cluster directory: kwok's pid and logs, kind's kubeconfig, the overlay.
export TRAINYARD_CLUSTER_DIR="$OUT/state"
export TRAINYARD_STACK_FILE="$OUT/Pulumi.$STACK.yaml"
export TRAINYARD_CLUSTER_EXTERNAL=1                 # tools/pulumi-local.sh: never start a process rehearsal here
export TRAINYARD_STATE_DIR="$OUT/pulumi-state" TRAINYARD_RUN_DIR="$OUT/run"

die() { echo "kind-up: $*" >&2; exit 2; }
command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 || die "Docker is not available: use \`make up\` (the process rehearsal) instead"
[[ -x "$KIND" ]] || die "kind is not built: make tools (tools/build.sh kind)"

"$TRAINYARD" kind config "$STACK" --out "$OUT" >/dev/null
NAME="$(sed -n 's/^name: //p' "$OUT/kind-cluster.yaml")"
mkdir -p "$TRAINYARD_CLUSTER_DIR"

case "$ACTION" in
  up)
    # Pulling the controllers needs real digests: the lock's placeholders would name images that do not exist.
    if grep -B2 'source: placeholder' "$ROOT/images.lock.yaml" | grep -qE '^  (registry.k8s.io/(kueue|jobset)|ghcr.io/kubeflow/trainer/trainer-controller-manager)'; then
      die "images.lock.yaml pins the controller images with placeholder digests: run \`trainyard images lock $STACK\` (docs/supply-chain.md) first"
    fi
    if ! "$KIND" get clusters 2>/dev/null | grep -qx "$NAME"; then
      "$KIND" create cluster --config "$OUT/kind-cluster.yaml" --kubeconfig "$TRAINYARD_CLUSTER_DIR/kubeconfig" --wait 120s
    else
      "$KIND" export kubeconfig --name "$NAME" --kubeconfig "$TRAINYARD_CLUSTER_DIR/kubeconfig"
    fi
    "$TRAINYARD" kind nodes "$STACK" --out "$OUT"
    "$ROOT/tools/pulumi-local.sh" up "$STACK" --yes --skip-preview
    "$TRAINYARD" cluster smoke "$STACK"
    ;;
  down)
    "$ROOT/tools/pulumi-local.sh" destroy "$STACK" --yes --skip-preview || true
    "$TRAINYARD" kind down "$STACK" --out "$OUT"
    "$KIND" delete cluster --name "$NAME" --kubeconfig "$TRAINYARD_CLUSTER_DIR/kubeconfig"
    ;;
  *) die "unknown action $ACTION (up|down)" ;;
esac
