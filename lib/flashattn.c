/*
 * flashattn.c: the public library (flashattn.h). The one argument check of the forward and the
 * backward, the stages the library ships in the order it prefers them, the choice of a stage for the
 * device, and the call.
 *
 * A call is checked in this order, and the first refusal is the answer:
 *   1. the arguments alone, no CUDA call (check_call): no NULL pointer, sizes >= 1, the flags 0 or 1,
 *      the scale and dtype, H_kv dividing H, D at most ATTN_MAX_D, cu_seqlens both or neither, no
 *      negative stride, alignment, every tensor's span within 64 bits, no output sharing a byte with
 *      an input or another output (with cu_seqlens, whose total is on the device: the spans bounded
 *      by B * N rows, the overlap judged on each tensor's first row of every head);
 *   2. the stage: a named one's own limits (its head dims, N, B*H), what it takes of the problem's
 *      extensions (H_kv != H, N_k != N, cu_seqlens, strides) and of the call (an LSE, determinism),
 *      its own rules for strides (stage 06: stage06_check_layout), the workspace, then the GPU it
 *      needs; with no name, the first stage of the list that this GPU
 *      runs and that takes the problem (the refusal of the last one tried when none does);
 *   3. the runtime: every pointer memory of the current device; for a stage that reads
 *      cudaGetLastError() after its launches, no error pending from an earlier call;
 *   4. the stage's run, on the caller's stream.
 * In a build without CUDA, 2 to 4 are one refusal: ATTN_ENODEV, no stage was built (step 1 runs, and is
 * tested, all the same).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "06_fa2_full/stage06.h"
#include "13_backward_fa2/backward_fa2.h"
#include "14_backward_hopper/backward_hopper.h"
#include "attn.h"
#include "stage.h"

#ifdef ATTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "07_tma_wgmma/stage07.h"
#include "08_warp_specialized/stage08.h"
#include "09_overlap/stage09.h"
#include "device_memory.h"
#include "device_sm.h"
#include "hopper_host.h"
#endif

/* ---- the call, as the check sees it ------------------------------------------------------------ */

/* One pointer of the call: a [B, heads, rows, D] 16-bit tensor (t), or a span of `bytes` (lse, the
 * workspace). */
typedef struct {
    const char *name;
    const void *data;
    const attn_tensor *t; /* NULL: a span of bytes */
    int64_t heads, rows;  /* a tensor's */
    uint64_t bytes;       /* a span's size; a tensor's is computed (tensor_bytes) */
    unsigned align;
    int output, may_be_null;
} operand;

#define MAX_OPERANDS 10

typedef struct {
    const attn_problem *p;
    operand op[MAX_OPERANDS]; /* the tensors and spans, inputs first, then the outputs, then (a forward)
                                 cu_seqlens_q and _k: op[0..4] are q, k, v, o, lse wherever read by index */
    int n;
    int deterministic; /* the backward's flag (the forward has none: 0) */
    int forward;
} call;

static void add_tensor(call *c, const char *name, const attn_tensor *t, int64_t heads, int64_t rows,
                       int output) {
    c->op[c->n++] = (operand){name, t->data, t, heads, rows, 0, 16, output, 0};
}

static void add_span(call *c, const char *name, const void *data, uint64_t bytes, unsigned align, int output,
                     int may_be_null) {
    c->op[c->n++] = (operand){name, data, NULL, 0, 0, bytes, align, output, may_be_null};
}

/* a * b + c for non-negative operands, or -1 past INT64_MAX */
static int64_t mul_add(int64_t a, int64_t b, int64_t c) {
    if (b != 0 && a > (INT64_MAX - c) / b) return -1;
    return a * b + c;
}

/* The LSE spans B*H*N floats; 0 when that overflows 64 bits or a size is below 1 (the call is refused
 * for it before the span is used). */
static uint64_t lse_bytes(const attn_problem *p) {
    if (p->B < 1 || p->H < 1 || p->N < 1) return 0;
    const int64_t bh = mul_add(p->B, p->H, 0), rows = bh < 0 ? -1 : mul_add(bh, p->N, 0);
    return rows < 0 || rows > INT64_MAX / 4 ? 0 : (uint64_t)rows * 4;
}

/* The LSE's bytes for the overlap check: all of them, or with cu_seqlens (the LSE [H, total_q], the
 * total on the device) its first float, what it certainly covers (the overflow check bounds it by
 * lse_bytes all the same). */
