# 09_overlap/overlap.mk: stage 09 is sm_90a machine code (wgmma and setmaxnreg exist
# only there), whatever ARCH says; on any other GPU the registry reports it unavailable.
NVCC_ARCH_09_overlap := $(NVCC_ARCH_SM90A)
