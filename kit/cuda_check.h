/*
 * cuda_check.h: the one CUDA error macro. Usable from C host code and from .cu files.
 *
 *   ATTN_CUDA(cudaMalloc(&p, n));           // on failure: returns ATTN_ECUDA (or ATTN_ENOMEM)
 *   kernel<<<grid, block, smem, stream>>>(...);
 *   ATTN_CUDA_LAUNCHED("stage 03 kernel");  // the launch itself (bad config, no device code)
 *
 * Both return from the enclosing function with an attn_status and leave a message naming the call,
 * the file and line, and CUDA's own error string. They never exit.
 */
#ifndef ATTN_CUDA_CHECK_H
#define ATTN_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "attn.h"

static inline attn_status attn_cuda_status(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return ATTN_OK;
    case cudaErrorMemoryAllocation: return ATTN_ENOMEM;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: return ATTN_ENODEV;
    default: return ATTN_ECUDA;
    }
}

#define ATTN_CUDA(call)                                                                              \
    do {                                                                                             \
        cudaError_t attn_e_ = (call);                                                                \
        if (attn_e_ != cudaSuccess)                                                                  \
            return attn_fail(attn_cuda_status(attn_e_), "%s failed at %s:%d: %s", #call, __FILE__,   \
                             __LINE__, cudaGetErrorString(attn_e_));                                 \
    } while (0)

#define ATTN_CUDA_LAUNCHED(what)                                                                     \
    do {                                                                                             \
        cudaError_t attn_e_ = cudaGetLastError();                                                    \
        if (attn_e_ != cudaSuccess)                                                                  \
            return attn_fail(attn_cuda_status(attn_e_), "launching %s failed at %s:%d: %s", (what),  \
                             __FILE__, __LINE__, cudaGetErrorString(attn_e_));                       \
    } while (0)

#endif