static uint64_t lse_span(const attn_problem *p) { return p->cu_seqlens_q ? 4 : lse_bytes(p); }

static call forward_call(const attn_forward_args *a) {
    const attn_problem *p = &a->p;
    call c = {p, {{0}}, 0, 0, 1};
    add_tensor(&c, "q", &a->q, p->H, p->N, 0);
    add_tensor(&c, "k", &a->k, p->H_kv, p->N_k, 0);
    add_tensor(&c, "v", &a->v, p->H_kv, p->N_k, 0);
    add_tensor(&c, "o", &a->o, p->H, p->N, 1);
    add_span(&c, "lse", a->lse, lse_span(p), 4, 1, 1);
    /* read by the kernel: device memory of the current device, sharing no byte with an output */
    const uint64_t cu_bytes = p->B >= 1 && p->B < INT64_MAX / 4 ? (uint64_t)(p->B + 1) * 4 : 0;
    add_span(&c, "cu_seqlens_q", p->cu_seqlens_q, cu_bytes, 4, 0, 1);
    add_span(&c, "cu_seqlens_k", p->cu_seqlens_k, cu_bytes, 4, 0, 1);
    return c;
}

static call backward_call(const attn_backward_args *a) {
    const attn_problem *p = &a->p;
    call c = {p, {{0}}, 0, a->deterministic, 0};
    add_tensor(&c, "q", &a->q, p->H, p->N, 0);
    add_tensor(&c, "k", &a->k, p->H_kv, p->N_k, 0);
    add_tensor(&c, "v", &a->v, p->H_kv, p->N_k, 0);
    add_tensor(&c, "o", &a->o, p->H, p->N, 0);
    add_span(&c, "lse", a->lse, lse_span(p), 4, 0, 0);
    add_tensor(&c, "d_o", &a->d_o, p->H, p->N, 0);
    add_tensor(&c, "dq", &a->dq, p->H, p->N, 1);
    add_tensor(&c, "dk", &a->dk, p->H_kv, p->N_k, 1);
    add_tensor(&c, "dv", &a->dv, p->H_kv, p->N_k, 1);
    add_span(&c, "workspace", a->workspace, a->workspace_bytes, 16, 1, 0);
    return c;
}

/* ---- 1. the arguments alone -------------------------------------------------------------------- */

/* The bytes from a tensor's first element to one past its last (all strides 0: contiguous), or 0 when
 * they overflow 64 bits. Sizes >= 1 and strides >= 0 (checked before). With cu_seqlens the sequences
 * are packed along the rows of one batch, and the total lives on the device: each sequence has at most
 * N (N_k) rows, so B * N bounds the rows. */
static uint64_t tensor_bytes(const attn_problem *p, const operand *x) {
    const attn_tensor *t = x->t;
    const int packed = p->cu_seqlens_q != NULL;
    const int64_t batch = packed ? 1 : p->B, rows = packed ? mul_add(p->B, x->rows, 0) : x->rows;
    int64_t elems;
    if (rows < 0) return 0;
    if (t->stride_b == 0 && t->stride_h == 0 && t->stride_n == 0) {
        elems = mul_add(batch, x->heads, 0);
        elems = elems < 0 ? -1 : mul_add(elems, rows, 0);
        elems = elems < 0 ? -1 : mul_add(elems, p->D, 0);
    } else { /* the last element's offset, plus one */
        elems = mul_add(batch - 1, t->stride_b, p->D);
        elems = elems < 0 ? -1 : mul_add(x->heads - 1, t->stride_h, elems);
        elems = elems < 0 ? -1 : mul_add(rows - 1, t->stride_n, elems);
    }
    return elems < 0 || elems > INT64_MAX / 2 ? 0 : (uint64_t)elems * 2;
}

static attn_status refuse_size(const char *what, int64_t got) {
    return attn_fail(ATTN_EINVAL, "%s: must be at least 1 (got %" PRId64 ")", what, got);
}

static attn_status refuse_flag(const char *what, int got) {
    return attn_fail(ATTN_EINVAL, "%s: must be 0 or 1 (got %d)", what, got);
}

