#!/bin/sh
# bench/report.sh: everything shown from a bench CSV: tables, README blocks, plots. POSIX sh and awk
# (bench/report.awk does the tables), gnuplot for the plots when it is there. No Python.
#
#   report.sh merge [--set COL=VALUE]... OUT CSV...
#                                the rows of several CSVs (attn-bench's, the peers') into OUT; --set
#                                fills COL (one of the run's facts: driver, sm_clock_mhz, power_limit_w,
#                                torch, cudnn, triton, fa4) in every row that left it empty
#   report.sh tables CSV [md]    the tables of every (D, causal) and each fast stage against the peers;
#                                then the backward's (rows whose pass is bwd), if the CSV has any
#   report.sh stage CSV ID       one stage's table (Markdown), as in its README (ID: 09, 13d, ...)
#   report.sh compact CSV        the top README's table: TFLOP/s at one N, speedup over naive PyTorch
#   report.sh bcompact CSV       the same for the backward, speedup over stage 11 (exit 3: no backward)
#   report.sh summary CSV        the fast stages against each other and the peers: each ratio's range
#                                over N >= 4096 (BENCH_SPLIT_N) per (D, causal), and below it the points
#                                where it is under 1
#   report.sh facts CSV          the run's facts beyond its rows (warm-up, L2, GPUs, driver, SM clock,
#                                power limit, library versions), "not recorded" where the CSV lacks one
#   report.sh plots CSV DIR      latency, speedup over naive PyTorch and over stage 02, TFLOP/s and
#                                memory against N (PNGs): one panel per (D, causal) and pass, one
#                                line per stage or peer, OOM points marked at the top of their panel
#   report.sh readme CSV         rewrites the generated blocks of README.md (compact tables),
#                                bench/README.md (every table, the plots) and NN_*/README.md (each
#                                <!-- bench:stage:ID:begin --> block there: ID's table)
#   report.sh decode CSV...      the decoding tables of attn-bench --decode's and decode_peers.py's CSVs
#                                (bench/report_decode.awk): time and K/V bandwidth per (B, N_k), the
#                                share of BENCH_PEAK_GBS (default 4300), stage 15 against the peers
# BENCH_FAST=NN: the first stage compared with the peers (default 06; later stages join it);
# BENCH_FAST_BWD=NN the same for the backward (default 13); BENCH_SPLIT_N=N the summary's split (4096).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
fast=${BENCH_FAST:-06} fastbwd=${BENCH_FAST_BWD:-13} nsplit=${BENCH_SPLIT_N:-4096}
rep() { mode=$1; shift; LC_ALL=C awk -v mode="$mode" -v fast="$fast" -v fastbwd="$fastbwd" -v nsplit="$nsplit" "$@"; }
need_csv() { [ -s "$1" ] || { echo "report: no CSV at $1" >&2; exit 1; }; }

