#!/usr/bin/env bash
# workshop/refresh.sh: rewrites exercises whose code moved, so that each applies exactly where it says.
#
#   bash workshop/refresh.sh workshop/04m-no-alpha.patch ...    (no argument: every workshop/*.patch)
#
# A patch that still applies, but at other lines (an "offset") or with fuzz, is applied to a copy of
# the files it touches, and its diff is made again from that copy (diff -u, 3 lines of context), below
# its unchanged header (Exercise, Stage, Breaks, Check, Expect). The change itself stays what it was;
# only its line numbers and context follow the code. make docs-check fails on a patch that needs this
# (tests/docs_refs.sh). A patch that no longer applies at all is reported and left alone: its change
# must be made again by hand. Exit 1 if any was left so.
set -u
cd "$(dirname "$0")/.."
mapfile -t list < <(if [ $# -gt 0 ]; then printf '%s\n' "$@"; else ls workshop/*.patch; fi)
status=0
for ex in "${list[@]}"; do
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/ws-refresh.XXXXXX")
    files=$(sed -n 's|^+++ b/\([^[:space:]]*\).*|\1|p' "$ex")
    for f in $files; do mkdir -p "$tmp/$(dirname "$f")" && cp "$f" "$tmp/$f"; done
    if ! out=$(patch -d "$tmp" -p1 --batch --no-backup-if-mismatch <"$ex" 2>&1); then
        echo "$ex: does not apply; make its change again by hand: $out" | head -3
        status=1; rm -rf "$tmp"; continue
    fi
    case $out in
    *offset* | *fuzz*)
        { sed -n '1,/^--- a\//p' "$ex" | sed '$d'
          for f in $files; do diff -u --label "a/$f" --label "b/$f" "$f" "$tmp/$f"; done; } >"$tmp/new"
        mv "$tmp/new" "$ex" && echo "$ex: refreshed" ;;
    *) echo "$ex: applies as it is" ;;
    esac
    rm -rf "$tmp"
done
exit $status
