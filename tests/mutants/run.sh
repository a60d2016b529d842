#!/usr/bin/env bash
# tests/mutants/run.sh: the check's mutation suite (make mutants; make check runs it). Each
# tests/mutants/*.patch plants one bug in one CPU model; the check must FAIL it at every N.
#
#   bash tests/mutants/run.sh [MUTANT.patch ...]        (no names: every one)
#
# For each model the patches touch, and for each patch:
#   1. the model's source file (pristine, or a copy patched in $MUTANT_OUT/NAME/) is compiled alone,
#      with the build's flags, and linked ahead of the build's libattn.a into mutant_check (its
#      stage entry in the registry then runs this object); the forward models (03m-06m) with
#      tests/mutants/shadow/ ahead of kit/, so that --rows ends computes only the rows it checks;
#   2. mutant_check runs it at each N: the pristine model (once per set of Options its mutants take)
#      must PASS at each, else the check rejects a correct model and no mutant proves anything; each
#      mutant must FAIL at each. The pristine 06m also runs at N = 2^20 + 1, where a correct model
#      must still pass (issue 58), on rows ends:8.
# One line per run (mutant_check's), then "mutants: K of M caught at every N ...". Exit 1 when a
# mutant passed at some N, a pristine model failed, or a patch did not apply or build; 2 on usage.
#
# What it costs, on CI's 2 cores. The forward models run N = 129, 4097 and 16385. A pristine 06m at
# N = 16385, D = 64 takes about 9 s, and the check of every row 24 s more (the reference is O(N D) per
# row); 12 such runs would be 6 minutes. Rows 0..255, the 256 around N/2 and the last 256 (--rows
# ends) cost 1 s and 5 s, and hold the rows where each forward mutant's bug shows (the first key, the
# last key, row 100, every key tile). The backward model (12m) must compute every gradient (a key's
# dK sums over every row) and its check is O(N^2 D) whatever it samples: 20 s at N = 4097 and 3
# minutes at 16385 per run, so make check runs it at N = 129 and 1025, and MUTANT_N_BACKWARD="129
# 4097 16385" the rest (tests/mutants/README.md has its numbers). At N = 2^20 + 1, rows ends:8 (0..7,
# N/2 .. N/2+7 and the last 8: four of 06m's row tiles of 128, one of them a single row) cost 42 s:
# 24 s the model, 10 s the check of 24 rows, the rest making 400 MB of inputs.
#
# Environment (tests/mutants/mutants.mk sets the first three from the build): MUTANT_CC (compiler
# and flags), MUTANT_LINK (libattn.a and the libraries), MUTANT_OUT (a scratch folder), MUTANT_N
# (the forward's N, default "129 4097 16385"), MUTANT_N_BACKWARD (default "129 1025"), MUTANT_ROWS
# (ends, ends:K or all; default ends), MUTANT_N_LARGE (the larger N of the pristine models, default
# 1048577; empty: none), MUTANT_ROWS_LARGE (default ends:8), MUTANT_LARGE_STAGES (the models run
# there, default 06m), MUTANT_JOBS (parallel compiles, default 2).
set -u
cd "$(dirname "$0")/../.."

: "${MUTANT_CC:?set by make mutants}" "${MUTANT_LINK:?set by make mutants}" "${MUTANT_OUT:?set by make mutants}"
Ns=${MUTANT_N:-129 4097 16385}
Ns_backward=${MUTANT_N_BACKWARD:-129 1025}
rows=${MUTANT_ROWS:-ends}
Ns_large=${MUTANT_N_LARGE-1048577}
rows_large=${MUTANT_ROWS_LARGE:-ends:8}
large_stages=${MUTANT_LARGE_STAGES:-06m}
jobs=${MUTANT_JOBS:-2}

field() { sed -n "s/^$2:[[:space:]]*//p" "$1" | head -n 1; }
model_of() { sed -n 's|^+++ b/\([^[:space:]]*\).*|\1|p' "$1" | head -n 1; } # the file a patch changes

