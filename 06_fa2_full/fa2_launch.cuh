/*
 * fa2_launch.cuh: the host side of one launch of a stage 06 kernel (the final one or a road step): the
 * shared-memory opt-in, the grid, the launch, and the error of that launch alone.
 */
#ifndef FA2_LAUNCH_CUH
#define FA2_LAUNCH_CUH

#include <cuda.h> /* types and enums only: the driver is reached through the runtime */
#include <cuda_runtime.h>

#include "fa2_internal.h"
#include "fa2_kernel.cuh"
#include "func_attribute.h"
#include "stage06.h" /* STAGE06_DIMS_TEXT */

#define FA2_MAX_DEVICES 64
#define FA2_GRID_YZ 65535 /* grid.y and grid.z limit */

/* More than 48 KB of dynamic shared memory needs an opt-in per kernel (and per device and context); the
 * carveout asks for the largest shared-memory share so that two 97 KB blocks fit on one SM. */
static cudaError_t fa2_configure(const void *kernel, int smem_bytes, const char **why) {
    cudaError_t e = attn_func_set_attribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes);
    if (e == cudaSuccess)
        e = attn_func_set_attribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                    (int)cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* reported through the return value: leave no trace for the caller */
        *why = "cudaFuncSetAttribute failed (the GPU has less shared memory per block than the kernel needs, "
               "or is older than sm_80)";
    }
    return e;
}

/*
 * Launches `kernel` (the instantiation for DTYPE, D, CAUSAL, RECIPE) on `stream` and returns the error
 * of this launch only: an error some earlier call left in cudaGetLastError() is neither reported nor
 * cleared. When this launch fails, its error is cleared there too (the caller gets it as the result).
 *
 * configured[dev] remembers that this kernel's opt-in is done on device dev, so that a call costs no
 * more than cudaGetDevice and the launch. It is a hint: cudaDeviceReset() undoes the opt-in without
 * telling anyone, so a launch that fails while the hint is set configures again and is retried once
 * (the failed launch queued nothing, so nothing runs twice). The flags are read and written atomically,
 * since threads may launch concurrently; two threads configuring at once set the same values.
 */
template <int DTYPE, int D, int CAUSAL, int RECIPE>
static cudaError_t fa2_launch(void (*kernel)(const fa2_params), const fa2_params *kp, cudaStream_t stream,
                              const char **why) {
    constexpr fa2_traits T = fa2_traits_of(D, RECIPE);
    static int configured[FA2_MAX_DEVICES];
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *why = "cudaGetDevice failed (no usable CUDA device?)";
        return e;
    }
    int *flag = dev >= 0 && dev < FA2_MAX_DEVICES ? &configured[dev] : NULL;
    const int hinted = flag != NULL && __atomic_load_n(flag, __ATOMIC_ACQUIRE);
    if (!hinted) {
        if ((e = fa2_configure((const void *)kernel, T.smem_bytes, why)) != cudaSuccess) return e;
        if (flag != NULL) __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    }
    const int row_tiles = (kp->n + T.br - 1) / T.br; /* Tr = ceil(N / Br) of the recipe's Br */
    const dim3 grid((unsigned)row_tiles, (unsigned)(kp->heads < FA2_GRID_YZ ? kp->heads : FA2_GRID_YZ),
                    (unsigned)((kp->heads + FA2_GRID_YZ - 1) / FA2_GRID_YZ));
    void *args[1] = {(void *)kp};
    e = cudaLaunchKernel((const void *)kernel, grid, dim3(T.threads), args, (size_t)T.smem_bytes, stream);
    if (e != cudaSuccess && hinted) {
        (void)cudaGetLastError();
        if ((e = fa2_configure((const void *)kernel, T.smem_bytes, why)) != cudaSuccess) return e;
        e = cudaLaunchKernel((const void *)kernel, grid, dim3(T.threads), args, (size_t)T.smem_bytes, stream);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *why = "the kernel launch failed";
    }
    return e;
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
