/*
 * hopper_host.h: the host half of the Hopper stages (07-09): tensor maps for the bulk tensor copy
 * engine, and the launch bookkeeping those stages share. CUDA builds only.
 *
 * A tensor map describes one [B, H, N, D] tensor to the copy engine as a 3-D array (D columns, N rows,
 * B*H heads) and the box it copies (64 columns x box_rows rows x 1 head, 128-byte swizzle). Rows past
 * N of a head are outside the array, so a box that reaches past a head's end is filled with zeros
 * instead of the next head's rows. cuTensorMapEncodeTiled is a driver function; it is looked up at
 * run time through the runtime (cudaGetDriverEntryPointByVersion, or cudaGetDriverEntryPoint before
 * CUDA 12.5), so nothing links -lcuda and the static build still runs on machines without a driver.
 */
#ifndef ATTN_HOPPER_HOST_H
#define ATTN_HOPPER_HOST_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "attn.h"
#include "stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kernel parameters every Hopper stage takes (passed by value as a __grid_constant__ parameter:
 * the tensor maps must live in parameter or constant memory for the copy engine to read them). */
typedef struct {
    CUtensorMap q_map, k_map, v_map; /* boxes of 64 columns x Br rows (Q) or Bc rows (K, V) */
    uint16_t *o;                     /* [B, H, N, D] */
    float *lse;                      /* [B, H, N] */
    int64_t bh;                      /* B*H */
    int n;                           /* N */
    float scale_log2;                /* |scale| * log2(e), at least FLT_MIN: the one multiplier of exp2 */
    int negate_q;                    /* scale < 0: S = (-Q) K^T (wgmma negates A), and |scale| */
} hop_attn_params;

/* Stages 08 and 09 store O through the copy engine (hop_store_o_through_tma): their kernels take the
 * parameters above and a tensor map of O with boxes of 64 columns x 64 rows (one consumer warpgroup's
 * rows), which the stage's launch fills with hop_tensor_map(&o_map, o, bh, n, D, 64). */
typedef struct {
    hop_attn_params a;
    CUtensorMap o_map;
} hop_attn_o_params;

/* The largest grid.y and grid.z: B*H is spread over both (2^31 heads need 32769 in z). */
#define HOP_GRID_YZ 65535
/* The most heads: a head is the copy engine's third coordinate, a signed 32-bit int (PTX .s32), so
 * head 2^31 would read as -2^31, outside the tensor: its boxes would arrive as zeros, silently. */
#define HOP_MAX_HEADS ((int64_t)1 << 31)

/* The Hopper stages' limits: D 64, 128 or 256 and N <= 2^30 (one head's shape), B*H <= 2^31 (the heads;
 * B*H*N*D already known to fit in 64 bits). ATTN_EUNSUPPORTED naming the argument and the value ("D: head
 * dim must be 64, 128 or 256 (got 32)"). hop_attn_setup asks both; the public library asks
 * hop_check_limits before any CUDA call (lib/flashattn.c). */
attn_status hop_check_head_shape(int64_t N, int64_t D);
attn_status hop_check_heads(int64_t bh);
attn_status hop_check_limits(int64_t B, int64_t H, int64_t N, int64_t D);

/* ATTN_EUNSUPPORTED unless the current device is an sm_90 GPU ("device: ... (got sm_80)"), ATTN_ECUDA
 * when it cannot be asked. The registry refuses such a GPU before build/attn runs a stage (gpu.c); the
 * public library asks this (lib/flashattn.c), as its callers would otherwise see a shared-memory or
 * launch error. ATTN_FAKE_SM applies. */
attn_status hop_check_device(void);

/* Checks the problem's limits (hop_check_limits) and fills *kp: tensor maps with Br-row boxes for Q
 * and Bc-row boxes for K and V, and the scale as stage 06 takes it (0 runs as FLT_MIN, where every 2^x
 * rounds to 1; a negative scale as -Q and |scale|). */
attn_status hop_attn_setup(hop_attn_params *kp, const attn_problem *p, const attn_args *a, int br, int bc);

/* Fills *map for the [bh, n, d] 16-bit tensor at base (16-byte aligned, d a multiple of 64) with a box
 * of 64 columns x box_rows rows. ATTN_ENODEV when the driver lacks the function, ATTN_EINVAL when the
 * driver refuses the shape (the message names the shape). */
attn_status hop_tensor_map(CUtensorMap *map, const void *base, int64_t bh, int64_t n, int64_t d,
                           int box_rows);

/* The kernel's shared memory opt-in (> 48 KB), set before each launch. */
attn_status hop_smem_opt_in(const void *kernel, int smem_bytes, const char *what);

/* Launches kernel(*params) (one parameter, by value) and reports this launch's error only: an error an
 * earlier, unrelated call left in cudaGetLastError() is neither taken as this launch's nor cleared
 * (kernel<<<...>>> followed by cudaGetLastError() would report it after queueing the kernel, and a
 * caller who retried would run it twice). */
attn_status hop_launch(const void *kernel, dim3 grid, unsigned threads, int smem_bytes, cudaStream_t stream,
                       void *params, const char *what);

/* The status of a launch made elsewhere, by hop_launch's rule: e is this launch's own error; it is
 * reported, and cleared so that no later call reports it. */
attn_status hop_launch_status(cudaError_t e, const char *what);

/* Pairs of blocks (stages 08 and 09): clusters of two along x, which the GPU places on two SMs of one
 * GPC. hop_pair_clusters_fit sets *fit to how many such clusters of kernel run at once, and fails with
 * ATTN_EUNSUPPORTED, naming `what`, when none does; hop_launch_pairs launches grid (grid.x even) as
 * clusters of two, by hop_launch's rule. */
attn_status hop_pair_clusters_fit(const void *kernel, unsigned threads, int smem_bytes, const char *what,
                                  int *fit);
attn_status hop_launch_pairs(const void *kernel, dim3 grid, unsigned threads, int smem_bytes,
                             cudaStream_t stream, void *params, const char *what);

#ifdef __cplusplus
}
#endif
#endif
