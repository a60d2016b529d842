#!/usr/bin/env bash
# sass_report.sh PTXAS_LOG SASS_OUT OBJECT...: one line per kernel from `nvcc -Xptxas -v` (registers,
# spills, stack; dynamic smem is set at launch, see fa2_traits.cuh), then, if a cuobjdump is found,
# instruction counts per kernel from the SASS: HMMA (mma.sync), LDSM (ldmatrix), LDGSTS (cp.async),
# MUFU (ex2), and LDL/STL (local memory: must be 0). Exit 1 if any kernel spills.
set -u
log=$1 out=$2
shift 2
status=0
echo "== ptxas: registers and spills per kernel (stage 06: fa2_forward_kernel<dtype, D, causal>; the road:"
echo "   <name>_kernel<D, causal>, fp16; dtype 0 = fp16, 1 = bf16)"
awk '
/Compiling entry function/ {
    name = $0; sub(/.*function .?_Z[0-9]+/, "", name); sub(/EEv10fa2_params.*/, "", name)
    args = name; sub(/ILi.*/, "", name); sub(/^[^I]*ILi/, "", args); gsub(/ELi/, ",", args)
    arch = $0; sub(/.* for ./, "", arch); sub(/.$/, "", arch)
    cur = sprintf("%s  %-28s <%s>", arch, name, args)
}
/bytes stack frame/ { stack = $0; sub(/^[ \t]+/, "", stack) }
/Used [0-9]+ registers/ {
    r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r)
    printf "%-50s %3s registers  %s\n", cur, r, stack
    if (stack !~ /0 bytes spill stores, 0 bytes spill loads/) bad = 1
}
END { if (bad) { print "!! some kernel spills"; exit 1 } else print "all kernels: 0 bytes spilled" }
' "$log" || status=1

cuobjdump=$(command -v cuobjdump || true)
[ -z "$cuobjdump" ] && [ -x /usr/local/cuda/bin/cuobjdump ] && cuobjdump=/usr/local/cuda/bin/cuobjdump
if [ -z "$cuobjdump" ]; then
    echo "== no cuobjdump found: SASS not dumped"
    exit $status
fi
: > "$out"
for obj in "$@"; do "$cuobjdump" -sass "$obj" >> "$out"; done
echo "== SASS instruction counts ($out)"
awk '
/Function : / { name = $0; sub(/.*Function : _Z[0-9]+/, "", name); sub(/EEv10fa2_params.*/, "", name); sub(/ILi/, "<", name); gsub(/ELi/, ",", name); fn = name ">" }
/^[ \t]+code for sm_/ { arch = $0; sub(/.*code for /, "", arch) }
/\/\*[0-9a-f]+\*\/ / {
    line = $0; sub(/^[^\/]*\/\*[0-9a-f]+\*\/[ \t]+/, "", line); sub(/^@!?U?P[0-9T] +/, "", line)
    split(line, w, /[ .;]/); op = w[1]; key = arch " " fn
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    c[key, op]++
}
END {
    for (i = 1; i <= n; ++i) {
        k = order[i]
        printf "%-44s HMMA %4d  LDSM %4d  LDGSTS %4d  MUFU %4d  BAR %2d  LDL %d  STL %d\n", k,
               c[k, "HMMA"], c[k, "LDSM"], c[k, "LDGSTS"], c[k, "MUFU"], c[k, "BAR"], c[k, "LDL"], c[k, "STL"]
        if (c[k, "LDL"] + c[k, "STL"] > 0) bad = 1
    }
    if (bad) { print "!! local memory traffic in some kernel"; exit 1 }
}
' "$out" || status=1
exit $status
