/*
 * hopper.cuh: the Hopper (sm_90a) pieces that stages 07-09 and 14 share: the mbarrier, the bulk tensor
 * copy (TMA), the warpgroup matrix multiply (wgmma) and its shared-memory descriptors, named
 * barriers and setmaxnreg. Thin PTX wrappers, one instruction each, named after what they do; the
 * stages read like the algorithm and this file says what the hardware does. Device code only; the
 * host side (tensor maps) is in hopper_host.h.
 *
 * Hopper's asynchronous path in one picture (one K/V tile, one warpgroup of 128 threads):
 *
 *     global K, V --(TMA: one thread issues, the copy engine moves 8-48 KB)--> shared memory
 *                         completes on an mbarrier (expect_tx bytes, then a phase flips)
 *     shared Q, K --(wgmma: 4 warps issue one 64 x N x 16 product together)--> registers S
 *     registers P, shared V --(wgmma, A from registers, B read transposed)--> registers O
 *
 * Shared-memory tiles are written by TMA with the 128-byte swizzle and read by wgmma with the same
 * swizzle: a tile of R rows x 64 half-precision columns is R rows of 128 bytes, and the 16-byte
 * chunk c of row r is stored at chunk c ^ (r % 8). Eight rows (1024 bytes) form one swizzle atom;
 * tiles start 1024-byte aligned so that both sides compute the same pattern from the address.
 */
#ifndef ATTN_HOPPER_CUH
#define ATTN_HOPPER_CUH

#include <stdint.h>

#include "hopper_desc.h"
#include "wgmma_ops.cuh"

static __device__ __forceinline__ uint32_t hop_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- mbarrier: a 64-bit counter in shared memory with a phase bit ------------------------------
 * init(count): the phase completes when `count` arrivals have happened and every byte announced
 * with expect_tx has landed; then the phase bit flips and the counter re-arms. Waiters poll
 * try_wait.parity with the parity of the phase they wait for (0, 1, 0, ... for a reused buffer). */
static __device__ __forceinline__ void hop_mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* makes the initialised barriers visible to the copy engine (the async proxy) */
static __device__ __forceinline__ void hop_fence_barrier_init(void) {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* one arrival that also announces `bytes` still to come from the copy engine */
static __device__ __forceinline__ void hop_mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ void hop_mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void hop_mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

/* ---- TMA: the bulk tensor copy engine ---------------------------------------------------------
 * One thread asks for a box of a 3-D tensor (column, row, head) described by a tensor map (built on
 * the host, passed as a __grid_constant__ kernel parameter); the engine writes it to shared memory
 * in the map's swizzle and counts the bytes on the mbarrier. Rows past the tensor's end (the tail of
 * a head) arrive as zeros: the kernel never reads out of bounds, but must still mask those keys. */
static __device__ __forceinline__ void hop_tma_load_3d(uint32_t dst, const void *tensor_map, uint32_t bar,
                                                       int col, int row, int head) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
                 "l"((uint64_t)(uintptr_t)tensor_map), "r"(col), "r"(row), "r"(head), "r"(bar)
                 : "memory");
}
/* The reverse direction: shared memory to global, rows past the tensor's end are not written. */
static __device__ __forceinline__ void hop_tma_store_3d(const void *tensor_map, uint32_t src, int col,
                                                        int row, int head) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                     (uint64_t)(uintptr_t)tensor_map),
                 "r"(src), "r"(col), "r"(row), "r"(head)
                 : "memory");
}
/* The same direction, but the engine adds the box into global memory instead of writing it (an atomic
 * add per element at L2, in the map's type: the backward's fp32 dQ accumulator, stage 14); rows past the
 * tensor's end are skipped. Committed and waited for as the stores are (bulk groups). */
static __device__ __forceinline__ void hop_tma_reduce_add_3d(const void *tensor_map, uint32_t src, int col,
                                                             int row, int head) {
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"
                 " [%0, {%2, %3, %4}], [%1];\n" ::"l"((uint64_t)(uintptr_t)tensor_map),
                 "r"(src), "r"(col), "r"(row), "r"(head)
                 : "memory");
}
/* Stores are committed as a group by the thread that issued them; that thread waits until the engine
 * has read the source (.read: the shared memory may be written again) or has finished the writes. */
