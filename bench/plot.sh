#!/bin/sh
# bench/plot.sh CSV [OUTDIR]: PNG plots of a bench CSV (attn-bench, with or without peer rows).
#
#   latency.png        median ms vs N, log-log
#   speedup_vs_02.png  time of stage 02 / time of each stage or peer, vs N
#   tflops.png         TFLOP/s vs N
#   memory.png         device memory beyond Q, K, V, O and LSE (GiB) vs N
#
# One panel per (D, causal) (2x2 for the default sweep), one line per stage or peer; only rows
# with status ok are drawn, so OOM, cpu-skip, unsupported and FAIL points are absent.
# Needs gnuplot (any 5.x); without it this says so and exits 0. POSIX sh and awk otherwise.
set -eu

csv=${1:-build/bench/bench.csv}
out=${2:-build/bench}

if [ ! -s "$csv" ]; then
    echo "plots: no CSV at $csv (make bench, or make plots CSV=path)" >&2
    exit 1
fi
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plots: gnuplot not found, so no PNGs; render them elsewhere with: make plots CSV=$csv"
    exit 0
fi
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/attn-plot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# One data file per (panel, series): "N ms tflops speedup_vs_02 mem_GiB", NaN where absent.
# $tmp/panels: "key D causal B H"; $tmp/series: "index stage|peer label" in display order (stages by id,
# then peers as they first appear); $tmp/have: "key index column" for every plottable value;
# $tmp/meta: gpu, date and commit of the first ok row.
awk -F, -v tmp="$tmp" '
function need(c) { if (!(c in col)) { printf "plots: %s has no column %s\n", FILENAME, c > "/dev/stderr"; bad = 1; exit 1 } }
function num(c,   v) { v = (c in col) ? $col[c] : ""; return v == "" ? "NaN" : v }
FNR == NR {  # first pass: the time of stage 02 at every point, for CSVs without speedup_vs_02
    if (FNR == 1) { for (i = 1; i <= NF; i++) c0[$i] = i; next }
    if (("stage" in c0) && $c0["stage"] == "02" && $c0["status"] == "ok" && $c0["ms"] != "")
        base[$c0["B"] "_" $c0["H"] "_" $c0["N"] "_" $c0["D"] "_" $c0["causal"]] = $c0["ms"]
    next
}
FNR == 1 {
    for (i = 1; i <= NF; i++) col[$i] = i
    need("stage"); need("B"); need("H"); need("N"); need("D"); need("causal"); need("status"); need("ms")
    next
}
{
    st = $col["stage"]; nm = ("name" in col) ? $col["name"] : st
    key = $col["D"] "_" $col["causal"] "_" $col["B"] "_" $col["H"]
    if (!(key in pseen)) { pseen[key] = 1; print key, $col["D"], $col["causal"], $col["B"], $col["H"] > (tmp "/panels") }
    if (!(st in sidx)) { ns++; sidx[st] = ns; sid[ns] = st; slabel[ns] = (nm != "" && nm != st) ? st " " nm : st }
    if ($col["status"] != "ok" || $col["ms"] == "") next
    if (!meta) { meta = 1; print (("gpu" in col) ? $col["gpu"] : "?") "\t" (("date" in col) ? $col["date"] : "?") "\t" (("commit" in col) ? $col["commit"] : "?") > (tmp "/meta") }
    mem = num("extra_bytes"); if (mem != "NaN") mem = mem / 1073741824
    tf = num("tflops")
    if (tf == "NaN" && $col["ms"] > 0) {
        fl = 4 * $col["B"] * $col["H"] * $col["N"] * $col["N"] * $col["D"]; if ($col["causal"] + 0) fl /= 2
        tf = fl / ($col["ms"] * 1e9)
    }
    sp = num("speedup_vs_02"); pk = $col["B"] "_" $col["H"] "_" $col["N"] "_" $col["D"] "_" $col["causal"]
    if (sp == "NaN" && (pk in base) && $col["ms"] > 0) sp = base[pk] / $col["ms"]
    f = tmp "/d_" key "_" sidx[st] ".dat"
    print $col["N"], $col["ms"], tf, sp, mem > f
    have[key " " sidx[st] " 2"] = 1
    if (tf != "NaN") have[key " " sidx[st] " 3"] = 1
    if (sp != "NaN") have[key " " sidx[st] " 4"] = 1
    if (mem != "NaN") have[key " " sidx[st] " 5"] = 1
}
END {
    if (bad) exit 1
    # stages (numeric ids) first, in numeric order, then the rest as they appeared
    n = 0
    for (i = 1; i <= ns; i++) if (sid[i] ~ /^[0-9]+$/) { n++; ord[n] = i }
    for (i = 2; i <= n; i++) for (j = i; j > 1 && sid[ord[j - 1]] + 0 > sid[ord[j]] + 0; j--) { t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t }
    for (i = 1; i <= ns; i++) if (sid[i] !~ /^[0-9]+$/) { n++; ord[n] = i }
    for (i = 1; i <= n; i++) print ord[i], (sid[ord[i]] ~ /^[0-9]+$/) ? "stage" : "peer", slabel[ord[i]] > (tmp "/series")
    for (k in have) print k > (tmp "/have")
    close(tmp "/have"); close(tmp "/series"); close(tmp "/panels")
}' "$csv" "$csv"

