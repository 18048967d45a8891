#!/usr/bin/env bash
# The GPU routine: what every lent GPU runs first, in one call of a few minutes.
#
#   1. the CUDA tests (pytest -m cuda: every suite kernel at small sizes against the oracle, streams,
#      graphs, the disk cache) -> pytest_cuda.log
#   2. the suite at GPU sizes against torch eager (bench/cpu_suite.py --device cuda --no-compile);
#      each tcjit kernel's record holds its CUDA source digest, launches and options, so every
#      timed kernel is a calibration point of the static GPU model -> gpu_suite.json, .md
#   3. the microbenchmarks of the GPU (bench/gpu_micro.py: clock, copy, FMA, launch, load
#      wavefronts by stride, shared-memory banks, atomics, barriers, latencies) -> gpu_micro.json, .md
#
# Usage (on the GPU machine, in the repository root):
#   OUT=/some/folder TCJIT_BENCH_COMMIT=<commit> bash scripts/gpu_check.sh [steps...]
# steps: tests, suite, micro (default: all three, in that order), and sweep (bench/gpu_option_sweep.py:
# a handful of option sets per kernel, calibration points of well-mapped variants) and ncu (every
# suite kernel's launches under Nsight Compute: bytes, sectors per request, conflicts, occupancy),
# and ncu-sweep (the option sweep's variants under Nsight Compute: calibration points of well-mapped
# kernels; SWEEP_KERNELS picks the kernels). OUT defaults to
# bench/results/gpu_check. Wheels in .whl/ (islpy, deap, platformdirs for the machine's Python) are
# installed into /tmp/site first (a lent machine has torch and CuPy but cannot reach PyPI), and
# tcjit itself as an editable install.
# Each step has a time limit (TESTS_S, SUITE_S, MICRO_S seconds) so that one that hangs cannot
# take the others' time; its exit status and duration are printed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results/gpu_check}
mkdir -p "$out"
python=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
# tcjit's layers install under tcjit.* (pyproject's package-dir): an editable install maps them.
"$python" -c "import tcjit.polyhedral" 2>/dev/null ||
    "$python" -m pip install -q --no-deps --no-build-isolation --no-index -e . || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv >"$out/nvidia_smi.csv" 2>&1 || true

step() {
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    echo "== $name (limit ${limit} s)"
    timeout "$limit" "$@"
    rc=$?
    echo "== $name: exit status $rc after $(($(date +%s) - start)) s"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests suite micro)
for s in "${steps[@]}"; do
    case "$s" in
        tests) step tests "${TESTS_S:-180}" "$python" -m pytest -m cuda -q -p no:cacheprovider \
            -n "${TEST_WORKERS:-8}" tests/gpu/test_cuda_runtime.py tests/runtime/test_bench.py \
            >"$out/pytest_cuda.log" 2>&1
            tail -15 "$out/pytest_cuda.log" ;;
        suite) step suite "${SUITE_S:-280}" "$python" bench/cpu_suite.py --device cuda --no-compile \
            --out "$out/gpu_suite" ;;
        micro) step micro "${MICRO_S:-90}" "$python" bench/gpu_micro.py --out "$out/gpu_micro" ;;
        sweep) step sweep "${SWEEP_S:-300}" "$python" bench/gpu_option_sweep.py --rounds 9 \
            --out "$out/gpu_option_sweep" ;;
        ncu) ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
            sections=(--section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis)
            metrics=dram__bytes_read.sum,dram__bytes_write.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
            metrics+=,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum
            metrics+=,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
            metrics+=,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum
            step ncu "${NCU_S:-240}" "$ncu" --kernel-name regex:^tc_ --csv --page raw "${sections[@]}" \
                --metrics "$metrics" --log-file "$out/ncu_raw.csv" \
                "$python" bench/gpu_ncu.py --out "$out/gpu_ncu_launches.json" ;;
        ncu-sweep) ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
            metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
            metrics+=,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
            step ncu-sweep "${NCU_S:-240}" "$ncu" --kernel-name regex:^tc_ --csv --page raw --section LaunchStats \
                --metrics "$metrics" --log-file "$out/ncu_sweep.csv" \
                "$python" bench/gpu_ncu.py --sweep --kernels "${SWEEP_KERNELS:-matmul,tmm,gconv,conv2d,softmax,bn_reduce,maxpool2x2}" \
                --out "$out/gpu_ncu_sweep_launches.json" ;;
        *) echo "unknown step $s (tests, suite, micro, sweep, ncu, ncu-sweep)" >&2; exit 2 ;;
    esac
done
