#!/usr/bin/env bash
# The GPU routine: what every lent GPU runs, in one call of a few minutes.
#
# Usage (on the GPU machine, in the repository root):
#   OUT=<folder> TCJIT_BENCH_COMMIT=<commit> bash scripts/gpu_check.sh [options] [steps...]
#
# Modes. The time counts from the script's start, its set-up included; starting a lent machine
# costs about a minute more of the same 15:
#   --quick     tests, suite, micro, overhead: under 3 minutes (a 170 s budget)
#   (default)   the full run: tests, suite, symbolic, micro, overhead, ncu where Nsight Compute
#               is installed, and sweep last (it takes what the others leave): under 6 minutes (a
#               350 s budget)
#   steps...    these steps alone, in the order given, in the mode's budget: tests, suite, symbolic,
#               micro, overhead, sweep, ncu, ncu-sweep
# Options:
#   --compile   the suite also times torch.compile (about 60 s more: name fewer steps, or give
#               --budget); without it torch.compile is left out
#   --budget S  the run's budget in seconds instead of the mode's
#   --plan      print the steps and their time limits, run nothing
#   --help      this text
#
# First it prints the device and the software (bench/gpu_env.py: nvidia-smi's line, Python, torch
# and its CUDA, the driver's CUDA, CuPy and its NVRTC, the static profile's NVRTC, ncu, tcjit's
# commit) and stops with status 2 where no CUDA device is usable. Then the steps:
#   tests      pytest -m cuda on TEST_WORKERS (8) processes: every suite kernel at small sizes
#              against the oracle, streams, graphs, the disk cache, the suite's own GPU path
#   suite      bench/cpu_suite.py --device cuda at the GPU sizes against torch eager, each tcjit
#              kernel's static-profile prediction beside its time -> gpu_suite_<gpu>.json, .md
#   symbolic   bench/symbolic_sizes.py --device cuda at the GPU sizes: kernels with the batch size
#              and with every size symbolic against specialised ones, at the sizes they were mapped
#              at and at the batch halved plus one (each launch's grid computed from the call's
#              sizes) -> symbolic_sizes_<gpu>.json, .md
#   micro      bench/gpu_micro.py: clock, copy, FMA, launch, loads by stride, shared banks,
#              atomics, barriers, latencies, block dispatch, loads in flight -> gpu_micro_<gpu>.*
#   overhead   bench/call_overhead.py --device cuda: the cost of a call on tiny inputs (a
#              1-element add, an 8x8 matmul, its grad cases) against torch's, 5 samples of 1000
#              back-to-back calls, synchronised at each sample's end -> call_overhead_<gpu>.*
#   sweep      bench/gpu_option_sweep.py: the default rules' knobs turned, 9 rounds, each variant's
#              prediction beside its time (SWEEP_KERNELS: some kernels) -> gpu_option_sweep_<gpu>.*
#   ncu        each suite kernel once under Nsight Compute: the counters that check the model
#              (duration, registers, occupancy, DRAM bytes, global requests and sectors, shared
#              bank conflicts, FFMAs) -> gpu_ncu_<gpu>.csv, gpu_ncu_launches_<gpu>.json
#   ncu-sweep  the option sweep's variants under Nsight Compute (SWEEP_KERNELS, default
#              matmul,tmm,gconv,conv2d,softmax,bn_reduce,maxpool2x2)
#              -> gpu_ncu_sweep_<gpu>.csv, gpu_ncu_sweep_launches_<gpu>.json
# (<gpu>: the GPU's name as a file name, nvidia_h100_80gb_hbm3.)
#
# Time limits. Each step's limit is its share of the time the budget has left when it starts
# (weights: tests 3, suite 4 or 8 with --compile, symbolic 3, micro 2, overhead 1, sweep 6, ncu 4,
# ncu-sweep 6), so that a step that finishes early leaves its time to the later ones and one that
# hangs cannot take theirs. TESTS_S, SUITE_S, SYMBOLIC_S, MICRO_S, OVERHEAD_S, SWEEP_S, NCU_S,
# NCU_SWEEP_S (seconds) set a step's limit instead. A step with under 10 s left is skipped. Each
# step's exit status and time are printed as it ends, and all of them again at the end, with the
# tests' summary, the geometric means and the call overhead of the 1-element add and the 8x8 matmul.
#
# Files, in OUT (default bench/results/gpu_check), at most four at any time (a lent machine gives
# back 8 files a call): gpu_check.log (everything printed), gpu_check.tar (each step's result
# files, added as the step ends) and the files of the step in progress, which every script
# rewrites as it goes (after each kernel or measurement): a run cut short keeps what it measured.
# `tar -xf gpu_check.tar -C bench/results` puts the results where they are committed.
#
# Set-up: wheels in .whl/ (or the folder WHEELS names: islpy, deap, platformdirs for the machine's
# Python) are installed into /tmp/site (a lent machine has torch and CuPy but cannot reach PyPI),
# and tcjit itself as an editable install. PYTHON names the interpreter (default python3). Exit status: 0 when every
# step exits 0, 1 when one does not, 2 for a usage error or no usable GPU.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

