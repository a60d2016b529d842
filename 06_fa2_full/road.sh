#!/usr/bin/env bash
# road.sh: the road of stage 06, one line per step, measured on this machine's GPU.
#
#   make fa2-road && bash 06_fa2_full/road.sh          # the table: B=4 H=32 N=4096 D=128, fp16, non-causal
#   bash 06_fa2_full/road.sh --full                    # plus the final kernel (r4) and FA2's ping-pong
#                                                      # (x1) at D=64/128, N=2048..8192, causal and not,
#                                                      # fp16 and bf16
# Each binary times 30 runs after 5 warm-ups (CUDA events, median) on fresh random inputs and checks a
# few rows against a double reference; a step whose check fails is marked CHECK FAILED.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
# SHAPE and REPS may be overridden from the environment (words split on spaces)
read -r -a SHAPE_ARGS <<< "${SHAPE:---batch 4 --heads 32 --seq 4096 --dim 128}"
read -r -a REPS_ARGS <<< "${REPS:---warmup 5 --reps 30}"

describe() {
    case $1 in
    r0) echo "first correct tensor-core version (64x64, plain smem, load then compute)" ;;
    r1) echo "+ XOR-swizzled smem (no bank conflicts)" ;;
    r2) echo "+ Q fragments held in registers" ;;
    r3) echo "+ cp.async double buffering of K and V" ;;
    r4) echo "+ FA2 tiles 128x64, 32 rows per warp (final)" ;;
    x1) echo "final tiles, FA2's K/V ping-pong instead of double buffers" ;;
    x3) echo "final tiles, no swizzle" ;;
    esac
}

status=0
run() { # step args...
    local step=$1
    shift
    local bin=$BUILD/road/road_$step
    if [ ! -x "$bin" ]; then
        echo "$step: $bin missing (run: make fa2-road)"
        status=1
        return
    fi
    "$bin" "$@" || status=1
}

echo "stage 06 road on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
echo "shape: ${SHAPE_ARGS[*]}, fp16, non-causal; TFLOP/s = 4*B*H*N*N*D / median time"
for step in r0 r1 r2 r3 r4 x1 x3; do
    printf '%-70s | ' "$step $(describe "$step")"
    run "$step" "${SHAPE_ARGS[@]}" "${REPS_ARGS[@]}"
done

if [ "${1:-}" = "--full" ]; then
    echo
    echo "final kernel (r4) and the ping-pong variant (x1), B=4 H=32 (B*H*N = 128*N):"
    for d in 64 128; do
        for n in 2048 4096 8192; do
            for c in "" "--causal"; do
                for t in "" "--bf16"; do
                    for step in r4 x1; do
                        run "$step" --batch 4 --heads 32 --seq "$n" --dim "$d" $c $t "${REPS_ARGS[@]}"
                    done
                done
            done
        done
    done
fi
exit $status
