#!/usr/bin/env bash
# Set-up, idempotent: a virtual environment in .venv with tcjit installed editable, the extras asked
# for, and a CPU build of torch. A torch that is already installed system-wide is reused
# (--system-site-packages), so nothing large is downloaded twice; where there is none, torch 2.13.0
# is installed by exact version first, so pip never resolves a multi-gigabyte CUDA build for us.
#
#   scripts/setup.sh            # tcjit and the `test` extra (what scripts/test.sh runs)
#   scripts/setup.sh base       # tcjit alone (what scripts/demo.sh runs)
#   scripts/setup.sh test ray   # several extras of pyproject.toml: test, ray, cuda
#
# One stamp per installed part (.venv/.tcjit-installed-base, -test, -ray, ...): installing one
# never marks another as installed, and a pyproject.toml newer than a stamp installs that part
# again. TCJIT_VENV names another environment folder (tests set up a scratch one).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${TCJIT_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv --system-site-packages "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
    echo "setup: installing torch==${TCJIT_TORCH_VERSION:-2.13.0} (set PIP_EXTRA_INDEX_URL to a CPU wheel index if your platform needs one)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "torch==${TCJIT_TORCH_VERSION:-2.13.0}"
fi
stale() { [ ! -f "$VENV/.tcjit-installed-$1" ] || [ pyproject.toml -nt "$VENV/.tcjit-installed-$1" ]; }
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(test)
missing=()
for part in base "${wanted[@]}"; do
    if [ "$part" != base ] && ! grep -q "^$part = \[" pyproject.toml; then
        echo "setup: no extra named '$part' in pyproject.toml" >&2
        exit 2
    fi
    if stale "$part" && [[ " ${missing[*]-} " != *" $part "* ]]; then
        missing+=("$part")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    extras=$(printf '%s\n' "${missing[@]}" | grep -vx base | paste -sd, - || true)
    echo "setup: installing tcjit${extras:+ with [$extras]}"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".${extras:+[$extras]}"
    for part in base "${missing[@]}"; do
        touch "$VENV/.tcjit-installed-$part"
    done
fi
