/*
 * stage.h: the one registry of stages. The front end (--list, --stage), the tests and the bench all
 * iterate attn_stages[]; no other list of stages exists.
 *
 * A stage is one function that computes O (and LSE, if it says so) for a problem:
 *   - GPU stages get device pointers and a cudaStream_t (as void *); they launch their kernels on
 *     that stream, check every launch (cudaGetLastError) and return without synchronising.
 *   - The CPU stage gets host pointers and ignores the stream.
 *   - A multi-GPU stage (max_gpus > 1: stage 10) gets the same pointers on the current GPU and the
 *     number of GPUs to spread the problem over; what it does on the others is its own business, but
 *     the work it enqueues ends on the given stream, so the harness times it like any other.
 * Scratch memory that grows with the problem (stage 02's N x N scores) is not allocated by the stage:
 * the stage says how much it needs (workspace_bytes) and the harness allocates it once, checks that
 * it fits before allocating, accounts for it in the memory column and passes it in.
 */
#ifndef ATTN_STAGE_H
#define ATTN_STAGE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --trace-row: one query row followed through a CPU model's key loop (04m, 05m, 06m). After every key
 * tile (06m: every 64-key step) that the row's block visits, the model calls step() with the row's
 * state as its code holds it, so a reader watches the online softmax converge. */
typedef struct {
    int key_first, key_last; /* the keys of the tile just added, key_last < N */
    float m, l, alpha;       /* the row's running max, running sum and this tile's rescale factor */
    float m_ln;              /* m times m_ln is m in the LSE's units (the natural log of e^(scale q.k)):
                                ln 2 where m is in log2 units (04m, 05m), |scale| where m is a raw
                                score q.k (06m); so m m_ln + ln l is the LSE of the keys so far */
    const float *o;          /* the row's running O (not yet divided by l), D floats */
    int D;
} attn_trace_step;

typedef struct attn_trace {
    int64_t row; /* the query row i of the first head (b = 0, h = 0) to follow */
    void (*step)(const struct attn_trace *t, const attn_trace_step *s);
    void *ctx; /* the caller's */
} attn_trace;

/* Element strides of one tensor over batch, head and row; its D elements are contiguous. All three 0:
 * contiguous [B, heads, rows, D]. [B, N, H, D] is {N*H*D, D, H*D}. With cu_seqlens the batch stride is
 * unused (sequences are packed along the rows). Only a stage whose `takes` has ATTN_TAKES_STRIDES gets
 * anything but zeros: the harness hands the others contiguous tensors. */
typedef struct {
    int64_t b, h, n;
} attn_strides;

typedef struct {
    const void *q, *k, *v; /* [B, H, N, D] 16-bit, device (GPU stage) or host (CPU stage) */
    void *o;               /* [B, H, N, D] 16-bit, same dtype as the inputs; a backward stage reads it */
    float *lse;            /* [B, H, N] float32; written only by stages with writes_lse; a backward
                              stage reads it (the forward's, natural log) */
    void *workspace;       /* workspace_bytes(p) bytes, or NULL when that is 0 */
    void *stream;          /* cudaStream_t for GPU stages, NULL for the CPU stage */
    int gpus;              /* GPUs a multi-GPU stage spreads the problem over (>= 1); others: 1 */
    /* Backward stages only (pass != ATTN_FORWARD); NULL for the forward ones. */
    const void *d_o;         /* dO = dLoss/dO, [B, H, N, D] 16-bit */
    void *dq, *dk, *dv;      /* the gradients of Q, K, V, [B, H, N, D] 16-bit, written by the stage */
    const attn_trace *trace; /* a stage with `traces` only, and one run of it: the row to follow, or NULL */
    /* ATTN_TAKES_STRIDES stages only (zeros for the rest): the layouts of Q, K, V and O. */
    attn_strides q_stride, k_stride, v_stride, o_stride;
    /* ATTN_TAKES_VARLEN GPU stages: device copies of p->cu_seqlens_q and _k (which the suite keeps on
     * the host), B + 1 int32 offsets each; NULL without cu_seqlens, and for CPU stages. */
    const int32_t *cu_seqlens_q_dev, *cu_seqlens_k_dev;
    /* ATTN_TAKES_PAGED GPU stages: K and V are pools of pages [num_pages, H_kv, page_size, D] that the
     * harness fills from the problem's contiguous K and V in a shuffled order, and block_table_dev (device,
     * [B, table_stride] int32) names the page that holds keys e * page_size .. of sequence b; the pool's
     * other pages and the slots past N_k hold NaN. 0 and NULL for every other stage. */
    const int32_t *block_table_dev;
    int64_t page_size, num_pages, table_stride;
} attn_args;

