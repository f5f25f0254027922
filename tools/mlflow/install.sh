#!/usr/bin/env bash
# The MLflow tool venv for the dataplane tier: ~/.cache/trainyard/tools/mlflow-<version>, from the exact pins in
# requirements.txt (PyPI). Stamped with the requirements' hash, so a warm run does nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools_dir="${TRAINYARD_TOOLS_DIR:-$HOME/.cache/trainyard/tools}"
version="$(sed -n 's/^mlflow\[auth\]==//p' "$here/requirements.txt")"
venv="$tools_dir/mlflow-$version"
stamp="$venv/.trainyard-stamp"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "mlflow $version: cached ($venv)"
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
echo "$want" > "$stamp"
echo "mlflow $version: installed ($venv)"
