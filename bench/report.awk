# bench/report.awk: the tables of bench CSVs (attn-bench's, the peers', or a merged one), in POSIX awk.
# Run through bench/report.sh, which sets LC_ALL=C (bytes, so widths can skip UTF-8 continuations).
#
#   -v mode=merge         the rows of every CSV given, under one header (columns matched by name)
#   -v mode=tables        every (D, causal) panel: one row per stage or peer and N; then each fast
#                         stage against the peers (-v md=1: Markdown; plain aligned text otherwise)
#   -v mode=stage -v id=NN   one stage's rows, for its README (Markdown)
#   -v mode=compact       TFLOP/s of every stage and peer at one N, speedup over naive PyTorch
#   -v mode=plotdata -v dir=DIR   data files for gnuplot (report.sh plots)
# Fast stages (compared with the peers): numeric ids >= fast (default 06), so later stages join alone.

BEGIN {
    FS = ","
    NCOL = split("gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes," \
                 "workspace_bytes,max_abs_err,check,repeats,l2,note,pass,hbm_read,hbm_written,tile_read," \
                 "tile_written", COL, ",")
    if (fast == "") fast = 6
    # the peers a fast stage is set against, and their short labels
    NPEER = split("sdpa_flash sdpa_cudnn triton_fa2 flash_attn4", PEER, " ")
    LABEL["sdpa_flash"] = "FA2"; LABEL["sdpa_cudnn"] = "cuDNN"; LABEL["triton_fa2"] = "Triton"
    LABEL["flash_attn4"] = "FA4"
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
    if (R[nr, "dtype"] == "") R[nr, "dtype"] = "fp16"
    if (!wellformed(nr)) {
        printf "report: %s:%d: skipped a malformed row\n", FILENAME, FNR > "/dev/stderr"
        nr--
        next
    }
    if (R[nr, "pass"] == "bwd") backward[R[nr, "stage"]] = 1
    if (R[nr, "causal"] == "True" || R[nr, "causal"] == "true") R[nr, "causal"] = 1
    R[nr, "causal"] += 0
    if (R[nr, "tflops"] == "" && R[nr, "ms"] > 0)
        R[nr, "tflops"] = 4 * R[nr, "B"] * R[nr, "H"] * R[nr, "N"] * R[nr, "N"] * R[nr, "D"] \
                          / (R[nr, "causal"] ? 2 : 1) / (R[nr, "ms"] * 1e9)
}

# A row as the writers write it: as many fields as its header (a quoted field holding a comma would
# shift every column after it; the writers never quote, so a '"' anywhere is refused), a stage, B, H,
# N, D positive integers, causal 0/1 (or Python's True/False), and every other number a number or
# empty. Anything else would be tabulated as 0 and merged as it is.
function wellformed(i,   k, c) {
    if (NF != hnf || index($0, "\"") || R[i, "stage"] == "") return 0
    for (k = split("B H N D", c, " "); k >= 1; k--) if (R[i, c[k]] !~ /^[0-9]+$/ || R[i, c[k]] + 0 <= 0) return 0
    if (R[i, "causal"] != "" && R[i, "causal"] !~ /^(0|1|True|False|true|false)$/) return 0
    for (k = split("ms tflops extra_bytes workspace_bytes max_abs_err repeats hbm_read hbm_written tile_read " \
                   "tile_written", c, " "); k >= 1; k--)
        if (R[i, c[k]] != "" && R[i, c[k]] !~ /^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$/) return 0
    return 1
}
function ok(i) { return R[i, "status"] == "ok" && R[i, "ms"] > 0 }
function point(i) { return R[i, "B"] SUBSEP R[i, "H"] SUBSEP R[i, "N"] SUBSEP R[i, "D"] SUBSEP R[i, "causal"] SUBSEP R[i, "dtype"] }
function panel(i) { return R[i, "D"] SUBSEP R[i, "causal"] SUBSEP R[i, "B"] SUBSEP R[i, "H"] SUBSEP R[i, "dtype"] }
function numeric(s) { return s ~ /^[0-9]+$/ }
# A backward stage (its rows' pass is bwd) is set against backward peers only, none of which is
# compared here yet: it is no fast stage of the forward's comparisons.
function isfast(s) { return numeric(s) && s + 0 >= fast + 0 && !(s in backward) }

