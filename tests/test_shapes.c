/*
 * test_shapes.c: K and V of their own shape (issue 56): grouped-query attention (H_kv < H) and N_k
 * keys for N queries, with the causal mask aligned to the bottom right. Stage 06m, the one stage that
 * takes them (the registry's `takes`), against the independent reference through the suite's own check
 * at random odd sizes; the rows that see no key; and the two planted bugs, the head map h % H_kv and
 * the top-left mask, which the check must FAIL; variable-length batches (cu_seqlens) the same. The
 * reference itself against a brute force: test_reference.c.
 */
#include <math.h>

#include "06_fa2_full/fa2_cpu.h"
#include "half.h"
#include "test_util.h"

static const attn_stage *model06(void) {
    const attn_stage *s = attn_find_stage("06m");
    cr_assert(s && !s->on_gpu, "no stage 06m in the registry");
    return s;
}

/* splitmix64, for the test's own choice of sizes */
static uint64_t next_random(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One random problem: H 1..8 and a divisor of it, N and N_k 1..300 (the first cases N > N_k and
 * N < N_k by far, then any), a head dim of stage 06, causal or not, fp16 or bf16. */
static attn_problem random_problem(uint64_t *x, int k) {
    static const int dims[] = {32, 64, 80, 96, 128, 192, 256};
    const int64_t H = 1 + (int64_t)(next_random(x) % 8);
    int64_t H_kv = 1 + (int64_t)(next_random(x) % (uint64_t)H);
    while (H % H_kv) H_kv--;
    int64_t N = 1 + (int64_t)(next_random(x) % 300), N_k = 1 + (int64_t)(next_random(x) % 300);
    if (k == 0) N = 300, N_k = 37;  /* most rows see no key when causal */
    if (k == 1) N = 37, N_k = 299;  /* every row sees the keys of a long prefix */
    attn_problem p = attn_problem_make(1 + (int64_t)(next_random(x) % 2), H, N,
                                       dims[next_random(x) % 7], k < 2 ? 1 : (int)(next_random(x) % 2));
    p.H_kv = H_kv, p.N_k = N_k;
    p.dtype = next_random(x) % 2 ? ATTN_BF16 : ATTN_F16;
    return p;
}

/* 24 random problems, fresh inputs each, through attn_run and its check, as build/attn --check runs
 * them: O and LSE poisoned (NaN) before the run, so an unwritten or NaN element fails. Small enough
 * that every row is checked. */
Test(shapes, fa2_cpu_matches_reference_at_random_gqa_and_seq_k) {
    const attn_stage *s = model06();
    uint64_t x = 0x56;
    for (int k = 0; k < 24; k++) {
        const attn_problem p = random_problem(&x, k);
        attn_inputs in;
        cr_assert_eq(attn_inputs_random(&in, &p, 1000 + (uint64_t)k, ATTN_INIT_NORMAL), ATTN_OK, "%s",
                     attn_last_error());
        attn_run_opts opt = attn_run_opts_default();
        opt.warmup = 0, opt.repeat = 1, opt.check = 1;
        attn_result r;
        cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_OK, "%s", attn_last_error());
        cr_expect(r.checked && r.chk.rows_checked == attn_rows(&p) && r.chk.lse_checked,
                  "case %d: not every row checked", k);
        cr_expect(r.chk.pass && r.chk.nonfinite == 0,
                  "case %d: B %lld H %lld H_kv %lld N %lld N_k %lld D %lld %s %s: err/tol %g, LSE %g, "
                  "%lld non-finite",
                  k, (long long)p.B, (long long)p.H, (long long)p.H_kv, (long long)p.N, (long long)p.N_k,
                  (long long)p.D, p.causal ? "causal" : "non-causal", attn_dtype_name(p.dtype),
                  r.chk.worst_ratio, r.chk.lse_worst_ratio, (long long)r.chk.nonfinite);
        attn_inputs_free(&in);
    }
}

/* 06m's O and LSE of in (every row), into buffers the caller frees. */
static void run_model(const attn_inputs *in, uint16_t **o, float **lse) {
    *o = malloc((size_t)attn_qkv_elems(&in->p) * 2);
    *lse = malloc((size_t)attn_rows(&in->p) * 4);
    cr_assert(*o && *lse);
    attn_run_opts opt = attn_run_opts_default();
    opt.warmup = 0, opt.repeat = 1;
    attn_result r;
    cr_assert_eq(attn_run(model06(), in, &opt, &r, *o, *lse), ATTN_OK, "%s", attn_last_error());
}

