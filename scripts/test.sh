#!/usr/bin/env bash
# The test command: set-up, lint, then the test suite. Extra arguments go to pytest, e.g.
#   scripts/test.sh --tier=full        # the wide matrices, run before resolving an issue
#   scripts/test.sh -k reference -x    # a subset
# The full tier also tunes through a local Ray instance, so it sets up the `ray` extra as well.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=(test)
tier=${TCJIT_TEST_TIER:-default}
previous=
for arg in "$@"; do
    case "$arg" in
        --tier=*) tier=${arg#--tier=} ;;
        *) [ "$previous" = --tier ] && tier=$arg ;;
    esac
    previous=$arg
done
[ "$tier" = full ] && extras+=(ray)
bash scripts/setup.sh "${extras[@]}"
.venv/bin/python -m ruff check .
exec .venv/bin/python -m pytest "$@"