declare -A weight=([tests]=3 [suite]=4 [symbolic]=3 [micro]=2 [overhead]=1 [sweep]=6 [ncu]=4 [ncu-sweep]=6)
reserve=5 # seconds kept for packing and the summary
# The counters that check the model per launch (time, DRAM bytes, global load requests and their
# sectors), and for the suite's kernels also stores, shared-memory bank conflicts and FFMAs;
# LaunchStats adds registers, grid and block, Occupancy the achieved occupancy.
ncu_sweep_metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
ncu_sweep_metrics+=,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
ncu_metrics=$ncu_sweep_metrics,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum
ncu_metrics+=,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
ncu_metrics+=,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum
# The overhead step's summary: the rows of its table for the plain calls, in words.
overhead_rows='s/^\| (pointwise 1 element|matmul 8x8) \| ([^|]*) \| ([^|]*) \| ([^|]*) \|.*/'
overhead_rows+='\1: tcjit \2, torch \3, tcjit - torch \4/p'
budget= quick=0 compile=0 plan=0 steps=()
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --compile) compile=1 ;;
        --plan) plan=1 ;;
        --budget)
            [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "gpu_check.sh: --budget takes seconds" >&2; exit 2; }
            budget=$2
            shift ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "gpu_check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *)
            [ -n "${weight[$1]:-}" ] || {
                echo "gpu_check.sh: unknown step $1 (tests, suite, symbolic, micro, overhead, sweep, ncu, ncu-sweep)" >&2
                exit 2
            }
            steps+=("$1") ;;
    esac
    shift
done
python=${PYTHON:-python3}
wheels=${WHEELS:-.whl}
[ "$compile" = 1 ] && weight[suite]=8
if [ -z "$budget" ]; then
    if [ "$quick" = 1 ]; then budget=170; else budget=350; fi