/* The check of o and lse against in's problem, every row. */
static attn_check check_all(const attn_inputs *in, const uint16_t *o, const float *lse) {
    int64_t *rows, nrows;
    cr_assert_eq(attn_sample_rows(&in->p, 1, 0, 1, &rows, &nrows), ATTN_OK);
    cr_assert_eq(nrows, attn_rows(&in->p), "a small problem is checked whole");
    attn_check c;
    cr_assert_eq(attn_check_output(in, o, lse, rows, nrows, &c), ATTN_OK, "%s", attn_last_error());
    free(rows);
    return c;
}

/* Causal with N > N_k: rows i < N - N_k see no key and hold exactly O = 0 and LSE = -inf (the
 * contract's rule), the others their keys' average. */
Test(shapes, fa2_cpu_rows_that_see_no_key_are_zero_and_minus_inf) {
    attn_problem p = attn_problem_make(1, 4, 300, 64, 1);
    p.H_kv = 2, p.N_k = 37;
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 11, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    uint16_t *o;
    float *lse;
    run_model(&in, &o, &lse);
    for (int64_t r = 0; r < attn_rows(&p); r++) {
        const int empty = r % p.N < p.N - p.N_k;
        cr_assert_eq(lse[r] == -INFINITY, empty, "row %lld: LSE %g", (long long)r, (double)lse[r]);
        for (int64_t d = 0; empty && d < p.D; d++)
            cr_assert_eq(o[r * p.D + d], 0, "row %lld sees no key: O bits %#x", (long long)r, o[r * p.D + d]);
    }
    cr_assert(check_all(&in, o, lse).pass, "06m's own output must pass");
    free(o), free(lse);
    attn_inputs_free(&in);
}

/* The top-left mask (row i sees keys 0 .. i, FlashAttention before 2.1) is, for N <= N_k, 06m run on
 * the first N keys alone: its output must FAIL the check of the problem with N_k keys, which 06m's own
 * output passes. */
