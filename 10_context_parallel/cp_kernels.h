/*
 * cp_kernels.h: stage 10's own small kernels (cp_kernels.cu): the LSE merge of a local call's partial
 * into a rank's running output, the start value of the running LSE, and the final fp32 -> 16-bit
 * conversion. Each launches on the given stream and checks its launch; none synchronises.
 */
#ifndef CP_KERNELS_H
#define CP_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Merges rows from .. to-1 of a partial (o_part [BH][part_rows][D] 16-bit, lse_part [BH][part_rows])
 * into rows shift+from .. shift+to-1 of the running output (o_acc [BH][acc_rows][D], lse_acc
 * [BH][acc_rows], fp32), with cp_merge.h's formulas. */
attn_status cp_merge_launch(float *o_acc, float *lse_acc, int64_t acc_rows, const void *o_part,
                            const float *lse_part, int64_t part_rows, int64_t BH, int64_t D, int64_t from,
                            int64_t to, int64_t shift, attn_dtype dtype, cudaStream_t stream);
/* lse[0 .. n) = -inf: the LSE of a sum over no keys yet. */
attn_status cp_fill_neg_inf(float *lse, int64_t n, cudaStream_t stream);
/* out[0 .. n) = o[0 .. n) rounded to the 16-bit dtype (nearest even). */
attn_status cp_finish_launch(void *out, const float *o, int64_t n, attn_dtype dtype, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
