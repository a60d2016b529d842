# bench/report.awk: the tables of bench CSVs (attn-bench's, the peers', or a merged one), in POSIX awk.
# Run through bench/report.sh, which sets LC_ALL=C (bytes, so widths can skip UTF-8 continuations).
#
#   -v mode=merge         the rows of every CSV given, under one header (columns matched by name)
#   -v mode=tables        every (D, causal) panel: one row per stage or peer and N; then each fast
#                         stage against the peers (-v md=1: Markdown; plain aligned text otherwise);
#                         then the same for the backward rows (pass bwd), if any, and the backward
#                         stages against each other
#   -v mode=stage -v id=NN   one stage's rows, for its README (Markdown)
#   -v mode=compact       TFLOP/s of every stage and peer at one N, speedup over naive PyTorch
#   -v mode=bcompact      the same for the backward, speedup over stage 11 (no output, exit 3: no
#                         backward rows)
#   -v mode=summary       the fast stages against each other and the peers at every (D, causal): the
#                         range of each ratio over N >= nsplit (default 4096), and the points below it
#                         where the ratio is under 1 (the top README's block, under the compact table)
#   -v mode=plotdata -v dir=DIR   data files for gnuplot (report.sh plots)
# With merge, -v fill='COL=VALUE|COL=VALUE' sets those columns in every row that left them empty: the
# facts of the run that only make bench's shell knows (the power limit, from nvidia-smi).
# The run's facts beyond the rows (the last nine columns: warm-up, GPUs, driver, SM clock, power limit,
# library versions) are shown once above the tables as "Recorded with the run"; a CSV from before them,
# or a row that left one empty, reads "not recorded" there.
# Fast stages (compared with the peers): numeric ids >= fast (default 06), so later stages join alone;
# fast backward stages: ids from fastbwd (default 13) on, a letter after the number allowed (13d), a CPU
# model (an id ending in m) never. Forward and backward rows never share a panel, a "vs best" or a
# comparison: a row's pass is part of its point.

BEGIN {
    FS = ","
    NCOL = split("gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes," \
                 "workspace_bytes,max_abs_err,check,repeats,l2,note,pass,hbm_read,hbm_written,tile_read," \
                 "tile_written,warmup_ms,gpus,driver,sm_clock_mhz,power_limit_w,torch,cudnn,triton,fa4", COL, ",")
    if (fast == "") fast = 6
    # the peers a fast stage is set against, and their short labels
    NPEER = split("sdpa_flash sdpa_cudnn triton_fa2 flash_attn4", PEER, " ")
    LABEL["sdpa_flash"] = "FA2"; LABEL["sdpa_cudnn"] = "cuDNN"; LABEL["triton_fa2"] = "Triton"
    LABEL["flash_attn4"] = "FA4"
    if (fastbwd == "") fastbwd = 13
    # The backward road: each stage against the one before it (the issue's targets: 12 >= 5x 11 at
    # N = 4096, 13 >= 5x 12, 13d within 15% of 13). Stage 11, the naive one, is the backward's baseline
    # as torch_naive is the forward's.
    NROAD = split("11 12 13 13d", ROAD, " ")
    BASEBWD = "11"
    # The stage that runs on several GPUs (its rows' gpus column says how many): named in the run's
    # facts, as its rows could otherwise pass for one GPU's.
    MULTIGPU = "10"
    # The ratios of the summary: "A:B" is B's time over A's (above 1, A is faster)
    if (pairs == "") pairs = "09:sdpa_cudnn 09:sdpa_flash 09:flash_attn4 09:06 08:07 08:sdpa_cudnn 07:06"
    if (nsplit == "") nsplit = 4096
    nfill = split(fill, FILL, "|")
}

FNR == 1 {
    split("", at)
    hnf = NF
    for (i = 1; i <= NF; i++) at[$i] = i
    if (!("stage" in at) || !("N" in at) || !("D" in at) || !("status" in at)) {
        printf "report: %s has no stage, N, D or status column; skipped\n", FILENAME > "/dev/stderr"
        skipfile = FILENAME
    } else skipfile = ""
    next
}
FILENAME == skipfile || /^[ \t]*$/ || /^#/ { next }
{
    nr++
    for (k = 1; k <= NCOL; k++) R[nr, COL[k]] = (COL[k] in at) ? $(at[COL[k]]) : ""
    for (k = 1; k <= nfill; k++) {
        fc = substr(FILL[k], 1, index(FILL[k], "=") - 1)
        if (R[nr, fc] == "") R[nr, fc] = substr(FILL[k], index(FILL[k], "=") + 1)
    }
    if (R[nr, "dtype"] == "") R[nr, "dtype"] = "fp16"
    if (R[nr, "pass"] == "") R[nr, "pass"] = "fwd"  # a CSV from before the column: the forward's
    if (!wellformed(nr)) {
        printf "report: %s:%d: skipped a malformed row\n", FILENAME, FNR > "/dev/stderr"
        nr--
        next
    }
    if (mode != "merge" && mode != "plotdata") for (k = 1; k <= NCOL; k++) R[nr, COL[k]] = shown(R[nr, COL[k]])
    if (R[nr, "pass"] == "bwd") bwdstage[R[nr, "stage"]] = 1; else fwdstage[R[nr, "stage"]] = 1
    if (R[nr, "causal"] == "True" || R[nr, "causal"] == "true") R[nr, "causal"] = 1
    R[nr, "causal"] += 0
    if (R[nr, "tflops"] == "" && R[nr, "ms"] > 0)
        R[nr, "tflops"] = 4 * R[nr, "B"] * R[nr, "H"] * R[nr, "N"] * R[nr, "N"] * R[nr, "D"] \
                          * (R[nr, "pass"] == "bwd" ? 2.5 : 1) / (R[nr, "causal"] ? 2 : 1) / (R[nr, "ms"] * 1e9)
}