plots() {
    csv=$1 out=$2
    need_csv "$csv"
    if ! command -v gnuplot >/dev/null 2>&1; then
        echo "plots: gnuplot not found, so no PNGs; render them elsewhere with: make plots CSV=$csv"
        return 0
    fi
    mkdir -p "$out"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/attn-plot.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT INT TERM
    rep plotdata -v dir="$tmp" -f "$here/report.awk" "$csv"
    [ -s "$tmp/meta" ] || { echo "plots: $csv has no row with status ok; nothing to plot" >&2; return 0; }
    IFS='	' read -r gpu date commit < "$tmp/meta"
    [ "$gpu" = none ] && gpu='no GPU (CPU stage only)'
    status=0
    # The forward's figures, then the backward's (NAME_backward.png: its own panels, so that neither
    # squeezes the other's); a figure has the panels of its pass with values in its column.
    # pass|name|column|ylabel|log y|title
    while IFS='|' read -r pass name col ylabel logy title; do
        awk -v c="$col" -v p="$pass" 'NR == FNR { if ($6 == p) want[$1] = 1; next } $3 == c && ($1 in want) { print $1 }' \
            "$tmp/panels" "$tmp/have" | sort -un > "$tmp/drawn"
        n=$(wc -l < "$tmp/drawn")
        if [ "$n" = 0 ]; then
            [ "$pass" = fwd ] && echo "plots: nothing to draw for $name.png (no such values in $csv), skipped"
            continue
        fi
        cols=$(( n <= 1 ? 1 : n <= 4 ? 2 : 3 )); rows=$(( (n + cols - 1) / cols ))
        gp_script "$name" "$col" "$ylabel" "$logy" "$title" > "$tmp/$name.gp"
        # gnuplot runs in $tmp and the script names its files relative to it: no path, which could hold
        # a quote or a backquote, is ever written into the script (report.awk cleans the CSV's fields)
        if (cd "$tmp" && gnuplot "$name.gp") 2> "$tmp/err" && mv -f "$tmp/$name.png" "$out/$name.png"; then
            echo "plots: $out/$name.png"
        else echo "plots: gnuplot failed on $name:" >&2; cat "$tmp/err" >&2; status=1; fi
    done <<EOF
fwd|latency|2|median time (ms)|1|Latency (median over repeats)
fwd|speedup_vs_torch|5|speedup over naive PyTorch (x)|1|Speedup over naive PyTorch (torch_naive): its time / time
fwd|speedup_vs_02|4|speedup over stage 02 (x)|1|Speedup over stage 02 (naive GPU): time of 02 / time
fwd|tflops|3|TFLOP/s|1|Throughput: 4·B·H·N²·D FLOPs (half when causal) / time
fwd|memory|6|GiB beyond Q, K, V, O, LSE|0|Peak device memory beyond the inputs and outputs
bwd|latency_backward|2|median time (ms)|1|Backward: latency (median over repeats)
bwd|tflops_backward|3|TFLOP/s|1|Backward throughput: 2.5 x 4·B·H·N²·D FLOPs (half when causal) / time
bwd|memory_backward|6|GiB beyond Q, K, V, O, LSE, dO, dQ, dK, dV|0|Backward: peak device memory beyond the inputs and gradients
EOF
    return $status
}

# One figure: a panel per (D, causal) of its pass with values in it ($tmp/drawn), a line per series
# (stages solid, peers dashed, one colour per series in every figure), an x at the top of the panel
# where a series ran out of memory.
gp_script() {
    name=$1 col=$2 ylabel=$3 logy=$4 title=$5
    echo "set terminal pngcairo noenhanced size 1400,820 font 'Sans,9' linewidth 1.2"
    echo "set output '$name.png'"
    i=0
    for c in 7f7f7f d62728 ff7f0e bcbd22 2ca02c 1f77b4 9467bd 17becf 8c564b e377c2 000000 aec7e8; do
        i=$((i + 1)); echo "set linetype $i lc rgb '#$c' pt $(( i % 2 ? 7 : 5 ))"
    done
    echo "set linetype cycle 12"
    echo "set grid xtics ytics mxtics mytics lc rgb '#dddddd'"
    echo "set key outside right top font 'Sans,8' samplen 2 spacing 0.9"
    echo "set offsets graph 0.04, graph 0.04, graph 0.08, 0"
    echo "set logscale x 2; set format x '%.0f'; set xlabel 'sequence length N'; set ylabel '$ylabel'"
    if [ "$logy" = 1 ]; then echo "set logscale y; set format y '%g'"; else echo "unset logscale y; set yrange [0:*]"; fi
    printf '%s\n' "set multiplot layout $rows,$cols title \"$title\\n$gpu · $date · commit $commit\" font 'Sans,11'"
    while read -r k D causal B H pass; do
        grep -qx "$k" "$tmp/drawn" || continue
        cw=non-causal; [ "$causal" = 1 ] && cw=causal
        echo "set title 'D = $D, $cw (B=$B, H=$H)'; unset label"
        plot="" m=0
        while read -r s kind label; do
            if grep -qx "$k $s $col" "$tmp/have"; then
                dt=1; [ "$kind" = peer ] && dt=2
                plot="$plot${plot:+, }'d_${k}_$s.dat' using 1:$col with linespoints lt $s dt $dt lw 1.5 ps 0.8 title '$label'"
            fi
            for N in $(awk -v k="$k" -v s="$s" '$1 == k && $2 == s { print $3 }' "$tmp/oom"); do
                m=$((m + 1))
                echo "set label $m 'OOM' at first $N, graph $(awk -v m=$m 'BEGIN { print 0.97 - 0.05 * ((m - 1) % 6) }') point lt $s pt 2 ps 1.4 offset 0.8,0 tc lt $s font ',7'"
            done
        done < "$tmp/series"
        [ -n "$plot" ] && echo "plot $plot" || echo "unset key; plot [1:2] [1:2] NaN notitle; set key"
    done < "$tmp/panels"
    echo "unset multiplot"
}

