# 08_warp_specialized/warp_specialized.mk: stage 08 is sm_90a machine code (wgmma and setmaxnreg exist
# only there), whatever ARCH says; on any other GPU the registry reports it unavailable.
NVCC_ARCH_08_warp_specialized := $(NVCC_ARCH_SM90A)