/* The problem's own rules (sizes, flags, scale, dtype, H_kv, D, cu_seqlens). */
static attn_status check_problem(const call *c) {
    const attn_problem *p = c->p;
    static const char *const size_name[6] = {"B", "H", "N", "D", "H_kv", "N_k"};
    const int64_t size[6] = {p->B, p->H, p->N, p->D, p->H_kv, p->N_k};
    for (int i = 0; i < 6; i++)
        if (size[i] < 1) return refuse_size(size_name[i], size[i]);
    if (p->causal != 0 && p->causal != 1) return refuse_flag("causal", p->causal);
    if (!c->forward && c->deterministic != 0 && c->deterministic != 1)
        return refuse_flag("deterministic", c->deterministic);
    if (!(p->scale >= -ATTN_MAX_SCALE && p->scale <= ATTN_MAX_SCALE)) /* also NaN */
        return attn_fail(ATTN_EINVAL,
                         "scale: must be finite with |scale| <= ATTN_MAX_SCALE = 2.3e38 (got %.9g)",
                         (double)p->scale);
    if (p->dtype != ATTN_F16 && p->dtype != ATTN_BF16) /* (int): a negative value shows as one */
        return attn_fail(ATTN_EINVAL, "dtype: must be ATTN_F16 (0) or ATTN_BF16 (1) (got %d)", (int)p->dtype);
    if (p->H % p->H_kv != 0)
        return attn_fail(ATTN_EINVAL,
                         "H_kv: must divide H, each K/V head serving H / H_kv query heads (got %" PRId64
                         " of %" PRId64 ")",
                         p->H_kv, p->H);
    if (p->D > ATTN_MAX_D)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "D: must be at most %d, the largest head dim of any stage (got %" PRId64 ")",
                         ATTN_MAX_D, p->D);
    if ((p->cu_seqlens_q == NULL) != (p->cu_seqlens_k == NULL))
        return attn_fail(ATTN_EINVAL, "%s: must be given with %s (variable lengths need both, or neither)",
                         p->cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q",
                         p->cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k");
    return ATTN_OK;
}

static attn_status check_strides(const call *c) {
    for (int i = 0; i < c->n; i++) {
        const attn_tensor *t = c->op[i].t;
        if (t == NULL) continue;
        static const char *const axis[3] = {"stride_b", "stride_h", "stride_n"};
        const int64_t s[3] = {t->stride_b, t->stride_h, t->stride_n};
        for (int d = 0; d < 3; d++)
            if (s[d] < 0)
                return attn_fail(ATTN_EINVAL, "%s.%s: must be at least 0 (got %" PRId64 ")", c->op[i].name,
                                 axis[d], s[d]);
    }
    return ATTN_OK;
}

/* Every tensor's span, and the LSE's, must be countable in 64 bits. */
static attn_status check_spans(const call *c) {
    const attn_problem *p = c->p;
    for (int i = 0; i < c->n; i++) {
        const operand *x = &c->op[i];
        if (x->t && tensor_bytes(p, x) == 0) {
            const int kv = x->heads != p->H || x->rows != p->N; /* K or V of a GQA or N_k != N problem */
            if (x->t->stride_b || x->t->stride_h || x->t->stride_n)
                return attn_fail(ATTN_EINVAL,
                                 "%s: its strides reach past 2^63 bytes (stride_b %" PRId64
                                 ", stride_h %" PRId64 ", stride_n %" PRId64 ")",
                                 x->name, x->t->stride_b, x->t->stride_h, x->t->stride_n);
            return attn_fail(ATTN_EINVAL,
                             "%s: overflows 64 bits (got B=%" PRId64 " %s=%" PRId64 " %s=%" PRId64
                             " D=%" PRId64 ")",
                             kv ? "B*H_kv*N_k*D" : "B*H*N*D", p->B, kv ? "H_kv" : "H", x->heads,
                             kv ? "N_k" : "N", x->rows, p->D);
        }
    }
    if (lse_bytes(p) == 0)
        return attn_fail(ATTN_EINVAL,
                         "B*H*N: the LSE's floats overflow 64 bits (got B=%" PRId64 " H=%" PRId64
                         " N=%" PRId64 ")",
                         p->B, p->H, p->N);
    return ATTN_OK;
}

static attn_status check_pointers(const call *c) {
    for (int i = 0; i < c->n; i++)
        if (c->op[i].data == NULL && !c->op[i].may_be_null)
            return attn_fail(ATTN_EINVAL, "%s: must be a device pointer, not NULL", c->op[i].name);
    return ATTN_OK;
}

