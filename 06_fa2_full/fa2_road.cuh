/*
 * fa2_road.cuh: what every road step file (step06a_*.cu .. step06e_*.cu) shares. A road step is stage
 * 06's block function (fa2_attention_block) built with a smaller recipe (fa2_traits.cuh): the kernel
 * is one line, and the step's file says which idea it adds. Road steps are registered stages of the
 * suite (suite/registry.c): `build/attn --stage 06c`, make check, make sanitize and make bench run
 * them like any stage. fp16, head dims 64 and 128 (the road's measured dims), LSE written.
 */
#ifndef FA2_ROAD_CUH
#define FA2_ROAD_CUH

#include "cuda_check.h"
#include "fa2_launch.cuh"
#include "stage06.h"

typedef void (*fa2_kernel_fn)(const fa2_params);

/* Runs road step `id` with the kernels of its recipe for (D = 64, 128) x (causal = 0, 1). */
template <int RECIPE>
static attn_status fa2_road_run(const char *id, const attn_problem *p, const attn_args *a, fa2_kernel_fn d64,
                                fa2_kernel_fn d64_causal, fa2_kernel_fn d128, fa2_kernel_fn d128_causal) {
    if (!stage06_road_supports_dim(p->D) || p->dtype != ATTN_F16)
        return attn_fail(ATTN_EUNSUPPORTED, "stage %s supports fp16 at head dim 64 or 128 (got %s, %lld)", id,
                         attn_dtype_name(p->dtype), (long long)p->D);
    const attn_status st06 = stage06_check_limits(p); /* N and B*H: the final kernel's grid and indices */
    if (st06 != ATTN_OK) return st06;
    const fa2_params kp = fa2_params_of(p, a);
    const char *why = "";
    cudaStream_t st = (cudaStream_t)a->stream;
    cudaError_t e;
    if (p->D == 64)
        e = p->causal ? fa2_launch<ATTN_F16, 64, 1, RECIPE>(d64_causal, &kp, st, &why)
                      : fa2_launch<ATTN_F16, 64, 0, RECIPE>(d64, &kp, st, &why);
    else
        e = p->causal ? fa2_launch<ATTN_F16, 128, 1, RECIPE>(d128_causal, &kp, st, &why)
                      : fa2_launch<ATTN_F16, 128, 0, RECIPE>(d128, &kp, st, &why);
    if (e != cudaSuccess)
        return attn_fail(attn_cuda_status(e), "stage %s: %s: %s", id, why, cudaGetErrorString(e));
    return ATTN_OK;
}

/* One road step: its kernel KERNEL<D, CAUSAL> (fp16) and the registry's entry point RUN. */
#define FA2_ROAD_STEP(ID, RECIPE, KERNEL, RUN)                                                               \
    template <int D, int CAUSAL>                                                                             \
    __global__ void __launch_bounds__(fa2_traits_of(D, RECIPE).threads, fa2_traits_of(D, RECIPE).min_blocks) \
        KERNEL(const fa2_params p) {                                                                         \
        fa2_attention_block<ATTN_F16, D, CAUSAL, RECIPE>(&p, (fa2_smem_address(fa2_smem) + 1023u) & ~1023u); \
    }                                                                                                        \
    extern "C" attn_status RUN(const attn_problem *p, const attn_args *a) {                                  \
        return fa2_road_run<RECIPE>(ID, p, a, KERNEL<64, 0>, KERNEL<64, 1>, KERNEL<128, 0>, KERNEL<128, 1>); \
    }

#endif
