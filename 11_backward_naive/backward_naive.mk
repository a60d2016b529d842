# 11_backward_naive/backward_naive.mk: stage 11 uses only CUDA cores (fp32 FFMA, plain loads), so it
# carries machine code from the oldest GPU nvcc builds for, as stages 02-05 do (the registry says
# SM70_UP); ARCH=sm_XX still builds the one target it names.
NVCC_ARCH_11_backward_naive ?= $(ARCH_CUDA_CORES)
