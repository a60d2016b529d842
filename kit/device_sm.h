/*
 * device_sm.h: the current device's compute capability as one number (90 for an H100 or H200), asked
 * by the registry before build/attn runs a stage (gpu.c) and by the public library (lib/flashattn.c,
 * and hop_check_device in hopper_host.c), so that a library caller on another GPU is told so instead
 * of getting a launch or shared-memory error.
 *
 * ATTN_FAKE_SM=75 (a test hook) makes the device answer as an sm_75 would, in both places: how an
 * H200 shows the refusal a T4, A100 or V100 user gets (nothing else changes; kernels that do run,
 * run on the real GPU). CUDA builds only.
 */
#ifndef ATTN_DEVICE_SM_H
#define ATTN_DEVICE_SM_H

#include <cuda_runtime_api.h>
#include <stdlib.h>

/* 10 * major + minor of the current device, or -1 when the runtime cannot say (no usable device);
 * that query's own error is cleared, so that no later cudaGetLastError() reports it. */
static inline int attn_device_sm(void) {
    const char *fake = getenv("ATTN_FAKE_SM");
    if (fake && *fake) {
        char *end = NULL;
        long v = strtol(fake, &end, 10);
        if (*end == '\0' && v >= 10 && v <= 1000) return (int)v;
    }
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return 10 * major + minor;
}

#endif
