#!/usr/bin/env bash
# tests/docs_check.sh: the body of `make docs-check` (tests/reliability.mk). The documentation must
# not lie about commands and links: a workshop reader copies them as they stand.
#
#   bash tests/docs_check.sh     (ATTN=build/attn BENCH_BIN=build/attn-bench, as make passes them;
#                                 without ATTN it builds them first with make -s)
#
# What it reads: every tracked *.md file (git ls-files), and the header comment (the first /* */
# block, or the first run of // lines) of every tracked *.c, *.h, *.cu and *.cuh file. In Markdown,
# "commands" are the lines of fenced code blocks (``` or ~~~; a line ending in \ joins the next) and
# inline `code spans` (a span may run over lines of one paragraph); in a header comment, the spans
# and the lines that read as commands: indented by two spaces or more past the " * ", or after a
# label such as "Run:", "Run it:" or "Build:". A command line is cut at &&, ||, ;, | and a # comment;
# each piece is read with the shell's quotes (no expansion). `make` or `build/attn` alone in running
# text names the tool, not a command: not checked. A span right after "commit HASH:" quotes a
# command as it was at that commit (06_fa2_full/README.md: `make fa2-road` at 5fa66aa): skipped.
# What it checks:
#
#   1. Links [text](path) and [text](path#anchor), and images, outside code: the path exists,
#      relative to the file's folder (/path: to the repository root), and git tracks it (or, for a
#      folder, something in it), so that a fresh clone has it too. http(s):, mailto: and other
#      schemes are not followed. An anchor into a .md file (or #anchor alone: the same file) must be
#      a heading's GitHub anchor: the heading as rendered (links and `code` marks dropped), lower
#      case, spaces to '-', every character other than a-z 0-9 - _ dropped (non-ASCII ones too:
#      GitHub keeps non-ASCII letters, and these headings have none), a repeated heading -1, -2;
#      <a name=..> and id=".." count as well. Anchors into other files are not checked.
#   2. `make ...`: each target named (and the default goal where none is) exists, with the
#      VAR=value words kept (and env words before make). Options (-s, -j16, -k ...) are dropped;
#      make -C / -f (another makefile), an ALL-CAPS word or a <placeholder> as target, or shell
#      expansion ($, backquotes) make the mention skipped; a word "..." ("and more") is dropped.
#      Each target is looked up in make's database (make -pq FORCE, which runs nothing); where no
#      recipe reached from it runs make or is a '+' line, `make -n` must also exit 0. A dry run
#      still executes exactly those lines (make's rule for recursion): `make -n check` would build
#      and run the workshop exercises, so for such targets the database alone is the check.
#   3. build/attn ... : run with the real binary ($ATTN, from the repository root), under a time
#      limit (DOCS_CHECK_TIMEOUT, default 20 s), nothing shrunk; identical commands run once. Exit 0
#      or 1 is fine (1: a FAIL, or a GPU stage on a machine without a GPU: flags, head dim and dtype
#      are checked before that); 2 (bad input or usage) is a documentation error, except a --gpus
#      above this machine's GPUs (stage 10: "this machine has N GPUs"), which is a skip, as a
#      timeout is; any other status (a crash) is a problem. Skipped too: --save (writes files),
#      --load of a folder not in the tree, input redirections, shell expansion,
#      placeholders (an ALL-CAPS word such as ID, N or DIR, or <...>). Output redirections are
#      dropped (the output is captured here). In running text a span without --stage (nor --list,
#      --list-ids, --list-dims, --source, --help), or ending in "...", shows flags, not a whole
#      command: it is completed with --stage 01 and, for each of --batch 1 --heads 1 --seq 64 --dim 64
#      it lacks, that flag, so that its flags are parsed. In a code block every command must stand alone.
#   4. build/attn-bench ... (and `attn-bench ...` in running text): run as in 3. with --cpu-only
#      appended (no GPU stage runs, wherever this runs) and --csv pointing into a temporary folder
#      (a --csv the line gives is replaced: its path is not checked), so that nothing in the tree
#      is written. A CPU sweep that outlasts the limit (attn-bench --warmup-ms 100 on 2 cores) is
#      a skip, as in 3.
#
#   5. References that go stale when the code moves (tests/docs_refs.sh, which says how): every
#      `file:line` in the Markdown must name what it cites, and the name must stand in those lines;
#      every workshop/*.patch must apply exactly where its hunks say, without offset or fuzz.
#   6. Figures that go stale when the next run comes (tests/docs_figures.sh, which says how): every
#      block a bench script generated is what it makes of its CSV today, and every figure from a run
#      typed in prose (outside history/) cites its run log entry and commit, and stands in that entry.
#
# Not checked: other programs and scripts (bash ..., python3 ..., bench/peers.py), anchors into
# non-Markdown files, the values of flags beyond what the binaries check, whether a GPU stage runs
# (on a machine without a GPU it stops at "no usable GPU"), and what a command prints.
#
# Output: one line per problem, FILE:LINE: what; then
#   docs-check: N links, M make targets, K commands, R line references, W patches, B blocks quoting runs
#   checked; P problems (S skipped)
# DOCS_CHECK_VERBOSE=1 also prints each skip, with its reason. Exit 1 if there is any problem, 0
# otherwise, 2 when the check itself cannot run.
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root" || exit 2