Test(shapes, check_fails_the_top_left_mask) {
    attn_problem p = attn_problem_make(1, 6, 37, 64, 1);
    p.H_kv = 2, p.N_k = 129;
    attn_inputs in, top_left;
    cr_assert_eq(attn_inputs_random(&in, &p, 12, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    attn_problem pt = p;
    pt.N_k = p.N;
    cr_assert_eq(attn_inputs_random(&top_left, &pt, 12, ATTN_INIT_NORMAL), ATTN_OK);
    for (int64_t g = 0; g < p.B * p.H_kv; g++) /* K/V head g's first N keys */
        for (int64_t e = 0; e < p.N * p.D; e++) {
            top_left.k[g * p.N * p.D + e] = in.k[g * p.N_k * p.D + e];
            top_left.v[g * p.N * p.D + e] = in.v[g * p.N_k * p.D + e];
        }
    memcpy(top_left.q, in.q, (size_t)attn_qkv_elems(&p) * 2);
    uint16_t *o, *o_tl;
    float *lse, *lse_tl;
    run_model(&in, &o, &lse);
    run_model(&top_left, &o_tl, &lse_tl);
    cr_assert(check_all(&in, o, lse).pass, "06m's own output must pass");
    const attn_check c = check_all(&in, o_tl, lse_tl);
    cr_assert(!c.pass, "the top-left mask passed the check (err/tol %g)", c.worst_ratio);
    free(o), free(lse), free(o_tl), free(lse_tl);
    attn_inputs_free(&in), attn_inputs_free(&top_left);
}

/* The head map h % H_kv is 06m run with H_kv = H on K and V whose head h is the original's head
 * h % H_kv: its output must FAIL the check of the real problem. */
Test(shapes, check_fails_the_head_map_h_mod_h_kv) {
    attn_problem p = attn_problem_make(2, 6, 37, 32, 0);
    p.H_kv = 2, p.N_k = 129;
    attn_inputs in, wrong;
    cr_assert_eq(attn_inputs_random(&in, &p, 13, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    attn_problem pw = p;
    pw.H_kv = p.H;
    cr_assert_eq(attn_inputs_random(&wrong, &pw, 13, ATTN_INIT_NORMAL), ATTN_OK);
    const int64_t head = p.N_k * p.D;
    for (int64_t b = 0; b < p.B; b++)
        for (int64_t h = 0; h < p.H; h++) {
            const int64_t from = (b * p.H_kv + h % p.H_kv) * head, to = (b * p.H + h) * head;
            memcpy(wrong.k + to, in.k + from, (size_t)head * 2);
            memcpy(wrong.v + to, in.v + from, (size_t)head * 2);
        }
    memcpy(wrong.q, in.q, (size_t)attn_qkv_elems(&p) * 2);
    uint16_t *o, *o_w;
    float *lse, *lse_w;
    run_model(&in, &o, &lse);
    run_model(&wrong, &o_w, &lse_w);
    cr_assert(check_all(&in, o, lse).pass, "06m's own output must pass");
    const attn_check c = check_all(&in, o_w, lse_w);
    cr_assert(!c.pass, "the head map h %% H_kv passed the check (err/tol %g)", c.worst_ratio);
    free(o), free(lse), free(o_w), free(lse_w);
    attn_inputs_free(&in), attn_inputs_free(&wrong);
}

/* Who takes what: 06 GQA, N_k != N, cu_seqlens and strides, 06m the first three; decoding's 15m, 15
 * and 15p GQA and N_k != N (15p its K and V as the harness's pages); every other stage (01-05, their
 * models, the road 06a-06e, the other GPU stages) is refused them by attn_stage_supports, with the field
 * named, and the models of 03-05 refuse them even when run directly. */
Test(shapes, only_06_06m_and_decoding_take_gqa_and_seq_k) {
    attn_problem gqa = attn_problem_make(1, 4, 64, 64, 1), seq_k = gqa;
    gqa.H_kv = 2;
    seq_k.N_k = 65;
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        const int is06 = !strcmp(s->id, "06"), is06m = !strcmp(s->id, "06m"), is15p = !strcmp(s->id, "15p");
        const int is15 = is15p || !strcmp(s->id, "15m") || !strcmp(s->id, "15"), takes = is06 || is06m || is15;
        const unsigned want = is06    ? ATTN_TAKES_GQA | ATTN_TAKES_SEQ_K | ATTN_TAKES_VARLEN | ATTN_TAKES_STRIDES
                              : is06m ? ATTN_TAKES_GQA | ATTN_TAKES_SEQ_K | ATTN_TAKES_VARLEN
                              : is15  ? ATTN_TAKES_GQA | ATTN_TAKES_SEQ_K | (is15p ? ATTN_TAKES_PAGED : 0u) |
                                           (s->on_gpu ? ATTN_FOR_DECODING : 0u)
                                      : 0u;
        cr_assert_eq(s->takes, want, "stage %s takes %#x", s->id, s->takes);
        if (!s->supports_dim(64) || !(s->dtypes & ATTN_DTYPE_BIT(ATTN_F16))) continue;
        cr_assert_eq(attn_stage_supports(s, &gqa) == ATTN_OK, takes, "stage %s, H_kv 2 of 4: %s", s->id,
                     attn_last_error());
        if (!takes) cr_assert(strstr(attn_last_error(), "H_kv == H only"), "%s", attn_last_error());
        cr_assert_eq(attn_stage_supports(s, &seq_k) == ATTN_OK, takes, "stage %s, N_k 65 of 64", s->id);
        if (!takes) cr_assert(strstr(attn_last_error(), "N_k == N only"), "%s", attn_last_error());
    }
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &gqa, 3, ATTN_INIT_NORMAL), ATTN_OK);
    uint16_t o[4 * 64 * 64];
    const attn_args a = {.q = in.q, .k = in.k, .v = in.v, .o = o, .gpus = 1};
    static const char *const models[] = {"03m", "04m", "05m"};
    for (int m = 0; m < 3; m++)
        cr_assert_eq(attn_find_stage(models[m])->run(&gqa, &a), ATTN_EUNSUPPORTED, "stage %s ran H_kv 2 of 4",
                     models[m]);
    attn_inputs_free(&in);
}

/* Random packed batches: 1 to 6 sequences of 1..300 queries and 1..300 keys each (so causal rows that
 * see no key), random H, H_kv, D, dtype, causal or not, through attn_run's check. */
Test(shapes, fa2_cpu_matches_reference_at_random_varlen) {
    const attn_stage *s = model06();
    uint64_t x = 0x5656;
    for (int k = 0; k < 12; k++) {
        attn_problem p = random_problem(&x, 2 + k);
        int32_t cq[7], ck[7];
        p.B = 1 + (int64_t)(next_random(&x) % 6), p.N = p.N_k = 0, cq[0] = ck[0] = 0;
        for (int64_t b = 0; b < p.B; b++) {
            const int32_t n = 1 + (int32_t)(next_random(&x) % 300), n_k = 1 + (int32_t)(next_random(&x) % 300);
            cq[b + 1] = cq[b] + n, ck[b + 1] = ck[b] + n_k;
            p.N = n > p.N ? n : p.N, p.N_k = n_k > p.N_k ? n_k : p.N_k;
        }
        p.cu_seqlens_q = cq, p.cu_seqlens_k = ck;
        attn_inputs in;
        cr_assert_eq(attn_inputs_random(&in, &p, 2000 + (uint64_t)k, ATTN_INIT_NORMAL), ATTN_OK, "%s",
                     attn_last_error());
        attn_run_opts opt = attn_run_opts_default();
        opt.warmup = 0, opt.repeat = 1, opt.check = 1;
        attn_result r;
        cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_OK, "%s", attn_last_error());
        cr_expect(r.checked && r.chk.rows_checked == attn_rows(&p), "case %d: not every row checked", k);
        cr_expect(r.chk.pass && r.chk.nonfinite == 0,
                  "case %d: %lld sequences, H %lld H_kv %lld D %lld %s: err/tol %g, LSE %g, %lld non-finite", k,
                  (long long)p.B, (long long)p.H, (long long)p.H_kv, (long long)p.D,
                  p.causal ? "causal" : "non-causal", r.chk.worst_ratio, r.chk.lse_worst_ratio,
                  (long long)r.chk.nonfinite);
        attn_inputs_free(&in);
    }
}

