#!/usr/bin/env bash
# The main job: set-up, then `tcjit demo` (every kernel of the benchmark suite through tcjit,
# checked against hand-written torch code).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/tcjit demo "$@"