die() {
    echo "error: $*" >&2
    exit 2
}

# The makes this script runs are its own, not part of a caller's (make docs-check): no jobserver,
# no -s / -n / -k inherited.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES
MAKE_CMD=${MAKE_CMD:-make}
TIMEOUT_S=${DOCS_CHECK_TIMEOUT:-20}
verbose=${DOCS_CHECK_VERBOSE:-0}

command -v git >/dev/null 2>&1 || die "git not found"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || die "$root is not a git work tree"
command -v timeout >/dev/null 2>&1 || die "timeout (coreutils) not found"

if [ -z "${ATTN:-}" ]; then
    ATTN=build/attn
    BENCH_BIN=${BENCH_BIN:-build/attn-bench}
    "$MAKE_CMD" -s --no-print-directory "$ATTN" "$BENCH_BIN" >&2 ||
        die "make $ATTN $BENCH_BIN failed (on a machine without nvcc: make docs-check)"
fi
BENCH_BIN=${BENCH_BIN:-build/attn-bench}
[ -x "$ATTN" ] || die "$ATTN not found or not executable (run make first)"
[ -x "$BENCH_BIN" ] || die "$BENCH_BIN not found or not executable (make $BENCH_BIN)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/docs_check.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT

n_links=0 n_make=0 n_cmds=0 n_problems=0 n_skipped=0

problem() {
    echo "$1:$2: $3"
    n_problems=$((n_problems + 1))
}
skipped() {
    [ "$verbose" = 1 ] && echo "skipped: $1:$2: $3"
    n_skipped=$((n_skipped + 1))
}

git ls-files '*.md' >"$tmp/md" || die "git ls-files failed"
git ls-files '*.c' '*.h' '*.cu' '*.cuh' >"$tmp/src"
git ls-files >"$tmp/tracked"
[ -s "$tmp/md" ] || die "no tracked *.md file"

