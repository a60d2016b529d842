/*
 * launch_opt_in.cuh: one launch of a kernel that needs more than 48 KB of dynamic shared memory, the
 * host side that stages 06 and 15 share. Such a kernel needs an opt-in per kernel (and per device and
 * context); the carveout asks for the largest shared-memory share so that two blocks of about 100 KB
 * fit on one SM.
 *
 * configured[dev] (KIT_MAX_DEVICES flags, one static array per kernel) remembers that the opt-in is
 * done on device dev, so that a call costs no more than cudaGetDevice and the launch. It is a hint:
 * cudaDeviceReset() undoes the opt-in without telling anyone, so a launch that fails while the hint is
 * set configures again and is retried once (the failed launch queued nothing, so nothing runs twice).
 * The flags are read and written atomically, since threads may launch concurrently; two threads
 * configuring at once set the same values.
 *
 * The result is the error of this launch only: an error some earlier call left in cudaGetLastError()
 * is neither reported nor cleared, and this launch's own is cleared there (the caller gets it as the
 * result, with *why saying which step failed).
 */
#ifndef KIT_LAUNCH_OPT_IN_CUH
#define KIT_LAUNCH_OPT_IN_CUH

#include <cuda.h> /* types and enums only: the driver is reached through the runtime */
#include <cuda_runtime.h>

#include "func_attribute.h"

#define KIT_MAX_DEVICES 64

/* The opt-in and the carveout of one kernel on the current device. */
static cudaError_t kit_opt_in_shared(const void *kernel, int smem_bytes, const char **why) {
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

/* Launches kernel(*arg) on grid x block with smem_bytes of dynamic shared memory, opted in once per
 * device through configured[]; launch_failed is *why's text when the launch itself fails. */
static cudaError_t kit_launch_opted_in(const void *kernel, int *configured, dim3 grid, dim3 block,
                                       int smem_bytes, const void *arg, cudaStream_t stream,
                                       const char *launch_failed, const char **why) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *why = "cudaGetDevice failed (no usable CUDA device?)";
        return e;
    }
    int *flag = dev >= 0 && dev < KIT_MAX_DEVICES ? &configured[dev] : NULL;
    const int hinted = flag != NULL && __atomic_load_n(flag, __ATOMIC_ACQUIRE);
    if (!hinted) {
        if ((e = kit_opt_in_shared(kernel, smem_bytes, why)) != cudaSuccess) return e;
        if (flag != NULL) __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    }
    void *args[1] = {(void *)arg};
    e = cudaLaunchKernel(kernel, grid, block, args, (size_t)smem_bytes, stream);
    if (e != cudaSuccess && hinted) {
        (void)cudaGetLastError();
        if ((e = kit_opt_in_shared(kernel, smem_bytes, why)) != cudaSuccess) return e;
        e = cudaLaunchKernel(kernel, grid, block, args, (size_t)smem_bytes, stream);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *why = launch_failed;
    }
    return e;
}

#endif