# Speedups, series (stages by number, then peers as they first appear), panels and their N.
function index_rows(   i, j, k, t, p, s, key, one) {
    for (i = 1; i <= nr; i++) {
        if (!ok(i)) continue
        p = point(i)
        if (R[i, "stage"] == "02") base02[p] = R[i, "ms"]
        if (R[i, "stage"] == "torch_naive") basetorch[p] = R[i, "ms"]
        if (R[i, "pass"] == "bwd") p = p SUBSEP "bwd" # vs best: a backward time against backward rows
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
        if (s in LABEL) havepeer[s] = 1
    }
    # series: numeric ids in numeric order first (insertion sort keeps the others' order)
    for (i = 2; i <= ns; i++)
        for (j = i; j > 1 && before(ser[j], ser[j - 1]); j--) { t = ser[j]; ser[j] = ser[j - 1]; ser[j - 1] = t }
    for (i = 2; i <= np; i++)
        for (j = i; j > 1 && pbefore(prow[j], prow[j - 1]); j--) {
            t = pan[j]; pan[j] = pan[j - 1]; pan[j - 1] = t; t = prow[j]; prow[j] = prow[j - 1]; prow[j - 1] = t
        }
    for (k = 1; k <= np; k++) order[k] = pidx[pan[k]]   # sorted position -> the panel's index
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
function pbefore(i, j) {
    if (R[i, "D"] != R[j, "D"]) return R[i, "D"] + 0 < R[j, "D"] + 0
    if (R[i, "causal"] != R[j, "causal"]) return R[i, "causal"] < R[j, "causal"]
    if (R[i, "B"] != R[j, "B"]) return R[i, "B"] + 0 < R[j, "B"] + 0
    if (R[i, "H"] != R[j, "H"]) return R[i, "H"] + 0 < R[j, "H"] + 0
    return R[i, "dtype"] < R[j, "dtype"]
}
function row_at(k, N, s) { return ((order[k], N, s) in find) ? find[order[k], N, s] : 0 }
function speedup(i, base, by_pass,   p) {
    p = point(i) (by_pass && R[i, "pass"] == "bwd" ? SUBSEP "bwd" : "")
    return ok(i) && (p in base) ? base[p] / R[i, "ms"] : -1
}

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
    C[3] = fmt_x(speedup(i, base02)); C[4] = fmt_x(speedup(i, basetorch)); C[5] = fmt_x(speedup(i, best, 1))
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
}

function legend(   b) {
    b = md ? "*" : ""
    printf "%sms%s: median of the timed runs after warm-up. %sTFLOP/s%s: 4·B·H·N²·D FLOPs (half when causal) / time. " \
        "%svs 02%s, %svs torch%s, %svs best%s: the time of stage 02, of naive PyTorch (torch_naive), or of the fastest row (of the backward rows, for a backward stage) " \
        "at that point, over this row's time (above 1: faster). %sextra mem%s: device memory beyond Q, K, V, O and LSE. " \
        "%scheck%s: max |O - O_ref| on sampled rows against the double CPU reference; a FAIL row is never counted as a " \
        "timing. OOM: the stage's workspace does not fit; cpu-skip: the CPU stage would take longer than the limit; " \
        "unavailable: the stage does not run on this GPU (its note says why); unsupported: a head dim the stage does " \
        "not take.\n\n", b, b, b, b, b, b, b, b, b, b, b, b, b, b
}

function panel_title(k,   i) {
    i = prow[k]
    if (md) printf "**D = %d, %s** (B=%d, H=%d, %s)\n\n", R[i, "D"], causal_word(R[i, "causal"]), R[i, "B"], R[i, "H"], R[i, "dtype"]
    else printf "== D=%d, %s  (B=%d, H=%d, %s) ==\n", R[i, "D"], causal_word(R[i, "causal"]), R[i, "B"], R[i, "H"], R[i, "dtype"]
}

function tables(   k, j, n, s, i, first, c) {
    header(); legend()
    for (k = 1; k <= np; k++) {
        tnew("N>|stage<|ms>|TFLOP/s>|vs 02>|vs torch>|vs best>|extra mem>|check<")
        for (j = 1; j <= pn[order[k]]; j++) {
            n = pN[order[k], j]; first = 1
            for (s = 1; s <= ns; s++) {
                i = row_at(k, n, ser[s])
                if (!i || R[i, "status"] == "no-gpu") continue
                metric_cells(i)
                tadd(1, first ? n : ""); tadd(2, label(i))
                for (c = 1; c <= 7; c++) tadd(c + 2, C[c])
                first = 0
            }
        }
        if (trows) { panel_title(k); tprint(); print "" }
    }
    for (s = 1; s <= ns; s++) if (isfast(ser[s]) && (ser[s] in timed)) versus(ser[s])
}