/* Which pass a stage computes. A backward stage (11 on) takes Q, K, V, the forward's O and LSE and
 * dO, and writes dQ, dK and dV. ATTN_BACKWARD_ATOMIC: its dQ is summed over key tiles by atomic adds
 * whose order changes from run to run, so two runs agree to rounding, not bit for bit. */
typedef enum { ATTN_FORWARD = 0, ATTN_BACKWARD = 1, ATTN_BACKWARD_ATOMIC = 2 } attn_pass;

/*
 * The bytes a stage moves through device memory for one problem, computed from its tiling, never
 * measured (each stage's traffic.c holds its formulas, its README explains them). Two counts:
 *   hbm_*   HBM, the device's DRAM: every array a kernel touches counted once per kernel that reads
 *           or writes it, as if the 50 MB L2 kept whatever a kernel re-reads (a head's K and V: 1 MiB
 *           at N = 4096, D = 64). The roofline plots this one; ncu's dram__bytes_read/write measure it.
 *   tile_*  what the blocks load from and store to device memory, each tile counted every time a
 *           block loads it (FlashAttention's IO count, where on-chip memory is one block's shared
 *           memory and registers and nothing is shared between blocks): the traffic between L2 and
 *           the SMs. A stage without tiles (01, 02, 11) counts the same as hbm_*.
 * For a CPU stage "HBM" is the machine's RAM; a CPU model (03m-06m, 12m, 15m) counts its kernel's bytes.
 */
typedef struct {
    double hbm_read, hbm_written;
    double tile_read, tile_written;
} attn_bytes;

/* The most GPUs of one host that a multi-GPU stage is asked to drive (--gpus). */
#define ATTN_MAX_GPUS 64

typedef struct {
    const char *id;     /* "01" .. "15"; stage 06's road steps "06a" .. "06e"; "03m" .. "06m" and "12m"
                           for the CPU models of 03 .. 06 and 12; "13d", "14d": the deterministic modes
                           of stages 13 and 14; "15m": the model of stage 15 (flash-decoding), "15p"
                           its kernel reading a paged cache */
    const char *folder; /* "01_naive_cpu" */
    const char *name;   /* "naive_cpu" */
    const char *idea;   /* one line: the idea this stage adds */
    int on_gpu;
    /* GPU stages: the compute capabilities whose machine code the stage carries, as 10*major+minor.
     * min_sm 80 runs on sm_80 and newer; max_sm 90 with min_sm 90 is sm_90 only (wgmma and setmaxnreg
     * exist in sm_90a code, which no other GPU runs). 0 = no bound. arch_text says it for messages. */
    int min_sm, max_sm;
    const char *arch_text; /* "sm_80 or newer (A100, RTX 30/40, H100, H200)" */
    /* 0 for the CPU stage, 1 for a stage that runs on one GPU, ATTN_MAX_GPUS for one that splits a
     * problem over the GPUs of a host through NCCL (built only where NCCL was found). */
    int max_gpus;
    int writes_lse;
    unsigned dtypes;       /* ATTN_DTYPE_BIT(ATTN_F16) | ... */
    const char *dims_text; /* the head dims it takes, for messages and --list: "1..256" */
    int (*supports_dim)(int64_t D);
    /* Bytes of scratch the stage needs beyond Q, K, V, O and LSE; NULL means none. */
    size_t (*workspace_bytes)(const attn_problem *p);
    const char *workspace_what; /* what the scratch holds, for the out-of-memory message */
    /* NULL when the stage was not built (a GPU stage in a build without CUDA: ATTN_NO_CUDA_WHY). */
    attn_status (*run)(const attn_problem *p, const attn_args *a);
    attn_pass pass;
    /* The bytes moved for problem p on `gpus` GPUs (1 but for a multi-GPU stage); see attn_bytes. */
    attn_bytes (*bytes_moved)(const attn_problem *p, int gpus);
    int traces; /* 1: a CPU model that follows one row through its key loop (attn_args.trace) */
    /* The file that holds the stage's idea, from the repository's root: what `make diff A=.. B=..`
     * compares ("04_online_softmax/online_softmax_cpu.c"; stage 06: its loops, fa2_kernel.cuh). */
    const char *source;
    /* What the stage takes beyond K and V of Q's shape and one length for every sequence (ATTN_TAKES_*;
     * 0: plain attention). attn_stage_supports refuses the rest, naming the field. */
    unsigned takes;
} attn_stage;