/* A model that forgets where the sequences end: 06m run on each packed head as one sequence of
 * total_q queries and total_k keys (B = 1, no cu_seqlens, the same memory). Its output must FAIL the
 * check of the packed problem, which 06m's own output passes. */
Test(shapes, check_fails_sequences_run_as_one) {
    static const int32_t cu[] = {0, 50, 87, 200};
    attn_problem p = attn_problem_make(3, 4, 113, 64, 0);
    p.H_kv = 2, p.N_k = 113, p.cu_seqlens_q = cu, p.cu_seqlens_k = cu;
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, 14, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    attn_inputs one = in; /* the same arrays, read as [1, H, 200, D] and [1, H_kv, 200, D] */
    one.p = attn_problem_make(1, 4, 200, 64, 0);
    one.p.H_kv = 2;
    uint16_t *o, *o1;
    float *lse, *lse1;
    run_model(&in, &o, &lse);
    run_model(&one, &o1, &lse1);
    cr_assert(check_all(&in, o, lse).pass, "06m's own output must pass");
    const attn_check c = check_all(&in, o1, lse1);
    cr_assert(!c.pass, "the sequences run as one passed the check (err/tol %g)", c.worst_ratio);
    free(o), free(lse), free(o1), free(lse1);
    attn_inputs_free(&in);
}

/* ---- stage 06 on the GPU (skipped without one) ------------------------------------------------------ */

/* One odd shape for stage 06: sizes, and for a packed batch its query and key lengths (nseq > 0). */
typedef struct {
    int64_t H, H_kv, N, N_k, D;
    int causal;
    attn_dtype dtype;
    int nseq;
    int32_t q_len[4], k_len[4];
} gpu_shape;

/* Stage 06 through attn_run as build/attn --check runs it, in both layouts: O and LSE poisoned before
 * the run, every row checked against the double reference, no element left non-finite. */
