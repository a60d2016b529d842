#!/usr/bin/env bash
# sass_backward_hopper.sh PTXAS_LOG SASS_OUT OBJECT: what the compiler made of stage 14's main kernels
# (make sass-14), the facts issue 55 asks of them that need no GPU. From `nvcc -Xptxas -v`: registers and
# spills per kernel (backward_hopper_kernel<bf16, D, deterministic>). Then, where a cuobjdump is found
# (CUOBJDUMP=path, else on PATH, else /usr/local/cuda/bin), from the SASS per kernel: HGMMA (wgmma),
# UTMALDG (TMA loads), UTMAREDG (the copy engine's reduce-add of dQ; none in 14d), USETMAXREG, LDL/STL,
# and the highest register named. Exit 1 if a kernel spills, uses local memory, or lacks HGMMA, UTMALDG,
# the two USETMAXREG or (14) UTMAREDG; without a cuobjdump only the ptxas half is checked.
set -u
log=$1 out=$2 obj=$3
status=0
echo "== ptxas: registers and spills (backward_hopper_kernel<bf16, D, deterministic>; the registers at entry,"
echo "   before setmaxnreg)"
awk '
/Compiling entry function .*backward_hopper_kernel/ {
    name = $0; sub(/.*backward_hopper_kernelILi/, "", name); sub(/EEv.*/, "", name); gsub(/ELi/, ",", name)
    cur = "<" name ">"; n++
}
/bytes stack frame/ { stack = $0; sub(/^[ \t]+/, "", stack) }
/Used [0-9]+ registers/ && cur != "" {
    r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r)
    printf "%-10s %3s registers  %s\n", cur, r, stack
    if (stack !~ /0 bytes spill stores, 0 bytes spill loads/) bad = 1
    cur = ""
}
END {
    if (n == 0) { print "!! no backward_hopper_kernel in the log"; exit 1 }
    if (bad) { print "!! some kernel spills"; exit 1 }
    print n " kernels: 0 bytes spilled"
}
' "$log" || status=1

cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
[ -z "$cuobjdump" ] && [ -x /usr/local/cuda/bin/cuobjdump ] && cuobjdump=/usr/local/cuda/bin/cuobjdump
if [ -z "$cuobjdump" ]; then
    echo "== no cuobjdump found (CUOBJDUMP=path names one): SASS not checked"
    exit $status
fi
"$cuobjdump" -sass "$obj" >"$out" || exit 1
echo "== SASS per kernel ($out)"
awk '
/Function : / {
    fn = ""
    if ($0 ~ /backward_hopper_kernel/) {
        fn = $0; sub(/.*backward_hopper_kernelILi/, "", fn); sub(/EEv.*/, "", fn); gsub(/ELi/, ",", fn)
        det[fn] = substr(fn, length(fn), 1); order[++n] = fn
    }
}
fn != "" && /\/\*[0-9a-f]+\*\/ / {
    line = $0; sub(/^[^\/]*\/\*[0-9a-f]+\*\/[ \t]+/, "", line); sub(/^@!?U?P[0-9T] +/, "", line)
    split(line, w, /[ .;]/); c[fn, w[1]]++
    while (match(line, /[^U]R[0-9]+/)) {
        r = substr(line, RSTART + 2, RLENGTH - 2) + 0
        if (r > top[fn]) top[fn] = r
        line = substr(line, RSTART + RLENGTH)
    }
}
END {
    if (n == 0) { print "!! no backward_hopper_kernel in the SASS"; exit 1 }
    for (i = 1; i <= n; ++i) {
        k = order[i]
        printf "%-10s HGMMA %3d  UTMALDG %2d  UTMAREDG %2d  USETMAXREG %d  LDL %d  STL %d  highest R%d\n", "<" k ">",
               c[k, "HGMMA"], c[k, "UTMALDG"], c[k, "UTMAREDG"], c[k, "USETMAXREG"], c[k, "LDL"], c[k, "STL"],
               top[k]
        if (c[k, "HGMMA"] == 0 || c[k, "UTMALDG"] == 0 || c[k, "USETMAXREG"] < 2 ||
            c[k, "LDL"] + c[k, "STL"] > 0 || (det[k] == "0" && c[k, "UTMAREDG"] == 0)) {
            print "!! <" k ">: an instruction the stage relies on is missing, or local memory is used"
            bad = 1
        }
    }
    if (bad) exit 1
    print n " kernels: HGMMA, UTMALDG, USETMAXREG (and UTMAREDG in 14) present, no local memory"
}
' "$out" || status=1
exit $status
