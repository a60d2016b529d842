#!/usr/bin/env bash
# tests/sanitize.sh: the bodies of `make sanitize` and `make leakcheck` (tests/reliability.mk).
#
#   sanitize.sh compute ATTN     compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over
#                                every GPU stage that ATTN --list-ids gpu names, at each head dim
#                                ATTN --list-dims S names, N in {1, 17, 129, 1000}, causal and not,
#                                fp16 and (where --list shows the stage takes it) bf16.
#                                SANITIZE_QUICK=1: N in {17, 1000}, D in {64, the smallest}.
#                                SANITIZE_TOOLS / SANITIZE_STAGES / SANITIZE_DIMS / SANITIZE_SEQS
#                                (lists separated by spaces or commas, as ATTN_TEST_STAGES) narrow
#                                the set.
#                                One log per (tool, stage) in $SANITIZE_DIR; a summary table; exit 1
#                                if any run reports errors or fails.
#   sanitize.sh plan ATTN        print the (tool, stage, D) triples that `compute` would cover, one a
#                                line, largest D first: `make sanitize` runs one process per triple.
#   sanitize.sh parallel ATTN    `make sanitize`: the plan's triples, SANITIZE_JOBS `compute` processes
#                                at a time, each in SANITIZE_OUT/<tool>-<stage>-d<D>/, then one table of
#                                the plan's triples. SANITIZE_RESUME=1 keeps SANITIZE_OUT and runs only
#                                the triples without a summary there.
#   sanitize.sh leakcheck ATTN   valgrind --leak-check=full over ATTN's error paths (bad arguments,
#                                missing and malformed .npy files, a FIFO, a failing --save, and
#                                every host allocation failing in turn); exit 1 on a leak, a memory
#                                error, or a bad argument that was accepted.
set -u

mode=${1:-}
attn=${2:-build/attn}
here=$(cd "$(dirname "$0")" && pwd)
out=${SANITIZE_DIR:-build/sanitize}

die() {
    echo "error: $*" >&2
    exit 2
}

# A list from the environment, commas or spaces between items: "07,08" and "07 08" name the same.
list_of() {
    # shellcheck disable=SC2046
    printf '%s\n' $(printf '%s\n' "$1" | tr ',' ' ')
}

[ -x "$attn" ] || die "$attn not found or not executable (run make first)"
mkdir -p "$out" || die "cannot create $out"

# ------------------------------------------------------------------------------------------------
# The head dims to cover for stage $1: all it supports, or 64 and the smallest with SANITIZE_QUICK=1,
# or SANITIZE_DIMS (those of them the stage supports).
stage_dims() {
    local all dims
    all=$("$attn" --list-dims "$1") || die "$attn --list-dims $1 failed"
    dims=$all
    if [ "${SANITIZE_QUICK:-0}" = 1 ]; then
        local smallest
        smallest=$(printf '%s\n' $all | sort -n | head -n 1)
        if printf '%s\n' $all | grep -qx 64; then
            dims=$(printf '%s\n' 64 "$smallest" | sort -nu)
        else
            dims=$smallest
        fi
    fi
    if [ -n "${SANITIZE_DIMS:-}" ]; then
        local d keep=""
        for d in $(list_of "$SANITIZE_DIMS"); do
            printf '%s\n' $all | grep -qx "$d" && keep="$keep $d"
        done
        dims=$keep
    fi
    printf '%s\n' $dims
}

gpu_stages() {
    local stages
    stages=$("$attn" --list-ids gpu) || die "$attn --list-ids gpu failed"
    if [ -n "${SANITIZE_STAGES:-}" ]; then
        stages=$(list_of "$SANITIZE_STAGES")
        [ -n "$stages" ] || die "SANITIZE_STAGES='$SANITIZE_STAGES' names no stage"
    fi
    [ -n "$stages" ] || die "$attn --list-ids gpu names no GPU stage"
    printf '%s\n' $stages
}

# The compute-sanitizer tools that `compute` knows how to read: another name is refused, not run.
sanitizer_tools() {
    local t tools
    tools=$(list_of "${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}")
    for t in $tools; do
        case $t in
        memcheck | racecheck | initcheck | synccheck) ;;
        *) die "SANITIZE_TOOLS: '$t' is not one of memcheck, racecheck, initcheck, synccheck" ;;
        esac
    done
    printf '%s\n' $tools
}