# replace FILE BEGIN END CONTENT: the lines strictly between the markers become CONTENT's. A marker is
# a line of its own (surrounding blanks aside): found anywhere in a line, a copy that a CSV field put
# into the block ended the block there on the next run (report.awk's shown() escapes them too).
replace() {
    file=$1 begin=$2 end=$3 content=$4
    is='function is(m,   l) { l = $0; sub(/^[ \t]+/, "", l); sub(/[ \t\r]+$/, "", l); return l == m }'
    if ! awk -v b="$begin" -v e="$end" "$is"'
        is(b) && !nb { nb = NR } is(e) && !ne { ne = NR } END { exit !(nb && ne && nb < ne) }' "$file"; then
        echo "report: $file has no '$begin' ... '$end' markers (in that order); left alone" >&2
        return 0
    fi
    awk -v b="$begin" -v e="$end" -v content="$content" "$is"'
        !done && is(b) { print; while ((getline line < content) > 0) print line; skip = 1; next }
        skip && is(e) { skip = 0; done = 1 }
        !skip { print }' "$file" > "$content.new"
    if cmp -s "$content.new" "$file"; then echo "report: $file unchanged"
    else cat "$content.new" > "$file"; echo "report: $file updated"; fi
}

# Image links to the PNGs beside the CSV, as seen from a README in folder PREFIX (relative path).
images() {
    for p in latency:Latency speedup_vs_torch:Speedup\ over\ naive\ PyTorch speedup_vs_02:Speedup\ over\ stage\ 02 \
             tflops:TFLOP/s memory:Memory\ beyond\ the\ inputs\ and\ outputs latency_backward:Backward\ latency \
             tflops_backward:Backward\ TFLOP/s memory_backward:Backward\ memory\ beyond\ the\ inputs\ and\ gradients; do
        [ -f "$(dirname "$csv")/${p%%:*}.png" ] && echo "![${p#*:}]($1$(dirname "$csv")/${p%%:*}.png)"
    done
    return 0
}

