/*
 * fa2_launch.cuh: the host side of one launch of a stage 06 kernel (the final one or a road step): the
 * shared-memory opt-in, the grid, the launch, and the error of that launch alone.
 */
#ifndef FA2_LAUNCH_CUH
#define FA2_LAUNCH_CUH

#include <cuda_runtime.h>

#include "fa2_internal.h"
#include "fa2_kernel.cuh"
#include "launch_opt_in.cuh"
#include "stage06.h" /* STAGE06_DIMS_TEXT */

#define FA2_GRID_YZ 65535 /* grid.y and grid.z limit */

/*
 * Launches `kernel` (the instantiation for DTYPE, D, CAUSAL, RECIPE) on `stream` over its grid of row
 * tiles and heads, with the shared-memory opt-in done once per device (kit/launch_opt_in.cuh says how,
 * and which error it returns).
 */
template <int DTYPE, int D, int CAUSAL, int RECIPE>
static cudaError_t fa2_launch(void (*kernel)(const fa2_params), const fa2_params *kp, cudaStream_t stream,
                              const char **why) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    static int configured[KIT_MAX_DEVICES];
    const int row_tiles = (kp->n + T.br - 1) / T.br; /* Tr = ceil(N / Br) of the recipe's Br */
    const dim3 grid((unsigned)row_tiles, (unsigned)(kp->heads < FA2_GRID_YZ ? kp->heads : FA2_GRID_YZ),
                    (unsigned)((kp->heads + FA2_GRID_YZ - 1) / FA2_GRID_YZ));
    return kit_launch_opted_in((const void *)kernel, configured, grid, dim3(T.threads), T.smem_bytes, kp,
                               stream, "the kernel launch failed", why);
}

/* Stage 06's kernel for one dtype, head dim D and mask. */
template <int DTYPE, int CAUSAL, int D>
static cudaError_t fa2_launch_dim(const fa2_params *kp, cudaStream_t stream, const char **why) {
    return fa2_launch<DTYPE, D, CAUSAL, FA2_RECIPE_FINAL>(fa2_forward_kernel<DTYPE, D, CAUSAL>, kp, stream,
                                                          why);
}

template <int DTYPE, int CAUSAL>
static cudaError_t fa2_launch_final(const fa2_params *kp, int64_t D, cudaStream_t stream, const char **why) {
    switch (D) {
    case 32: return fa2_launch_dim<DTYPE, CAUSAL, 32>(kp, stream, why);
    case 64: return fa2_launch_dim<DTYPE, CAUSAL, 64>(kp, stream, why);
    case 80: return fa2_launch_dim<DTYPE, CAUSAL, 80>(kp, stream, why);
    case 96: return fa2_launch_dim<DTYPE, CAUSAL, 96>(kp, stream, why);
    case 128: return fa2_launch_dim<DTYPE, CAUSAL, 128>(kp, stream, why);
    case 192: return fa2_launch_dim<DTYPE, CAUSAL, 192>(kp, stream, why);
    case 256: return fa2_launch_dim<DTYPE, CAUSAL, 256>(kp, stream, why);
    }
    *why = "head dim must be " STAGE06_DIMS_TEXT; /* stage06_check_limits refuses it before */
    return cudaErrorInvalidValue;
}

#endif