static attn_status check_alignment(const call *c) {
    for (int i = 0; i < c->n; i++)
        if ((uintptr_t)c->op[i].data % c->op[i].align)
            return attn_fail(ATTN_EINVAL, "%s: must be %u-byte aligned (the kernels move %u bytes at a time)",
                             c->op[i].name, c->op[i].align, c->op[i].align);
    const int32_t *cu[2] = {c->p->cu_seqlens_q, c->p->cu_seqlens_k};
    for (int i = 0; i < 2; i++)
        if ((uintptr_t)cu[i] % 4)
            return attn_fail(ATTN_EINVAL, "%s: must be 4-byte aligned (int32)",
                             i ? "cu_seqlens_k" : "cu_seqlens_q");
    return ATTN_OK;
}

/* The bytes an operand certainly covers, for the overlap check. With cu_seqlens the packed row count is
 * on the device: a tensor covers at least its first row of every head (a span from the bound B * N would
 * refuse an O allocated right after a Q of fewer rows), the LSE its first float (lse_span). */
static uint64_t span_of(const call *c, const operand *x) {
    if (!x->t) return x->bytes;
    if (!c->p->cu_seqlens_q) return tensor_bytes(c->p, x);
    const int64_t stride_h = x->t->stride_h ? x->t->stride_h : x->rows * c->p->D;
    const int64_t elems = mul_add(x->heads - 1, stride_h, c->p->D);
    return elems < 0 || elems > INT64_MAX / 2 ? tensor_bytes(c->p, x) : (uint64_t)elems * 2;
}

/* An output that shares a byte with an input or an earlier output races with the blocks that still
 * read it (o over k: other blocks read the keys this block's O overwrites). Inputs may share memory:
 * they are only read (q == k is self-attention). A NULL pointer spans nothing. */
static attn_status check_overlap(const call *c) {
    for (int x = 0; x < c->n; x++) {
        const operand *out = &c->op[x];
        if (!out->output || out->data == NULL) continue;
        const uintptr_t a = (uintptr_t)out->data, na = span_of(c, out);
        for (int y = 0; y < c->n; y++) {
            const operand *in = &c->op[y];
            /* every input (the forward's cu_seqlens come after the outputs), and the outputs before x */
            if (in->data == NULL || y == x || (in->output && y > x)) continue;
            const uintptr_t b = (uintptr_t)in->data, nb = span_of(c, in);
            /* [a, a + na) and [b, b + nb) meet; written without a + na, which may wrap */
            if ((a >= b ? a - b < nb : b - a < na))
                return attn_fail(ATTN_EINVAL,
                                 "%s and %s: an output must not share memory with an input or "
                                 "with another output",
                                 out->name, in->name);
        }
    }
    return ATTN_OK;
}

/* Step 1 of the header's list; with_pointers 0 leaves out what looks at the pointers (the stage and
 * workspace queries). */
static attn_status check_call(const call *c, int with_pointers) {
    attn_status st;
    if (with_pointers && (st = check_pointers(c)) != ATTN_OK) return st;
    if ((st = check_problem(c)) != ATTN_OK || (st = check_strides(c)) != ATTN_OK) return st;
    if (with_pointers && (st = check_alignment(c)) != ATTN_OK) return st;
    if ((st = check_spans(c)) != ATTN_OK) return st;
    return with_pointers ? check_overlap(c) : ATTN_OK;
}

/* ---- 2. the stage ------------------------------------------------------------------------------ */

#ifdef ATTN_HAVE_CUDA

/* What a stage takes beyond plain attention (contiguous [B, H, N, D], H_kv == H, N_k == N): stage 06
 * all four (issue 56); 07-09 and the backward none yet. */
enum { TAKES_GQA = 1, TAKES_SEQ_K = 2, TAKES_VARLEN = 4, TAKES_STRIDES = 8 };

typedef struct {
    const char *id;
    attn_status (*run)(const attn_problem *p, const attn_args *a);
    attn_status (*limits)(const attn_problem *p); /* the stage's own, no CUDA call */
    /* a stage that takes strides: its own rules for them (multiples, bounds), no CUDA call; NULL: none */
    attn_status (*layout)(const attn_problem *p, const attn_strides *const s[4]);
    attn_status (*device)(void); /* may the current GPU run it? */
    unsigned takes;
    int needs_lse;     /* a forward that always writes the LSE */
    int deterministic; /* a backward whose dQ is bitwise repeatable */
    size_t (*workspace)(const attn_problem *p);
    int reads_last_error; /* launches with <<<>>> then asks cudaGetLastError(), which would report an
                             error pending from an earlier call as its own: none may be pending */
    int by_name_only;     /* never the library's own choice: a slower stage kept for callers who name it */
} lib_stage;

