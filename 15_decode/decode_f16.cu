/*
 * decode_f16.cu: stage 15's kernels for fp16 (one translation unit per dtype, so that the two compile in
 * parallel). The kernels are in decode_kernel.cuh; decode_gpu.c calls this launch.
 */
#include "decode_kernel.cuh"

extern "C" int decode_launch_f16(const decode_params *kp, int64_t B, int64_t D, void *stream,
                                 const char **why) {
    return (int)decode_launch<ATTN_F16>(kp, B, D, (cudaStream_t)stream, why);
}

/* One definition for both dtypes: the layout does not depend on the dtype. */
extern "C" int decode_smem_bytes_of(int64_t D, int64_t R) {
    const int wk = decode_key_warps(R);
    return D == 32 || D == 64 || D == 128 ? decode_smem_bytes((int)D, wk) : 0;
}
