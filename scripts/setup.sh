#!/usr/bin/env bash
# Set-up, idempotent: a virtual environment in .venv with tcjit installed editable, its test tools,
# and a CPU build of torch. A torch that is already installed system-wide is reused
# (--system-site-packages), so nothing large is downloaded twice; where there is none, torch 2.13.0
# is installed by exact version first, so pip never resolves a multi-gigabyte CUDA build for us.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv --system-site-packages .venv
fi
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    echo "setup: installing torch==${TCJIT_TORCH_VERSION:-2.13.0} (set PIP_EXTRA_INDEX_URL to a CPU wheel index if your platform needs one)"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==${TCJIT_TORCH_VERSION:-2.13.0}"
fi
stamp=.venv/.tcjit-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
    touch "$stamp"
fi