fi
if [ ${#steps[@]} -eq 0 ]; then
    steps=(tests suite micro overhead)
    if [ "$quick" = 0 ]; then
        steps=(tests suite symbolic micro overhead)
        [ -n "$("$python" bench/gpu_env.py --ncu 2>/dev/null)" ] && steps+=(ncu)
        steps+=(sweep)
    fi
fi

# The limit of step number $1 when $2 seconds of the budget have passed: its share of what is left.
limit_of() {
    local i=$1 spent=$2 rest=0 j name var
    name=${steps[i]}
    var=$(echo "${name}_S" | tr 'a-z-' 'A-Z_')
    if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
    for ((j = i; j < ${#steps[@]}; j++)); do rest=$((rest + weight[${steps[j]}])); done
    echo $(((budget - reserve - spent) * weight[$name] / rest))
}

if [ "$plan" = 1 ]; then
    echo "budget ${budget} s; each step's limit if those before it use theirs (the set-up's time comes out of them):"
    spent=0
    for i in "${!steps[@]}"; do
        limit=$(limit_of "$i" "$spent")
        printf '  %-9s %4d s\n' "${steps[i]}" "$limit"
        spent=$((spent + limit))
    done
    exit 0
fi

out=${OUT:-bench/results/gpu_check}
mkdir -p "$out"
log=$out/gpu_check.log
archive=$out/gpu_check.tar
rm -f "$archive"

# Moves the files of a finished step into the archive.
pack() {
    local f present=()
    for f in "$@"; do [ -e "$out/$f" ] && present+=("$f"); done
    [ ${#present[@]} -eq 0 ] && return
    tar -rf "$archive" -C "$out" "${present[@]}" && (cd "$out" && rm -f "${present[@]}")
}

run() {
    local start=$SECONDS summary=() failed=0 i name limit t rc gpu ncu files pytest_out sections metrics which
    pytest_out=$(mktemp)
    if compgen -G "$wheels/*.whl" >/dev/null; then
        "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site "$wheels"/*.whl || return 1
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    export PYTHONUNBUFFERED=1
    # tcjit's layers install under tcjit.* (pyproject's package-dir): an editable install maps them.
    "$python" -c "import tcjit.polyhedral" 2>/dev/null ||
        "$python" -m pip install -q --no-deps --no-build-isolation --no-index -e . || return 1
    echo "== the device and the software (set-up took $((SECONDS - start)) s)"
    "$python" bench/gpu_env.py || { echo "gpu_check.sh: no usable CUDA device: nothing to measure"; return 2; }
    gpu=$("$python" bench/gpu_env.py --slug)
    ncu=$("$python" bench/gpu_env.py --ncu)
    for i in "${!steps[@]}"; do
        name=${steps[i]}
        limit=$(limit_of "$i" $((SECONDS - start)))
        if [ "$limit" -lt 10 ]; then
            summary+=("$name: skipped, ${limit} s left of the ${budget} s budget")
            echo "== ${summary[-1]}"
            continue
        fi
        echo "== $name (limit ${limit} s)"
        t=$SECONDS
        files=()
        case "$name" in
            tests)
                timeout -k 10 "$limit" "$python" -m pytest -m cuda -q -p no:cacheprovider \
                    -n "${TEST_WORKERS:-8}" tests/gpu/test_cuda_runtime.py tests/runtime/test_bench.py \
                    tests/runtime/test_bench_shapes.py \
                    2>&1 | tee "$pytest_out"
                rc=$?
                summary+=("tests: $(tail -1 "$pytest_out")") ;;
            suite)
                files=("gpu_suite_$gpu.json" "gpu_suite_$gpu.md")
                timeout -k 10 "$limit" "$python" bench/cpu_suite.py --device cuda \
                    $([ "$compile" = 1 ] || echo --no-compile) --out "$out/gpu_suite_$gpu"
                rc=$?
                [ -e "$out/${files[1]}" ] && while read -r line; do summary+=("suite: $line"); done \
                    < <(grep '^Geometric mean' "$out/${files[1]}") ;;
            symbolic)
                files=("symbolic_sizes_$gpu.json" "symbolic_sizes_$gpu.md")
                timeout -k 10 "$limit" "$python" bench/symbolic_sizes.py --device cuda --budget 0.3 --repeat 9 \
                    $([ "$compile" = 1 ] || echo --no-compile) --out "$out/symbolic_sizes_$gpu"
                rc=$?
                [ -e "$out/${files[1]}" ] && while read -r line; do summary+=("symbolic: $line"); done \
                    < <(grep '^Geometric mean' "$out/${files[1]}") ;;
            micro)
                files=("gpu_micro_$gpu.json" "gpu_micro_$gpu.md")
                timeout -k 10 "$limit" "$python" bench/gpu_micro.py --out "$out/gpu_micro_$gpu" >/dev/null
                rc=$? ;;
            overhead)
                files=("call_overhead_$gpu.json" "call_overhead_$gpu.md")
                timeout -k 10 "$limit" "$python" bench/call_overhead.py --device cuda --calls 1000 \
                    --samples 5 --out "$out/call_overhead_$gpu"
                rc=$?
                [ -e "$out/${files[1]}" ] && while read -r line; do summary+=("overhead: $line"); done \
                    < <(sed -n -E "$overhead_rows" "$out/${files[1]}") ;;
            sweep)
                files=("gpu_option_sweep_$gpu.json" "gpu_option_sweep_$gpu.md")
                timeout -k 10 "$limit" "$python" bench/gpu_option_sweep.py --rounds 9 \
                    ${SWEEP_KERNELS:+--kernels "$SWEEP_KERNELS"} --out "$out/gpu_option_sweep_$gpu"
                rc=$?
                [ -e "$out/${files[1]}" ] && while read -r line; do summary+=("sweep: ${line%%. \`*}."); done \
                    < <(grep '^Geometric mean' "$out/${files[1]}") ;;
            ncu | ncu-sweep)
                if [ "$name" = ncu ]; then
                    files=("gpu_ncu_$gpu.csv" "gpu_ncu_launches_$gpu.json")
                    sections=(--section LaunchStats --section Occupancy)
                    metrics=$ncu_metrics
                    which=()
                else  # 85 variants: fewer counters, fewer replays of each
                    files=("gpu_ncu_sweep_$gpu.csv" "gpu_ncu_sweep_launches_$gpu.json")
                    sections=(--section LaunchStats)
                    metrics=$ncu_sweep_metrics
                    which=(--sweep --kernels "${SWEEP_KERNELS:-matmul,tmm,gconv,conv2d,softmax,bn_reduce,maxpool2x2}")
                fi
                if [ -z "$ncu" ]; then
                    echo "no ncu (Nsight Compute) on this machine"
                    rc=127
                else
                    timeout -k 10 "$limit" "$ncu" --kernel-name regex:^tc_ --csv --page raw "${sections[@]}" \
                        --metrics "$metrics" --log-file "$out/${files[0]}" \
                        "$python" bench/gpu_ncu.py "${which[@]}" --out "$out/${files[1]}"
                    rc=$?
                fi ;;
        esac
        pack "${files[@]}"
        [ "$rc" = 0 ] || failed=1
        [ "$rc" = 124 ] && rc="124 (stopped at its limit)"
        summary+=("$name: exit status $rc after $((SECONDS - t)) s")
        echo "== ${summary[-1]}"
    done
    rm -f "$pytest_out"
    echo "== summary: $((SECONDS - start)) s of the ${budget} s budget; results in $archive"
    printf '   %s\n' "${summary[@]}"
    return "$failed"
}

run 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
