/*
 * traffic.c: the bytes stage 10 moves on G GPUs, summed over them (attn_bytes, common/stage.h; the
 * README's "Bytes moved"). e = 2 bytes; c rows a chunk, S chunks a rank (cp_plan.h).
 *
 *   G = 1       the local stage on the whole problem, alone (stage10_run's one-GPU path)
 *   G > 1       scatter   Q, K, V from the caller's GPU to the ranks: 3 N D e read and written a head
 *               calls     every local call of the plan (cp_pair_call), counted as the local stage's
 *                         bytes for its square problem of n rows
 *               merges    each call's merged rows: its O (D e) and LSE (4) read, the running fp32 O
 *                         and LSE (4 D + 4) read and written
 *               ring      at each of the G - 1 steps after the first every rank sends its S shards of
 *                         K and V, 2 S c D e bytes a head, read on one GPU and written on the next
 *               gathers   the short key chunk's b keys copied before its calls (Q window, K, V)
 *               finish    the running O read (4 D a row), O and LSE written, then gathered
 * The local stage is the one an H100 or H200 picks (stage10_local_stage without the GPU): stage 09
 * at D = 64, 128 and 256, stage 06 at 32 and 96. On an sm_80 GPU it would be 06 throughout.
 */
#include "cp_plan.h"
#include "stage10.h"
#include "traffic.h"

/* The last registered single-GPU stage that writes LSE, needs no scratch and takes p. */
static const attn_stage *local_stage(const attn_problem *p) {
    for (int i = attn_num_stages - 1; i >= 0; i--) {
        const attn_stage *s = &attn_stages[i];
        if (s->on_gpu && s->max_gpus == 1 && s->writes_lse && !s->workspace_bytes && s->bytes_moved &&
            s->pass == ATTN_FORWARD && attn_stage_supports(s, p) == ATTN_OK)
            return s;
    }
    return NULL;
}

/* The local calls and merges of one rank over the G steps of the ring. */
static attn_bytes rank_calls(const cp_plan *pl, const attn_problem *p, const attn_stage *local, int rank) {
    const double heads = (double)p->B * (double)p->H, D = (double)p->D;
    attn_bytes b = {0, 0, 0, 0};
    for (int step = 0; step < pl->G; step++)
        for (int qs = 0; qs < pl->S; qs++)
            for (int ks = 0; ks < pl->S; ks++) {
                cp_call call;
                int64_t k = 0;
                const int src = cp_kv_source(pl, rank, step);
                while (cp_pair_call(pl, cp_chunk(pl, rank, qs), cp_chunk(pl, src, ks), &k, &call)) {
                    attn_problem sq = *p;
                    sq.N = call.n, sq.causal = call.causal;
                    b = traffic_add(b, local->bytes_moved(&sq, 1), 1.0);
                    const double rows = heads * (double)(call.to - call.from);
                    const double merge_r = rows * (D * TRAFFIC_ELEM + 4.0 + 4.0 * D + 4.0), merge_w = rows * (4.0 * D + 4.0);
                    const double gather = call.gather ? heads * 3.0 * (double)call.n * D * TRAFFIC_ELEM : 0.0;
                    b = traffic_add(b, traffic_untiled(merge_r + gather, merge_w + gather), 1.0);
                }
            }
    return b;
}

attn_bytes stage10_bytes(const attn_problem *p, int gpus) {
    const attn_stage *local = local_stage(p);
    const attn_bytes none = {0, 0, 0, 0};
    if (!local) return none;
    if (gpus <= 1) return local->bytes_moved(p, 1);
    const cp_plan pl = cp_plan_make(p->N, gpus, p->causal);
    const double heads = (double)p->B * (double)p->H, D = (double)p->D, arr = traffic_array(p);
    const double shard = heads * 2.0 * pl.S * (double)pl.c * D * TRAFFIC_ELEM; /* one rank's K and V */
    const double rows = heads * (double)p->N;
    attn_bytes b = traffic_untiled(3.0 * heads * arr, 3.0 * heads * arr); /* scatter */
    for (int r = 0; r < gpus; r++) b = traffic_add(b, rank_calls(&pl, p, local, r), 1.0);
    b = traffic_add(b, traffic_untiled(shard, shard), (double)(gpus - 1) * gpus); /* the ring */
    /* finish on the ranks (fp32 O read, O and LSE written), then the gather of O and LSE */
    const double out = heads * arr + 4.0 * rows;
    return traffic_add(b, traffic_untiled(rows * 4.0 * D + out, 2.0 * out), 1.0);
}