#define ATTN_TAKES_GQA 1u     /* H_kv < H: grouped-query (and multi-query) attention */
#define ATTN_TAKES_SEQ_K 2u   /* N_k != N, with the causal mask aligned to the bottom right */
#define ATTN_TAKES_VARLEN 4u  /* cu_seqlens_q and cu_seqlens_k */
#define ATTN_TAKES_STRIDES 8u /* any row-contiguous layout of Q, K, V, O (attn_args' strides) */
#define ATTN_TAKES_PAGED 16u  /* K and V as pages of a pool through a block table (attn_args' pages) */
/* Not a shape but a purpose: a forward built for decoding, a few new queries a sequence over a long
 * cache (stage 15). attn_default_forward never picks one as a backward stage's forward: a backward's
 * problems are training's, N queries over N keys, where the query-tile stages are the fast ones. */
#define ATTN_FOR_DECODING 256u

/* The keys a page holds where the harness pages K and V for an ATTN_TAKES_PAGED stage: the smallest
 * page the paged-cache target of issue 60 names (pages of 64 keys or more). */
#define ATTN_PAGE_SIZE 64

/* The ids of the stages whose `takes` has `what` (ATTN_TAKES_*), for a refusal's message: "06, 06m", or
 * "none". Writes at most cap bytes into ids and returns it. */
const char *attn_stages_taking(unsigned what, char *ids, size_t cap);

/* Why a build has no GPU stages, for the messages that say a stage was not built ("..., and "
 * ATTN_NO_CUDA_WHY): the Makefile leaves them out both when it finds no nvcc and when NO_CUDA=1 asks
 * it to, into the same build/nocuda/ with the same objects. */
#define ATTN_NO_CUDA_WHY "nvcc was not found, or NO_CUDA=1 was given, when this was built"

extern const attn_stage attn_stages[];
extern const int attn_num_stages;

/* The head dims the tests, the sanitizer runs and --list-dims use: every dim a stage supports among
 * these (odd and non-power-of-two dims included for the stages that take any D). */
extern const int attn_test_dims[];
extern const int attn_num_test_dims;

/* Accepts "2", "02", "02_naive_gpu" or "naive_gpu"; a road step or CPU model by its id ("06c", "3m",
 * "03m" or "03M") or name (a folder names the numbered stage in it); NULL if none matches. */
const attn_stage *attn_find_stage(const char *key);
/* The CPU model of GPU stage s ("04" -> "04m"), or NULL when it has none. */
const attn_stage *attn_cpu_model_of(const attn_stage *s);
/* ATTN_OK, or ATTN_EUNSUPPORTED with "stage 03 supports head dim 32, 64, 128 (got 80)" etc.; also for
 * the shapes the stage does not take (attn_stage.takes): "stage 03 takes H_kv == H only (...)". */
attn_status attn_stage_supports(const attn_stage *s, const attn_problem *p);
/* ATTN_OK when stage s can run here: built, and (GPU stages) a GPU is present whose compute
 * capability the stage supports. Otherwise ATTN_ENODEV with the reason, naming the stage, what it
 * needs and what this machine has: "stage 07 needs sm_90 (H100, H200); this GPU (NVIDIA A100-SXM4-80GB)
 * is sm_80". The front end exits 1 on it, the tests skip with it, the bench rows carry it. */
attn_status attn_stage_available(const attn_stage *s);
/* 1 when the GPU stages were compiled into this build. */
int attn_built_with_cuda(void);
/* ATTN_OK when stage s may be asked to use `gpus` GPUs (0: the default, every GPU present for a
 * multi-GPU stage); otherwise ATTN_EINVAL with a message naming --gpus and the allowed range. Says
 * nothing about how many GPUs this machine has: the stage itself refuses more than are present. */
attn_status attn_stage_gpus_ok(const attn_stage *s, int gpus);

#ifdef __cplusplus
}
#endif
#endif
