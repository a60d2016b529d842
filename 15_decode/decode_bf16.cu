/*
 * decode_bf16.cu: stage 15's kernels for bf16 (one translation unit per dtype, so that the two compile in
 * parallel). The kernels are in decode_kernel.cuh; decode_gpu.c calls this launch.
 */
#include "decode_kernel.cuh"

extern "C" int decode_launch_bf16(const decode_params *kp, int64_t B, int64_t D, void *stream,
                                  const char **why) {
    return (int)decode_launch<ATTN_BF16>(kp, B, D, (cudaStream_t)stream, why);
}
