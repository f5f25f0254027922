#!/usr/bin/env bash
# The lab tool venv for `make test-lab`: ~/.cache/trainyard/tools/lab-torch-<version>, from the exact pins in
# runtimes/programs/requirements.txt (PyPI), the same file the lora-peft runtime image installs. Stamped with
# the requirements' hash, so a warm run does nothing. Cold: ~4 min and ~5.7 GB (torch's CUDA wheels; PyPI
# has no CPU-only x86_64 torch), measured in docs/lab.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
requirements="$here/../../runtimes/programs/requirements.txt"
tools_dir="${TRAINYARD_TOOLS_DIR:-$HOME/.cache/trainyard/tools}"
version="$(sed -n 's/^torch==//p' "$requirements")"
venv="$tools_dir/lab-torch-$version"
stamp="$venv/.trainyard-stamp"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "lab venv (torch $version): cached ($venv)"
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
echo "$want" > "$stamp"
echo "lab venv (torch $version): installed ($venv)"