static void run_gpu_shape(const attn_stage *s, const gpu_shape *c, attn_layout layout, uint64_t seed) {
    attn_problem p = attn_problem_make(2, c->H, c->N, c->D, c->causal);
    p.H_kv = c->H_kv, p.N_k = c->N_k, p.dtype = c->dtype;
    int32_t cq[5] = {0}, ck[5] = {0};
    if (c->nseq) {
        p.B = c->nseq, p.N = p.N_k = 1;
        for (int b = 0; b < c->nseq; b++) {
            cq[b + 1] = cq[b] + c->q_len[b], ck[b + 1] = ck[b] + c->k_len[b];
            p.N = c->q_len[b] > p.N ? c->q_len[b] : p.N, p.N_k = c->k_len[b] > p.N_k ? c->k_len[b] : p.N_k;
        }
        p.cu_seqlens_q = cq, p.cu_seqlens_k = ck;
    }
    attn_inputs in;
    cr_assert_eq(attn_inputs_random(&in, &p, seed, ATTN_INIT_NORMAL), ATTN_OK, "%s", attn_last_error());
    attn_run_opts opt = attn_run_opts_default();
    opt.warmup = 0, opt.repeat = 2, opt.check = 1, opt.layout = layout;
    attn_result r;
    cr_assert_eq(attn_run(s, &in, &opt, &r, NULL, NULL), ATTN_OK, "%s", attn_last_error());
    cr_expect(r.checked && r.chk.rows_checked == attn_rows(&p) && r.chk.lse_checked,
              "%s: not every row checked", attn_layout_name(layout));
    cr_expect(r.chk.pass && r.chk.nonfinite == 0 && r.identical == 1,
              "stage 06 %s: %d sequences, H %lld H_kv %lld N %lld N_k %lld D %lld %s %s: err/tol %g, LSE %g, %lld "
              "non-finite (%lld unwritten), repeatable %d",
              attn_layout_name(layout), c->nseq, (long long)p.H, (long long)p.H_kv, (long long)p.N,
              (long long)p.N_k, (long long)p.D, p.causal ? "causal" : "non-causal", attn_dtype_name(p.dtype),
              r.chk.worst_ratio, r.chk.lse_worst_ratio, (long long)r.chk.nonfinite, (long long)r.chk.unwritten,
              r.identical);
    attn_inputs_free(&in);
}

/* Stage 06's kernel at the shapes models hold, against the double reference: grouped-query heads (H 6 of
 * H_kv 2; H 8 of 1: multi-query), N_k != N causal and not (N 77 of N_k 300: the band shifted up by 223;
 * N 300 of N_k 77: 223 rows per head that see no key, O = 0 and LSE = -inf), packed batches (1, 17,
 * 129, 1000 queries; keys alike, then of their own lengths, one sequence with a single key), fp16 and
 * bf16, D 64, 128, 96 (rows padded in smem), 32 and 256 (8 warps, ping-pong), each in [B, H, N, D] and
 * [B, N, H, D] ([total, H, D] packed). The planted changes each fails (reasoned, and for the CPU
 * model shown above): K/V head h instead of h / (H / H_kv) reads other heads (and past K at H 8 of 1),
 * N in place of N_k drops or invents keys, the top-left mask (off 0) shows rows the wrong keys, the
 * sequences run as one (no cu_seqlens) mixes them, strides ignored under bnhd read other heads' rows,
 * and the empty rows left to the softmax would hold the poison or NaN, which the check counts. */
Test(shapes, fa2_gpu_matches_reference_at_odd_shapes) {
    const attn_stage *s = attn_find_stage("06");
    SKIP_UNLESS_RUNNABLE(s);
    static const gpu_shape shapes[] = {
        {6, 2, 77, 300, 64, 0, ATTN_F16, 0, {0}, {0}},
        {6, 2, 77, 300, 64, 1, ATTN_F16, 0, {0}, {0}},
        {6, 2, 300, 77, 128, 1, ATTN_BF16, 0, {0}, {0}},
        {8, 1, 300, 77, 64, 1, ATTN_BF16, 0, {0}, {0}},
        {8, 1, 77, 300, 128, 0, ATTN_F16, 0, {0}, {0}},
        {6, 2, 129, 129, 96, 1, ATTN_F16, 0, {0}, {0}},
        {4, 2, 100, 333, 32, 1, ATTN_BF16, 0, {0}, {0}},
        {4, 1, 333, 100, 256, 1, ATTN_F16, 0, {0}, {0}},
        {6, 2, 77, 300, 80, 1, ATTN_BF16, 0, {0}, {0}},
        {4, 4, 300, 77, 192, 0, ATTN_F16, 0, {0}, {0}},
        {6, 2, 0, 0, 192, 1, ATTN_F16, 4, {1, 17, 129, 1000}, {300, 1, 129, 77}},
        {6, 2, 0, 0, 64, 1, ATTN_F16, 4, {1, 17, 129, 1000}, {1, 17, 129, 1000}},
        {6, 2, 0, 0, 128, 0, ATTN_BF16, 4, {1, 17, 129, 1000}, {1, 17, 129, 1000}},
        {8, 1, 0, 0, 64, 1, ATTN_BF16, 4, {1, 17, 129, 1000}, {300, 1, 129, 77}},
        {6, 3, 0, 0, 96, 0, ATTN_F16, 4, {1000, 129, 17, 1}, {77, 1, 300, 129}},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int l = 0; l <= 1; l++) run_gpu_shape(s, &shapes[i], (attn_layout)l, 3000 + 2 * i + (uint64_t)l);
}
