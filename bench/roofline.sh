#!/bin/sh
# bench/roofline.sh: the roofline of a bench CSV on the GPU it ran on. POSIX sh and awk; gnuplot for
# the picture. No Python.
#
#   roofline.sh table CSV CEILINGS      one line per stage and point: FLOPs per HBM byte, TFLOP/s, GB/s,
#                                       and the share of the copy bandwidth and of the fp16 matmul rate
#   roofline.sh plot CSV CEILINGS DIR   DIR/roofline.png: a panel per (D, causal), each stage's points
#                                       (one per N) under the ceilings
#
# CSV is attn-bench's (or a merged one): a stage's bytes are its columns hbm_read + hbm_written, the
# model of its tiles (attn_bytes in common/stage.h; every stage's README, "Bytes moved"), and its FLOPs
# are tflops x ms (4 B H N^2 D, half when causal; 2.5 times that for a backward stage). Only rows
# with status ok, bytes and a time count, and only those timed on the GPU the ceilings were measured
# on: a point of another GPU under these ceilings would be misread. CEILINGS is bench/ceilings.py's
# CSV (what: copy_bandwidth in B/s, matmul_fp16 and matmul_fp32 in FLOP/s). The roof for a point of
# intensity I FLOP/B is min(I x bandwidth, matmul rate): left of the ridge a stage can go no faster
# than HBM feeds it, right of it no faster than the arithmetic units (stages 02-05, 11 and 12 use the
# fp32 CUDA cores: their roof is the fp32 line).
set -eu


usage() { sed -n '5,8p' "$0" >&2; exit 2; }

# The points, one per line: D causal B H N stage intensity TFLOP/s GB/s share-of-bandwidth share-of-fp16;
# the first line: "ceilings BW P16 P32 GPU", the GPU's name last (it holds spaces). Fields are cleaned for gnuplot as report.awk's gp() does.
points() {
    LC_ALL=C awk -F, '
    function gp(s) { gsub(/[^A-Za-z0-9 ._:+\/()=-]/, "_", s); return s }
    function num(s) { return s ~ /^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$/ }
    FNR == 1 { split("", at); for (i = 1; i <= NF; i++) at[$i] = i; file++; next }
    file == 1 {
        if (!("what" in at) || !("value" in at)) { print "roofline: " FILENAME ": no what or value column" > "/dev/stderr"; exit 2 }
        c[$at["what"]] = $at["value"] + 0; if ("gpu" in at) gpu = $at["gpu"]
        next
    }
    file == 2 && !("hbm_read" in at) {
        print "roofline: " FILENAME " has no hbm_read column (a CSV of attn-bench before the bytes model)" > "/dev/stderr"; exit 2
    }
    file == 2 {
        if ($at["status"] != "ok" || !num($at["ms"]) || !num($at["tflops"]) || !num($at["hbm_read"]) || !num($at["hbm_written"])) next
        if ($at["stage"] !~ /^[0-9]/ || $at["ms"] <= 0) next
        if (gpu != "" && $at["gpu"] != gpu) { other++; next }
        bytes = $at["hbm_read"] + $at["hbm_written"]; flops = $at["tflops"] * $at["ms"] * 1e9
        if (bytes <= 0) next
        I = flops / bytes; gbs = bytes / ($at["ms"] * 1e-3) / 1e9
        causal = ($at["causal"] == 1 || $at["causal"] == "True" || $at["causal"] == "true") ? 1 : 0
        line[++n] = sprintf("%s %d %s %s %s %s %.6g %.6g %.6g %.4f %.4f", gp($at["D"]), causal, gp($at["B"]), gp($at["H"]),
            gp($at["N"]), gp($at["stage"]), I, $at["tflops"], gbs, gbs * 1e9 / c["copy_bandwidth"], $at["tflops"] * 1e12 / c["matmul_fp16"])
    }
    END {
        if (!(c["copy_bandwidth"] > 0) || !(c["matmul_fp16"] > 0)) {
            print "roofline: the ceilings need copy_bandwidth and matmul_fp16 (bench/ceilings.py)" > "/dev/stderr"; exit 2
        }
        if (other) printf "roofline: %d rows timed on another GPU than %s left out\n", other, gpu > "/dev/stderr"
        printf "ceilings %.6g %.6g %.6g %s\n", c["copy_bandwidth"], c["matmul_fp16"], c["matmul_fp32"], gp(gpu == "" ? "GPU" : gpu)
        for (i = 1; i <= n; i++) print line[i]
    }' "$2" "$1"
}

