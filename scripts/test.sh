#!/usr/bin/env bash
# The test command: set-up, lint, then the test suite. Extra arguments go to pytest, e.g.
#   scripts/test.sh --tier=full        # the wide matrices, run before resolving an issue
#   scripts/test.sh -k reference -x    # a subset
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m ruff check .
exec .venv/bin/python -m pytest "$@"
