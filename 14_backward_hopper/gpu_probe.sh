#!/bin/sh
# 14_backward_hopper/gpu_probe.sh: stage 14's first run on an H100/H200, in one go (about 3-4 minutes,
# most of it the build). Run from the repository's root with $OUT set to a folder for the logs:
#
#     OUT=/tmp/probe14 sh 14_backward_hopper/gpu_probe.sh
#
# 1. builds build/attn for sm_90 (make ARCH=sm_90 -j16 build/attn);
# 2. checks 14 and 14d against the double reference (--check) at N = 17, 129, 1000, 4097, D = 64 and
#    128, causal and not, fp16 and bf16 (64 runs, each under a 120 s timeout: a block that waits
#    forever shows as a timeout, not a hung machine);
# 3. runs 14d 20 times on the same inputs at two shapes, saves dq/dk/dv.npy and compares them with
#    cmp (bitwise); 14 twice, to say whether its atomic order shows in the bits;
# 4. times 13, 14 and 14d at B = 4, H = 32, N = 4096, D = 64 and 128, causal and not (10 runs after 2);
# 5. if time is left, compute-sanitizer memcheck and synccheck on small problems.
# Prints a summary at the end; every run's output is in $OUT (fail_*.txt for the failures).
set -u
OUT=${OUT:-build/probe14}
mkdir -p "$OUT"
ATTN=${ATTN:-build/attn} # the probe's own test runs a stand-in
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

say "== stage 14 probe: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)," \
    "commit $(git rev-parse --short HEAD 2>/dev/null)"
if [ "${PROBE_NO_BUILD:-0}" != 1 ] && ! make ARCH=sm_90 -j16 build/attn >"$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"
    say "BUILD FAILED (log: $OUT/build.log)"
    exit 1
fi
say "build: $(elapsed) s"

# ---- 2. correctness ---------------------------------------------------------------------------
pass=0
fail=0
for s in ${PROBE_STAGES:-14 14d}; do
    for D in 64 128; do
        for N in ${PROBE_SEQS:-17 129 1000 4097}; do
            if [ "$N" -le 1000 ]; then bh="--batch 2 --heads 3"; else bh="--batch 1 --heads 2"; fi
            for c in "" "--causal"; do
                for dt in fp16 bf16; do
                    args="--stage $s $bh --seq $N --dim $D $c --dtype $dt --repeat 1 --warmup 0 --check"
                    f="$OUT/run.txt"
                    timeout 120 $ATTN $args >"$f" 2>&1
                    rc=$?
                    ratios=$(grep -E "^  d[QKV] " "$f" | sed 's/.*(err\/tol \([^)]*\)).*/\1/' | tr '\n' ' ')
                    if [ $rc -eq 0 ] && grep -q "^PASS" "$f"; then
                        pass=$((pass + 1))
                        echo "PASS $args   err/tol dQ dK dV: $ratios" >>"$OUT/checks.txt"
                    else
                        fail=$((fail + 1))
                        name="fail_${s}_D${D}_N${N}_${dt}${c:+_causal}.txt"
                        cp "$f" "$OUT/$name"
                        say "FAIL (rc $rc) $args   err/tol dQ dK dV: $ratios  -> $name"
                        tail -8 "$f" | sed 's/^/    /' | tee -a "$SUMMARY"
                    fi
                done
            done
        done
    done
done
say "checks: $pass passed, $fail failed ($(elapsed) s; every line in $OUT/checks.txt)"

# ---- 3. bitwise repeatability ------------------------------------------------------------------
bitwise() { # stage runs shape...
    st=$1
    runs=$2
    shift 2
    same=0
    differ=0
    for k in $(seq 1 "$runs"); do
        d="$OUT/bits/$st/$k"
        rm -rf "$d"
        mkdir -p "$d"
        if ! timeout 120 $ATTN --stage "$st" "$@" --repeat 1 --warmup 0 --save "$d" >"$d/out.txt" 2>&1; then
            say "  $st run $k failed: $(tail -1 "$d/out.txt")"
            differ=$((differ + 1))
            continue
        fi
        [ "$k" -eq 1 ] && continue
        if cmp -s "$d/dq.npy" "$OUT/bits/$st/1/dq.npy" && cmp -s "$d/dk.npy" "$OUT/bits/$st/1/dk.npy" &&
            cmp -s "$d/dv.npy" "$OUT/bits/$st/1/dv.npy"; then
            same=$((same + 1))
        else
            differ=$((differ + 1))
        fi
    done
    say "bitwise $st $*: $same of $((runs - 1)) runs identical to the first, $differ differ or failed"
}
bitwise 14d 20 --batch 1 --heads 4 --seq 4097 --dim 64 --causal
bitwise 14d 20 --batch 2 --heads 3 --seq 1000 --dim 128
bitwise 14 3 --batch 2 --heads 3 --seq 1000 --dim 128
say "($(elapsed) s)"

# ---- 4. timing ----------------------------------------------------------------------------------
say "timing, B=4 H=32 N=4096 fp16 (ms, median of 10 after 2 warm-up runs; TFLOP/s at 2.5 x the forward's):"
say "  stage  D    causal  ms        TFLOP/s"
for D in 64 128; do
    for c in "" "--causal"; do
        for s in 13 14 14d; do
            f="$OUT/time_${s}_D${D}${c:+_causal}.txt"
            timeout 120 $ATTN --stage $s --batch 4 --heads 32 --seq 4096 --dim $D $c >"$f" 2>&1
            ms=$(grep "^time" "$f" | awk '{print $2}')
            tf=$(grep "^speed" "$f" | awk '{print $2}')
            say "  $(printf '%-6s %-4s %-7s %-9s %s' "$s" "$D" "${c:+yes}" "${ms:-ERR}" "${tf:-$(tail -1 "$f")}")"
        done
    done
done
say "($(elapsed) s)"

# ---- 5. sanitizer, if time is left -----------------------------------------------------------------
if command -v compute-sanitizer >/dev/null 2>&1 && [ "$(elapsed)" -lt 200 ]; then
    for tool in memcheck synccheck; do
        for s in 14 14d; do
            f="$OUT/sanitize_${tool}_${s}.txt"
            timeout 60 compute-sanitizer --tool $tool --error-exitcode 3 $ATTN --stage $s --batch 1 --heads 2 \
                --seq 129 --dim 64 --causal --repeat 1 --warmup 0 >"$f" 2>&1
            say "compute-sanitizer $tool $s (N = 129, D = 64, causal): rc $?, $(grep "ERROR SUMMARY" "$f")"
        done
    done
else
    say "compute-sanitizer: skipped (absent, or past 200 s)"
fi
say "== done in $(elapsed) s"
