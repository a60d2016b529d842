/*
 * fa2_bf16.cu: stage 06's kernels for bf16 (one translation unit per dtype, so that the two compile in
 * parallel). The kernel is fa2_forward_kernel in fa2_kernel.cuh; the launch in fa2_launch.cuh.
 */
#include "fa2_launch.cuh"

extern "C" cudaError_t fa2_launch_bf16(const fa2_params *kp, int64_t D, int causal, cudaStream_t stream,
                                       const char **why) {
    return causal ? fa2_launch_final<ATTN_BF16, 1>(kp, D, stream, why)
                  : fa2_launch_final<ATTN_BF16, 0>(kp, D, stream, why);
}