static __device__ __forceinline__ void hop_tma_store_commit(void) {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
static __device__ __forceinline__ void hop_tma_store_wait_read(void) {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
static __device__ __forceinline__ void hop_tma_store_wait_all(void) {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
static __device__ __forceinline__ void hop_tma_prefetch_map(const void *tensor_map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)(uintptr_t)tensor_map) : "memory");
}
/* Ordinary shared-memory stores that the copy engine or wgmma reads next need this fence first. */
static __device__ __forceinline__ void hop_fence_async_smem(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* ---- wgmma: warpgroup matrix multiply ---------------------------------------------------------
 * Operands in shared memory are named by 64-bit descriptors: hop_desc_sw128() and hop_desc_advance()
 * in hopper_desc.h (plain C, tested on the CPU). */
/* Before the first wgmma of a batch: registers it reads or accumulates into were written by
 * ordinary instructions (O rescaled by alpha, P packed) and must be settled first. */
static __device__ __forceinline__ void hop_wgmma_fence(void) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void hop_wgmma_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* Waits until at most N committed groups of this warpgroup are still running. */
template <int N> static __device__ __forceinline__ void hop_wgmma_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving reads or writes of an accumulator across an asynchronous wgmma:
 * after hop_wgmma_wait, every accumulator register goes through this empty asm. */
template <int R> static __device__ __forceinline__ void hop_settle(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* ---- warp specialization (stages 08, 09) ------------------------------------------------------ */
/* Named barrier `id` (1..15; 0 is __syncthreads) for `threads` threads, a multiple of 32. */
static __device__ __forceinline__ void hop_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
static __device__ __forceinline__ void hop_bar_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/* setmaxnreg: a warpgroup gives registers back (dec) or takes them (inc); the count is per thread,
 * a multiple of 8 in 24..256. Needs a register cap at entry (__launch_bounds__(threads, 1)). */
template <int R> static __device__ __forceinline__ void hop_regs_release(void) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R> static __device__ __forceinline__ void hop_regs_claim(void) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

/* ---- clusters (stage 09's pairs of blocks) ----------------------------------------------------
 * A cluster is a group of blocks on one GPC that can read, write and signal each other's shared
 * memory. Two blocks working on adjacent row blocks of one head need the same K and V tiles: each
 * loads half of a tile and the copy engine writes it into both (multicast), so L2 serves each K/V
 * byte once per pair instead of once per block. */
static __device__ __forceinline__ uint32_t hop_cluster_rank(void) {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* Every thread of every block of the cluster (not .aligned: warps may arrive diverged) */
static __device__ __forceinline__ void hop_cluster_sync(void) {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
/* The address of the same shared-memory offset in block `rank` of the cluster */
static __device__ __forceinline__ uint32_t hop_cluster_map(uint32_t addr, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
/* One arrival on an mbarrier of another block of the cluster (an address from hop_cluster_map). The
 * default .release.cta semantics, as the local arrival has: the reads it orders are this block's own
 * (wgmma reads of the buffer the arrival frees). HOP_ARRIVE_CLUSTER_SCOPE asks for .release.cluster. */
static __device__ __forceinline__ void hop_mbar_arrive_cluster(uint32_t cluster_addr) {
#ifdef HOP_ARRIVE_CLUSTER_SCOPE
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr)
                 : "memory");
#else
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
#endif
}
/* A box written to the same offset `dst` in every block of `cta_mask`, each counting the bytes on its
 * own mbarrier at offset `bar` */
static __device__ __forceinline__ void hop_tma_load_3d_multicast(uint32_t dst, const void *tensor_map,
                                                                 uint32_t bar, int col, int row, int head,
                                                                 uint16_t cta_mask) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
                 "l"((uint64_t)(uintptr_t)tensor_map), "r"(col), "r"(row), "r"(head), "r"(bar), "h"(cta_mask)
                 : "memory");
}

#endif
