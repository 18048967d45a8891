#!/usr/bin/env bash
# The main job: set-up (tcjit alone: no test extras), then `tcjit demo` (every kernel of the
# benchmark suite through tcjit, checked against hand-written torch code and timed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh base
exec .venv/bin/tcjit demo "$@"
