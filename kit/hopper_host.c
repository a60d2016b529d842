/*
 * hopper_host.c: tensor maps and the shared-memory opt-in for the Hopper stages (hopper_host.h).
 */
#ifdef ATTN_HAVE_CUDA
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "cuda_check.h"
#include "device_sm.h"
#include "func_attribute.h"
#include "hopper_host.h"

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;
static const char *encode_lookup_why = "not looked up";
static pthread_once_t encode_once = PTHREAD_ONCE_INIT;

/* Through the runtime's lookup (func_attribute.h: by version from CUDA 12.5, unversioned before). */
static void look_up_encode(void) {
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    void *fn = NULL;
    const cudaError_t e = attn_driver_entry_point("cuTensorMapEncodeTiled", &fn, &found);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* the lookup's own error, kept in the reason below */
        encode_lookup_why = cudaGetErrorString(e);
    } else if (found == cudaDriverEntryPointSuccess && fn) {
        encode_tiled = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    } else {
        encode_lookup_why = found == cudaDriverEntryPointVersionNotSufficent
                                ? "the driver is older than CUDA 12.0"
                                : "the driver lacks the symbol";
    }
}

attn_status hop_tensor_map(CUtensorMap *map, const void *base, int64_t bh, int64_t n, int64_t d,
                           int box_rows) {
    pthread_once(&encode_once, look_up_encode);
    if (!encode_tiled)
        return attn_fail(ATTN_ENODEV,
                         "the CUDA driver has no cuTensorMapEncodeTiled (a CUDA 12 driver has it): %s",
                         encode_lookup_why);
    /* dims innermost first: columns, rows of a head, heads; strides in bytes for dims 1 and 2 */
    const cuuint64_t dims[3] = {(cuuint64_t)d, (cuuint64_t)n, (cuuint64_t)bh};
    const cuuint64_t strides[2] = {(cuuint64_t)d * 2, (cuuint64_t)(n * d * 2)};
    const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
    const cuuint32_t unit[3] = {1, 1, 1};
    CUresult r = encode_tiled(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, (void *)base, dims, strides, box, unit,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return attn_fail(ATTN_EINVAL,
                         "cuTensorMapEncodeTiled refused a [%lld, %lld, %lld] tensor with a 64 x %d "
                         "box (CUresult %d)",
                         (long long)bh, (long long)n, (long long)d, box_rows, (int)r);
    return ATTN_OK;
}

attn_status hop_check_head_shape(int64_t N, int64_t D) {
    if (D != 64 && D != 128 && D != 256)
        return attn_fail(ATTN_EUNSUPPORTED, "D: head dim must be 64, 128 or 256 (got %lld)", (long long)D);
    if (N > ((int64_t)1 << 30))
        return attn_fail(ATTN_EUNSUPPORTED, "N: must be at most 2^30 (got %lld)", (long long)N);
    return ATTN_OK;
}

attn_status hop_check_heads(int64_t bh) {
    if (bh > HOP_MAX_HEADS)
        return attn_fail(ATTN_EUNSUPPORTED, "B*H: must be at most 2^31 (got %lld)", (long long)bh);
    return ATTN_OK;
}

attn_status hop_check_limits(int64_t B, int64_t H, int64_t N, int64_t D) {
    const attn_status st = hop_check_head_shape(N, D);
    return st != ATTN_OK ? st : hop_check_heads(B * H);
}

attn_status hop_check_device(void) {
    const int sm = attn_device_sm();
    if (sm < 0)
        return attn_fail(ATTN_ECUDA,
                         "device: the CUDA runtime cannot tell the current GPU's compute capability "
                         "(no usable device?)");
    if (sm != 90)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "device: stages 07-09 need an sm_90 GPU (H100, H200): wgmma, setmaxnreg and the "
                         "copy engine's tensor maps exist in sm_90a code only (got sm_%d)",
                         sm);
    return ATTN_OK;
}

