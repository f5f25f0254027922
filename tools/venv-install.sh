#!/usr/bin/env bash
# A Python tool venv in the tools cache from exact pins: venv-install.sh NAME REQUIREMENTS makes
# ~/.cache/trainyard/tools/NAME (TRAINYARD_TOOLS_DIR) from PyPI. Stamped with the requirements' hash,
# so a warm run does nothing. Used by tools/mlflow/install.sh and tools/lab/install.sh.
set -euo pipefail
name="$1"
requirements="$2"
tools_dir="${TRAINYARD_TOOLS_DIR:-$HOME/.cache/trainyard/tools}"
venv="$tools_dir/$name"
stamp="$venv/.trainyard-stamp"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$name: cached ($venv)"
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
echo "$want" > "$stamp"
echo "$name: installed ($venv)"