readme() {
    csv=$1 cmd=${BENCH_CMD:-make bench}
    need_csv "$csv"
    # both go into the READMEs as they are (a code span, a link, the generated comment), where a '<', '`'
    # or '|' could end one early, as a CSV field could (report.awk's shown())
    for v in "CSV path:$csv" "BENCH_CMD:$cmd"; do
        case ${v#*:} in *[\<\>\|\`]*|*[[:cntrl:]]*)
            echo "report: readme: the ${v%%:*} '${v#*:}' holds '<', '>', '|', '\`' or a control character" >&2; exit 2 ;;
        esac
    done
    root=$(cd "$here/.." && pwd)
    case "$csv" in /*) echo "report: $csv should be relative to $root for the README links" >&2 ;; esac
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/attn-readme.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT INT TERM
    gen="<!-- generated by bench/report.sh from $csv: edit neither by hand -->"
    { echo "$gen"; echo; rep compact -v md=1 -f "$here/report.awk" "$csv"; echo
      if rep bcompact -v md=1 -f "$here/report.awk" "$csv" > "$tmp/bcompact.md"; then cat "$tmp/bcompact.md"; echo; fi
      rep summary -v md=1 -f "$here/report.awk" "$csv" > "$tmp/summary.md"
      [ ! -s "$tmp/summary.md" ] || { cat "$tmp/summary.md"; echo; }
      rep facts -v md=1 -f "$here/report.awk" "$csv"
      echo "Every (D, causal) and N, each fast stage against FA2, cuDNN and Triton, and the plots: [bench/README.md](bench/README.md#results)."
      echo "Command: \`$cmd\`; CSV: [\`$csv\`]($csv)."
      [ -f "$(dirname "$csv")/speedup_vs_torch.png" ] && { echo; echo "![Speedup over naive PyTorch]($(dirname "$csv")/speedup_vs_torch.png)"; }
    } > "$tmp/top.md"
    replace "$root/README.md" "<!-- bench:begin -->" "<!-- bench:end -->" "$tmp/top.md"
    { echo "$gen"; echo; echo "Command: \`$cmd\` on the machine below; CSV: [\`$csv\`](../$csv)."; echo
      rep tables -v md=1 -f "$here/report.awk" "$csv"; echo; images ../
    } > "$tmp/bench.md"
    replace "$root/bench/README.md" "<!-- bench:tables:begin -->" "<!-- bench:tables:end -->" "$tmp/bench.md"
    # each stage block in a stage's README: <!-- bench:stage:ID:begin --> (stage 13's holds 13 and 13d)
    for dir in "$root"/[0-9][0-9]_*/; do
        dir=${dir%/}
        [ -f "$dir/README.md" ] || continue
        for id in $(sed -n 's/^<!-- bench:stage:\([0-9][0-9][a-z]*\):begin -->$/\1/p' "$dir/README.md"); do
            { echo "$gen"; echo
              rep stage -v md=1 -v id="$id" -f "$here/report.awk" "$csv" 2>/dev/null || { echo; echo "(No rows for stage $id in the last run.)"; }
              echo; echo "All stages side by side, with plots: [bench/README.md](../bench/README.md#results). Command: \`$cmd\`."
            } > "$tmp/stage.md"
            replace "$dir/README.md" "<!-- bench:stage:$id:begin -->" "<!-- bench:stage:$id:end -->" "$tmp/stage.md"
        done
    done
}

cmd=${1:-}
[ $# -ge 2 ] || { sed -n '5,29p' "$0" >&2; exit 2; }
case $cmd in
merge) shift; fill=""
    # --set COL=VALUE: a fact of the run the writers could not know, into the rows that left COL empty.
    # VALUE goes into the CSV and from there into README prose: the characters report.awk's shown() and
    # gp() would have to escape are refused here instead.
    while [ "${1:-}" = --set ]; do
        [ $# -ge 2 ] || { echo "report: merge: --set needs COL=VALUE" >&2; exit 2; }
        case $2 in
        driver=?* | sm_clock_mhz=?* | power_limit_w=?* | torch=?* | cudnn=?* | triton=?* | fa4=?*) ;;
        *) echo "report: merge: --set takes driver, sm_clock_mhz, power_limit_w, torch, cudnn, triton or fa4 =VALUE (got '$2')" >&2; exit 2 ;;
        esac
        case ${2#*=} in *[!A-Za-z0-9\ ._:+/\(\)-]*)
            echo "report: merge: --set $2: a value holds letters, digits, spaces and ._:+/()- only" >&2; exit 2 ;;
        esac
        fill="$fill${fill:+|}$2"; shift 2
    done
    [ $# -ge 1 ] || { echo "report: merge: OUT is missing" >&2; exit 2; }
    out=$1; shift; [ $# -ge 1 ] || { echo "report: nothing to merge into $out" >&2; exit 1; }
    # OUT is replaced by a rename: a directory would take the file inside it, and a FIFO or a device
    # would be replaced by it (a link is replaced, never written through)
    if [ -d "$out" ]; then echo "report: merge: '$out' is a directory, not a file" >&2; exit 2
    elif [ ! -L "$out" ] && [ -e "$out" ] && [ ! -f "$out" ]; then
        echo "report: merge: '$out' is not a regular file (a FIFO, a device...): it would be replaced" >&2; exit 2
    fi
    # A new temporary file beside OUT (mktemp: exclusive, so nothing planted there is written through),
    # the mode a new file gets, then one rename.
    tmp=$(mktemp "$out.XXXXXX") || exit 1
    trap 'rm -f "$tmp"' EXIT INT TERM
    rep merge -v fill="$fill" -f "$here/report.awk" "$@" > "$tmp" && chmod "$(printf %o $((0666 & ~0$(umask))))" "$tmp" &&
        mv "$tmp" "$out" ;;
tables) need_csv "$2"; rep tables -v md="$([ "${3:-}" = md ] && echo 1 || echo 0)" -f "$here/report.awk" "$2" ;;
stage) need_csv "$2"; rep stage -v md=1 -v id="${3:?stage id}" -f "$here/report.awk" "$2" ;;
compact) need_csv "$2"; rep compact -v md=1 -f "$here/report.awk" "$2" ;;
bcompact) need_csv "$2"; rep bcompact -v md=1 -f "$here/report.awk" "$2" ;;
summary) need_csv "$2"; rep summary -v md=1 -f "$here/report.awk" "$2" ;;
facts) need_csv "$2"; rep facts -v md=1 -f "$here/report.awk" "$2" ;;
plots) plots "$2" "${3:-build/bench}" ;;
readme) cd "$here/.." && readme "$2" ;;
decode) shift; for f in "$@"; do need_csv "$f"; done
    LC_ALL=C awk -v peak="${BENCH_PEAK_GBS:-4300}" -f "$here/report_decode.awk" "$@" ;;
*) sed -n '5,29p' "$0" >&2; exit 2 ;;
esac
