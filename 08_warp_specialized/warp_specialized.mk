# 08_warp_specialized/warp_specialized.mk: stage 08 is sm_90a machine code (wgmma and setmaxnreg exist
# only there), whatever ARCH says; on any other GPU the registry reports it unavailable.
$(BUILD)/obj/08_warp_specialized/%.cu.o: NVCC_ARCH = $(NVCC_ARCH_SM90A)
