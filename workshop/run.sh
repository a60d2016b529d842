#!/usr/bin/env bash
# workshop/run.sh: the break-it exercises, kept true as the code changes (make workshop-check).
#
#   bash workshop/run.sh cpu|gpu [EXERCISE.patch ...]
#
# (An exercise named here that does not exist, or is not of the kind asked for, is an error: exit 2.)
#
# Each workshop/*.patch starts with a header (Exercise, Stage, Breaks, Check, Expect) and then a
# unified diff that removes one idea. For each exercise of the asked kind this script
#   1. copies the tree into build/workshop/<name>/ with the pristine objects of the same build (so
#      that only what the patch touches is compiled again), applies the patch and builds build/attn
#      there (NO_CUDA=1 for cpu exercises; the CUDA build, with the caller's ARCH, for gpu ones);
#   2. runs the Check command on the pristine build, which must PASS (else the exercise proves
#      nothing), then on the broken one, which must end as Expect says: FAIL (exit 1 and a FAIL line)
#      or, for an exercise whose change is harmless, PASS;
#   3. prints one line per exercise and, at the end, how many were caught.
# It exits 1 when any exercise was not caught (or did not apply or build): the exercise, or the
# check, needs attention. A gpu exercise whose stage cannot run here is reported as skipped.
#
# Environment (set by workshop/workshop.mk): MAKE, WS_NOCUDA_BUILD (default build/nocuda),
# WS_CUDA_BUILD (default build), WS_MAKEFLAGS (extra make arguments, e.g. ARCH=sm_90), WS_JOBS.
# WS_KEEP=1 keeps every broken tree (build/workshop/<name>/, its binary in the same build folder)
# for trying other commands on it.
set -u
cd "$(dirname "$0")/.."

kind=${1:-}
[ "$kind" = cpu ] || [ "$kind" = gpu ] || { echo "usage: bash workshop/run.sh cpu|gpu [EXERCISE.patch ...]" >&2; exit 2; }
shift
MAKE=${MAKE:-make}
jobs=${WS_JOBS:-2}

field() { sed -n "s/^$2:[[:space:]]*//p" "$1" | head -n 1; }

# Exercises named on the command line must exist and be of this kind: a misspelt name used to be
# skipped in silence ("0 of 0 exercises", exit 0).
for ex in "$@"; do
    [ -f "$ex" ] || { echo "workshop: no exercise '$ex' (see: ls workshop/*.patch)" >&2; exit 2; }
    needs=$(field "$ex" Stage | sed -n 's/.*(\(.*\)).*/\1/p')
    if [ "$needs" != cpu ] && [ "$needs" != gpu ]; then
        echo "workshop: '$ex' is not an exercise: it has no 'Stage: NN (cpu)' or 'Stage: NN (gpu)' line" >&2; exit 2
    fi
    [ "$needs" = "$kind" ] || { echo "workshop: '$ex' is a $needs exercise: bash workshop/run.sh $needs $ex" >&2; exit 2; }
done
if [ "$kind" = cpu ]; then build=${WS_NOCUDA_BUILD:-build/nocuda}; mkargs="NO_CUDA=1 BUILD=$build"
else build=${WS_CUDA_BUILD:-build}; mkargs="BUILD=$build ${WS_MAKEFLAGS:-}"; fi
attn=$build/attn
[ -x "$attn" ] || { echo "workshop: $attn is missing: build it first (make workshop-check does)" >&2; exit 2; }

# The pristine tree: tracked and untracked-but-not-ignored files, mtimes kept. git lists them only when
# this folder is its work tree's top: inside another repository's work tree (a tarball unpacked in a
# folder that repository ignores) git answered for that repository, listed nothing of the project, and
# every exercise said NOT CAUGHT; then the whole folder is copied, as where there is no git.
copy_tree() {
    local dst=$1 top
    mkdir -p "$dst"
    top=$(git rev-parse --show-toplevel 2>/dev/null) || top=
    if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ]; then
        git ls-files -z --cached --others --exclude-standard | xargs -0 cp -p --parents -t "$dst" 2>/dev/null
    else
        tar --exclude=./build --exclude=./.git -cf - . | tar -C "$dst" -xf -
    fi
    mkdir -p "$dst/$build"
    cp -a "$build/obj" "$build/libattn.a" "$build/attn" "$dst/$build/"
}

