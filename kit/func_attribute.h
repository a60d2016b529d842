/*
 * func_attribute.h: set a kernel attribute (the shared-memory opt-in, the carveout) without touching
 * the caller's cudaGetLastError(). Used by stage 06's launch (fa2_launch.cuh) and the Hopper stages'
 * (hopper_host.c), whose libraries promise to leave an earlier, unrelated error where it was.
 *
 * The runtime's cudaFuncSetAttribute clears an error left pending in cudaGetLastError() even when it
 * succeeds (measured on the H200 with CUDA 13.0: a planted cudaErrorMemoryAllocation was gone after
 * the call), and that error belongs to the caller. The driver's cuFuncSetAttribute sets the same
 * attribute and knows nothing of the runtime's last error; it is reached through the runtime's
 * entry-point lookup (attn_driver_entry_point, which hopper_host.c uses too), so nothing links -lcuda.
 * Only where the lookup fails is the runtime call used.
 */
#ifndef ATTN_FUNC_ATTRIBUTE_H
#define ATTN_FUNC_ATTRIBUTE_H

#include <cuda.h> /* types and enums only: the driver is reached through the runtime */
#include <cuda_runtime_api.h>

/* The driver function `name` in its CUDA 12.0 form, through the runtime: by version from CUDA 12.5,
 * unversioned before (12.0-12.4 lack cudaGetDriverEntryPointByVersion; the functions asked for here have
 * had one form since 12.0). The lookup's own error is returned, for the caller to report or clear. */
static inline cudaError_t attn_driver_entry_point(const char *name, void **fn,
                                                  enum cudaDriverEntryPointQueryResult *found) {
#if CUDART_VERSION >= 12050
    return cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, found);
#else
    return cudaGetDriverEntryPoint(name, fn, cudaEnableDefault, found);
#endif
}

static inline cudaError_t attn_func_set_attribute(const void *kernel, enum cudaFuncAttribute attr,
                                                  CUfunction_attribute cu_attr, int value) {
    typedef CUresult (*set_attribute_fn)(CUfunction, CUfunction_attribute, int);
    static void *driver_set; /* looked up once; threads racing here store the same pointer */
    void *fn = __atomic_load_n(&driver_set, __ATOMIC_ACQUIRE);
    if (fn == NULL) {
        enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
        if (attn_driver_entry_point("cuFuncSetAttribute", &fn, &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            fn = NULL;
        else
            __atomic_store_n(&driver_set, fn, __ATOMIC_RELEASE);
    }
    CUfunction f = NULL;
    if (fn != NULL && cudaGetFuncBySymbol(&f, kernel) == cudaSuccess)
        return ((set_attribute_fn)fn)(f, cu_attr, value) == CUDA_SUCCESS ? cudaSuccess
                                                                         : cudaErrorInvalidValue;
    return cudaFuncSetAttribute(kernel, attr, value);
}

#endif
