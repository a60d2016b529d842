#!/usr/bin/env bash
# 10_context_parallel/gpu_proof.sh: stage 10's proof on a machine with 2 (or more) GPUs, as one short
# table: correctness (front end and ring, against the double reference and against one GPU), one GPU
# bit for bit its local stage, the refusal of more GPUs than present, the stage's tests, the scaling
# table (B=1, H=32, D=128), and N = 256k on 2 GPUs with the memory each holds.
#
#   bash 10_context_parallel/gpu_proof.sh            (from the repository root; `make cp-proof` too)
#
# Environment: OUT=dir keeps the full log (proof.log) and the table (proof_table.txt) there;
# ARCH (default sm_90) and JOBS (default: the cores) for the build; PROOF_PARTS picks sections
# (default "build correct tests scaling memory"). About 5 minutes on 2 H200s after a 2-minute build.
# Exit status: 0 when every check passed and every scaling target was met, 1 otherwise, 2 for a
# PROOF_PARTS naming no part or an unknown one.
set -uo pipefail
cd "$(dirname "$0")/.."

# The ring needs send/recv only; NVLink multicast stays off on a shared host (cp_ring.c sets it too).
export NCCL_NVLS_ENABLE=0
PARTS=${PROOF_PARTS:-build correct tests scaling memory}
# a misspelt part would run nothing and report "every check passed": refused, as is an empty list
nparts=0
for part in $PARTS; do
    nparts=$((nparts + 1))
    case $part in build | correct | tests | scaling | memory) ;;
    *) echo "gpu_proof: PROOF_PARTS: unknown part '$part' (the parts: build correct tests scaling memory)" >&2
       exit 2 ;;
    esac
done
[ "$nparts" -gt 0 ] || { echo "gpu_proof: PROOF_PARTS names no part (the parts: build correct tests scaling memory)" >&2; exit 2; }
OUTDIR=${OUT:-}
LOG=$(mktemp /tmp/cp_proof.XXXXXX.log)
TABLE=$(mktemp /tmp/cp_proof.XXXXXX.txt)
TMPD=$(mktemp -d /tmp/cp_proof.XXXXXX)
FAILED=0
trap 'rm -rf "$TMPD"' EXIT

has() { [[ " $PARTS " == *" $1 "* ]]; }
say() { echo "$*" | tee -a "$TABLE"; }
log() { echo "$*" >>"$LOG"; }
stamp() { echo "[$(date +%T)] $*" | tee -a "$LOG" >&2; }
# kv KEY LINE: the value of KEY=value in a cp_bench summary line
kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
row() { printf '%-44s %-6s %s\n' "$1" "$2" "$3" | tee -a "$TABLE"; [ "$2" = PASS ] || FAILED=1; }
# run CMD...: logged with its output; the output is left in $RUN_OUT, the status returned
run() {
    log "\$ $*"
    RUN_OUT=$("$@" 2>&1)
    local rc=$?
    log "$RUN_OUT"
    log "(exit $rc)"
    return $rc
}
finish() {
    if [ -n "$OUTDIR" ]; then
        mkdir -p "$OUTDIR" && cp "$LOG" "$OUTDIR/proof.log" && cp "$TABLE" "$OUTDIR/proof_table.txt"
    fi
    rm -f "$LOG" "$TABLE"
    exit "$FAILED"
}

if has build; then
    stamp "building (ARCH=${ARCH:-sm_90})"
    sh tests/ensure-criterion.sh >>"$LOG" 2>&1 || log "(Criterion unavailable: the tests row will say so)"
    if ! run make ARCH="${ARCH:-sm_90}" -j"${JOBS:-$(nproc)}" build/attn build/cp_bench; then
        echo "$RUN_OUT" | tail -20
        FAILED=1
        finish
    fi
    run make ARCH="${ARCH:-sm_90}" -j"${JOBS:-$(nproc)}" build/test_attn || log "(test binary not built)"
