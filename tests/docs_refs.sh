#!/usr/bin/env bash
# tests/docs_refs.sh: the references in the documentation that go stale when code moves, checked
# (part of make docs-check; tests/docs_check.sh runs it).
#
#   bash tests/docs_refs.sh [ROOT]     ROOT: a git work tree (default: this repository)
#
# 1. Line references. A code span `path:N` or `path:N-M` in a tracked *.md file (outside fenced code;
#    path ending in .c .h .cu .cuh .py .sh .mk .awk; a bare file name is looked up among the tracked
#    files and must name one; `:N-M` alone continues the last path of the same file) must be followed
#    by the name of what it cites, ` (`identifier`)`, and that identifier must stand in lines N..M of
#    the file. A reference without a name cannot be checked and is a problem too: cite the function
#    instead (`fa2_store_lse` in `fa2_steps.cuh`), which never goes stale, or name it. When a name has
#    moved the message says where it is now.
# 2. Workshop patches. Every workshop/*.patch applies to the tree exactly where its hunks say: no
#    offset, no fuzz (patch --dry-run). A patch that applies elsewhere still works today, but its
#    line numbers point a reader to the wrong place; bash workshop/refresh.sh rewrites it.
#
# Output: one line per problem, FILE:LINE: what; then
#   docs-refs: R line references, P patches checked; N problems
# Exit 1 if there is any problem, 0 otherwise, 2 when the check cannot run.
set -u

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "docs-refs: $root is not a git work tree" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/docs_refs.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
git ls-files >"$tmp/tracked"
n_refs=0 n_patches=0 n_problems=0
problem() { echo "$1"; n_problems=$((n_problems + 1)); }

# ---- 1. line references: "FILE LINE PATH FIRST LAST NAME" (NAME "-" when none follows) -----------
mapfile -t md < <(grep '\.md$' "$tmp/tracked")
# shellcheck disable=SC2016
[ ${#md[@]} -eq 0 ] || awk '
FNR == 1 { fence = ""; last = "" }
/^[ \t]*(```|~~~)/ { fence = fence == "" ? "x" : ""; next }
fence != "" { next }
{
    s = $0
    while (match(s, /`[^`]+`/)) {
        span = substr(s, RSTART + 1, RLENGTH - 2); rest = substr(s, RSTART + RLENGTH); s = rest
        path = ""; range = ""
        if (match(span, /^[A-Za-z0-9_.\/-]+\.(c|h|cu|cuh|py|sh|mk|awk):[0-9]+(-[0-9]+)?$/)) {
            path = span; sub(/:[0-9-]+$/, "", path); range = substr(span, length(path) + 2); last = path
        } else if (match(span, /^:[0-9]+(-[0-9]+)?$/) && last != "") {
            path = last; range = substr(span, 2)
        } else continue
        first = range; lastl = range
        if (index(range, "-")) { first = substr(range, 1, index(range, "-") - 1); lastl = substr(range, index(range, "-") + 1) }
        name = "-"
        if (match(rest, /^ *\(`[A-Za-z_][A-Za-z0-9_]*`/)) { name = substr(rest, RSTART, RLENGTH); sub(/^ *\(`/, "", name); sub(/`$/, "", name) }
        print FILENAME, FNR, path, first, lastl, name
    }
}' "${md[@]}" >"$tmp/refs"

while read -r file ln path first last name; do
    n_refs=$((n_refs + 1))
    where="$file:$ln: \`$path:$first$([ "$first" = "$last" ] || echo "-$last")\`"
    target=$path
    if ! grep -qxF -- "$target" "$tmp/tracked"; then
        mapfile -t hits < <(grep -E "(^|/)$(printf '%s' "$path" | sed 's/[].[^$*]/\\&/g')\$" "$tmp/tracked")
        if [ ${#hits[@]} -ne 1 ]; then
            problem "$where: $([ ${#hits[@]} -eq 0 ] && echo "no tracked file $path" || echo "$path names ${#hits[@]} tracked files: give its folder")"
            continue
        fi
        target=${hits[0]}
    fi
    lines=$(wc -l <"$target")
    if [ "$last" -lt "$first" ] || [ "$last" -gt "$lines" ]; then
        problem "$where: $target has $lines lines"; continue
    fi
    if [ "$name" = - ]; then
        problem "$where names nothing to check: follow it with (\`identifier\`) of those lines, or cite the function instead"
        continue
    fi
    if ! sed -n "${first},${last}p" "$target" | grep -qw -- "$name"; then
        now=$(grep -nw -- "$name" "$target" | head -n 1 | cut -d: -f1)
        problem "$where (\`$name\`): $name is not in lines $first-$last of $target$([ -n "$now" ] && echo " (it is at line $now now)")"
    fi
done <"$tmp/refs"

# ---- 2. workshop patches apply where they say --------------------------------------------------
if ! command -v patch >/dev/null 2>&1; then
    echo "docs-refs: patch not found: the workshop patches were not checked" >&2
else
    for ex in $(grep -E '^workshop/[^/]+\.patch$' "$tmp/tracked"); do
        n_patches=$((n_patches + 1))
        out=$(patch -p1 --dry-run --batch <"$ex" 2>&1)
        rc=$?
        if [ $rc -ne 0 ]; then
            problem "$ex:1: does not apply: $(printf '%s\n' "$out" | grep -m1 -iE 'fail|malformed|can.t' || printf '%s' "$out" | tail -n 1)"
        elif printf '%s\n' "$out" | grep -qE 'offset|fuzz'; then
            problem "$ex:1: applies only $(printf '%s\n' "$out" | grep -m1 -oE '(with fuzz [0-9]+|at [0-9]+ \(offset -?[0-9]+ lines?\))'): bash workshop/refresh.sh $ex"
        fi
    done
fi

echo "docs-refs: $n_refs line references, $n_patches patches checked; $n_problems problems"
[ "$n_problems" -eq 0 ]