/* Contiguous: strides all 0, or those of [B, heads, rows, D] (a size-1 dim's stride does not matter;
 * a product past 64 bits is no stride anyone gave). */
static int is_contiguous(const attn_problem *p, const operand *x) {
    const attn_tensor *t = x->t;
    if (t->stride_b == 0 && t->stride_h == 0 && t->stride_n == 0) return 1;
    const int64_t head = mul_add(x->rows, p->D, 0), batch = head < 0 ? -1 : mul_add(x->heads, head, 0);
    return (x->rows == 1 || t->stride_n == p->D) && (x->heads == 1 || t->stride_h == head) &&
           (p->B == 1 || t->stride_b == batch);
}

/* The problem's extensions the stage does not take, and what the call asks of it. */
static attn_status check_takes(const lib_stage *s, const call *c) {
    const attn_problem *p = c->p;
    if (p->H_kv != p->H && !(s->takes & TAKES_GQA))
        return attn_fail(ATTN_EUNSUPPORTED,
                         "H_kv: stage %s takes H_kv == H only (got %" PRId64 " of %" PRId64 ")", s->id,
                         p->H_kv, p->H);
    if (p->N_k != p->N && !(s->takes & TAKES_SEQ_K))
        return attn_fail(ATTN_EUNSUPPORTED,
                         "N_k: stage %s takes N_k == N only (got %" PRId64 " of %" PRId64 ")", s->id, p->N_k,
                         p->N);
    if (p->cu_seqlens_q && !(s->takes & TAKES_VARLEN))
        return attn_fail(ATTN_EUNSUPPORTED,
                         "cu_seqlens_q: stage %s takes no variable-length batches (cu_seqlens_q "
                         "and cu_seqlens_k must be NULL)",
                         s->id);
    for (int i = 0; i < c->n; i++) {
        const operand *x = &c->op[i];
        if (x->t && !(s->takes & TAKES_STRIDES) && !is_contiguous(p, x))
            return attn_fail(ATTN_EUNSUPPORTED,
                             "%s: stage %s takes contiguous [B, %s, %s, D] tensors only (got "
                             "stride_b %" PRId64 ", stride_h %" PRId64 ", stride_n %" PRId64 ")",
                             x->name, s->id, x->heads == p->H ? "H" : "H_kv", x->rows == p->N ? "N" : "N_k",
                             x->t->stride_b, x->t->stride_h, x->t->stride_n);
    }
    if (c->forward && s->needs_lse && c->op[4].data == NULL)
        return attn_fail(ATTN_EUNSUPPORTED, "lse: stage %s always writes the LSE: must not be NULL", s->id);
    if (c->deterministic == 1 && !s->deterministic)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "deterministic: stage %s sums dQ by atomic adds, whose order changes "
                         "from run to run (13d and 14d are deterministic) (got 1)",
                         s->id);
    return ATTN_OK;
}

/* The call's tensors 0..3 (q, k, v, o of a forward) as a stage's layout rules see them. */
static attn_status check_layout(const lib_stage *s, const call *c) {
    if (!s->layout || !c->forward) return ATTN_OK;
    attn_strides st[4];
    const attn_strides *ptr[4];
    for (int i = 0; i < 4; i++) {
        const attn_tensor *t = c->op[i].t;
        st[i] = (attn_strides){t->stride_b, t->stride_h, t->stride_n};
        ptr[i] = &st[i];
    }
    return s->layout(c->p, ptr);
}

/* The stage's limits and what it takes, then (for a call with pointers) the workspace it needs. */
static attn_status check_stage(const lib_stage *s, const call *c, int with_pointers) {
    attn_status st = s->limits(c->p);
    if (st == ATTN_OK) st = check_takes(s, c);
    if (st == ATTN_OK) st = check_layout(s, c);
    if (st != ATTN_OK || !with_pointers || !s->workspace) return st;
    const size_t need = s->workspace(c->p);
    const operand *w = &c->op[c->n - 1];
    if (w->bytes < need)
        return attn_fail(ATTN_EINVAL,
                         "workspace_bytes: stage %s needs at least %zu for this problem "
                         "(attn_backward_workspace_bytes) (got %" PRIu64 ")",
                         s->id, need, w->bytes);
    return ATTN_OK;
}

