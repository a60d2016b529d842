/*
 * device_memory.h: may a kernel on the current device read and write these pointers? Device memory of
 * the current device, or managed memory: yes. Host memory (malloc, or cudaMallocHost) would fault in
 * the kernel or be read over the bus; another device's memory likewise. Asked by the public library
 * (flashattn.c) before it runs a stage.
 */
#ifndef ATTN_DEVICE_MEMORY_H
#define ATTN_DEVICE_MEMORY_H

#include <cuda_runtime.h>
#include <stddef.h>

#define ATTN_MEMORY_UNKNOWN_WHY "not memory the CUDA runtime knows (need device memory)"
#define ATTN_MEMORY_HOST_WHY "host memory (need device or managed memory)"
#define ATTN_MEMORY_OTHER_WHY "memory of another device than the current one"
#define ATTN_MEMORY_NO_ANSWER_WHY "cannot ask the CUDA runtime about the pointers (no usable device?)"
#define ATTN_MEMORY_NO_DEVICE_WHY                                                                            \
    "no CUDA device (no NVIDIA GPU or driver here, or a driver older than this CUDA runtime)"

typedef enum {
    ATTN_MEMORY_READABLE,     /* every pointer: the current device's, or managed */
    ATTN_MEMORY_UNKNOWN,      /* one the runtime never saw (older runtimes answer so for malloc) */
    ATTN_MEMORY_HOST,         /* host memory, pinned or not */
    ATTN_MEMORY_OTHER_DEVICE, /* another device's memory */
    ATTN_MEMORY_NO_ANSWER     /* the runtime cannot answer (no usable device): not the caller's fault */
} attn_memory_verdict;

typedef struct {
    int index;         /* the pointer the verdict is about (the first one refused) */
    int device;        /* for ATTN_MEMORY_OTHER_DEVICE: whose memory it is */
    int current;       /* the current device */
    cudaError_t error; /* for ATTN_MEMORY_NO_ANSWER: the runtime's error */
} attn_memory_report;

/* Whether the runtime's error means there is no GPU (or no driver), and the reason for
 * ATTN_MEMORY_NO_ANSWER given that error. Without a GPU or its driver the
 * runtime's own text, which the callers append, is "CUDA driver version is insufficient for CUDA runtime
 * version" (cudaErrorInsufficientDriver: no driver counts as an old one); read alone, it asked for a
 * driver update on a machine with no GPU (issue 58). Such a refusal says "no CUDA device" first. */
static inline int attn_memory_no_device(cudaError_t e) {
    return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver;
}
static inline const char *attn_memory_no_answer_why(cudaError_t e) {
    return attn_memory_no_device(e) ? ATTN_MEMORY_NO_DEVICE_WHY : ATTN_MEMORY_NO_ANSWER_WHY;
}

/* ptr[0..n-1], NULL entries skipped (an optional output). The runtime is left without an error: a
 * failed query is reported through the verdict, never through a later call's cudaGetLastError. */
static inline attn_memory_verdict attn_device_memory(const void *const ptr[], int n, attn_memory_report *r) {
    r->index = -1;
    r->device = r->current = 0;
    r->error = cudaGetDevice(&r->current);
    for (int i = 0; i < n && r->error == cudaSuccess; i++) {
        if (ptr[i] == NULL) continue;
        struct cudaPointerAttributes at;
        r->error = cudaPointerGetAttributes(&at, ptr[i]);
        r->index = i;
        if (r->error == cudaErrorInvalidValue) {
            (void)cudaGetLastError();
            r->error = cudaSuccess;
            return ATTN_MEMORY_UNKNOWN;
        }
        if (r->error != cudaSuccess) break;
        if (at.type == cudaMemoryTypeHost || at.type == cudaMemoryTypeUnregistered) return ATTN_MEMORY_HOST;
        r->device = at.device;
        if (at.type == cudaMemoryTypeDevice && at.device != r->current) return ATTN_MEMORY_OTHER_DEVICE;
    }
    if (r->error == cudaSuccess) return ATTN_MEMORY_READABLE;
    (void)cudaGetLastError();
    return ATTN_MEMORY_NO_ANSWER;
}

#endif
