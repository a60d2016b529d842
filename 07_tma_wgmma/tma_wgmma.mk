# 07_tma_wgmma/tma_wgmma.mk: stage 07 is sm_90a machine code (wgmma exists only there), whatever ARCH
# says; the other stages keep their targets. On any other GPU the registry reports it unavailable.
NVCC_ARCH_07_tma_wgmma := $(NVCC_ARCH_SM90A)