table() {
    pts=$(points "$1" "$2") || exit $?
    printf '%s\n' "$pts" | awk '
    NR == 1 {
        gpu = $5; for (i = 6; i <= NF; i++) gpu = gpu " " $i
        printf "roofline on %s: HBM copy %.3g TB/s, fp16 matmul %.4g TFLOP/s, fp32 matmul %.3g TFLOP/s; ridge at %.0f FLOP/B\n\n",
            gpu, $2 / 1e12, $3 / 1e12, $4 / 1e12, $3 / $2
        printf "%4s  %-10s  %6s  %-5s  %9s  %9s  %9s  %9s  %9s\n", "D", "causal", "N", "stage", "FLOP/B", "TFLOP/s", "GB/s", "of copy", "of fp16"
        next
    }
    { printf "%4s  %-10s  %6s  %-5s  %9.4g  %9.4g  %9.4g  %8.1f%%  %8.1f%%\n", $1, $2 ? "causal" : "non-causal", $5, $6, $7, $8, $9, 100 * $10, 100 * $11 }'
}

plot() {
    csv=$1 ceil=$2 out=$3
    if ! command -v gnuplot >/dev/null 2>&1; then
        echo "roofline: gnuplot not found, so no PNG; the numbers: sh bench/roofline.sh table $csv $ceil"
        return 0
    fi
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/attn-roofline.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT INT TERM
    points "$csv" "$ceil" > "$tmp/points"
    [ "$(wc -l < "$tmp/points")" -gt 1 ] || { echo "roofline: no stage row of $csv with bytes and a time; nothing to plot" >&2; return 0; }
    # panels "k D causal B H", series per panel "d_k_stage.dat" (I, TFLOP/s), labels at each series' largest N
    awk -v dir="$tmp" 'NR == 1 { sub(/^ceilings /, ""); print > (dir "/ceil"); next }
        { key = $1 " " $2 " " $3 " " $4
          if (!(key in pk)) { pk[key] = ++np; print np, key > (dir "/panels") }
          k = pk[key]; f = dir "/d_" k "_" $6 ".dat"
          if (!((k, $6) in seen)) { seen[k, $6] = 1; ns[k]++; print k, $6 > (dir "/series") }
          print $5, $7, $8 > f
          if ($5 + 0 >= big[k, $6]) { big[k, $6] = $5 + 0; lab[k, $6] = $7 " " $8 }
          if (!(lo > 0) || $7 < lo) lo = $7; if ($7 > hi) hi = $7 }
        END { for (kv in lab) { split(kv, a, SUBSEP); print a[1], a[2], lab[kv] > (dir "/labels") }
              print lo, hi > (dir "/range") }' "$tmp/points"
    read -r bw p16 p32 gpu < "$tmp/ceil"
    read -r lo hi < "$tmp/range"
    n=$(wc -l < "$tmp/panels"); cols=$(( n <= 1 ? 1 : 2 )); rows=$(( (n + cols - 1) / cols ))
    gp_script "$gpu" "$bw" "$p16" "$p32" "$lo" "$hi" > "$tmp/roofline.gp"
    mkdir -p "$out"
    if (cd "$tmp" && gnuplot roofline.gp) 2> "$tmp/err" && mv -f "$tmp/roofline.png" "$out/roofline.png"; then
        echo "roofline: $out/roofline.png"
    else echo "roofline: gnuplot failed:" >&2; cat "$tmp/err" >&2; return 1; fi
}

