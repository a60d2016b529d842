#!/bin/sh
# tests/fuzz/run_fuzz.sh: the body of `make fuzz` (tests/reliability.mk).
#
#   run_fuzz.sh --probe CLANG          exit 1, with the install command, when CLANG cannot link a
#                                      libFuzzer program
#   run_fuzz.sh BIN WORKDIR SECONDS    fuzz BIN (build/fuzz_TARGET) for SECONDS on WORKDIR/corpus
#                                      (seeded from the target's seeds: tests/fuzz/corpus for npy
#                                      and npy_file, tests/fuzz/corpus_TARGET for the others; new
#                                      inputs stay in WORKDIR, never in the repository); crashes go
#                                      to WORKDIR/artifacts. Prints the executions and crashes;
#                                      exits 1 on a crash.
set -u

if [ "${1:-}" = "--probe" ]; then
    cc=${2:-clang}
    if ! command -v "$cc" >/dev/null 2>&1; then
        echo "error: $cc not found; libFuzzer needs clang. Install it with:" >&2
        echo "  sudo apt-get install -y clang libclang-rt-dev" >&2
        exit 1
    fi
    # a new private directory (mktemp -d): at the old $TMPDIR/attn-fuzz-probe-$$.c, a name known before
    # the run, a link planted there was written through
    d=$(mktemp -d "${TMPDIR:-/tmp}/attn-fuzz-probe.XXXXXX") ||
        { echo "error: cannot create a temporary directory in ${TMPDIR:-/tmp} for the probe" >&2; exit 1; }
    t=$d/probe
    printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$t.c"
    if "$cc" -fsanitize=fuzzer,address,undefined "$t.c" -o "$t" >/dev/null 2>&1; then
        rm -rf "$d"
        exit 0
    fi
    rm -rf "$d"
    major=$("$cc" --version 2>/dev/null | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -n 1)
    echo "error: $cc cannot link -fsanitize=fuzzer: clang's runtime (compiler-rt) is missing. Install it with:" >&2
    echo "  sudo apt-get install -y clang libclang-rt-${major:-14}-dev" >&2
    exit 1
fi

bin=$1
work=$2
secs=$3
here=$(dirname "$0")
target=$(basename "$bin")
target=${target#fuzz_}
seeds=$here/corpus
[ -d "$here/corpus_$target" ] && seeds=$here/corpus_$target
mkdir -p "$work/corpus" "$work/artifacts"
# Seeds are copied in each time; what the fuzzer adds stays in the build folder between runs.
cp "$seeds"/* "$work/corpus/"
find "$work/artifacts" -type f >"$work/artifacts.before"
log=$work/fuzz.log
# The file targets write, fsync and rename a file per input: on tmpfs that costs no disk flush, which
# is not what they test. FUZZ_TMPDIR overrides.
tmp=${FUZZ_TMPDIR:-/dev/shm}
[ -d "$tmp" ] && [ -w "$tmp" ] && export TMPDIR="$tmp"
echo "fuzzing $target for ${secs}s (corpus $work/corpus, log $log)"
"$bin" -max_total_time="$secs" -timeout=10 -max_len=8192 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict="$here/npy.dict" -artifact_prefix="$work/artifacts/" "$work/corpus" >"$log" 2>&1
rc=$?
find "$work/artifacts" -type f >"$work/artifacts.after"
crashes=$(sort "$work/artifacts.before" "$work/artifacts.after" | uniq -u)
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
units=$(find "$work/corpus" -type f | wc -l)
echo "$target: executions: ${execs:-?} (${speed:-?}/s), corpus: $units inputs, exit status: $rc"
if [ -n "$crashes" ] || [ "$rc" -ne 0 ]; then
    echo "CRASH: the fuzzer stopped on an input; its report:"
    grep -E 'ERROR|runtime error|SUMMARY|Test unit written|^    #[0-9]' "$log" | head -n 16
    echo "inputs: ${crashes:-see $log}"
    echo "reproduce: $bin <input>; keep each as a regression case in tests/npy_cases/bad_fuzz_*.npy"
    exit 1
fi
echo "$target: crashes: 0"