run_plan() {
    local stages s t d dims tools plan=""
    stages=$(gpu_stages) || exit 2
    tools=$(sanitizer_tools) || exit 2
    for s in $stages; do
        dims=$(stage_dims "$s") || exit 2
        for t in $tools; do
            for d in $dims; do plan="$plan$t $s $d
"; done
        done
    done
    [ -n "$plan" ] || die "SANITIZE_TOOLS, SANITIZE_STAGES or SANITIZE_DIMS leave no (tool, stage, D) to run"
    # Largest D first: those runs take longest, so starting them first keeps all job slots busy.
    printf '%s' "$plan" | sort -k3,3nr -k1,1 -k2,2
}

# ------------------------------------------------------------------------------------------------
run_compute() {
    [ -n "${HAVE_CUDA-1}" ] || die "make sanitize needs the CUDA build (nvcc was not found) and a GPU"
    local cs=${COMPUTE_SANITIZER:-}
    if [ -z "$cs" ]; then
        if command -v compute-sanitizer >/dev/null 2>&1; then cs=$(command -v compute-sanitizer)
        elif [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/compute-sanitizer" ]; then cs=$CUDA_HOME/bin/compute-sanitizer
        elif [ -x /usr/local/cuda/bin/compute-sanitizer ]; then cs=/usr/local/cuda/bin/compute-sanitizer
        else die "compute-sanitizer not found (set COMPUTE_SANITIZER=/path/to/compute-sanitizer)"
        fi
    fi

    local stages
    stages=$(gpu_stages) || exit 2
    local tools
    tools=$(sanitizer_tools) || exit 2
    local seqs="1 17 129 1000"
    [ "${SANITIZE_QUICK:-0}" = 1 ] && seqs="17 1000"
    [ -n "${SANITIZE_SEQS:-}" ] && seqs=$(list_of "$SANITIZE_SEQS")
    local limit=${SANITIZE_TIMEOUT:-600}
    local tmo=""
    command -v timeout >/dev/null 2>&1 && tmo="timeout $limit"

    local summary=$out/summary.txt
    printf '%-10s %-6s %-14s %5s %7s %7s\n' tool stage dims runs errors failed >"$summary"
    local bad=0 total=0 s t
    for t in $tools; do
        local opts=""
        [ "$t" = memcheck ] && opts="--leak-check full"
        for s in $stages; do
            local dims
            dims=$(stage_dims "$s") || exit 2
            local log=$out/$t-$s.log runs=0 errs=0 failed=0 n d c dt
            # bf16 too where the stage takes it (its own conversions and packing): --list's dtype column
            local dtypes=fp16
            "$attn" --list | awk -v s="$s" '$1 == s' | grep -q 'fp16,bf16' && dtypes="fp16 bf16"
            [ -n "${SANITIZE_DTYPES:-}" ] && dtypes=$(list_of "$SANITIZE_DTYPES")
            : >"$log"
            for n in $seqs; do
                for d in $dims; do
                    for c in "" --causal; do
                      for dt in $dtypes; do
                        local cmd="$cs --tool $t $opts --error-exitcode 1 $attn --stage $s --batch 2 --heads 3 --seq $n --dim $d $c --dtype $dt --repeat 1 --warmup 0 --check"
                        local part=$out/.run.log
                        echo "### $cmd" >>"$log"
                        local t0=$SECONDS
                        # shellcheck disable=SC2086
                        $tmo $cmd >"$part" 2>&1
                        local rc=$?
                        cat "$part" >>"$log"
                        echo "### exit status $rc after $((SECONDS - t0)) s" >>"$log"
                        runs=$((runs + 1))
                        # "ERROR SUMMARY: 3 errors"; racecheck: "RACECHECK SUMMARY: ... (2 errors, 1 warnings)"
                        local e
                        e=$(sed -n -e 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' \
                                   -e 's/.*RACECHECK SUMMARY:.*(\([0-9][0-9]*\) error.*/\1/p' "$part" |
                            sort -n | tail -n 1)
                        e=${e:-0}
                        errs=$((errs + e))
                        if [ "$e" -gt 0 ]; then
                            echo "  $t stage $s N=$n D=$d ${c:-non-causal} $dt: $e errors (see $log)"
                        elif [ "$rc" -ne 0 ]; then
                            failed=$((failed + 1))
                            local why
                            why=$(grep -v '^=========' "$part" | grep -m 1 -iE 'error|fail|attn:' || true)
                            [ "$rc" = 124 ] && why="timed out after ${limit}s"
                            echo "  $t stage $s N=$n D=$d ${c:-non-causal} $dt: exit status $rc: ${why:-see $log}"
                        fi
                      done
                    done
                done
            done
            rm -f "$out/.run.log"
            printf '%-10s %-6s %-14s %5d %7d %7d\n' "$t" "$s" "$(echo $dims | tr ' ' ,)" "$runs" "$errs" "$failed" >>"$summary"
            [ "$errs" -gt 0 ] || [ "$failed" -gt 0 ] && bad=1
            total=$((total + runs))
        done
    done
    echo
    cat "$summary"
    echo "logs: $out/<tool>-<stage>.log"
    if [ "$bad" -ne 0 ]; then
        echo "FAIL: compute-sanitizer reported errors or runs failed"
        return 1
    fi
    if [ "$total" -eq 0 ]; then # a list of commas or dims no stage takes: nothing ran, nothing passed
        echo "FAIL: no run: SANITIZE_TOOLS, SANITIZE_STAGES, SANITIZE_DIMS, SANITIZE_SEQS or SANITIZE_DTYPES left none"
        return 1
    fi
    echo "PASS: no errors"
}

# ------------------------------------------------------------------------------------------------
# One `compute` process per planned (tool, stage, D), SANITIZE_JOBS at a time; the table counts the
# plan's triples only (a folder left by another plan in the same SANITIZE_OUT is not one of them).
run_parallel() {
    local top=${SANITIZE_OUT:-build/sanitize} jobs=${SANITIZE_JOBS:-4} t s d
    # a process has finished when its summary holds a row under the header (compute writes the header
    # first): the one test of "finished" for both the list still to run and the table
    finished_rows() { grep -sv '^tool' "$top/$1-$2-d$3/summary.txt"; }
    [ "${SANITIZE_RESUME:-0}" = 1 ] || rm -rf "$top"
    mkdir -p "$top" || die "cannot create $top"
    run_plan >"$top/plan.txt" || exit 2
    while read -r t s d; do
        finished_rows "$t" "$s" "$d" >/dev/null || echo "$t $s $d"
    done <"$top/plan.txt" >"$top/todo.txt"
    echo "sanitize: $(wc -l <"$top/plan.txt") (tool, stage, D) processes, $jobs at a time" \
        "($(wc -l <"$top/todo.txt") to run)"
    # with nothing to run, xargs would still start one process, with no triple (every tool, stage, D)
    if [ -s "$top/todo.txt" ]; then
        export SANITIZE_TOP=$top SANITIZE_SCRIPT=$here/sanitize.sh SANITIZE_ATTN=$attn
        # shellcheck disable=SC2016
        xargs -P "$jobs" -L 1 sh -c 'SANITIZE_DIR=$SANITIZE_TOP/$0-$1-d$2 SANITIZE_TOOLS=$0 SANITIZE_STAGES=$1 \
            SANITIZE_DIMS=$2 bash "$SANITIZE_SCRIPT" compute "$SANITIZE_ATTN" >"$SANITIZE_TOP/$0-$1-d$2.out" 2>&1' \
            <"$top/todo.txt" || true
    fi
    grep -h '^  ' "$top"/*.out 2>/dev/null
    local planned
    planned=$(wc -l <"$top/plan.txt")
    while read -r t s d; do
        finished_rows "$t" "$s" "$d"
    done <"$top/plan.txt" >"$top/table.txt"
    if [ ! -s "$top/table.txt" ]; then
        echo "sanitize: no run finished:"
        cat "$top"/*.out 2>/dev/null | sort -u | head -n 5
        return 1
    fi
    sort -k1,1 -k2,2 -k3,3n "$top/table.txt" | awk -v planned="$planned" '
        { k = $1 " " $2; if (!(k in r)) { keys[++n] = k; d[k] = $3 } else d[k] = d[k] "," $3;
          r[k] += $4; e[k] += $5; f[k] += $6; R += $4; E += $5; F += $6; done_++ }
        END { printf "%-10s %-6s %-22s %5s %7s %7s\n", "tool", "stage", "D", "runs", "errors", "failed";
              for (i = 1; i <= n; i++) { split(keys[i], kk, " ");
                printf "%-10s %-6s %-22s %5d %7d %7d\n", kk[1], kk[2], d[keys[i]], r[keys[i]], e[keys[i]], f[keys[i]] }
              printf "sanitize: %d of %d processes finished, %d runs, %d errors, %d failed runs\n", done_, planned, R, E, F;
              exit (done_ < planned || E > 0 || F > 0) }' && return 0
    echo "logs: $top/<tool>-<stage>-d<D>/"
    return 1
}

# ------------------------------------------------------------------------------------------------
run_leakcheck() {
    command -v valgrind >/dev/null 2>&1 ||
        die "valgrind not found. Install it with: sudo apt-get install -y valgrind"
    local cases=$here/npy_cases
    local f16=$cases/valid_f16_qkv_1x2x3x8.npy f32=$cases/valid_f32_qkv_1x2x5x8.npy
    [ -f "$f16" ] && [ -f "$f32" ] || die "$cases lacks the valid_*_qkv_* files (run tests/npy_cases/make_cases.py)"
    local dirs=$out/inputs
    rm -rf "$dirs"
    mkdir -p "$dirs/bad_q" "$dirs/bad_k" "$dirs/bad_v" "$dirs/mismatch" "$dirs/no_v" "$dirs/f8" "$dirs/fifo" \
        "$dirs/good" "$dirs/out" "$dirs/lse_is_dir/lse.npy" || die "cannot create $dirs"
    cp "$cases/bad_lying_shape.npy" "$dirs/bad_q/q.npy"
    cp "$f16" "$dirs/bad_q/k.npy"; cp "$f16" "$dirs/bad_q/v.npy"
    cp "$f16" "$dirs/bad_k/q.npy"; cp "$cases/bad_truncated_data.npy" "$dirs/bad_k/k.npy"; cp "$f16" "$dirs/bad_k/v.npy"
    cp "$f16" "$dirs/bad_v/q.npy"; cp "$f16" "$dirs/bad_v/k.npy"; cp "$cases/bad_trailing_garbage.npy" "$dirs/bad_v/v.npy"
    cp "$f16" "$dirs/mismatch/q.npy"; cp "$f32" "$dirs/mismatch/k.npy"; cp "$f16" "$dirs/mismatch/v.npy"
    cp "$f16" "$dirs/no_v/q.npy"; cp "$f16" "$dirs/no_v/k.npy"
    cp "$cases/bad_dtype_f8.npy" "$dirs/f8/q.npy"; cp "$f16" "$dirs/f8/k.npy"; cp "$f16" "$dirs/f8/v.npy"
    mkfifo "$dirs/fifo/q.npy"; cp "$f16" "$dirs/fifo/k.npy"; cp "$f16" "$dirs/fifo/v.npy"
    cp "$f16" "$dirs/good/q.npy"; cp "$f16" "$dirs/good/k.npy"; cp "$f16" "$dirs/good/v.npy"
    : >"$dirs/lse_is_dir/lse.npy/keep" # rename() cannot replace a non-empty directory: --save fails late

    # One case a line: the arguments, all of which must be refused. @IN@ stands for the inputs folder
    # and is put in after the line is split into arguments, so that a path with a space stays one.
    local list=$out/cases.txt
    cat >"$list" <<'EOF'
--stage nosuch
--stage 01 --seq 0
--stage 01 --dim abc
--stage 01 --dim 257
--stage 01 --seq 99999999999999999999
--stage 01 --heads -1
--stage 01 --seq
--stage 01 --no-such-flag
--list-dims nosuch

--stage 01 --load @IN@/missing
--stage 01 --load @IN@/bad_q
--stage 01 --load @IN@/bad_k
--stage 01 --load @IN@/bad_v
--stage 01 --load @IN@/mismatch
--stage 01 --load @IN@/no_v
--stage 01 --load @IN@/f8
--stage 01 --batch 1 --heads 1 --seq 4 --dim 8 --repeat 1 --warmup 0 --save @IN@/no/such/dir
--stage 01 --load @IN@/fifo
--stage 01 --load @IN@/good --seq 4
--stage 01 --seq 4 --dim 8 --check-rows 3
--stage 01 --seq 16 --dim 8 --scale 3e38
--stage 01 --batch 1 --heads 1 --seq 4 --dim 8 --save @IN@/lse_is_dir
--stage 01 --batch 1 --heads 1 --seq 4 --dim 8 --save @IN@/lse_is_dir --save-inputs
EOF
    # Every host allocation of a small checked and saved run fails once (ATTN_FAIL_ALLOC=n, see
    # attn.h): each must exit 1 without a leak. n runs from 1 until a plain run gets through.
    local fault="--stage 01 --causal --load @IN@/good --save @IN@/out --save-inputs --check" n=1
    local -a args
    read -r -a args <<<"$fault"
    while [ "$n" -lt 500 ] && ! ATTN_FAIL_ALLOC=$n "$attn" "${args[@]//@IN@/$dirs}" >/dev/null 2>&1; do
        echo "ATTN_FAIL_ALLOC=$n $fault" >>"$list"
        n=$((n + 1))
    done
    # Without a GPU, a GPU stage fails on the no-GPU path (not built, or no device).
    if [ ! -e /dev/nvidiactl ]; then
        local g
        g=$("$attn" --list-ids gpu 2>/dev/null | head -n 1)
        [ -n "$g" ] && echo "--stage $g --batch 1 --heads 1 --seq 4 --dim 64 --repeat 1 --warmup 0" >>"$list"
    fi

    local -a vg=(valgrind -q "--suppressions=$here/valgrind.supp" --leak-check=full
        --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible
        --error-exitcode=9)
    # valgrind itself must work (its options, the suppressions file) before its silence means anything:
    # a valgrind that cannot start exits with a status of its own, which the loop below could take for
    # the program's.
    local probe
    if ! probe=$("${vg[@]}" true 2>&1) || [ -n "$probe" ]; then
        echo "leakcheck: FAIL: valgrind does not run as: ${vg[*]}" >&2
        printf '%s\n' "$probe" | head -n 5 >&2
        return 1
    fi
    local log=$out/leakcheck.log runs=0 leaks=0 accepted=0 failed=0 line
    : >"$log"
    printf '%-6s %-9s %s\n' status valgrind arguments
    while IFS= read -r line || [ -n "$line" ]; do
        runs=$((runs + 1))
        local part=$out/.run.log
        local -a envs=()
        case "$line" in ATTN_FAIL_ALLOC=*) envs=("${line%% *}") line=${line#* } ;; esac
        args=()
        [ -n "$line" ] && read -r -a args <<<"$line"
        args=("${args[@]//@IN@/$dirs}")
        line=${line//@IN@/$dirs}
        echo "### $attn $line" >>"$log"
        env "${envs[@]}" "${vg[@]}" "$attn" "${args[@]}" >"$part" 2>&1
        local rc=$?
        cat "$part" >>"$log"
        echo "### exit status $rc" >>"$log"
        # attn refuses with 1 (a failure) or 2 (a usage error): only those count as clean. 9 is
        # valgrind's error exit and 0 a bad invocation accepted; any other status (126/127: nothing
        # ran; 128+n: a signal; or valgrind's own complaint in the log) is a run that did not happen
        # as it should, and fails the target too.
        local verdict=clean
        if [ "$rc" -eq 9 ]; then
            verdict=ERRORS
            leaks=$((leaks + 1))
        elif [ "$rc" -eq 0 ]; then
            verdict=ACCEPTED
            accepted=$((accepted + 1))
        elif { [ "$rc" -ne 1 ] && [ "$rc" -ne 2 ]; } ||
            grep -qE '^valgrind:|^==[0-9]+== (FATAL|Fatal|valgrind:)' "$part"; then
            verdict=FAILED
            failed=$((failed + 1))
        fi
        local msg
        msg=$(grep -v '^==' "$part" | grep -m 1 . || true)
        printf '%-6s %-9s %s\n       %s\n' "$rc" "$verdict" "${envs[*]:+${envs[*]} }${line:-(no arguments)}" "${msg:-(no message)}"
    done <"$list"
    rm -f "$out/.run.log"
    echo
    echo "leakcheck: $runs runs, $leaks with valgrind errors or leaks, $accepted bad invocations accepted," \
        "$failed that did not run as they should (log: $log)"
    [ "$leaks" -eq 0 ] && [ "$accepted" -eq 0 ] && [ "$failed" -eq 0 ] || return 1
}

case "$mode" in
compute) run_compute ;;
plan) run_plan ;;
parallel) run_parallel ;;
leakcheck) run_leakcheck ;;
*) die "usage: tests/sanitize.sh compute|plan|parallel|leakcheck BUILD/attn" ;;
esac