# The ceilings in TFLOP/s against x FLOP/B: the copy bandwidth's slope up to each matmul rate.
gp_script() {
    gpu=$1 bw=$2 p16=$3 p32=$4 lo=$5 hi=$6
    echo "set terminal pngcairo noenhanced size 1400,$(( 420 * rows + 80 )) font 'Sans,9' linewidth 1.2"
    echo "set output 'roofline.png'"
    echo "set logscale xy; set format x '%g'; set format y '%g'; set grid xtics ytics mxtics mytics lc rgb '#dddddd'"
    echo "set xlabel 'FLOPs per HBM byte (bytes: the model of the tiles)'; set ylabel 'TFLOP/s'"
    echo "set key outside right top font 'Sans,8' samplen 2 spacing 0.9"
    i=0 # one colour per stage in every panel, in the order of the stages' ids
    for c in d62728 ff7f0e bcbd22 2ca02c 1f77b4 9467bd 17becf 8c564b e377c2 7f7f7f aec7e8 98df8a; do
        i=$((i + 1)); echo "set linetype $i lc rgb '#$c' pt $(( i % 2 ? 7 : 5 ))"
    done
    echo "set linetype cycle 12"
    echo "bw = $bw; p16 = $p16 / 1e12; p32 = $p32 / 1e12"
    echo "roof(x, p) = x * bw / 1e12 < p ? x * bw / 1e12 : p"
    echo "set xrange [$(awk -v a="$lo" -v r="$p32" -v b="$bw" 'BEGIN { m = r * 1e12 / b; print (a < m ? a : m) / 4 }'):$(awk -v a="$hi" -v r="$p16" -v b="$bw" 'BEGIN { m = r / b; print (a > m ? a : m) * 4 }')]"
    echo "set samples 400"
    printf '%s\n' "set multiplot layout $rows,$cols title \"Roofline on $gpu: HBM copy $(awk -v b="$bw" 'BEGIN { printf "%.2f", b / 1e12 }') TB/s, fp16 matmul $(awk -v p="$p16" 'BEGIN { printf "%.0f", p / 1e12 }') TFLOP/s, fp32 $(awk -v p="$p32" 'BEGIN { printf "%.0f", p / 1e12 }') TFLOP/s (bench/ceilings.py)\" font 'Sans,11'"
    while read -r k D causal B H; do
        cw=non-causal; [ "$causal" = 1 ] && cw=causal
        echo "set title 'D = $D, $cw (B=$B, H=$H): a point per N'; unset label"
        m=0
        while read -r kk s x y; do
            [ "$kk" = "$k" ] || continue
            m=$((m + 1)); echo "set label $m '$s' at first $x, first $y offset 0.6,0.6 font ',8'"
        done < "$tmp/labels"
        plot="roof(x, p16) with lines lw 2 lc rgb '#000000' title 'fp16 roof', roof(x, p32) with lines lw 1.5 dt 2 lc rgb '#555555' title 'fp32 roof'"
        while read -r kk s; do
            [ "$kk" = "$k" ] || continue
            lt=$(awk '{ print $2 }' "$tmp/series" | sort -u | grep -nx -- "$s" | cut -d: -f1)
            plot="$plot, 'd_${k}_$s.dat' using 2:3 with linespoints lt $lt ps 0.9 title '$s'"
        done < "$tmp/series"
        echo "plot $plot"
    done < "$tmp/panels"
    echo "unset multiplot"
}

[ $# -ge 3 ] || usage
for f in "$2" "$3"; do [ -s "$f" ] || { echo "roofline: no CSV at $f" >&2; exit 1; }; done
case $1 in
table) table "$2" "$3" ;;
plot) [ $# -ge 4 ] || usage; plot "$2" "$3" "$4" ;;
*) usage ;;
esac