# A row as the writers write it: as many fields as its header (a quoted field holding a comma would
# shift every column after it; the writers never quote, so a '"' anywhere is refused), a stage, B, H,
# N, D positive integers, causal 0/1 (or Python's True/False), pass fwd or bwd (empty reads as fwd),
# and every other number a number or empty. Anything else would be tabulated as 0 and merged as it is.
function wellformed(i,   k, c) {
    if (NF != hnf || index($0, "\"") || R[i, "stage"] == "" || R[i, "pass"] !~ /^(fwd|bwd)$/) return 0
    for (k = split("B H N D", c, " "); k >= 1; k--) if (R[i, c[k]] !~ /^[0-9]+$/ || R[i, c[k]] + 0 <= 0) return 0
    if (R[i, "causal"] != "" && R[i, "causal"] !~ /^(0|1|True|False|true|false)$/) return 0
    for (k = split("ms tflops extra_bytes workspace_bytes max_abs_err repeats hbm_read hbm_written tile_read " \
                   "tile_written warmup_ms gpus", c, " "); k >= 1; k--)
        if (R[i, c[k]] != "" && R[i, c[k]] !~ /^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$/) return 0
    return 1
}
# A CSV field as the tables show it (merge copies the CSV as it is; plotdata has gp() below). A control
# character becomes '?': an escape sequence reached the terminal. In Markdown, '\' and '|' are escaped
# (a '|' split its table cell), '<' too (a field holding a README block's end marker, copied into the
# block, ended it there on the next run, and the README grew on every run), and '`' becomes a quote
# (it ended the commit's code span). None of these appears in what the writers themselves put there.
function shown(s) {
    gsub(/[\001-\037\177]/, "?", s)
    if (!md) return s
    gsub(/\\/, "\\\\\\\\", s); gsub(/\|/, "\\|", s); gsub(/</, "\\<", s); gsub(/`/, "'", s)
    return s
}
function ok(i) { return R[i, "status"] == "ok" && R[i, "ms"] > 0 }
function point(i) { return R[i, "B"] SUBSEP R[i, "H"] SUBSEP R[i, "N"] SUBSEP R[i, "D"] SUBSEP R[i, "causal"] SUBSEP R[i, "dtype"] SUBSEP R[i, "pass"] }
function panel(i) { return R[i, "D"] SUBSEP R[i, "causal"] SUBSEP R[i, "B"] SUBSEP R[i, "H"] SUBSEP R[i, "dtype"] SUBSEP R[i, "pass"] }
function numeric(s) { return s ~ /^[0-9]+$/ }
# A backward stage (its rows' pass is bwd) is set against the peers' backward rows only.
function isfast(s) { return numeric(s) && s + 0 >= fast + 0 && (s in fwdstage) }
function isfastbwd(s) { return (s in bwdstage) && s ~ /^[0-9]+[a-z]?$/ && s !~ /m$/ && s + 0 >= fastbwd + 0 }
function isbwdpanel(k) { return R[prow[k], "pass"] == "bwd" }

# Speedups, series (stages by number, then peers as they first appear), panels and their N.
function index_rows(   i, j, k, t, p, s, key, one) {
    for (i = 1; i <= nr; i++) {
        seen[R[i, "status"]] = 1
        if (!ok(i)) continue
        p = point(i)
        if (R[i, "stage"] == "02") base02[p] = R[i, "ms"]
        if (R[i, "stage"] == "torch_naive") basetorch[p] = R[i, "ms"]
        if (R[i, "stage"] == BASEBWD && R[i, "pass"] == "bwd") basebwd[p] = R[i, "ms"]
        if (!(p in best) || R[i, "ms"] < best[p]) best[p] = R[i, "ms"]
    }
    for (i = 1; i <= nr; i++) {
        s = R[i, "stage"]; p = panel(i)
        if (!(s in sidx)) { sidx[s] = ++ns; ser[ns] = s }
        if (!(p in pidx)) { pidx[p] = ++np; pan[np] = p; prow[np] = i }
        key = pidx[p] SUBSEP (R[i, "N"] + 0)
        if (!(key in nseen)) { nseen[key] = 1; pn[pidx[p]]++; pN[pidx[p], pn[pidx[p]]] = R[i, "N"] + 0 }
        if (!((pidx[p], R[i, "N"] + 0, s) in find)) find[pidx[p], R[i, "N"] + 0, s] = i
        if (!((R[i, "N"] + 0) in allN)) { allN[R[i, "N"] + 0] = 1; nall++; aN[nall] = R[i, "N"] + 0 }
        if (ok(i)) timed[s] = 1
        if (s in LABEL) havepeer[R[i, "pass"], s] = 1
    }
    # series: numeric ids in numeric order first (insertion sort keeps the others' order)
    for (i = 2; i <= ns; i++)
        for (j = i; j > 1 && before(ser[j], ser[j - 1]); j--) { t = ser[j]; ser[j] = ser[j - 1]; ser[j - 1] = t }
    for (i = 2; i <= np; i++)
        for (j = i; j > 1 && pbefore(prow[j], prow[j - 1]); j--) {
            t = pan[j]; pan[j] = pan[j - 1]; pan[j - 1] = t; t = prow[j]; prow[j] = prow[j - 1]; prow[j - 1] = t
        }
    for (k = 1; k <= np; k++) order[k] = pidx[pan[k]]   # sorted position -> the panel's index
    # the backward panels' order: stages by number, each with its letters after it (11, 12, 12m, 13,
    # 13d), then the peers; the forward's keeps letters after every number (03m, 06a), as it always has
    for (i = 1; i <= ns; i++) bser[i] = ser[i]
    for (i = 2; i <= ns; i++)
        for (j = i; j > 1 && bbefore(bser[j], bser[j - 1]); j--) { t = bser[j]; bser[j] = bser[j - 1]; bser[j - 1] = t }
    for (nfp = 0; nfp < np && !isbwdpanel(nfp + 1); nfp++) ;  # forward panels first: 1..nfp
    sort_numbers(aN, nall)
    for (p = 1; p <= np; p++) {
        for (i = 1; i <= pn[p]; i++) one[i] = pN[p, i]
        sort_numbers(one, pn[p])
        for (i = 1; i <= pn[p]; i++) pN[p, i] = one[i]
    }
}
# A[1..n] in ascending numeric order. Shell's sort with gaps shrinking 2.2-fold: a bench has few
# sequence lengths, but a CSV of 15,000 rows over 3000 distinct N in falling order took 16 s to
# report with insertion sort here, 3.5 s with this (the rest is the tables themselves).
function sort_numbers(A, n,   gap, i, j, t) {
    for (gap = int(n / 2); gap > 0; gap = gap == 2 ? 1 : int(gap / 2.2))
        for (i = gap + 1; i <= n; i++) {
            t = A[i]
            for (j = i; j > gap && A[j - gap] > t; j -= gap) A[j] = A[j - gap]
            A[j] = t
        }
}
function before(a, b) { return numeric(a) && (!numeric(b) || a + 0 < b + 0) }
function staged(s) { return s ~ /^[0-9]+[a-z]*$/ }
function bbefore(a, b) { return staged(a) && (!staged(b) || a + 0 < b + 0 || (a + 0 == b + 0 && a < b)) }
# Series s of panel k's table, in that panel's order.
function series(k, s) { return isbwdpanel(k) ? bser[s] : ser[s] }
function pbefore(i, j) {
    if (R[i, "pass"] != R[j, "pass"]) return R[i, "pass"] == "fwd"
    if (R[i, "D"] != R[j, "D"]) return R[i, "D"] + 0 < R[j, "D"] + 0
    if (R[i, "causal"] != R[j, "causal"]) return R[i, "causal"] < R[j, "causal"]
    if (R[i, "B"] != R[j, "B"]) return R[i, "B"] + 0 < R[j, "B"] + 0
    if (R[i, "H"] != R[j, "H"]) return R[i, "H"] + 0 < R[j, "H"] + 0
    return R[i, "dtype"] < R[j, "dtype"]
}
function row_at(k, N, s) { return ((order[k], N, s) in find) ? find[order[k], N, s] : 0 }
function speedup(i, base,   p) { p = point(i); return ok(i) && (p in base) ? base[p] / R[i, "ms"] : -1 }

# ---- number formats (the same as the C tables they replace) --------------------------------------
function fmt_ms(v) { return v >= 1000 ? sprintf("%.0f", v) : v >= 100 ? sprintf("%.1f", v) : v >= 10 ? sprintf("%.2f", v) : sprintf("%.3f", v) }
function fmt_tf(v) {
    if (v == "" || !(v >= 0)) return "-"
    return v >= 100 ? sprintf("%.0f", v) : v >= 10 ? sprintf("%.1f", v) : v >= 1 ? sprintf("%.2f", v) \
         : v >= 0.01 ? sprintf("%.3f", v) : sprintf("%.5f", v)
}
function fmt_x(v) {
    if (!(v > 0)) return "-"
    return v >= 100 ? sprintf("%.0fx", v) : v >= 10 ? sprintf("%.1fx", v) : v >= 0.01 ? sprintf("%.2fx", v) : sprintf("%.4fx", v)
}
function fmt_bytes(v) {
    if (v == "" || !(v >= 0)) return "-"
    return v < 1 ? "0" : v < 1024 ? sprintf("%.0f B", v) : v < 1048576 ? sprintf("%.1f KiB", v / 1024) \
         : v < 1073741824 ? sprintf("%.1f MiB", v / 1048576) : sprintf("%.1f GiB", v / 1073741824)
}
function label(i) { return (R[i, "name"] != "" && R[i, "name"] != R[i, "stage"]) ? R[i, "stage"] " " R[i, "name"] : R[i, "stage"] }
function causal_word(c) { return c ? "causal" : "non-causal" }

# The cells every table shares: ms, TFLOP/s, vs 02, vs torch, vs best, extra mem, check -> C[1..7].
function metric_cells(i,   st, fail, note) {
    st = R[i, "status"]; fail = st == "FAIL"; note = substr(R[i, "note"], 1, 300)
    if (st != "ok" && !fail) {
        C[1] = st; C[2] = C[3] = C[4] = C[5] = C[6] = "-"; C[7] = R[i, "note"]
        return
    }
    C[1] = fail ? "FAIL" : fmt_ms(R[i, "ms"])   # a wrong result's time means nothing
    C[2] = fail ? "-" : fmt_tf(R[i, "tflops"])
    C[3] = R[i, "pass"] == "bwd" ? fmt_x(speedup(i, basebwd)) : fmt_x(speedup(i, base02)); C[4] = fmt_x(speedup(i, basetorch)); C[5] = fmt_x(speedup(i, best))
    C[6] = fmt_bytes(R[i, "extra_bytes"])
    if (fail) C[7] = (md ? "**FAIL** " : "FAIL ") note
    else if (R[i, "max_abs_err"] != "")
        C[7] = sprintf("%s %.1e", R[i, "check"] != "" ? R[i, "check"] : "pass", R[i, "max_abs_err"]) (note != "" ? "; " note : "")
    else C[7] = (R[i, "check"] != "" ? R[i, "check"] : "-") (note != "" ? "; " note : "")
}

# ---- a table: spec "N>|stage<|..." ('>' right-aligned), rows added cell by cell ------------------
function tnew(spec,   k, n, h) {
    tn = split(spec, h, "|"); trows = 0
    for (k = 1; k <= tn; k++) { TR[k] = substr(h[k], length(h[k])) == ">"; TH[k] = substr(h[k], 1, length(h[k]) - 1) }
}
function tadd(k, s) { if (k == 1) trows++; T[trows, k] = s }
function width(s) { gsub(/[\200-\277]/, "", s); return length(s) }
function pad(n,   s) { s = ""; while (n-- > 0) s = s " "; return s }
function tprint(   k, r, w, s, line) {
    if (md) {
        line = ""; for (k = 1; k <= tn; k++) line = line "| " TH[k] " "; print line "|"
        line = ""; for (k = 1; k <= tn; k++) line = line (TR[k] ? "|---:" : "|:---"); print line "|"
        for (r = 1; r <= trows; r++) { line = ""; for (k = 1; k <= tn; k++) line = line "| " T[r, k] " "; print line "|" }
        return
    }
    for (k = 1; k <= tn; k++) { W[k] = width(TH[k]); for (r = 1; r <= trows; r++) if (width(T[r, k]) > W[k]) W[k] = width(T[r, k]) }
    for (r = -1; r <= trows; r++) {
        line = ""
        for (k = 1; k <= tn; k++) {
            if (r == 0) { s = pad(W[k]); gsub(/ /, "-", s) } else s = r < 0 ? TH[k] : T[r, k]
            w = W[k] - width(s)
            line = line (k > 1 ? "  " : "") (TR[k] && r ? pad(w) s : s (k < tn && r ? pad(w) : ""))
        }
        print line
    }
}

# ---- the modes --------------------------------------------------------------------------------
function header(   i, first, s, k, skipped, why, any, ran, l2) {
    for (i = 1; i <= nr && !first; i++) if (R[i, "status"] != "no-gpu") first = i
    if (!first) first = 1
    if (md) printf "GPU: **%s** · date: %s · commit: `%s`\n\n", R[first, "gpu"], R[first, "date"], R[first, "commit"]
    else printf "GPU: %s  date: %s  commit: %s\n\n", R[first, "gpu"], R[first, "date"], R[first, "commit"]
    for (k = 1; k <= ns; k++) {                 # GPU stages that ran nowhere, and why
        s = ser[k]; any = ran = 0
        if (!numeric(s)) continue
        for (i = 1; i <= nr; i++) if (R[i, "stage"] == s) {
            any = 1
            if (R[i, "status"] != "no-gpu") ran = 1; else if (why == "") why = R[i, "note"]
        }
        if (any && !ran) skipped = skipped (skipped != "" ? ", " : "") s
    }
    # the CSV writers turn a note's commas into ';' (the CSV is not quoted): prose gets its commas back
    gsub(/;/, ",", why)
    if (skipped != "") printf "%sGPU stages skipped (%s): %s.%s\n\n", md ? "**" : "", skipped, why, md ? "**" : ""
    for (i = 1; i <= nr; i++) if (R[i, "l2"] == "warm" || R[i, "l2"] == "cold") l2[R[i, "l2"]] = 1
    if (("warm" in l2) || ("cold" in l2))
        printf "L2 cache between timed runs: %s.\n\n", ("warm" in l2) && ("cold" in l2) ? "warm and cold rows mixed (the CSV's l2 column says which)" \
            : ("cold" in l2) ? "**cold** (4x the L2 size written before every timed run: `make bench COLD=1`)" \
            : "**warm** (Q, K, V may stay in L2 from one timed run to the next, as in back-to-back calls; `make bench COLD=1` flushes it)"
    facts()
}

# The distinct values of column c over the rows (of stage s alone when s is given), in the order met,
# ", " between them; "-" (no value: a row that did not run) and empty cells left out.
# unit: after each value but "no GPU" (a merge of a GPU run and a CPU one holds both).
function values(c, s, unit,   i, v, out, met) {
    for (i = 1; i <= nr; i++) {
        v = R[i, c]
        if (v == "" || v == "-" || (s != "" && R[i, "stage"] != s) || (v in met)) continue
        met[v] = 1; out = out (out != "" ? ", " : "") (v == "no-gpu" ? "no GPU" : v unit)
    }
    return out
}
# One fact of the run: what column c holds, in words (unit after it); "not run" where the rows say "-"
# (a peer's library that was not there), else "not recorded".
function fact(what, c, unit,   v, i) {
    v = values(c, "", unit)
    if (v == "") for (i = 1; i <= nr && R[i, c] != "-"; i++) ;
    return what " " (v != "" ? v : i <= nr ? "not run" : "not recorded")
}
# The run's facts beyond its rows, in one line: what was set (warm-up, L2), where it ran (GPUs per row,
# driver, SM clock, power limit) and what the peers were (library versions). A CSV written before these
# columns, or by a writer that could not know one (attn-bench knows no PyTorch, and no power limit but
# what make bench's nvidia-smi fills in), says "not recorded" for it.
function facts(   i, l2, w, g, m, lines, b) {
    b = md ? "**" : ""
    for (i = 1; i <= nr; i++) if (R[i, "l2"] == "warm" || R[i, "l2"] == "cold") l2[R[i, "l2"]] = 1
    w = values("warmup_ms", "", "")
    w = w == "" ? "not recorded" : w == "0" ? "none (1 or 2 untimed runs a point)" \
        : w " ms of untimed runs before each GPU point's timing"
    g = values("gpus", "", "")
    if (g == "0") g = "none (the CPU stages alone ran)"
    else sub(/^0, |, 0$/, "", g)   # the CPU stages' 0 beside a GPU run's count says nothing more
    m = values("gpus", MULTIGPU, "")
    m = m == "" ? "'s GPUs not recorded" : " on " gpus_of(MULTIGPU)
    for (i = 1; i <= nr && R[i, "stage"] != MULTIGPU; i++) ;
    g = (g == "" ? "not recorded" : g) (i > nr ? "" : ran(MULTIGPU) ? ", stage " MULTIGPU m : ", stage " MULTIGPU " did not run")
    for (i = 1; i <= nr && staged(R[i, "stage"]); i++) ;   # a peer's row: the libraries were asked
    printf "%sRecorded with the run:%s warm-up %s; L2 %s; GPUs a row ran on: %s; %s; %s; %s; %s.\n\n",
        b, b, w, ("warm" in l2) && ("cold" in l2) ? "warm and cold (mixed)" : ("cold" in l2) ? "cold" : ("warm" in l2) ? "warm" \
        : values("l2", "", "") == "" && R[1, "l2"] == "-" ? "not used (no GPU row was timed)" : "not recorded",
        g, fact("driver", "driver", ""), fact("SM clock (the peak the device reports)", "sm_clock_mhz", " MHz"),
        fact("power limit", "power_limit_w", " W"), (i > nr) ? "PyTorch, cuDNN, Triton, FlashAttention-4: no peer ran" \
        : fact("PyTorch", "torch", "") ", " fact("cuDNN", "cudnn", "") ", " fact("Triton", "triton", "") ", " \
          fact("FlashAttention-4", "fa4", "")
}

function legend(   b) {
    b = md ? "*" : ""
    printf "%sms%s: median of the timed runs after warm-up. %sTFLOP/s%s: 4·B·H·N²·D FLOPs (half when causal) / time. " \
        "%svs 02%s, %svs torch%s, %svs best%s: the time of stage 02, of naive PyTorch (torch_naive), or of the fastest row " \
        "at that point, over this row's time (above 1: faster). %sextra mem%s: device memory beyond Q, K, V, O and LSE. " \
        "%scheck%s: max |O - O_ref| on sampled rows against the double CPU reference; a FAIL row is never counted as a " \
        "timing. OOM: the stage's workspace does not fit; cpu-skip: the CPU stage would take longer than the limit; " \
        "%sunavailable: the stage does not run on this GPU (its note says why); unsupported: a head dim the stage does " \
        "not take.\n\n", b, b, b, b, b, b, b, b, b, b, b, b, b, b,
        ("gpu-skip" in seen) ? "gpu-skip: a GPU stage's run was estimated above the limit (attn-bench --gpu-limit); " : ""
}

# What the backward rows' columns mean, once before their panels.
function legend_bwd(   b) {
    b = md ? "*" : ""
    printf "%sBackward%s: dQ, dK and dV from dO and the forward's O and LSE (the rows whose pass is bwd). %sms%s: the " \
        "backward alone (a stage's forward runs once before it, untimed; a peer's is torch.autograd.grad of its output, " \
        "which times no accumulation into .grad). %sTFLOP/s%s: 2.5 times the forward's 4·B·H·N²·D FLOPs (half when causal; " \
        "five products of the forward's size against two) / time. %svs %s%s, %svs best%s: the time of stage %s (the naive " \
        "backward) or of the fastest backward row at that point over this row's time. %sextra mem%s: device memory beyond " \
        "Q, K, V, O, LSE, dO, dQ, dK and dV: stage 11's N×N P and dS grow as N², stage 12's and 13's fp32 dQ accumulator " \
        "and D as N. %scheck%s: the largest error of dQ, dK and dV against the double reference (the peers: float64, " \
        "on sampled heads), with the tolerance of suite/check_backward.c.\n\n",
        b, b, b, b, b, b, b, BASEBWD, b, b, b, BASEBWD, b, b, b, b
}

function panel_title(k,   i, bw) {
    i = prow[k]; bw = isbwdpanel(k)
    if (md) printf "**%s %d, %s** (B=%d, H=%d, %s)\n\n", bw ? "Backward, D =" : "D =", R[i, "D"], causal_word(R[i, "causal"]),
        R[i, "B"], R[i, "H"], R[i, "dtype"]
    else printf "== %s%d, %s  (B=%d, H=%d, %s) ==\n", bw ? "Backward: D=" : "D=", R[i, "D"], causal_word(R[i, "causal"]),
        R[i, "B"], R[i, "H"], R[i, "dtype"]
}

# Panel k's table: a row per stage or peer and N. A backward panel's third column is the time of stage
# 11 over the row's (vs 02 and vs torch have no backward rows to divide).
function panel_table(k,   j, n, s, i, first, c, bw) {
    bw = isbwdpanel(k)
    tnew(bw ? "N>|stage<|ms>|TFLOP/s>|vs " BASEBWD ">|vs best>|extra mem>|check<" \
            : "N>|stage<|ms>|TFLOP/s>|vs 02>|vs torch>|vs best>|extra mem>|check<")
    for (j = 1; j <= pn[order[k]]; j++) {
        n = pN[order[k], j]; first = 1
        for (s = 1; s <= ns; s++) {
            i = row_at(k, n, series(k, s))
            if (!i || R[i, "status"] == "no-gpu") continue
            metric_cells(i)
            tadd(1, first ? n : ""); tadd(2, label(i))
            for (c = 1; c <= 7; c++) if (!bw || c != 4) tadd(c + 2 - (bw && c > 4), C[c])
            first = 0
        }
    }
    if (trows) { panel_title(k); tprint(); print "" }
}

function tables(   k, s) {
    header(); legend()
    for (k = 1; k <= nfp; k++) panel_table(k)
    for (s = 1; s <= ns; s++) if (isfast(ser[s]) && (ser[s] in timed)) versus(ser[s], 1, nfp, "fwd")
    if (nfp == np) return
    legend_bwd()
    for (k = nfp + 1; k <= np; k++) panel_table(k)
    for (s = 1; s <= ns; s++) if (isfastbwd(ser[s]) && (ser[s] in timed)) versus(ser[s], nfp + 1, np, "bwd")
    road()
}

# Fast stage f against each peer present in pass ps: the peer's time over the stage's, per panel
# (k0..k1, those of the pass) and N.
function versus(f, k0, k1, ps,   spec, k, q, j, n, a, b, cell, any, desc, npk, pk, fa4, kv) {
    for (q = 1; q <= NPEER; q++) if ((ps, PEER[q]) in havepeer) pk[++npk] = PEER[q]
    if (!npk) return
    kv = k1 - k0 + 1 > int(15 / npk) ? k0 + int(15 / npk) - 1 : k1   # at most 15 columns
    spec = "N>"
    for (k = k0; k <= kv; k++) for (q = 1; q <= npk; q++)
        spec = spec sprintf("|D=%d%s vs %s>", R[prow[k], "D"], R[prow[k], "causal"] ? " causal" : "", LABEL[pk[q]])
    tnew(spec)
    for (j = 1; j <= nall; j++) {
        n = aN[j]; any = 0
        for (k = k0; k <= kv; k++) for (q = 1; q <= npk; q++) {
            a = row_at(k, n, f); b = row_at(k, n, pk[q])
            if (!a || !b) cell[k, q] = "-"
            else if (!ok(b)) cell[k, q] = LABEL[pk[q]] " " R[b, "status"]
            else if (!ok(a)) cell[k, q] = f " " R[a, "status"]
            else { cell[k, q] = sprintf("%.2f", R[b, "ms"] / R[a, "ms"]); any = 1 }
        }
        if (!any) continue
        tadd(1, n)
        for (k = k0; k <= kv; k++) for (q = 1; q <= npk; q++) tadd(1 + (k - k0) * npk + q, cell[k, q])
    }
    if (!trows) return
    for (q = 1; q <= npk; q++) desc = desc (q > 1 ? ", " : "") LABEL[pk[q]]
    fa4 = ((ps, "flash_attn4") in havepeer) ? "; FA4: the flash-attn-4 package (on Hopper, its FlashAttention-3-class kernel)" : ""
    if (ps == "bwd") {
        if (md) printf "**Stage %s's backward against the peers' backward** (%s): the peer's time over stage %s's; above 1, " \
            "stage %s is faster. FA2 and cuDNN: the backward of PyTorch SDPA's FlashAttention-2 and cuDNN backends%s.\n\n", \
            f, desc, f, f, fa4
        else printf "== Backward: stage %s against the peers' backward (%s): peer time / stage %s time (above 1: %s is faster) ==\n", \
            f, desc, f, f
    } else if (md) printf "**Stage %s against the peers** (%s): the peer's time over stage %s's; above 1, stage %s is faster. " \
        "FA2 and cuDNN: PyTorch SDPA's FlashAttention-2 and cuDNN backends; Triton: the seed's kernel as written here, python/triton_fa2.py%s.\n\n", \
        f, desc, f, f, fa4
    else printf "== Stage %s against the peers (%s): peer time / stage %s time (above 1: %s is faster) ==\n", f, desc, f, f
    tprint(); print ""
}

# The time of ROAD[r - 1] over that of ROAD[r], at point k, N (a cell of road() and stage_table_bwd()).
function road_cell(k, n, r,   a, b) {
    a = row_at(k, n, ROAD[r]); b = row_at(k, n, ROAD[r - 1])
    if (!a || !b) return "-"
    if (!ok(b)) return ROAD[r - 1] " " R[b, "status"]
    if (!ok(a)) return ROAD[r] " " R[a, "status"]
    return sprintf("%.2f", R[b, "ms"] / R[a, "ms"])
}
# Where r stands in ROAD (0: not on it).
function road_at(s,   r) { for (r = NROAD; r >= 1 && ROAD[r] != s; r--) ; return r }

# The backward stages against each other, the ratios the targets are set in: a row per panel and N.
function road(   spec, r, nc, col, k, j, n, any, c, cell) {
    for (r = 2; r <= NROAD; r++) if ((ROAD[r] in bwdstage) && (ROAD[r - 1] in bwdstage)) col[++nc] = r
    if (!nc) return
    spec = "D>|causal<|N>"
    for (c = 1; c <= nc; c++) spec = spec "|" ROAD[col[c]] " vs " ROAD[col[c] - 1] ">"
    tnew(spec)
    for (k = nfp + 1; k <= np; k++) for (j = 1; j <= pn[order[k]]; j++) {
        n = pN[order[k], j]; any = 0
        for (c = 1; c <= nc; c++) if ((cell[c] = road_cell(k, n, col[c])) ~ /^[0-9]/) any = 1
        if (!any) continue
        tadd(1, R[prow[k], "D"]); tadd(2, R[prow[k], "causal"] ? "yes" : "no"); tadd(3, n)
        for (c = 1; c <= nc; c++) tadd(3 + c, cell[c])
    }
    if (!trows) return
    if (md) printf "**The backward stages against each other**: the earlier stage's time over the later one's (above 1: " \
        "the later is faster). Targets: 12 vs 11 >= 5 at N = 4096, 13 vs 12 >= 5, 13d vs 13 >= 0.87 (13d within 15%% of " \
        "13's time).\n\n"
    else printf "== Backward: the stages against each other: earlier stage's time / later stage's time ==\n"
    tprint(); print ""
}

# One stage's rows for its README; a fast stage also gets the peers' TFLOP/s and time ratios.
function stage_table(f,   spec, npk, pk, q, k, j, n, i, b, last) {
    if (f in bwdstage) { stage_table_bwd(f); return }
    if (isfast(f)) for (q = 1; q <= NPEER; q++) if (("fwd", PEER[q]) in havepeer) pk[++npk] = PEER[q]
    spec = "D>|causal<|N>|ms>|TFLOP/s>|vs 02>|vs torch>|extra mem>|check<"
    for (q = 1; q <= npk; q++) spec = spec "|" LABEL[pk[q]] " TFLOP/s>"
    for (q = 1; q <= npk; q++) spec = spec "|vs " LABEL[pk[q]] ">"
    tnew(spec)
    for (k = 1; k <= np; k++) for (j = 1; j <= pn[order[k]]; j++) {
        n = pN[order[k], j]
        if (!(i = row_at(k, n, f))) continue
        last = i
        metric_cells(i)
        tadd(1, R[i, "D"]); tadd(2, R[i, "causal"] ? "yes" : "no"); tadd(3, n)
        tadd(4, C[1]); tadd(5, C[2]); tadd(6, C[3]); tadd(7, C[4]); tadd(8, C[6]); tadd(9, C[7])
        for (q = 1; q <= npk; q++) {
            b = row_at(k, n, pk[q])
            tadd(9 + q, b && ok(b) ? fmt_tf(R[b, "tflops"]) : b ? R[b, "status"] : "-")
            tadd(9 + npk + q, b && ok(b) && ok(i) ? sprintf("%.2f", R[b, "ms"] / R[i, "ms"]) : "-")
        }
    }
    if (!last) { printf "report: no rows for stage %s in this CSV\n", f > "/dev/stderr"; exit 1 }
    printf "Stage %s on **%s** (B=%d, H=%d, %s%s; date %s, commit `%s`):\n\n", f, R[last, "gpu"], R[last, "B"], R[last, "H"],
        R[last, "dtype"], f == MULTIGPU ? "; " gpus_of(f) : "", R[last, "date"], R[last, "commit"]
    tprint()
}

# A backward stage's rows for its README: vs 11, vs the stage before it on the road (when that is not
# 11), the memory beyond the inputs and gradients; a fast one also the peers' backward.
function stage_table_bwd(f,   spec, npk, pk, q, k, j, n, i, b, last, r, c) {
    if (isfastbwd(f)) for (q = 1; q <= NPEER; q++) if (("bwd", PEER[q]) in havepeer) pk[++npk] = PEER[q]
    r = road_at(f); if (r > 1 && ROAD[r - 1] == BASEBWD) r = 0
    spec = "D>|causal<|N>|ms>|TFLOP/s>|vs " BASEBWD ">" (r > 1 ? "|vs " ROAD[r - 1] ">" : "") "|extra mem>|check<"
    for (q = 1; q <= npk; q++) spec = spec "|" LABEL[pk[q]] " TFLOP/s>"
    for (q = 1; q <= npk; q++) spec = spec "|vs " LABEL[pk[q]] ">"
    tnew(spec)
    for (k = nfp + 1; k <= np; k++) for (j = 1; j <= pn[order[k]]; j++) {
        n = pN[order[k], j]
        if (!(i = row_at(k, n, f))) continue
        last = i
        metric_cells(i)
        tadd(1, R[i, "D"]); tadd(2, R[i, "causal"] ? "yes" : "no"); tadd(3, n)
        tadd(4, C[1]); tadd(5, C[2]); tadd(6, C[3]); c = 6
        if (r > 1) tadd(++c, road_cell(k, n, r))
        tadd(++c, C[6]); tadd(++c, C[7])
        for (q = 1; q <= npk; q++) {
            b = row_at(k, n, pk[q])
            tadd(c + q, b && ok(b) ? fmt_tf(R[b, "tflops"]) : b ? R[b, "status"] : "-")
            tadd(c + npk + q, b && ok(b) && ok(i) ? sprintf("%.2f", R[b, "ms"] / R[i, "ms"]) : "-")
        }
    }
    if (!last) { printf "report: no rows for stage %s in this CSV\n", f > "/dev/stderr"; exit 1 }
    printf "Stage %s's backward on **%s** (B=%d, H=%d, %s; date %s, commit `%s`; TFLOP/s at 2.5 times the forward's " \
        "FLOPs; extra mem: beyond Q, K, V, O, LSE, dO and the gradients):\n\n", f, R[last, "gpu"], R[last, "B"], R[last, "H"],
        R[last, "dtype"], R[last, "date"], R[last, "commit"]
    tprint()
}

# TFLOP/s of every stage and peer at one N of panels k0..k1 (the largest where the baseline bs ran in
# every one of them, else the largest), with the speedup over it (times in base) in brackets: the top
# README's table, the forward's (baseline naive PyTorch) and the backward's (stage 11).
function compact(k0, k1, bs, base,   k, j, n, N, s, i, spec, cnt, sp) {
    for (j = 1; j <= nall; j++) {
        cnt = 0
        for (k = k0; k <= k1; k++) if ((i = row_at(k, aN[j], bs)) && ok(i)) cnt++
        if (cnt == k1 - k0 + 1) N = aN[j]
    }
    if (N == "") N = aN[nall]
    spec = "stage<"
    for (k = k0; k <= k1; k++) spec = spec sprintf("|D=%d%s>", R[prow[k], "D"], R[prow[k], "causal"] ? " causal" : "")
    tnew(spec)
    for (s = 1; s <= ns; s++) {
        cnt = 0
        for (k = k0; k <= k1; k++) if ((i = row_at(k, N, series(k0, s))) && R[i, "status"] ~ /^(ok|OOM|FAIL)$/) cnt++
        if (!cnt) continue
        for (k = k0; k <= k1 && !(i = row_at(k, N, series(k0, s))); k++) ;
        tadd(1, label(i) (R[i, "stage"] == MULTIGPU ? " (" gpus_of(MULTIGPU) ")" : ""))
        for (k = k0; k <= k1; k++) {
            i = row_at(k, N, series(k0, s))
            sp = i ? speedup(i, base) : -1
            tadd(k - k0 + 2, !i ? "-" : !ok(i) ? R[i, "status"] : fmt_tf(R[i, "tflops"]) (sp > 0 ? " (" fmt_x(sp) ")" : ""))
        }
    }
    i = prow[k0]
    if (bs == BASEBWD)
        printf "**Backward TFLOP/s at N = %d** (B=%d, H=%d, %s; 2.5 times the forward's FLOPs; in brackets: the speedup " \
            "over stage %s, the naive backward) on **%s**, date %s, commit `%s`:\n\n", N, R[i, "B"], R[i, "H"], R[i, "dtype"],
            BASEBWD, R[i, "gpu"], R[i, "date"], R[i, "commit"]
    else printf "**TFLOP/s at N = %d** (B=%d, H=%d, %s; in brackets: the speedup over naive PyTorch) on **%s**, " \
        "date %s, commit `%s`:\n\n", N, R[i, "B"], R[i, "H"], R[i, "dtype"], R[i, "gpu"], R[i, "date"], R[i, "commit"]
    tprint()
}

# 1 when some row of stage s ran (timed, or FAILed its check).
function ran(s,   i) {
    for (i = 1; i <= nr; i++) if (R[i, "stage"] == s && R[i, "status"] ~ /^(ok|FAIL)$/) return 1
    return 0
}

# How many GPUs stage s's rows ran on, in words ("1 GPU", "2 GPUs", "GPUs not recorded").
function gpus_of(s,   v) {
    v = values("gpus", s, "")
    return v == "" ? "GPUs not recorded" : v " GPU" (v == "1" ? "" : "s")
}

# The short name of a series in the summary: a peer's label (cuDNN, FA2), a stage's id.
function short(s) { return (s in LABEL) ? LABEL[s] : s }

# The summary: for each pair "a:b" of pairs whose both sides have forward rows, b's time over a's (a's
# speed over b's) at every forward (D, causal): the range over N >= nsplit in that panel's column, and
# in the last column the points below nsplit where it is under 1 (b faster there), with their range.
function summary(   np2, P, q, a, b, k, j, n, i, i2, r, lo, hi, under, ulo, uhi, unum, uall, spec, c, any, uk) {
    np2 = split(pairs, P, " ")
    spec = "ratio<"
    for (k = 1; k <= nfp; k++) spec = spec sprintf("|D=%d%s, N >= %d>", R[prow[k], "D"], R[prow[k], "causal"] ? " causal" : "", nsplit)
    spec = spec "|N < " nsplit ": under 1 at<"
    tnew(spec)
    for (q = 1; q <= np2; q++) {
        a = substr(P[q], 1, index(P[q], ":") - 1); b = substr(P[q], index(P[q], ":") + 1)
        if (!(a in fwdstage) || !(b in fwdstage)) continue
        split("", lo); split("", hi); under = ""; unum = uall = 0; ulo = ""; uhi = ""; any = 0; uk = 0
        for (k = 1; k <= nfp; k++) for (j = 1; j <= pn[order[k]]; j++) {
            n = pN[order[k], j]; i = row_at(k, n, a); i2 = row_at(k, n, b)
            if (!i || !i2 || !ok(i) || !ok(i2)) continue
            r = R[i2, "ms"] / R[i, "ms"]; any = 1
            if (n >= nsplit) {
                if (!(k in lo) || r < lo[k]) lo[k] = r
                if (!(k in hi) || r > hi[k]) hi[k] = r
                continue
            }
            uall++
            if (r >= 1) continue
            unum++
            if (ulo == "" || r < ulo) ulo = r
            if (uhi == "" || r > uhi) uhi = r
            # the points grouped by panel: "D=64: N=512, 1024; D=128 causal: N=512"
            under = under (k == uk ? ", " : (under != "" ? "; " : "") sprintf("D=%d%s: N=", R[prow[k], "D"], R[prow[k], "causal"] ? " causal" : "")) n
            uk = k
        }
        if (!any) continue
        tadd(1, a " / " short(b))
        for (k = 1; k <= nfp; k++)
            tadd(k + 1, !(k in lo) ? "-" : lo[k] == hi[k] || sprintf("%.3f", lo[k]) == sprintf("%.3f", hi[k]) ? sprintf("%.3f", lo[k]) \
                                       : sprintf("%.3f-%.3f", lo[k], hi[k]))
        c = !uall ? "-" : !unum ? sprintf("none of %d", uall) \
            : sprintf("%s %d: %s (%s)", unum == uall ? "all" : unum " of", uall, under,
                      ulo == uhi ? sprintf("%.3f", ulo) : sprintf("%.3f-%.3f", ulo, uhi))
        tadd(nfp + 2, c)
    }
    if (!trows) return
    i = prow[1]
    printf "**Speed ratios in this run** (A / B: B's time over A's; above 1, A is faster; B=%d, H=%d, %s): each " \
        "(D, causal) column the range over N >= %d, the last column the points below that where A is slower:\n\n",
        R[i, "B"], R[i, "H"], R[i, "dtype"], nsplit
    tprint()
}

# A CSV field as text for a gnuplot string: only letters, digits and ' ._:+/()=,-' are kept, the rest
# become '_'. A backquote runs a shell command even inside a gnuplot string, and a quote would end the
# string and let the rest run as gnuplot commands (system() among them): report.sh puts these fields
# into the script, so a planted CSV must not be able to reach either.
function gp(s) { gsub(/[^A-Za-z0-9 ._:+\/()=,-]/, "_", s); return s }

# Files for gnuplot in dir: panels ("k D causal B H pass"), series ("s kind label", in order), one
# d_k_s.dat per panel and series ("N ms TFLOP/s vs02 vstorch GiB", NaN where absent), have ("k s
# column" for every column with a value), oom ("k s N": the points marked OOM), meta.
function plotdata(   k, s, i, j, n, f, v, c, sp, mem) {
    for (k = 1; k <= np; k++) {
        i = prow[k]
        print k, gp(R[i, "D"]), R[i, "causal"], gp(R[i, "B"]), gp(R[i, "H"]), R[i, "pass"] > (dir "/panels")
    }
    for (s = 1; s <= ns; s++) {
        for (j = 1; j <= nr && R[j, "stage"] != ser[s]; j++) ;
        print s, numeric(ser[s]) ? "stage" : "peer", gp(label(j)) > (dir "/series")
    }
    for (k = 1; k <= np; k++) for (j = 1; j <= pn[order[k]]; j++) for (s = 1; s <= ns; s++) {
        n = pN[order[k], j]
        if (!(i = row_at(k, n, ser[s]))) continue
        if (R[i, "status"] == "OOM") print k, s, n > (dir "/oom")
        if (!ok(i)) continue
        if (!meta++) print gp(R[i, "gpu"]) "\t" gp(R[i, "date"]) "\t" gp(R[i, "commit"]) > (dir "/meta")
        mem = R[i, "extra_bytes"] == "" ? "NaN" : R[i, "extra_bytes"] / 1073741824
        v[2] = R[i, "ms"]; v[3] = R[i, "tflops"]; v[6] = mem
        sp = speedup(i, base02); v[4] = sp > 0 ? sp : "NaN"
        sp = speedup(i, basetorch); v[5] = sp > 0 ? sp : "NaN"
        f = dir "/d_" k "_" s ".dat"
        print n, v[2], v[3], v[4], v[5], v[6] > f
        for (c = 2; c <= 6; c++) if (v[c] != "NaN") have[k " " s " " c] = 1
    }
    for (f in have) print f > (dir "/have")
    printf "" > (dir "/have"); printf "" > (dir "/oom")
}

END {
    if (mode == "merge") {
        # no row read (every file skipped or empty): OUT must keep what it holds, not become a header
        if (!nr) { print "report: merge: no rows to merge (every CSV was skipped or empty)" > "/dev/stderr"; exit 1 }
        for (k = 1; k <= NCOL; k++) printf "%s%s", COL[k], k < NCOL ? "," : "\n"
        for (i = 1; i <= nr; i++) for (k = 1; k <= NCOL; k++) printf "%s%s", R[i, COL[k]], k < NCOL ? "," : "\n"
        exit 0
    }
    if (!nr) { print "report: no rows" > "/dev/stderr"; exit 1 }
    index_rows()
    if (mode == "tables") tables()
    else if (mode == "stage") stage_table(id)
    else if (mode == "compact") { if (nfp) compact(1, nfp, "torch_naive", basetorch) }
    else if (mode == "bcompact") { if (nfp == np) exit 3; compact(nfp + 1, np, BASEBWD, basebwd) }
    else if (mode == "plotdata") plotdata()
    else if (mode == "summary") { if (nfp) summary() }
    else if (mode == "facts") facts()
    else { printf "report: unknown mode '%s'\n", mode > "/dev/stderr"; exit 2 }
}