/* Stages 06 and 13: mma.sync on bf16, cp.async and ldmatrix. ATTN_FAKE_SM applies (device_sm.h). */
static attn_status device_sm80(void) {
    const int sm = attn_device_sm();
    if (sm < 0)
        return attn_fail(ATTN_ECUDA,
                         "device: the CUDA runtime cannot tell the current GPU's compute capability");
    if (sm < 80)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "device: stages 06 and 13 need an sm_80 or newer GPU (A100, RTX 30/40, "
                         "H100, H200): mma.sync on bf16, cp.async, ldmatrix (got sm_%d)",
                         sm);
    return ATTN_OK;
}

/* Stage 14: wgmma, setmaxnreg and the copy engine's tensor maps, sm_90a code that no other GPU runs. */
static attn_status device_sm90_backward(void) {
    const int sm = attn_device_sm();
    if (sm < 0)
        return attn_fail(ATTN_ECUDA,
                         "device: the CUDA runtime cannot tell the current GPU's compute capability");
    if (sm != 90)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "device: stage 14 needs an sm_90 GPU (H100, H200): wgmma, setmaxnreg and the copy "
                         "engine's tensor maps exist in sm_90a code only (got sm_%d)",
                         sm);
    return ATTN_OK;
}

static attn_status hopper_limits(const attn_problem *p) { return hop_check_limits(p->B, p->H, p->N, p->D); }

/* The forward stages, fastest first: the order a call without a stage tries them in. On the H200,
 * 09 ran 1.2-1.8x 06 at every bench shape and above 07 and 08 wherever it runs (README's table), and
 * 07 and 08 take no problem 09 refuses, so they are reached by name only. */
static const lib_stage forward_stages[] = {
    {"09", stage09_run, hopper_limits, NULL, hop_check_device, 0, 1, 0, NULL, 0, 0},
    {"08", stage08_run, hopper_limits, NULL, hop_check_device, 0, 1, 0, NULL, 0, 0},
    {"07", stage07_run, hopper_limits, NULL, hop_check_device, 0, 1, 0, NULL, 0, 0},
    {"06", stage06_run, stage06_check_limits, stage06_check_layout, device_sm80,
     TAKES_GQA | TAKES_SEQ_K | TAKES_VARLEN | TAKES_STRIDES, 0, 0, NULL, 0, 0},
};
/* The backward stages, fastest first within each kind of call: 14, then 13, for one that may sum dQ
 * in any order; 13d for a deterministic one (14d by name only). On the H100 (history/backward.md, the run at
 * 0ca91b7) 14 ran 1.30-1.46x 13 at every shape timed, and 14d ran below 13d at every one (its ordered
 * dQ costs it two thirds of 14's speed), so a deterministic call gets 13d and 14d is reached by name
 * only. 14 is sm_90 code at D = 64 and 128: every other call falls to 13, the broadest, whose refusal
 * stands when none takes it. One workspace layout serves both (kit/backward_workspace.h). */
static const lib_stage backward_stages[] = {
    {"14", stage14_run, stage14_check_limits, NULL, device_sm90_backward, 0, 0, 0, stage14_workspace_bytes, 1,
     0},
    {"13", stage13_run, stage13_check_limits, NULL, device_sm80, 0, 0, 0, stage13_workspace_bytes, 1, 0},
    {"13d", stage13d_run, stage13_check_limits, NULL, device_sm80, 0, 0, 1, stage13_workspace_bytes, 1, 0},
    {"14d", stage14d_run, stage14_check_limits, NULL, device_sm90_backward, 0, 0, 1, stage14_workspace_bytes,
     1, 1},
};
#define NUM_FORWARD ((int)(sizeof forward_stages / sizeof forward_stages[0]))
#define NUM_BACKWARD ((int)(sizeof backward_stages / sizeof backward_stages[0]))

/* Is there a GPU at all? The runtime's own words for "none" name a driver version (a machine without a
 * driver counts as one with an old driver: issue 58), so they follow ours. ATTN_FAKE_SM answers yes. */
static attn_status check_gpu_present(void) {
    if (attn_device_sm() >= 0) return ATTN_OK;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError(); /* this query's own error, reported here */
    if (e == cudaSuccess && n == 0)
        return attn_fail(ATTN_ENODEV, ATTN_MEMORY_NO_DEVICE_WHY ": the CUDA runtime counts 0 devices");
    if (e == cudaSuccess || attn_memory_no_device(e))
        return attn_fail(ATTN_ENODEV, ATTN_MEMORY_NO_DEVICE_WHY ": %s", cudaGetErrorString(e));
    return attn_fail(ATTN_ECUDA, "device: the CUDA runtime cannot say which GPU this is: %s",
                     cudaGetErrorString(e));
}

