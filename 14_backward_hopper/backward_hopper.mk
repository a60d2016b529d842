# 14_backward_hopper/backward_hopper.mk: stage 14 is sm_90a machine code (wgmma, setmaxnreg and the
# copy engine's tensor maps exist only there), whatever ARCH says; on any other GPU the registry
# reports it unavailable.
NVCC_ARCH_14_backward_hopper := $(NVCC_ARCH_SM90A)

# make sass-14: what the compiler made of the stage's main kernels, the facts issue 55 asks of them that
# need no GPU (tools/sass_backward_hopper.sh): ptxas's registers and spills, and, where a cuobjdump is
# found (CUOBJDUMP=path), HGMMA, UTMALDG, UTMAREDG (14), USETMAXREG and no local memory in the SASS; exit
# 1 where one fails. build/sass/backward_hopper.{ptxas,sass} keep the logs.
.PHONY: sass-14
ifneq ($(HAVE_CUDA),)
$(BUILD)/sass/backward_hopper.o: 14_backward_hopper/backward_hopper.cu $(HEADERS) 14_backward_hopper/backward_hopper.mk $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS_ALL) $(NVCC_ARCH_SM90A) -Xptxas -v -c $< -o $@ 2> $(basename $@).ptxas

sass-14: $(BUILD)/sass/backward_hopper.o tools/sass_backward_hopper.sh
	bash tools/sass_backward_hopper.sh $(BUILD)/sass/backward_hopper.ptxas $(BUILD)/sass/backward_hopper.sass $<
else
sass-14:
	@echo "$@: needs the CUDA build (nvcc not found, or NO_CUDA=1)" >&2; exit 1
endif