fi
[ -x build/attn ] && [ -x build/cp_bench ] || { echo "gpu_proof: build/attn and build/cp_bench are needed (make)"; exit 1; }

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
run nvidia-smi topo -m
LINK=$(echo "$RUN_OUT" | awk '$1 == "GPU0" { print $3; exit }')
run env NCCL_DEBUG=VERSION build/cp_bench --gpus 2 --heads 1 --seq 64 --dim 64 --repeat 1 --warmup 0 --check-rows 0 --no-single
NCCLV=$(echo "$RUN_OUT" | sed -n 's/.*NCCL version \([^ ]*\).*/\1/p' | head -1)
say "== stage 10 on $NGPU x ${GPU:-?} (GPU0-GPU1 link: ${LINK:-?}; NCCL ${NCCLV:-?}), commit $(git rev-parse --short HEAD 2>/dev/null)"
if [ "${NGPU:-0}" -lt 2 ]; then
    say "gpu_proof: needs 2 GPUs (this machine has ${NGPU:-0}); the one-GPU parts are in make check"
    FAILED=1
    finish
fi

if has correct; then
    stamp "correctness"
    say ""
    printf '%-44s %-6s %s\n' "check (2 GPUs unless said)" "result" "detail" | tee -a "$TABLE"
    # The front end: harness buffers on GPU 0, scattered, the ring, gathered; every row of the
    # first and last head checked, plus 256 random rows.
    for c in "20001 64 --causal" "20001 128" "4099 128 --causal --dtype bf16" "1 64 --causal"; do
        set -- $c
        run build/attn --stage 10 --gpus 2 --batch 1 --heads 4 --seq "$1" --dim "$2" "${@:3}" --check --repeat 3
        st=FAIL; [[ $RUN_OUT == *$'\nPASS'* ]] && st=PASS
        err=$(echo "$RUN_OUT" | sed -n 's/.*(err\/tol \([0-9.e+-]*\)).*/\1/p' | head -1)
        lse=$(echo "$RUN_OUT" | sed -n 's/.*LSE max error.*(err\/tol \([0-9.e+-]*\)).*/\1/p')
        row "attn --stage 10 N=$1 D=$2 ${*:3}" "$st" "err/tol ${err:-?}, LSE err/tol ${lse:-?}"
    done
    # The ring at N up to 128k: sampled rows against the reference, every row against one GPU.
    for c in "131071 64" "131071 64 --causal" "131071 128" "131071 128 --causal"; do
        set -- $c
        run build/cp_bench --gpus 2 --batch 1 --heads 8 --seq "$1" --dim "$2" "${@:3}" --repeat 2 --warmup 1
        line=$(echo "$RUN_OUT" | grep '^cp_bench:')
        st=$(kv result "$line"); [ -n "$st" ] || st=FAIL
        row "ring N=$1 D=$2 H=8 ${*:3}" "$st" "err/tol $(kv ring_err "$line") (one GPU $(kv single_err "$line")), LSE $(kv ring_lse_err "$line"); vs one GPU: max|dO| $(kv max_do "$line"), max|dLSE| $(kv max_dlse "$line")"
    done
    # One GPU: stage 10 is its local stage, run as is; the saved files must be the same bytes.
    mkdir -p "$TMPD/a" "$TMPD/b"
    run build/cp_bench --gpus 2 --heads 1 --seq 64 --dim 128 --causal --repeat 1 --warmup 0 --check-rows 0 --no-single
    local_id=$(echo "$RUN_OUT" | sed -n 's/.* local=\([0-9]*\).*/\1/p')
    args="--batch 1 --heads 8 --seq 8191 --dim 128 --causal --repeat 1 --warmup 0"
    if run build/attn --stage 10 --gpus 1 $args --save "$TMPD/a" && run build/attn --stage "$local_id" $args --save "$TMPD/b" &&
        cmp -s "$TMPD/a/o.npy" "$TMPD/b/o.npy" && cmp -s "$TMPD/a/lse.npy" "$TMPD/b/lse.npy"; then
        row "--gpus 1 == stage $local_id, bit for bit" PASS "N=8191 D=128 causal: o.npy and lse.npy identical"
    else
        row "--gpus 1 == stage $local_id, bit for bit" FAIL "see the log"
    fi
    run build/attn --stage 10 --gpus $((NGPU + 1)) --seq 64 --dim 64
    rc=$?
    msg=$(echo "$RUN_OUT" | head -1)
    [ $rc -eq 2 ] && st=PASS || st=FAIL
    row "--gpus $((NGPU + 1)) refused" "$st" "exit $rc: $msg"
