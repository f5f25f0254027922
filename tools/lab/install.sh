#!/usr/bin/env bash
# The lab tool venv for `make test-lab`: ~/.cache/trainyard/tools/lab-torch-<version>, from the exact pins in
# runtimes/programs/requirements.txt (PyPI), the same file the lora-peft runtime image installs. Stamped with
# the requirements' hash, so a warm run does nothing. Cold: ~4-6 min and 7.3 GB (torch's CUDA wheels; PyPI
# has no CPU-only x86_64 torch), measured in docs/tools.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
requirements="$here/../../runtimes/programs/requirements.txt"
version="$(sed -n 's/^torch==//p' "$requirements")"
exec "$here/../venv-install.sh" "lab-torch-$version" "$requirements"