attn_status hop_attn_setup(hop_attn_params *kp, const attn_problem *p, const attn_args *a, int br, int bc) {
    attn_status st = hop_check_limits(p->B, p->H, p->N, p->D);
    if (st != ATTN_OK) return st;
    const int64_t bh = p->B * p->H;
    if ((st = hop_tensor_map(&kp->q_map, a->q, bh, p->N, p->D, br)) != ATTN_OK ||
        (st = hop_tensor_map(&kp->k_map, a->k, bh, p->N, p->D, bc)) != ATTN_OK ||
        (st = hop_tensor_map(&kp->v_map, a->v, bh, p->N, p->D, bc)) != ATTN_OK)
        return st;
    kp->o = (uint16_t *)a->o;
    kp->lse = a->lse;
    kp->bh = bh;
    kp->n = (int)p->N;
    kp->scale_log2 = attn_exp2_scale(p->scale);
    kp->negate_q = p->scale < 0.f;
    return ATTN_OK;
}

/* Set on every launch rather than cached: the call costs about a microsecond on the host, and a cache
 * goes stale after cudaDeviceReset (the attribute is lost, the cache would still say "done"). Through
 * the driver (func_attribute.h), so that an error an earlier call left pending stays for its owner. */
attn_status hop_smem_opt_in(const void *kernel, int smem_bytes, const char *what) {
    cudaError_t e = attn_func_set_attribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* this call's own error, reported below: leave no trace */
        return attn_fail(attn_cuda_status(e), "%s: asking for %d bytes of shared memory per block failed: %s",
                         what, smem_bytes, cudaGetErrorString(e));
    }
    return ATTN_OK;
}

attn_status hop_launch(const void *kernel, dim3 grid, unsigned threads, int smem_bytes, cudaStream_t stream,
                       void *params, const char *what) {
    void *args[1] = {params};
    dim3 block = {threads, 1, 1};
    return hop_launch_status(cudaLaunchKernel(kernel, grid, block, args, (size_t)smem_bytes, stream), what);
}

attn_status hop_launch_status(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return ATTN_OK;
    (void)cudaGetLastError();
    return attn_fail(attn_cuda_status(e), "launching %s failed: %s", what, cudaGetErrorString(e));
}

/* A cluster launch's configuration: grid of `threads`-thread blocks, clusters of two along x. The
 * attribute is copied into *attr, which cfg points at. */
static cudaLaunchConfig_t pair_config(dim3 grid, unsigned threads, int smem_bytes, cudaStream_t stream,
                                      cudaLaunchAttribute *attr) {
    memset(attr, 0, sizeof *attr);
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = 2, attr->val.clusterDim.y = 1, attr->val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid, cfg.blockDim = (dim3){threads, 1, 1};
    cfg.dynamicSmemBytes = (size_t)smem_bytes, cfg.stream = stream;
    cfg.attrs = attr, cfg.numAttrs = 1;
    return cfg;
}

/* Asked on every launch, as the shared-memory opt-in is: about 0.4 us a call on the H200 (a probe of
 * 20000 calls), against 4.3 us to launch a cluster kernel. */
attn_status hop_pair_clusters_fit(const void *kernel, unsigned threads, int smem_bytes, const char *what,
                                  int *fit) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pair_config((dim3){2, 1, 1}, threads, smem_bytes, 0, &attr);
    *fit = 0;
    ATTN_CUDA(cudaOccupancyMaxActiveClusters(fit, kernel, &cfg));
    if (*fit < 1)
        return attn_fail(ATTN_EUNSUPPORTED,
                         "%s runs in clusters of two blocks (%d bytes of shared memory each) and none "
                         "fits on this GPU",
                         what, smem_bytes);
    return ATTN_OK;
}

attn_status hop_launch_pairs(const void *kernel, dim3 grid, unsigned threads, int smem_bytes,
                             cudaStream_t stream, void *params, const char *what) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pair_config(grid, threads, smem_bytes, stream, &attr);
    void *args[1] = {params};
    return hop_launch_status(cudaLaunchKernelExC(&cfg, kernel, args), what);
}
#endif