# Fast stage f against each peer present: the peer's time over the stage's, per panel and N.
function versus(f,   spec, k, q, j, n, a, b, cell, any, desc, npk, pk, fa4) {
    for (q = 1; q <= NPEER; q++) if (PEER[q] in havepeer) pk[++npk] = PEER[q]
    if (!npk) return
    if (np * npk > 15) np_v = int(15 / npk); else np_v = np
    spec = "N>"
    for (k = 1; k <= np_v; k++) for (q = 1; q <= npk; q++)
        spec = spec sprintf("|D=%d%s vs %s>", R[prow[k], "D"], R[prow[k], "causal"] ? " causal" : "", LABEL[pk[q]])
    tnew(spec)
    for (j = 1; j <= nall; j++) {
        n = aN[j]; any = 0
        for (k = 1; k <= np_v; k++) for (q = 1; q <= npk; q++) {
            a = row_at(k, n, f); b = row_at(k, n, pk[q])
            if (!a || !b) cell[k, q] = "-"
            else if (!ok(b)) cell[k, q] = LABEL[pk[q]] " " R[b, "status"]
            else if (!ok(a)) cell[k, q] = f " " R[a, "status"]
            else { cell[k, q] = sprintf("%.2f", R[b, "ms"] / R[a, "ms"]); any = 1 }
        }
        if (!any) continue
        tadd(1, n)
        for (k = 1; k <= np_v; k++) for (q = 1; q <= npk; q++) tadd(1 + (k - 1) * npk + q, cell[k, q])
    }
    if (!trows) return
    for (q = 1; q <= npk; q++) desc = desc (q > 1 ? ", " : "") LABEL[pk[q]]
    fa4 = ("flash_attn4" in havepeer) ? "; FA4: the flash-attn-4 package (on Hopper, its FlashAttention-3-class kernel)" : ""
    if (md) printf "**Stage %s against the peers** (%s): the peer's time over stage %s's; above 1, stage %s is faster. " \
        "FA2 and cuDNN: PyTorch SDPA's FlashAttention-2 and cuDNN backends; Triton: the seed's kernel as written here, python/triton_fa2.py%s.\n\n", \
        f, desc, f, f, fa4
    else printf "== Stage %s against the peers (%s): peer time / stage %s time (above 1: %s is faster) ==\n", f, desc, f, f
    tprint(); print ""
}

# One stage's rows for its README; a fast stage also gets the peers' TFLOP/s and time ratios.
function stage_table(f,   spec, npk, pk, q, k, j, n, i, b, last) {
    if (isfast(f)) for (q = 1; q <= NPEER; q++) if (PEER[q] in havepeer) pk[++npk] = PEER[q]
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
    printf "Stage %s on **%s** (B=%d, H=%d, %s; date %s, commit `%s`):\n\n", f, R[last, "gpu"], R[last, "B"], R[last, "H"],
        R[last, "dtype"], R[last, "date"], R[last, "commit"]
    tprint()
}

# TFLOP/s of every stage and peer at one N (the largest where naive PyTorch ran in every panel,
# else the largest), with the speedup over naive PyTorch in brackets: the top README's table.
function compact(   k, j, n, N, s, i, spec, cnt, sp) {
    for (j = 1; j <= nall; j++) {
        cnt = 0
        for (k = 1; k <= np; k++) if ((i = row_at(k, aN[j], "torch_naive")) && ok(i)) cnt++
        if (cnt == np) N = aN[j]
    }
    if (N == "") N = aN[nall]
    spec = "stage<"
    for (k = 1; k <= np; k++) spec = spec sprintf("|D=%d%s>", R[prow[k], "D"], R[prow[k], "causal"] ? " causal" : "")
    tnew(spec)
    for (s = 1; s <= ns; s++) {
        cnt = 0
        for (k = 1; k <= np; k++) if ((i = row_at(k, N, ser[s])) && R[i, "status"] ~ /^(ok|OOM|FAIL)$/) cnt++
        if (!cnt) continue
        for (k = 1; k <= np && !(i = row_at(k, N, ser[s])); k++) ;
        tadd(1, label(i))
        for (k = 1; k <= np; k++) {
            i = row_at(k, N, ser[s])
            sp = i ? speedup(i, basetorch) : -1
            tadd(k + 1, !i ? "-" : !ok(i) ? R[i, "status"] : fmt_tf(R[i, "tflops"]) (sp > 0 ? " (" fmt_x(sp) ")" : ""))
        }
    }
    i = prow[1]
    printf "**TFLOP/s at N = %d** (B=%d, H=%d, %s; in brackets: the speedup over naive PyTorch) on **%s**, " \
        "date %s, commit `%s`:\n\n", N, R[i, "B"], R[i, "H"], R[i, "dtype"], R[i, "gpu"], R[i, "date"], R[i, "commit"]
    tprint()
}

# A CSV field as text for a gnuplot string: only letters, digits and ' ._:+/()=,-' are kept, the rest
# become '_'. A backquote runs a shell command even inside a gnuplot string, and a quote would end the
# string and let the rest run as gnuplot commands (system() among them): report.sh puts these fields
# into the script, so a planted CSV must not be able to reach either.
function gp(s) { gsub(/[^A-Za-z0-9 ._:+\/()=,-]/, "_", s); return s }

# Files for gnuplot in dir: panels ("k D causal B H"), series ("s kind label", in order), one
# d_k_s.dat per panel and series ("N ms TFLOP/s vs02 vstorch GiB", NaN where absent), have ("k s
# column" for every column with a value), oom ("k s N": the points marked OOM), meta.
function plotdata(   k, s, i, j, n, f, v, c, sp, mem) {
    for (k = 1; k <= np; k++) {
        i = prow[k]
        print k, gp(R[i, "D"]), R[i, "causal"], gp(R[i, "B"]), gp(R[i, "H"]) > (dir "/panels")
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
    else if (mode == "compact") compact()
    else if (mode == "plotdata") plotdata()
    else { printf "report: unknown mode '%s'\n", mode > "/dev/stderr"; exit 2 }
}