mapfile -t list < <(if [ $# -gt 0 ]; then printf '%s\n' "$@"; else ls tests/mutants/*.patch; fi)
for p in "${list[@]}"; do
    [ -f "$p" ] && [ -n "$(field "$p" Mutant)" ] && [ -n "$(model_of "$p")" ] ||
        { echo "mutants: '$p' is not a mutant (a Mutant: line and a patch of one file)" >&2; exit 2; }
done
rm -rf "$MUTANT_OUT" && mkdir -p "$MUTANT_OUT" || exit 2
# shellcheck disable=SC2086
$MUTANT_CC -c tests/mutants/mutant_check.c -o "$MUTANT_OUT/mutant_check.o" || exit 2

# build NAME SOURCE ORIGINAL: $MUTANT_OUT/NAME/mutant_check from SOURCE (a copy of ORIGINAL or itself)
build() {
    local dir=$MUTANT_OUT/$1 shadow=
    case $3 in 0[3-6]_*) shadow="-iquote tests/mutants/shadow" ;; esac
    # shellcheck disable=SC2086
    $MUTANT_CC $shadow -iquote "$(dirname "$3")" -c "$2" -o "$dir/model.o" >"$dir/build.log" 2>&1 &&
        $MUTANT_CC "$MUTANT_OUT/mutant_check.o" "$dir/model.o" $MUTANT_LINK -o "$dir/mutant_check" >>"$dir/build.log" 2>&1
}

# Every binary first, $jobs at a time: the pristine models (pristine-<stage>), then the mutants.
declare -A model_file
for p in "${list[@]}"; do model_file[$(field "$p" Stage)]=$(model_of "$p"); done
for stage in "${!model_file[@]}"; do
    mkdir -p "$MUTANT_OUT/pristine-$stage"
    build "pristine-$stage" "${model_file[$stage]}" "${model_file[$stage]}" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
for p in "${list[@]}"; do
    name=$(field "$p" Mutant) src=$(model_of "$p")
    mkdir -p "$MUTANT_OUT/$name/$(dirname "$src")" && cp "$src" "$MUTANT_OUT/$name/$src"
    if ! patch -d "$MUTANT_OUT/$name" -p1 --forward --batch --silent <"$p" >"$MUTANT_OUT/$name/build.log" 2>&1; then
        echo "mutants: $name: the patch no longer applies to $src (update $p)" >>"$MUTANT_OUT/$name/build.log"
        continue
    fi
    build "$name" "$MUTANT_OUT/$name/$src" "$src" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
wait

# run NAME STAGE OPTIONS WANT [NS ROWS]: mutant_check at every N of NS (default: those of the stage's
# pass) on ROWS (default $rows); prints its lines; returns 0 when each ended as WANT (PASS: exit 0;
# FAIL: exit 1, the check's verdict, not a crash)
run() {
    local bin=$MUTANT_OUT/$1/mutant_check ok=0 n line rc list=$Ns at=${6:-$rows}
    case ${model_file[$2]} in 1[1-9]_*) list=$Ns_backward ;; esac # stages 11 on: the backward
    list=${5:-$list}
    if [ ! -x "$bin" ]; then
        printf '%-32s NOT BUILT: %s\n' "$1" "$(tail -n 1 "$MUTANT_OUT/$1/build.log")"
        return 1
    fi
    for n in $list; do
        # shellcheck disable=SC2086
        line=$("$bin" --stage "$2" --seq "$n" --rows "$at" $3 2>&1); rc=$?
        if { [ "$4" = PASS ] && [ $rc -eq 0 ]; } || { [ "$4" = FAIL ] && [ $rc -eq 1 ]; }; then
            printf '%-32s %s\n' "$1" "$line"
        else
            printf '%-32s WANT %s, GOT (exit %d): %s\n' "$1" "$4" $rc "$line"
            ok=1
        fi
    done
    return $ok
}

bad=0 caught=0
for stage in $(printf '%s\n' "${!model_file[@]}" | sort); do
    # the pristine model once with each set of options its mutants take (--causal for 05m, ...)
    while IFS= read -r opts; do
        run "pristine-$stage" "$stage" "$opts" PASS || bad=$((bad + 1))
        case " $large_stages " in *" $stage "*)
            [ -z "$Ns_large" ] || run "pristine-$stage" "$stage" "$opts" PASS "$Ns_large" "$rows_large" || bad=$((bad + 1)) ;;
        esac
    done < <(for p in "${list[@]}"; do [ "$(field "$p" Stage)" != "$stage" ] || printf '%s\n' "$(field "$p" Options)"; done | sort -u)
    for p in "${list[@]}"; do
        [ "$(field "$p" Stage)" = "$stage" ] || continue
        if run "$(field "$p" Mutant)" "$stage" "$(field "$p" Options)" FAIL; then caught=$((caught + 1)); else bad=$((bad + 1)); fi
    done
done
msg="mutants: $caught of ${#list[@]} caught at every N (forward: $Ns; backward: $Ns_backward; rows: $rows)"
[ -z "$Ns_large" ] || msg="$msg; pristine $large_stages also at N = $Ns_large (rows $rows_large)"
[ $bad -eq 0 ] || msg="$msg; $bad did not end as they must"
echo "$msg"
[ $bad -eq 0 ]
