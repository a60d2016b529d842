# 12_backward_tiled/backward_tiled.mk: stage 12 uses only CUDA cores (fp32 FFMA, shuffles, float
# atomics), so it carries machine code from the oldest GPU nvcc builds for, as stages 02-05 do (the
# registry says SM70_UP); on sm_90 its dQ atomics are 4-wide (atomicAdd on float4).
NVCC_ARCH_12_backward_tiled ?= $(ARCH_CUDA_CORES)