static void list_ids(const lib_stage *list, int n, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", list[i].id);
}

/* Step 2: the stage that runs the call, or NULL with the refusal in attn_last_error() (*st). `want`
 * names one, or NULL for the first of the list that the GPU runs and that takes the call. with_device
 * 0 (a named stage only) asks no CUDA call. */
static const lib_stage *choose_stage(const lib_stage *list, int n, const char *want, const call *c,
                                     int with_pointers, int with_device, attn_status *st) {
    if (want != NULL) {
        for (int i = 0; i < n; i++) {
            if (strcmp(list[i].id, want) != 0) continue;
            if ((*st = check_stage(&list[i], c, with_pointers)) != ATTN_OK) return NULL;
            if (with_device &&
                ((*st = check_gpu_present()) != ATTN_OK || (*st = list[i].device()) != ATTN_OK))
                return NULL;
            return &list[i];
        }
        char ids[64];
        list_ids(list, n, ids, sizeof ids);
        *st = attn_fail(ATTN_EINVAL,
                        "stage: must be NULL (the fastest this GPU runs) or one of %s (got \"%.16s\")", ids,
                        want);
        return NULL;
    }
    if ((*st = check_gpu_present()) != ATTN_OK) return NULL;
    for (int i = 0; i < n; i++) {
        if (!c->forward && c->deterministic != list[i].deterministic) continue; /* 13d only when asked */
        if (list[i].by_name_only) continue;
        if ((*st = list[i].device()) == ATTN_OK && (*st = check_stage(&list[i], c, with_pointers)) == ATTN_OK)
            return &list[i];
    }
    return NULL; /* the last refusal stands: the broadest stage's, the one a caller can act on */
}

/* Step 3: may a kernel on the current device read and write every pointer (device_memory.h)? */
static attn_status check_device_memory(const call *c) {
    const void *ptr[MAX_OPERANDS];
    for (int i = 0; i < c->n; i++) ptr[i] = c->op[i].data;
    attn_memory_report r;
    switch (attn_device_memory(ptr, c->n, &r)) {
    case ATTN_MEMORY_READABLE: return ATTN_OK;
    case ATTN_MEMORY_UNKNOWN:
        return attn_fail(ATTN_EINVAL, "%s: " ATTN_MEMORY_UNKNOWN_WHY, c->op[r.index].name);
    case ATTN_MEMORY_HOST: return attn_fail(ATTN_EINVAL, "%s: " ATTN_MEMORY_HOST_WHY, c->op[r.index].name);
    case ATTN_MEMORY_OTHER_DEVICE:
        return attn_fail(ATTN_EINVAL, "%s: " ATTN_MEMORY_OTHER_WHY " (got device %d, current %d)",
                         c->op[r.index].name, r.device, r.current);
    default:
        return attn_fail(attn_memory_no_device(r.error) ? ATTN_ENODEV : ATTN_ECUDA, "%s: %s",
                         attn_memory_no_answer_why(r.error), cudaGetErrorString(r.error));
    }
}

/* An error an earlier call left pending belongs to its owner: named, left, nothing run. */
static attn_status check_no_pending_error(void) {
    const cudaError_t e = cudaPeekAtLastError();
    if (e == cudaSuccess) return ATTN_OK;
    return attn_fail(ATTN_ECUDA,
                     "an earlier CUDA call left an error pending in cudaGetLastError() (%s: %s); "
                     "nothing was queued: clear it (cudaGetLastError()) and call again",
                     cudaGetErrorName(e), cudaGetErrorString(e));
}

/* The stages of one pass: the forward's or the backward's list, and its length. */
static const lib_stage *stages_of(int backward, int *n) {
    *n = backward ? NUM_BACKWARD : NUM_FORWARD;
    return backward ? backward_stages : forward_stages;
}
#else
/* A build without CUDA has no stage to choose: after step 1, this. */
static attn_status no_cuda_build(void) {
    return attn_fail(ATTN_ENODEV, "this library has no GPU stage: " ATTN_NO_CUDA_WHY);
}
#endif

/* The header's steps 1 to 4: the call's arguments, the stage (`want`, or the library's choice), the
 * pointers' memory, the run. */
