# bench/report_decode.awk: the tables of attn-bench --decode's CSV and bench/decode_peers.py's (merged
# or not), in POSIX awk; bench/report.sh decode runs it (LC_ALL=C). Columns are matched by name.
#
# One Markdown table per (D, H, H_kv, N_q, causal, dtype): a row per (B, N_k), a column per stage or
# peer that ran there (status ok), each cell the median time and the K/V bandwidth, kv_gbps = the K and
# V bytes of the step over its time, with its share of -v peak (GB/s; default 4300, the copy bandwidth
# issue 60 quotes for the H200: measure your own device's and pass it). Then three ratios where their
# rows ran: the stage (-v stage, default 15) against the fastest peer (its time over the stage's: above
# 1, the stage is faster), the paged step (-v paged, default 15p) over the stage (the issue's target:
# within 5%), and the best share of peak. Rows that did not run are counted under each table by status.
# A peer is a series whose name does not start with a digit (sdpa_*, flash_attn4).

BEGIN {
    FS = ","
    if (peak == "") peak = 4300
    if (stage == "") stage = "15"
    if (paged == "") paged = "15p"
}

FNR == 1 {
    split("", at)
    for (i = 1; i <= NF; i++) at[$i] = i
    good = ("stage" in at) && ("N_k" in at) && ("H_kv" in at) && ("kv_gbps" in at) && ("status" in at)
    if (!good) printf "report: %s is not a --decode CSV (no stage, H_kv, N_k, kv_gbps or status column); skipped\n",
                      FILENAME > "/dev/stderr"
    next
}
!good || /^[ \t]*$/ { next }
{
    s = $(at["stage"]); st = $(at["status"])
    k = $(at["D"]) SUBSEP $(at["H"]) SUBSEP $(at["H_kv"]) SUBSEP $(at["N_q"]) SUBSEP $(at["causal"]) SUBSEP $(at["dtype"])
    if (!(k in panel)) { panel[k] = ++npanel; PANEL[npanel] = k }
    pt = ($(at["B"]) + 0) SUBSEP ($(at["N_k"]) + 0)
    if (!((k, pt) in seen)) { seen[k, pt] = 1; PT[k, ++npt[k]] = pt }
    kvb[k, pt] = $(at["kv_bytes"])
    if (st == "ok" && $(at["ms"]) > 0) {
        MS[k, pt, s] = $(at["ms"]) + 0
        GB[k, pt, s] = $(at["kv_gbps"]) + 0
        if (!((k, s) in ran)) { ran[k, s] = 1; SER[k, ++nser[k]] = s }
    } else {
        notrun[k, st]++
        if (!((k, st) in why)) { why[k, st] = s; nwhy[k]++; WHY[k, nwhy[k]] = st }
        else if (index(" " why[k, st] " ", " " s " ") == 0) why[k, st] = why[k, st] " " s
    }
    if (gpu == "" && "gpu" in at) gpu = $(at["gpu"])
}

function ispeer(s) { return s !~ /^[0-9]/ }
# series order: the stages by number (then letter), then the peers by name
function sbefore(a, b) {
    if (ispeer(a) != ispeer(b)) return !ispeer(a)
    if (!ispeer(a) && a + 0 != b + 0) return a + 0 < b + 0
    return a < b
}
function pbefore(a, b,   x, y) { split(a, x, SUBSEP); split(b, y, SUBSEP); return x[1] + 0 < y[1] + 0 || (x[1] == y[1] && x[2] + 0 < y[2] + 0) }
function fmt_us(ms) { return ms * 1000 >= 100 ? sprintf("%.0f", ms * 1000) : sprintf("%.1f", ms * 1000) }
function cell(k, pt, s) {
    if (!((k, pt, s) in MS)) return "-"
    return sprintf("%s us, %.0f GB/s (%.0f%%)", fmt_us(MS[k, pt, s]), GB[k, pt, s], 100 * GB[k, pt, s] / peak)
}

function table(k,   f, n, i, j, t, s, pt, head, line, best, bs, x, y, ratio, pr, peakshare) {
    split(k, f, SUBSEP)
    n = nser[k]
    for (i = 2; i <= n; i++) for (j = i; j > 1 && sbefore(SER[k, j], SER[k, j - 1]); j--) {
        t = SER[k, j]; SER[k, j] = SER[k, j - 1]; SER[k, j - 1] = t
    }
    for (i = 2; i <= npt[k]; i++) for (j = i; j > 1 && pbefore(PT[k, j], PT[k, j - 1]); j--) {
        t = PT[k, j]; PT[k, j] = PT[k, j - 1]; PT[k, j - 1] = t
    }
    printf "Decoding, D = %s, H = %s over H_kv = %s, N_q = %s, %s, %s (%s): median time and K/V bandwidth " \
           "(K and V bytes / time; %% of %s GB/s)\n\n", f[1], f[2], f[3], f[4], f[5] ? "causal" : "non-causal",
           f[6], gpu, peak
    head = "| B | N_k | K, V (MB) |"
    line = "|---|---|---|"
    for (i = 1; i <= n; i++) { head = head " " SER[k, i] " |"; line = line "---|" }
    head = head " " stage " vs fastest peer | " paged " / " stage " |"
    line = line "---|---|"
    print head; print line
    for (j = 1; j <= npt[k]; j++) {
        pt = PT[k, j]
        split(pt, x, SUBSEP)
        printf "| %s | %s | %.1f |", x[1], x[2], kvb[k, pt] / 1e6
        best = 0; bs = ""
        for (i = 1; i <= n; i++) {
            s = SER[k, i]
            printf " %s |", cell(k, pt, s)
            if (ispeer(s) && (k, pt, s) in MS && (best == 0 || MS[k, pt, s] < best)) { best = MS[k, pt, s]; bs = s }
        }
        ratio = ((k, pt, stage) in MS) && best > 0 ? sprintf("%.2fx (%s)", best / MS[k, pt, stage], bs) : "-"
        pr = ((k, pt, stage) in MS) && ((k, pt, paged) in MS) ? sprintf("%.3f", MS[k, pt, paged] / MS[k, pt, stage]) : "-"
        printf " %s | %s |\n", ratio, pr
    }
    for (i = 1; i <= nwhy[k]; i++)
        printf "%s%d rows %s (%s)", i == 1 ? "\nNot run: " : "; ", notrun[k, WHY[k, i]], WHY[k, i], why[k, WHY[k, i]]
    if (nwhy[k]) printf ".\n"
    printf "\n"
}

END {
    if (!npanel) { print "report: no --decode rows" > "/dev/stderr"; exit 1 }
    for (p = 1; p <= npanel; p++) table(PANEL[p])
}
