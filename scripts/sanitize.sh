#!/usr/bin/env bash
# Run tests with every generated CPU kernel built with AddressSanitizer and UndefinedBehaviorSanitizer
# (TCJIT_SANITIZE=all). An ASan-built kernel loads only into a process that started with the ASan
# runtime, so Python runs with it preloaded; leak detection is off (CPython and torch keep memory to
# the end by design), and any sanitizer report ends the process with a non-zero status. Arguments go
# to pytest; where none names a test file, every test module that compiles programs runs:
#   scripts/sanitize.sh                                  # the compiled programs, suite and fuzzers
#   scripts/sanitize.sh -q --tier=full                   # the same at the full tier
#   scripts/sanitize.sh tests/mapping/test_packing.py -x  # one module
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
CC=${CC:-cc}
asan=$("$CC" -print-file-name=libasan.so)
if [ ! -e "$asan" ]; then
    echo "sanitize: $CC has no AddressSanitizer runtime (libasan.so); install it (Debian: libasan8)" >&2
    exit 2
fi
# Arguments naming no test file or folder (only options, such as -q or --tier=full) keep the list.
named=0
for arg in "$@"; do
    [ -e "${arg%%::*}" ] && named=1
done
if [ "$named" -eq 0 ]; then
    set -- "$@" \
        tests/backends/test_crash_regressions.py tests/backends/test_compiled_programs.py \
        tests/backends/test_compiled_suite.py tests/backends/test_compiled_fuzz.py \
        tests/backends/test_compiled_fuzz_nests.py tests/mapping/test_register_tiles.py \
        tests/mapping/test_packing.py tests/mapping/test_prefetch.py \
        tests/mapping/test_parallel_reduction.py tests/mapping/test_scatter.py \
        tests/mapping/test_cpu_mapping.py tests/mapping/test_split_compile.py \
        tests/backends/test_call_dtypes.py tests/gpu/test_emulated.py
fi
# Reports go to files: pytest captures the test process's stderr, and a sanitizer that halts the
# process would take its report with it.
reports=$(mktemp -d "${TMPDIR:-/tmp}/tcjit-sanitize-XXXXXX")
# libstdc++ right after the runtime: ASan intercepts __cxa_throw and must find the real one when it
# starts, before torch loads libstdc++ (else the first C++ exception, as torch.compile throws,
# stops the process in ASan's CHECK).
cxx=$("$CC" -print-file-name=libstdc++.so.6)
export LD_PRELOAD="$asan${cxx:+ $cxx}${LD_PRELOAD:+ $LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:log_path=$reports/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TCJIT_SANITIZE=all
status=0
.venv/bin/python -m pytest -p no:cacheprovider "$@" || status=$?
if compgen -G "$reports/*" >/dev/null; then
    echo "sanitize: the sanitizers reported:" >&2
    cat "$reports"/* >&2
    [ "$status" -ne 0 ] || status=1
fi
rm -rf "$reports"
exit "$status"