static attn_status run_call(const call *c, int backward, const char *want, const attn_args *args) {
    attn_status st = check_call(c, 1);
    if (st != ATTN_OK) return st;
#ifdef ATTN_HAVE_CUDA
    int n = 0;
    const lib_stage *list = stages_of(backward, &n), *s = choose_stage(list, n, want, c, 1, 1, &st);
    if (s == NULL) return st;
    if ((st = check_device_memory(c)) != ATTN_OK) return st;
    if (s->reads_last_error && (st = check_no_pending_error()) != ATTN_OK) return st;
    st = s->run(c->p, args);
    if (st != ATTN_OK && s->reads_last_error) (void)cudaGetLastError(); /* none was pending: the run's own */
    return st;
#else
    (void)backward, (void)want, (void)args;
    return no_cuda_build();
#endif
}

/* The stage and workspace queries: step 1 without the pointers, then step 2. */
static attn_status query_stage(const call *c, int backward, const char *want, int with_device,
                               const char **id, size_t *bytes) {
    attn_status st = check_call(c, 0);
    if (st != ATTN_OK) return st;
#ifdef ATTN_HAVE_CUDA
    int n = 0;
    const lib_stage *list = stages_of(backward, &n), *s = choose_stage(list, n, want, c, 0, with_device, &st);
    if (s == NULL) return st;
    if (id) *id = s->id;
    if (bytes) *bytes = s->workspace ? s->workspace(c->p) : 0;
    return ATTN_OK;
#else
    (void)backward, (void)want, (void)with_device, (void)id, (void)bytes;
    return no_cuda_build();
#endif
}

/* ---- the public functions ---------------------------------------------------------------------- */

attn_status attn_forward(const attn_forward_args *a, const char *stage, void *stream) {
    if (a == NULL) return attn_fail(ATTN_EINVAL, "a: must point to the arguments, not NULL");
    const call c = forward_call(a);
    /* the strides and the device cu_seqlens as the caller gave them: a stage that takes none was refused
     * them in the check (check_takes) */
    const attn_args args = {.q = a->q.data,
                            .k = a->k.data,
                            .v = a->v.data,
                            .o = a->o.data,
                            .lse = a->lse,
                            .stream = stream,
                            .gpus = 1,
                            .q_stride = {a->q.stride_b, a->q.stride_h, a->q.stride_n},
                            .k_stride = {a->k.stride_b, a->k.stride_h, a->k.stride_n},
                            .v_stride = {a->v.stride_b, a->v.stride_h, a->v.stride_n},
                            .o_stride = {a->o.stride_b, a->o.stride_h, a->o.stride_n},
                            .cu_seqlens_q_dev = a->p.cu_seqlens_q,
                            .cu_seqlens_k_dev = a->p.cu_seqlens_k};
    return run_call(&c, 0, stage, &args);
}

attn_status attn_backward(const attn_backward_args *a, const char *stage, void *stream) {
    if (a == NULL) return attn_fail(ATTN_EINVAL, "a: must point to the arguments, not NULL");
    const call c = backward_call(a);
    /* attn_args holds o and lse writable because a forward stage writes them; a backward stage only reads */
    const attn_args args = {.q = a->q.data,
                            .k = a->k.data,
                            .v = a->v.data,
                            .o = a->o.data,
                            .lse = (float *)a->lse,
                            .workspace = a->workspace,
                            .stream = stream,
                            .gpus = 1,
                            .d_o = a->d_o.data,
                            .dq = a->dq.data,
                            .dk = a->dk.data,
                            .dv = a->dv.data};
    return run_call(&c, 1, stage, &args);
}

attn_status attn_forward_stage(const attn_forward_args *a, const char *stage, const char **id) {
    if (a == NULL || id == NULL) return attn_fail(ATTN_EINVAL, "%s: must not be NULL", a ? "id" : "a");
    const call c = forward_call(a);
    return query_stage(&c, 0, stage, 1, id, NULL);
}

attn_status attn_backward_stage(const attn_backward_args *a, const char *stage, const char **id) {
    if (a == NULL || id == NULL) return attn_fail(ATTN_EINVAL, "%s: must not be NULL", a ? "id" : "a");
    const call c = backward_call(a);
    return query_stage(&c, 1, stage, 1, id, NULL);
}

attn_status attn_backward_workspace_bytes(const attn_backward_args *a, const char *stage, size_t *bytes) {
    if (a == NULL || bytes == NULL) return attn_fail(ATTN_EINVAL, "%s: must not be NULL", a ? "bytes" : "a");
    const call c = backward_call(a);
    return query_stage(&c, 1, stage, stage == NULL, NULL, bytes);
}
