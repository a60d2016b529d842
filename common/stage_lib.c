/*
 * stage_lib.c: the checks and status mapping behind every stage library's NAME_forward (stage_lib.h).
 */
#ifdef ATTN_HAVE_CUDA
#include <math.h>

#include "stage_lib.h"

/* 1 when p is device memory this process can use (not a host pointer, which would fault later) */
static int on_device(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static int lib_status(attn_status s) {
    switch (s) {
    case ATTN_OK: return 0;
    case ATTN_EINVAL: return 1;
    case ATTN_EUNSUPPORTED: return 2;
    default: return 3;
    }
}

int attn_lib_forward(attn_stage_run_fn run, const void *q, const void *k, const void *v, void *o, float *lse,
                     int64_t B, int64_t H, int64_t N, int64_t D, int causal, float scale, int dtype,
                     cudaStream_t stream) {
    const void *ptr[5] = {q, k, v, o, lse};
    const char *name[5] = {"q", "k", "v", "o", "lse"};
    for (int i = 0; i < 5; i++) {
        if (!ptr[i])
            return lib_status(attn_fail(ATTN_EINVAL, "%s must be a device pointer, not NULL", name[i]));
        if ((uintptr_t)ptr[i] % (i < 4 ? 16 : 4))
            return lib_status(attn_fail(ATTN_EINVAL, "%s must be %d-byte aligned", name[i], i < 4 ? 16 : 4));
        if (!on_device(ptr[i]))
            return lib_status(attn_fail(ATTN_EINVAL, "%s is not device memory of this process", name[i]));
    }
    if (dtype != ATTN_F16 && dtype != ATTN_BF16)
        return lib_status(attn_fail(ATTN_EINVAL, "dtype must be 0 (fp16) or 1 (bf16), got %d", dtype));
    attn_problem p = attn_problem_make(B, H, N, D, causal != 0);
    p.scale = scale;
    p.dtype = (attn_dtype)dtype;
    attn_status st = attn_problem_validate(&p);
    if (st != ATTN_OK) return lib_status(st);
    const attn_args a = {q, k, v, o, lse, NULL, (void *)stream, 1};
    return lib_status(run(&p, &a));
}

const char *attn_lib_status_string(int s) {
    switch (s) {
    case 0: return "ok";
    case 1: return "invalid argument";
    case 2: return "unsupported";
    case 3: return "CUDA error";
    }
    return "unknown status";
}
#endif
