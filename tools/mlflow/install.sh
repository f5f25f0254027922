#!/usr/bin/env bash
# The MLflow tool venv for the dataplane tier: ~/.cache/trainyard/tools/mlflow-<version>, from the exact pins in
# requirements.txt (PyPI). Stamped with the requirements' hash, so a warm run does nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's/^mlflow\[auth\]==//p' "$here/requirements.txt")"
exec "$here/../venv-install.sh" "mlflow-$version" "$here/requirements.txt"