if [ ! -s "$tmp/meta" ]; then
    echo "plots: $csv has no row with status ok; nothing to plot" >&2
    exit 0
fi
for f in "$tmp"/d_*.dat; do sort -n -k1,1 "$f" > "$f.s" && mv "$f.s" "$f"; done
sort -n -k2,2 -k3,3 -k4,4 -k5,5 "$tmp/panels" > "$tmp/panels.s"
touch "$tmp/have"

IFS='	' read -r gpu date commit < "$tmp/meta"
[ "$gpu" = none ] && gpu='no GPU (CPU stage only)'
npanels=$(wc -l < "$tmp/panels.s")
if [ "$npanels" -le 1 ]; then rows=1; cols=1
elif [ "$npanels" -le 2 ]; then rows=1; cols=2
elif [ "$npanels" -le 4 ]; then rows=2; cols=2
else cols=3; rows=$(( (npanels + 2) / 3 )); fi

# plot_one NAME COLUMN YLABEL LOGY KEYPOS TITLE
plot_one() {
    name=$1 ycol=$2 ylabel=$3 logy=$4 keypos=$5 title=$6
    if ! grep -q " $ycol\$" "$tmp/have"; then
        echo "plots: nothing to draw for $name.png (no such values in $csv), skipped"
        return 0
    fi
    g="$tmp/$name.gp"
    {
        echo "set terminal pngcairo noenhanced size 1000,750 font 'Sans,9' linewidth 1.2"
        echo "set output '$out/$name.png'"
        # one colour per series, the same in every figure: stages solid, peers dashed
        echo "set linetype 1 lc rgb '#7f7f7f' pt 7"; echo "set linetype 2 lc rgb '#d62728' pt 5"
        echo "set linetype 3 lc rgb '#ff7f0e' pt 9"; echo "set linetype 4 lc rgb '#bcbd22' pt 11"
        echo "set linetype 5 lc rgb '#2ca02c' pt 13"; echo "set linetype 6 lc rgb '#1f77b4' pt 7"
        echo "set linetype 7 lc rgb '#9467bd' pt 4"; echo "set linetype 8 lc rgb '#17becf' pt 6"
        echo "set linetype 9 lc rgb '#8c564b' pt 8"; echo "set linetype 10 lc rgb '#e377c2' pt 10"
        echo "set linetype cycle 10"
        echo "set grid xtics ytics mxtics mytics lc rgb '#dddddd'"
        echo "set key $keypos font 'Sans,8' samplen 2 spacing 0.9 box opaque"
        echo "set offsets graph 0.04, graph 0.04, 0, 0"
        echo "set logscale x 2"
        echo "set format x '%.0f'"
        echo "set xlabel 'sequence length N'"
        echo "set ylabel '$ylabel'"
        if [ "$logy" = 1 ]; then echo "set logscale y"; echo "set format y '%g'"; else echo "unset logscale y"; echo "set yrange [0:*]"; fi
        printf '%s\n' "set multiplot layout $rows,$cols title \"$title\\n$gpu · $date · commit $commit\" font 'Sans,11'"
        while read -r key D causal B H; do
            cw=non-causal; [ "$causal" = 1 ] && cw=causal
            echo "set title 'D = $D, $cw (B=$B, H=$H)'"
            plot="" pos=0
            while read -r idx kind label; do
                pos=$((pos + 1))
                grep -qx "$key $idx $ycol" "$tmp/have" || continue
                dt=1; [ "$kind" = peer ] && dt=2
                plot="$plot${plot:+, }'$tmp/d_${key}_$idx.dat' using 1:$ycol with linespoints lt $pos dt $dt lw 1.5 ps 0.8 title '$label'"
            done < "$tmp/series"
            if [ -n "$plot" ]; then
                echo "plot $plot"
            else
                echo "set label 1 'no data' at graph 0.5,0.5 center"
                echo "unset key; unset tics; unset xlabel; unset ylabel; unset grid"
                echo "plot [1:2] [1:2] NaN notitle"
                echo "unset label 1"
                echo "set key; set tics; set grid xtics ytics mxtics mytics"
                echo "set xlabel 'sequence length N'; set ylabel '$ylabel'"
            fi
        done < "$tmp/panels.s"
        echo "unset multiplot"
    } > "$g"
    if gnuplot "$g" 2> "$tmp/err"; then
        echo "plots: $out/$name.png"
    else
        echo "plots: gnuplot failed on $name:" >&2
        cat "$tmp/err" >&2
        return 1
    fi
}

status=0
plot_one latency 2 'median time (ms)' 1 'bottom right' 'Latency (median over repeats)' || status=1
plot_one speedup_vs_02 4 'speedup over stage 02 (x)' 1 'bottom right' 'Speedup over stage 02 (naive GPU): time of 02 / time' || status=1
plot_one tflops 3 'TFLOP/s' 1 'bottom right' 'Throughput: 4·B·H·N²·D FLOPs (half when causal) / time' || status=1
plot_one memory 5 'GiB beyond Q, K, V, O, LSE' 0 'top left' 'Peak device memory beyond the inputs and outputs' || status=1
exit $status
