# 14_backward_hopper/backward_hopper.mk: stage 14 is sm_90a machine code (wgmma, setmaxnreg and the
# copy engine's tensor maps exist only there), whatever ARCH says; on any other GPU the registry
# reports it unavailable.
NVCC_ARCH_14_backward_hopper := $(NVCC_ARCH_SM90A)
