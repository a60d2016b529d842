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
#
# A recipe file (a road step of stages 08 and 09, and those stages themselves: step08b_*.cu,
# warp_specialized.cu) is a list of #define lines and the #include of a kernel body of its folder
# whose `#if NAME` / `#if !NAME` ... `#else` ... `#endif` regions those names decide. Its code here is
# the body with the recipe applied: the kernel the step builds, as if written by hand, so the diff of
# two steps is the code of the idea the later one adds, not a changed #define.
#
#   sh tools/stage_diff.sh --show ID   the code of one stage as the diff sees it (a recipe applied)
set -eu

[ $# -eq 2 ] || { sed -n '4p' "$0" >&2; exit 2; }
show=0
[ "$1" != --show ] || show=1
cd "$(dirname "$0")/.."
attn=${ATTN:-build/attn}
[ -x "$attn" ] || { echo "diff: $attn not found: build it first (make, or make NO_CUDA=1)" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/stage-diff.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
# the stage's file, or its refusal ("unknown stage") as diff's
src() { "$attn" --source "$1" 2>"$tmp/err" || { sed 's/^attn: /diff: /' "$tmp/err" >&2; exit 2; }; }
if [ $show = 1 ]; then
    a=$(src "$2") || exit 2
    b=$a
else
    a=$(src "$1") || exit 2
    b=$(src "$2") || exit 2
fi
for f in "$a" "$b"; do [ -f "$f" ] || { echo "diff: $f not found" >&2; exit 2; }; done
if [ $show = 0 ] && [ "$a" = "$b" ]; then echo "diff: stages $1 and $2 are the same file, $a: their difference is in how it is called"; exit 0; fi

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

# The #if regions of a kernel body decided by a recipe ("NAME=0 NAME=1 ..."): a region whose #if names
# a recipe bit (#if NAME, #if !NAME) keeps the lines of its branch that holds and loses its directives;
# every other #if, #ifdef and #ifndef stays as it is, with its #else and #endif.
resolve() {
    awk -v recipe="$2" '
        BEGIN { n = split(recipe, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); val[p[1]] = p[2] }
                depth = 0; live[0] = 1 }
        function bit(line,   m, neg) { # 1 or 0 for "#if NAME" / "#if !NAME" with NAME in the recipe; else -1
            if (line !~ /^[ \t]*#[ \t]*if[ \t]+!?[A-Za-z_][A-Za-z0-9_]*[ \t]*$/) return -1
            m = line; sub(/^[ \t]*#[ \t]*if[ \t]+/, "", m); sub(/[ \t]*$/, "", m)
            neg = substr(m, 1, 1) == "!"; if (neg) m = substr(m, 2)
            if (!(m in val)) return -1
            return (val[m] != 0) != neg
        }
        /^[ \t]*#[ \t]*if/ { k = bit($0); depth++; decided[depth] = k >= 0
                               if (k < 0) { if (live[depth - 1]) print; live[depth] = live[depth - 1] }
                               else { holds[depth] = k; live[depth] = live[depth - 1] && k }
                               next }
        /^[ \t]*#[ \t]*elif/ { if (decided[depth]) { print FILENAME ": #elif in a recipe region" > "/dev/stderr"; exit 2 } }
        /^[ \t]*#[ \t]*else/ { if (!decided[depth]) { if (live[depth - 1]) print; next }
                                 holds[depth] = !holds[depth]; live[depth] = live[depth - 1] && holds[depth]; next }
        /^[ \t]*#[ \t]*endif/ { if (!decided[depth] && live[depth - 1]) print; depth--; next }
        live[depth] { print }' "$1"
}
# The code of a stage's file: without its header comment; a recipe file's #define lines dropped and
# its body, #included from its folder, put in their place with the recipe applied.
code() {
    dir=$(dirname "$1")
    recipe=$(sed -n 's/^#define \([A-Za-z_][A-Za-z0-9_]*\) \([01]\)[ \t]*$/\1=\2/p' "$1" | tr '\n' ' ')
    body=
    if [ -n "$recipe" ]; then
        for inc in $(sed -n 's/^#include "\([^"/]*\)".*/\1/p' "$1"); do
            [ -f "$dir/$inc" ] && grep -q '^#if !*[A-Za-z_]' "$dir/$inc" && body=$inc
        done
    fi
    if [ -z "$body" ]; then strip "$1"; return; fi
    strip "$dir/$body" > "$tmp/body"
    resolve "$tmp/body" "$recipe" > "$tmp/resolved" || exit 2
    strip "$1" | awk -v body="$body" -v resolved="$tmp/resolved" '
        /^#define / { next }
        $0 == "#include \"" body "\"" { while ((getline line < resolved) > 0) print line; next }
        { print }'
}
if [ $show = 1 ]; then code "$a"; exit 0; fi
code "$a" > "$tmp/a"
code "$b" > "$tmp/b"
diff -u --label "$1: $a" --label "$2: $b" "$tmp/a" "$tmp/b" || [ $? -eq 1 ]