# ------------------------------------------------------------------------------------------------
# Extraction: one record per line, tab-separated:
#   L FILE LINE TARGET    a link's target
#   A FILE - ANCHOR       an anchor the .md file defines
#   C FILE LINE TEXT      a command line: a code block's line, or a header comment's command line
#   S FILE LINE TEXT      an inline code span
# (slug(), a heading's anchor, is tests/md_slug.awk's: tests/docs_figures.sh finds history entries by it)
# shellcheck disable=SC2016
extract_awk='
function reset_para() { spn = 0; sbuf = ""; pprev = "" }
function emit(kind, ln, text) { gsub(/\t/, " ", text); printf "%s\t%s\t%d\t%s\n", kind, FILENAME, ln, text }
function anchor(text,    s) {
    s = slug(text)
    if (s in seen) { seen[s]++; s = s "-" (seen[s] - 1) } else seen[s] = 1
    emit("A", 0, s)
}
# Code spans out of a line of running text (a span may go on over the next lines); returns the line
# with each span replaced by a placeholder, for the link scan.
function spans(line,    i, c, n, L, out) {
    out = ""; L = length(line); i = 1
    while (i <= L) {
        c = substr(line, i, 1)
        if (c == "\\" && spn == 0) { out = out substr(line, i, 2); i += 2; continue }
        if (c == "`") {
            n = 0; while (substr(line, i + n, 1) == "`") n++
            if (spn == 0) { spn = n; sbuf = ""; sline = FNR; shist = ((pprev " " out) ~ /commit [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]+: *$/) }
            else if (n == spn) { s = sbuf; sub(/^ /, "", s); sub(/ $/, "", s); emit(shist ? "Q" : "S", sline, s); spn = 0; out = out "CODE" }
            else sbuf = sbuf substr(line, i, n)
            i += n; continue
        }
        if (spn) sbuf = sbuf c; else out = out c
        i++
    }
    if (spn) sbuf = sbuf " "
    pprev = out
    return out
}
function links(s,    p, rest, t, depth, i, c) {
    while ((p = index(s, "](")) > 0) {
        rest = substr(s, p + 2); t = ""
        if (substr(rest, 1, 1) == "<") {
            i = index(rest, ">"); if (i == 0) { s = rest; continue }
            t = substr(rest, 2, i - 2); rest = substr(rest, i + 1)
        } else {
            depth = 0
            for (i = 1; i <= length(rest); i++) {
                c = substr(rest, i, 1)
                if (c == "(") depth++
                else if (c == ")") { if (depth == 0) break; depth-- }
                else if (c == " " || c == "\t") break
                t = t c
            }
            rest = substr(rest, i)
        }
        if (t != "") emit("L", FNR, t)
        s = rest
    }
}
function html_anchors(line,    s, a) {
    s = line
    while (match(s, /(name|id)="[^"]+"/)) {
        a = substr(s, RSTART, RLENGTH); sub(/^[a-z]+="/, "", a); sub(/"$/, "", a)
        emit("A", 0, a); s = substr(s, RSTART + RLENGTH)
    }
}
function prose(line) { html_anchors(line); links(spans(line)) }
FNR == 1 {
    md = (FILENAME ~ /\.md$/); fence = ""; cont = ""; prev = ""; reset_para(); split("", seen)
    hdr = 0; hdrdone = 0
}
md {
    line = $0
    if (fence != "") {
        t = line; sub(/^[ \t]+/, "", t)
        if (index(t, fence) == 1 && t ~ /^(`+|~+)[ \t]*$/) { fence = ""; cont = ""; next }
        if (cont != "") { line = cont " " line; ln = cln } else ln = FNR
        if (line ~ /\\$/) { sub(/\\$/, "", line); cont = line; cln = ln; next }
        cont = ""
        emit("C", ln, line); next
    }
    if (match(line, /^[ \t]*(```+|~~~+)/)) {
        fence = substr(line, RSTART, RLENGTH); sub(/^[ \t]+/, "", fence); reset_para(); prev = ""; next
    }
    if (line ~ /^[ \t]*$/) { reset_para(); prev = ""; next }
    if (match(line, /^ ? ? ?#+([ \t]|$)/) && RLENGTH <= 8) {
        h = line; sub(/^ *#+[ \t]*/, "", h); sub(/[ \t]+#+[ \t]*$/, "", h); anchor(h)
        reset_para(); prose(line); reset_para(); prev = ""; next
    }
    if (prev != "" && line ~ /^ ? ? ?(=+|-+)[ \t]*$/ && prev !~ /^[ \t]*([-*+]|[0-9]+\.)[ \t]/ && prev !~ /\|/) {
        anchor(prev); prev = ""; reset_para(); next
    }
    prose(line); prev = line; next
}
# A header comment of C / CUDA source: the first /* */ block, or the first run of // lines.
{
    if (hdrdone) next
    line = $0
    if (hdr == 0) {
        if (line ~ /^[ \t]*$/) next
        if (line ~ /^[ \t]*\/\*/) hdr = 1
        else if (line ~ /^[ \t]*\/\//) hdr = 2
        else { hdrdone = 1; next }
    }
    if (hdr == 2 && line !~ /^[ \t]*\/\//) { hdrdone = 1; next }
    last = (hdr == 1 && line ~ /\*\//)
    sub(/\*\/.*$/, "", line)
    if (hdr == 1) { sub(/^[ \t]*\/\*+/, "", line); sub(/^[ \t]*\*/, "", line) } else sub(/^[ \t]*\/\/+/, "", line)
    sub(/^ /, "", line)
    if (line ~ /^[ \t]*$/) reset_para()
    else {
        c = line
        if (sub(/^[A-Z][a-z]*( [a-z]+)?:[ \t]+/, "", c) || sub(/^[ \t][ \t]+/, "", c))
            if (c ~ /^(\.\/)?(make|build\/attn(-bench)?)([ \t]|$)/) emit("C", FNR, c)
        prose(line)
    }
    if (last) hdrdone = 1
}
'
mapfile -t files < <(cat "$tmp/md" "$tmp/src")
printf '%s\n' "$extract_awk" >"$tmp/extract.awk"
awk -f "$here/md_slug.awk" -f "$tmp/extract.awk" "${files[@]}" >"$tmp/items" || die "awk failed reading the files"
awk -F '\t' '$1 == "A" { print $2 "\t" $4 }' "$tmp/items" >"$tmp/anchors"

# ------------------------------------------------------------------------------------------------
# Commands: C and S records cut into pieces and words. One record per piece that runs make, attn
# or attn-bench:  KIND FILE LINE SRC FLAGS WORDS  (SRC: C or S; FLAGS: e (shell expansion),
# i (input redirection), o (output redirection dropped); WORDS joined by \037, env words first).
# shellcheck disable=SC2016
words_awk='
function flush(    j, k, w, out, kind, first) {
    if (nw == 0) { reset(); return }
    k = 1
    if (W[1] == "$" ) k = 2
    first = k
    while (k <= nw && W[k] ~ /^[A-Za-z_][A-Za-z0-9_]*=/) k++
    kind = ""
    if (k <= nw) {
        if (W[k] == "make") kind = "make"
        else if (W[k] ~ /^(\.\/)?build\/attn$/) kind = "attn"
        else if (W[k] ~ /^(\.\/)?build\/attn-bench$/ || (src != "C" && W[k] == "attn-bench")) kind = "bench"
    }
    if (kind != "") {
        # env words, then the program, then its arguments: the program word is marked by \036
        out = ""
        for (j = first; j < k; j++) out = out W[j] "\037"
        out = out "\036"
        for (j = k + 1; j <= nw; j++) out = out "\037" W[j]
        printf "%s\t%s\t%s\t%s\t%s\t%s\n", kind, file, ln, src, fl "-", out
    }
    reset()
}
function reset() { nw = 0; split("", W); fl = ""; word = ""; inword = 0; dropnext = 0 }
function endword() {
    if (!inword) return
    if (dropnext) { dropnext = 0 }
    else W[++nw] = word
    word = ""; inword = 0
}
BEGIN { FS = "\t" }
$1 == "C" || $1 == "S" || $1 == "Q" {
    src = $1; file = $2; ln = $3; s = $4; reset()
    L = length(s); i = 1; q = ""
    while (i <= L) {
        c = substr(s, i, 1)
        if (q == "\047") { if (c == "\047") q = ""; else word = word c; i++; continue }
        if (q == "\"") {
            if (c == "\"") q = ""
            else { if (c == "$" || c == "`") fl = fl "e"; word = word c }
            i++; continue
        }
        if (c == "\047" || c == "\"") { q = c; inword = 1; i++; continue }
        if (c == "\\") { word = word substr(s, i + 1, 1); inword = 1; i += 2; continue }
        if (c == " " || c == "\t") { endword(); i++; continue }
        if (c == "#" && !inword) break
        if (c == "&" && substr(s, i + 1, 1) == "&") { endword(); flush(); i += 2; continue }
        if (c == "|" || c == ";" || c == "&") { endword(); flush(); i += (substr(s, i + 1, 1) == "|") ? 2 : 1; continue }
        if (c == "<" && !inword && match(substr(s, i), /^<[A-Za-z][^ <>]*>/)) {
            word = substr(s, i, RLENGTH); inword = 1; i += RLENGTH; continue
        }
        if (c == "<" || c == ">") {
            # a redirection: [n]>file, [n]>>file, [n]>&m, <file; an "n" already read belongs to it
            if (inword && word !~ /^[0-9]+$/) endword()
            word = ""; inword = 0
            if (c == "<") fl = fl "i"; else fl = fl "o"
            rest = substr(s, i); match(rest, /^(<|>>?)(&[0-9-]*)?/); i += RLENGTH
            if (substr(rest, RLENGTH, 1) != "&" && substr(rest, RLENGTH, 1) !~ /[0-9-]/) {
                while (substr(s, i, 1) == " ") i++
                dropnext = 1
            }
            continue
        }
        if (c == "$" || c == "`" || c == "*" || c == "?") fl = fl "e"
        word = word c; inword = 1; i++
    }
    endword(); flush()
}
'
awk "$words_awk" "$tmp/items" >"$tmp/cmds" || die "awk failed splitting the commands"

# ------------------------------------------------------------------------------------------------
# 1. Links.
is_tracked() { # path relative to the root: a tracked file, or a folder holding one
    local p=${1%/}
    [ -z "$p" ] || [ "$p" = . ] && return 0
    grep -qxF -- "$p" "$tmp/tracked" && return 0
    grep -q -- "^$(printf '%s' "$p" | sed 's/[][\.*^$]/\\&/g')/" "$tmp/tracked"
}
# path as written, relative to the file's folder -> relative to the root, normalised
norm_path() {
    local base=$1 p=$2 out="" part
    case $p in /*) p=${p#/} ;; *) [ "$base" = . ] || p="$base/$p" ;; esac
    local IFS=/
    for part in $p; do
        case $part in
        '' | .) ;;
        ..) if [ -z "$out" ] || [ "${out##*/}" = .. ]; then out="${out:+$out/}.."; else
            case $out in */*) out=${out%/*} ;; *) out="" ;; esac
        fi ;;
        *) out="${out:+$out/}$part" ;;
        esac
    done
    printf '%s\n' "${out:-.}"
}
while IFS=$'\t' read -r kind file ln target; do
    [ "$kind" = L ] || continue
    case $target in
    [A-Za-z]*:*) case ${target%%:*} in *[!A-Za-z0-9+.-]*) ;; *) continue ;; esac ;;
    esac
    n_links=$((n_links + 1))
    path=${target%%#*}
    anchor=""
    case $target in *'#'*) anchor=${target#*#} ;; esac
    path=${path//%20/ }
    if [ -z "$path" ]; then
        rel=$file
    else
        rel=$(norm_path "$(dirname "$file")" "$path")
        case $rel in ..*) problem "$file" "$ln" "link '$target' leaves the repository"; continue ;; esac
        if [ ! -e "$rel" ]; then
            problem "$file" "$ln" "link '$target': no such file or folder ($rel)"
            continue
        fi
        if ! is_tracked "$rel"; then
            problem "$file" "$ln" "link '$target': $rel exists here but git does not track it"
            continue
        fi
    fi
    if [ -n "$anchor" ]; then
        case $rel in
        *.md)
            if ! grep -qxF -- "$rel"$'\t'"$anchor" "$tmp/anchors"; then
                problem "$file" "$ln" "link '$target': $rel has no heading with the anchor #$anchor"
            fi
            ;;
        *) skipped "$file" "$ln" "anchor of '$target' (not a .md file)" ;;
        esac
    fi
done <"$tmp/items"

# ------------------------------------------------------------------------------------------------
# 2. make targets. make's database, once per set of VAR=value words: "T target" (explicit),
# "R target" (a recipe reached from it runs make or is a + line), "P pattern" (a pattern rule whose
# recipe does), "G goal" (the default goal).
# shellcheck disable=SC2016
db_awk='
/^# Files/ { files = 1; impl = 0; next }
/^# Implicit Rules/ { impl = 1; next }
/^# (Files|Variables|Directories|Pattern-specific|VPATH|Finished)/ { impl = 0 }
/^\.DEFAULT_GOAL :?= / { goal = $3 }
/^# Not a target:/ { skipnext = 1; next }
/^[^#\t \.%][^=]*:/ || /^[^#\t ]*%[^=]*:/ {
    if (skipnext) { skipnext = 0; cur = ""; next }
    if ($0 ~ /^[^:]*:[:]?=/) { cur = ""; next }
    t = $0; sub(/:.*$/, "", t); deps = $0; sub(/^[^:]*::?/, "", deps); sub(/\|/, " ", deps)
    cur = t
    if (impl) { pat[t] = 1; next }
    if (!files) { cur = ""; next }
    known[t] = 1; dep[t] = deps; next
}
/^\t/ { if (cur != "" && ($0 ~ /^\t[-@ ]*\+/ || $0 ~ /\$[({]MAKE[)}]/)) rec[cur] = 1; next }
/^$/ { cur = ""; skipnext = 0 }
function walk(t,    n, i, d) {
    if (t in state) return state[t]
    state[t] = 0
    if (t in rec) { state[t] = 1; return 1 }
    n = split(dep[t], d, " ")
    for (i = 1; i <= n; i++) if (walk(d[i])) { state[t] = 1; return 1 }
    return 0
}
END {
    for (t in known) { print "T " t; if (walk(t)) print "R " t }
    for (p in pat) if (p in rec) print "P " p
    print "G " goal
}
'
db_for() { # VAR=value words -> file of the database summary
    local key f
    key=$(printf '%s\037' "$@" | cksum | cut -d' ' -f1)
    f="$tmp/db.$key"
    if [ ! -f "$f" ]; then
        "$MAKE_CMD" -pq --no-print-directory "$@" FORCE </dev/null 2>/dev/null | awk "$db_awk" >"$f"
        # no target read: the dry runs below could not tell a recursive recipe; stop rather than guess
        grep -q '^T ' "$f" || die "make -pq${*:+ $*} FORCE: no targets in make's database"
    fi
    printf '%s\n' "$f"
}
declare -A make_seen=()
check_make() { # file line src flags env... \036 args...
    local file=$1 ln=$2 src=$3 flags=$4
    shift 4
    local -a env=() vars=() targets=()
    while [ $# -gt 0 ] && [ "$1" != $'\036' ]; do env+=("$1"); shift; done
    shift
    [ "$src" != C ] && [ $# -eq 0 ] && [ ${#env[@]} -eq 0 ] && return # `make` in running text: the tool
    [ "$src" = Q ] && { skipped "$file" "$ln" "make $*: quoted as it was at an earlier commit"; return; }
    local w skip=""
    case $flags in *e*) skip="shell expansion" ;; esac
    while [ $# -gt 0 ]; do
        w=$1; shift
        case $w in
        -C | -f | -C?* | -f?* | --file=* | --makefile=* | --directory=*) skip="make $w: another makefile or folder" ;;
        -j | -l) case ${1:-} in [0-9]*) shift ;; esac ;;
        -o | -W | -I) shift ;;
        -*) ;;
        ... | .. | …) ;;
        *=*) vars+=("$w") ;;
        *'<'*'>'* | [A-Z] | [A-Z][A-Z0-9_]*) case $w in *[!A-Z0-9_]*[a-z]* | *[a-z]*) targets+=("$w") ;; *) skip="placeholder '$w'" ;; esac ;;
        *) targets+=("$w") ;;
        esac
    done
    if [ -n "$skip" ]; then
        skipped "$file" "$ln" "make: $skip"
        return
    fi
    local db
    db=$(db_for "${vars[@]+"${vars[@]}"}")
    if [ ${#targets[@]} -eq 0 ]; then
        targets=("$(sed -n 's/^G //p' "$db")")
        [ -n "${targets[0]}" ] || targets=(all)
    fi
    local t key out rc why p
    for t in "${targets[@]}"; do
        n_make=$((n_make + 1))
        key="${env[*]+${env[*]}}|${vars[*]+${vars[*]}}|$t"
        if [ -z "${make_seen[$key]+x}" ]; then
            why=""
            local recursive=0
            if grep -qxF "R $t" "$db"; then recursive=1; fi
            while read -r p; do
                # shellcheck disable=SC2053
                [[ $t == ${p//%/*} ]] && recursive=1
            done < <(sed -n 's/^P //p' "$db")
            if [ $recursive = 1 ]; then
                grep -qxF "T $t" "$db" || why="no target '$t' in make's database"
            else
                out=$(env "${env[@]+"${env[@]}"}" "$MAKE_CMD" -n --no-print-directory "${vars[@]+"${vars[@]}"}" "$t" </dev/null 2>&1 >/dev/null)
                rc=$?
                if [ $rc -ne 0 ]; then
                    why=$(printf '%s\n' "$out" | grep -m1 -E '\*\*\*|rror' || printf '%s\n' "$out" | tail -n 1)
                    why="make -n${vars[*]+ ${vars[*]}} $t exits $rc: ${why:-no message}"
                fi
            fi
            make_seen[$key]=$why
        fi
        [ -z "${make_seen[$key]}" ] || problem "$file" "$ln" "${make_seen[$key]}"
    done
}

# ------------------------------------------------------------------------------------------------
# 3 and 4. build/attn and attn-bench.
declare -A run_seen=()
check_run() { # kind file line src flags env... \036 args...
    local kind=$1 file=$2 ln=$3 src=$4 flags=$5
    shift 5
    local -a env=() args=()
    while [ $# -gt 0 ] && [ "$1" != $'\036' ]; do env+=("$1"); shift; done
    shift
    args=("$@")
    local prog=build/attn
    [ "$kind" = bench ] && prog=attn-bench
    [ ${#args[@]} -eq 0 ] && return # the program's name, not a command
    [ "$src" = Q ] && { skipped "$file" "$ln" "$prog ${args[*]}: quoted as it was at an earlier commit"; return; }
    case $flags in
    *e*) skipped "$file" "$ln" "$prog: shell expansion"; return ;;
    *i*) skipped "$file" "$ln" "$prog: input redirection"; return ;;
    esac
    local w prev="" fragment=0 has_stage=0 has_action=0 i
    local -a keep=()
    for w in "${args[@]}"; do
        case $w in
        ... | .. | …) fragment=1; continue ;;
        *'<'*'>'* | [A-Z] | [A-Z][A-Z0-9_]* | *=[A-Z] | *=[A-Z][A-Z0-9_]*)
            case $w in *[a-z]*) ;; *) skipped "$file" "$ln" "$prog: placeholder '$w'"; return ;; esac ;;
        --save | --save=*) [ "$kind" = attn ] && { skipped "$file" "$ln" "$prog: --save writes files"; return; } ;;
        --stage | --stage=*) has_stage=1 ;;
        --list | --list-ids | --list-dims | --source | --help | -h) has_action=1 ;;
        esac
        if [ "$prev" = --load ] && [ ! -d "$w" ]; then
            skipped "$file" "$ln" "$prog: --load $w: no such folder in the tree"
            return
        fi
        prev=$w
        keep+=("$w")
    done
    local -a cmd=()
    if [ "$kind" = attn ]; then
        if [ "$src" != C ] && { [ $fragment = 1 ] || { [ $has_stage = 0 ] && [ $has_action = 0 ]; }; }; then
            [ $has_stage = 1 ] || keep+=(--stage 01)
            local f v
            for f in --batch:1 --heads:1 --seq:64 --dim:64; do
                v=${f#*:} f=${f%%:*}
                case " ${keep[*]} " in *" $f "* | *" $f="*) ;; *)
                    case " ${keep[*]} " in *" --load "*) ;; *) keep+=("$f" "$v") ;; esac ;;
                esac
            done
        fi
        cmd=("$ATTN" "${keep[@]}")
    else
        local -a b=()
        i=0
        while [ $i -lt ${#keep[@]} ]; do
            case ${keep[$i]} in
            --csv) i=$((i + 2)); continue ;;
            --csv=*) i=$((i + 1)); continue ;;
            esac
            b+=("${keep[$i]}")
            i=$((i + 1))
        done
        case " ${b[*]} " in *" --cpu-only "*) ;; *) b+=(--cpu-only) ;; esac
        cmd=("$BENCH_BIN" "${b[@]}" --csv "$tmp/bench.csv")
    fi
    n_cmds=$((n_cmds + 1))
    local key="${env[*]+${env[*]}}|${cmd[*]}"
    if [ -z "${run_seen[$key]+x}" ]; then
        local out rc
        out=$(env "${env[@]+"${env[@]}"}" timeout "$TIMEOUT_S" "${cmd[@]}" </dev/null 2>&1 >/dev/null)
        rc=$?
        rm -f "$tmp/bench.csv"
        case $rc in
        0 | 1) run_seen[$key]="" ;;
        124) run_seen[$key]="skip:timed out after ${TIMEOUT_S} s" ;;
        2)
            out=$(printf '%s\n' "$out" | grep -v '^$' | head -n 1)
            # --gpus above this machine's count: stage 10 refuses it as bad input, but the docs are
            # right for the machines they name (2-GPU hosts)
            case $out in
            *'but this machine has '[0-9]*' GPU'*) run_seen[$key]="skip:${out#attn: }" ;;
            *) run_seen[$key]="exit status 2 (bad input): $out" ;;
            esac
            ;;
        *) run_seen[$key]="exit status $rc: $(printf '%s\n' "$out" | grep -v '^$' | tail -n 1)" ;;
        esac
    fi
    local res=${run_seen[$key]}
    case $res in
    '') ;;
    skip:*) n_cmds=$((n_cmds - 1)); skipped "$file" "$ln" "$prog ${args[*]}: ${res#skip:}" ;;
    *) problem "$file" "$ln" "${env[*]+${env[*]} }$prog ${args[*]}: $res" ;;
    esac
}

while IFS=$'\t' read -r kind file ln src flags words; do
    IFS=$'\037' read -r -a w <<<"$words"
    case $kind in
    make) check_make "$file" "$ln" "$src" "$flags" "${w[@]}" ;;
    attn | bench) check_run "$kind" "$file" "$ln" "$src" "$flags" "${w[@]}" ;;
    esac
done <"$tmp/cmds"

# ------------------------------------------------------------------------------------------------
# 5. file:line references and the workshop patches.
refs_out=$(bash "$here/docs_refs.sh" "$root")
[ $? -le 1 ] || die "tests/docs_refs.sh could not run"
printf '%s\n' "$refs_out" | grep -v '^docs-refs: '
refs_last=$(printf '%s\n' "$refs_out" | tail -n 1)
n_refs=$(printf '%s\n' "$refs_last" | sed -n 's/^docs-refs: \([0-9]*\) line references.*/\1/p')
n_patches=$(printf '%s\n' "$refs_last" | sed -n 's/.*, \([0-9]*\) patches checked.*/\1/p')
n_problems=$((n_problems + $(printf '%s\n' "$refs_last" | sed -n 's/.*; \([0-9]*\) problems$/\1/p')))

# ------------------------------------------------------------------------------------------------
# 6. Figures from runs (tests/docs_figures.sh, which says how): generated blocks match their CSV, and
#    every run figure typed in prose cites its history entry and commit.
figs_out=$(bash "$here/docs_figures.sh" "$root")
[ $? -le 1 ] || die "tests/docs_figures.sh could not run"
printf '%s\n' "$figs_out" | grep -v '^docs-figures: '
figs_last=$(printf '%s\n' "$figs_out" | tail -n 1)
n_figblocks=$(printf '%s\n' "$figs_last" | sed -n 's/.*generated blocks, \([0-9]*\) blocks quoting runs.*/\1/p')
n_problems=$((n_problems + $(printf '%s\n' "$figs_last" | sed -n 's/.*; \([0-9]*\) problems$/\1/p')))

echo "docs-check: $n_links links, $n_make make targets, $n_cmds commands, ${n_refs:-0} line references, ${n_patches:-0} patches, ${n_figblocks:-0} blocks quoting runs checked; $n_problems problems ($n_skipped skipped)"
[ "$n_problems" -eq 0 ]
