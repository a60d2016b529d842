#!/bin/sh
# tools/stage_diff.sh: the code of two stages side by side, without their header comments (make diff).
#
#   sh tools/stage_diff.sh A B        e.g. 03m 04m, 05 06a, 06c 06d, 12 13 (ATTN: the build/attn to ask)
#
# Each stage's file is the one the registry names as holding its idea (build/attn --source ID: a CPU
# model's .c, a kernel's .cu, the road step's one-line file; stage 06's loops, fa2_kernel.cuh). The
# header comment of each (the first /* */ block, or the first run of // lines, with the blank lines
# around it) says what the stage adds in words; what is left is the code, so the diff shows the idea
# as code alone. Prints a unified diff, labelled with the ids; exit 0 whether or not the files differ
# (two stages of one file, 13 and 13d: "the same file"), 2 for an unknown stage or a missing file.
set -eu

[ $# -eq 2 ] || { sed -n '4p' "$0" >&2; exit 2; }
cd "$(dirname "$0")/.."
attn=${ATTN:-build/attn}
[ -x "$attn" ] || { echo "diff: $attn not found: build it first (make, or make NO_CUDA=1)" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/stage-diff.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
# the stage's file, or its refusal ("unknown stage") as diff's
src() { "$attn" --source "$1" 2>"$tmp/err" || { sed 's/^attn: /diff: /' "$tmp/err" >&2; exit 2; }; }
a=$(src "$1") || exit 2
b=$(src "$2") || exit 2
for f in "$a" "$b"; do [ -f "$f" ] || { echo "diff: $f not found" >&2; exit 2; }; done
if [ "$a" = "$b" ]; then echo "diff: stages $1 and $2 are the same file, $a: their difference is in how it is called"; exit 0; fi

# The file without its header comment: the lines before the first line of code that is not comment.
strip() {
    # state 0: before the header, 1: inside its /* */, 3: the blank lines after it, 2: the code
    awk 'BEGIN { state = 0 }
        state == 0 && /^[ \t]*$/ { next }
        state == 0 && /^[ \t]*\/\*/ { state = 1 }
        state == 0 && /^[ \t]*\/\// { next }
        state == 0 { state = 2 }
        state == 1 { if (/\*\//) { state = 3 } next }
        state == 3 && /^[ \t]*$/ { next }
        { state = 2; print }' "$1"
}
strip "$a" > "$tmp/a"
strip "$b" > "$tmp/b"
diff -u --label "$1: $a" --label "$2: $b" "$tmp/a" "$tmp/b" || [ $? -eq 1 ]
