#!/usr/bin/env bash
# Run the real Pulumi engine for a Trainyard stack against the local control plane.
#
#   tools/pulumi-local.sh up|preview|destroy|refresh [STACK] [extra pulumi args...]
#   tools/pulumi-local.sh state STACK SUBCOMMAND [args...]  `pulumi state` on the stack (e.g. local unprotect --all --yes)
#   tools/pulumi-local.sh env [STACK]     print the environment it runs Pulumi with
#   tools/pulumi-local.sh rundir [STACK]  prepare the run directory and print its path
#
# A thin entry point: the run directory, state, passphrase, salt, config secrets, the rehearsal cluster
# and the engine run are in platform/trainyard/rehearsal/engine.py (`tools/pulumi-local.sh --help`
# prints its usage). It runs this repository's code (REPO/platform) with the project's venv.
# See docs/rehearsal.md.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ -x "$REPO/.venv/bin/python" ]] || { printf 'pulumi-local.sh: %s missing: run make setup\n' "$REPO/.venv" >&2; exit 2; }
exec "$REPO/.venv/bin/python" -c '
import sys
sys.path.insert(0, sys.argv[1] + "/platform")
from trainyard.rehearsal.engine import main
sys.exit(main(sys.argv[2:], repo=sys.argv[1]))
' "$REPO" "$@"