apply_patch() { # dir patch
    if command -v patch >/dev/null 2>&1; then
        patch -d "$1" -p1 --forward --batch --silent <"$2"
    else
        (cd "$1" && GIT_CEILING_DIRECTORIES=$(cd .. && pwd) git apply -p1 <"$2") # outside any repository
    fi
}

# A line from the check's output, shortened: "max abs error 3.1e-01", "LSE max error ..."
summary() {
    local out=$1 s
    s=$(printf '%s\n' "$out" | sed -n 's/^  max abs error *- .*/no element of O finite/p; t; s/^  max abs error *\([^ ]*\).*/max abs err \1/p; s/^  LSE max error *\([^ ]*\) (err\/tol \([^)]*\)).*/LSE err \1 (err\/tol \2)/p; s/^  never written *\(.*\) (they still.*/never written: \1/p; s/^  non-finite *\(.*\) written as NaN or inf/non-finite: \1/p; s/^  \(d[QKV]\)  max abs error \([^ ]*\).*(err\/tol \([^)]*\)).*/\1 err\/tol \3/p' | paste -sd ';' -)
    [ -n "$s" ] || s=$(printf '%s\n' "$out" | tail -n 1)
    printf '%s' "$s" | sed 's/;/; /g'
}

mapfile -t list < <(if [ $# -gt 0 ]; then printf '%s\n' "$@"; else ls workshop/*.patch; fi)
caught=0 missed=0 skipped=0 ran=0
for ex in "${list[@]}"; do
    needs=$(field "$ex" Stage | sed -n 's/.*(\(.*\)).*/\1/p')
    [ "$needs" = "$kind" ] || continue
    name=$(field "$ex" Exercise); stage=$(field "$ex" Stage | cut -d' ' -f1)
    check=$(field "$ex" Check); expect=$(field "$ex" Expect)
    # --list ends with one line per stage that cannot run here, saying why
    why=$("$attn" --list 2>/dev/null | grep -m1 "^  stage $stage " | sed 's/^  //')
    if [ "$kind" = gpu ] && [ -n "$why" ]; then
        printf '%-32s skipped: no GPU (%s)\n' "$name" "$why"
        skipped=$((skipped + 1))
        continue
    fi
    ran=$((ran + 1))
    scratch=build/workshop/$name
    rm -rf "$scratch"
    copy_tree "$scratch"
    if ! apply_patch "$scratch" "$ex"; then
        printf '%-32s NOT CAUGHT: the patch no longer applies (the code moved; update %s)\n' "$name" "$ex"
        missed=$((missed + 1)); continue
    fi
    if ! (cd "$scratch" && $MAKE --no-print-directory -s -j"$jobs" $mkargs "$attn" >build.log 2>&1); then
        printf '%-32s NOT CAUGHT: the broken tree does not build (see %s/build.log)\n' "$name" "$scratch"
        missed=$((missed + 1)); continue
    fi
    # shellcheck disable=SC2086
    good=$("$attn" $check 2>&1); good_rc=$?
    # shellcheck disable=SC2086
    bad=$("$scratch/$attn" $check 2>&1); bad_rc=$?
    if [ $good_rc -ne 0 ] || ! printf '%s\n' "$good" | grep -qx PASS; then
        printf '%-32s NOT CAUGHT: the pristine build does not PASS this check (exit %d): %s\n' "$name" \
            $good_rc "$(summary "$good")"
        missed=$((missed + 1)); continue
    fi
    if [ "$expect" = PASS ]; then
        ok=$([ $bad_rc -eq 0 ] && printf '%s\n' "$bad" | grep -qx PASS && echo 1)
    else
        ok=$([ $bad_rc -eq 1 ] && printf '%s\n' "$bad" | grep -qx FAIL && echo 1)
    fi
    if [ -n "$ok" ]; then
        printf '%-32s %s as expected (%s): %s\n' "$name" "$expect" "$stage" "$(summary "$bad")"
        caught=$((caught + 1))
        [ -n "${WS_KEEP:-}" ] || rm -rf "$scratch"
    else
        printf '%-32s NOT CAUGHT: want %s, got exit %d: %s (kept in %s)\n' "$name" "$expect" $bad_rc \
            "$(summary "$bad")" "$scratch"
        missed=$((missed + 1))
    fi
done
echo "workshop ($kind): $caught of $ran exercises behaved as expected, $missed did not, $skipped skipped"
[ $missed -eq 0 ]