fi

if has tests; then
    stamp "tests"
    if [ -x build/test_attn ]; then
        run env ATTN_BIN=build/attn build/test_attn --timeout 600 --filter 'context_parallel/*'
        rc=$?
        summary=$(echo "$RUN_OUT" | grep '^tests:' | tail -1)
        [ $rc -eq 0 ] && st=PASS || st=FAIL
        row "make check's context_parallel/* tests" "$st" "${summary:-see the log}"
    else
        row "make check's context_parallel/* tests" FAIL "build/test_attn missing (Criterion?)"
    fi
fi

if has scaling; then
    stamp "scaling"
    say ""
    say "scaling: B=1 H=32 D=128 fp16, the ring with shards resident (build/cp_bench) vs the local stage on one GPU"
    printf '%-18s %10s %10s %6s %7s %12s %11s %7s %s\n' "N" "1 GPU ms" "2 GPU ms" "ratio" "target" \
        "K/V sent/GPU" "exch. alone" "hidden" "check" | tee -a "$TABLE"
    for c in "65536" "65536 --causal" "131072" "131072 --causal"; do
        set -- $c
        target=0.55; [ "${2:-}" = --causal ] && target=0.60
        run build/cp_bench --gpus 2 --batch 1 --heads 32 --seq "$1" --dim 128 ${2:-} --repeat 5 --warmup 1 --check-rows 64
        line=$(echo "$RUN_OUT" | grep '^cp_bench:')
        ratio=$(kv ratio "$line")
        met=$(awk -v r="${ratio:-9}" -v t="$target" 'BEGIN { print (r + 0 <= t + 0) ? "met" : "MISSED" }')
        [ "$met" = met ] || FAILED=1
        [ "$(kv result "$line")" = PASS ] || FAILED=1
        printf '%-18s %10.2f %10.2f %6s %7s %9.3f GiB %8.2f ms %6.0f%% %s\n' "$1 ${2:+causal}" \
            "$(kv single_ms "$line")" "$(kv ring_ms "$line")" "${ratio:-?}" "<=$target $met" \
            "$(kv sent_gib "$line")" "$(kv comm_ms "$line")" "$(awk -v h="$(kv hidden "$line")" 'BEGIN { print 100 * h }')" \
            "$(kv result "$line")" | tee -a "$TABLE"
    done
    say "(K/V sent/GPU: what each GPU passes on over one pass; exch. alone: the same exchange with no"
    say " attention running; hidden: the share of it the overlap with the local calls hides)"
fi

if has memory; then
    stamp "memory (N=262144)"
    say ""
    run build/cp_bench --gpus 2 --batch 1 --heads 32 --seq 262144 --dim 128 --repeat 2 --warmup 1 --check-rows 32
    line=$(echo "$RUN_OUT" | grep '^cp_bench:')
    st=$(kv result "$line"); [ -n "$st" ] || st=FAIL
    row "N=262144 H=32 D=128 non-causal on 2 GPUs" "$st" "ring $(kv ring_ms "$line") ms vs one GPU $(kv single_ms "$line") ms; err/tol $(kv ring_err "$line")"
    say "  per GPU: $(kv alloc_gib "$line") GiB allocated by stage 10 (free memory dropped $(kv mem_gib "$line") GiB, NCCL included);"
    say "  one GPU at this shape holds $(kv one_gpu_gib "$line") GiB of Q, K, V, O, LSE"
    echo "$RUN_OUT" | grep -E '^(ring|memory) ' | sed 's/^/  /' | tee -a "$TABLE"
fi

stamp "done"
say ""
say "gpu_proof: $([ $FAILED -eq 0 ] && echo 'every check passed and every target was met' || echo 'SOMETHING FAILED OR MISSED (see above and the log)')"
finish
