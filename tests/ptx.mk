# tests/ptx.mk: stages 02-05 on the GPUs before sm_80 (V100 sm_70, T4 sm_75), shown on a newer one
# (included by the root Makefile).
#
#   make check-ptx    (GPU machine) builds into build/ptx with stages 02-05 as compute_70 (CUDA 12) or
#                     compute_75 (CUDA 13) PTX alone, no machine code at all, so the driver must
#                     JIT-compile exactly the PTX that the V100/T4 build carries; then runs the whole
#                     test suite on that build with the stage-by-stage tests narrowed to 02-05
#                     (ATTN_TEST_STAGES, tests/test_util.h: the other stages are the ordinary build's
#                     code, which `make check` covers; all of them would not fit one 10-minute device
#                     call), and asks stage 06 to run as if on such a GPU (ATTN_FAKE_SM), which must
#                     refuse with "needs sm_80". Other folders get PTX_OTHER_ARCH (default sm_90, the
#                     H100/H200: one target keeps the build short). ATTN_TEST_STAGES= (empty) runs all.
#
# Why not CUDA_FORCE_PTX_JIT=1 on the ordinary build: it makes the driver JIT every kernel from the
# newest PTX it carries, which for stages 02-05 is the compute_90 PTX of the default build, not the
# old-GPU code; and kernels built without PTX (sm_90a ones) would not load at all. A build that has
# nothing but old PTX for 02-05 leaves the driver one choice.

PTX_BUILD      ?= build/ptx
PTX_ONLY       := -gencode arch=compute_$(ATTN_SM_FLOOR),code=compute_$(ATTN_SM_FLOOR)
PTX_OTHER_ARCH ?= -gencode arch=compute_90,code=sm_90
PTX_MAKE = $(MAKE) --no-print-directory BUILD=$(PTX_BUILD) ARCH_SM80_UP='$(PTX_OTHER_ARCH)' \
           NVCC_ARCH_02_naive_gpu='$(PTX_ONLY)' NVCC_ARCH_03_tiled='$(PTX_ONLY)' \
           NVCC_ARCH_04_online_softmax='$(PTX_ONLY)' NVCC_ARCH_05_causal_bands='$(PTX_ONLY)'
PTX_OBJS = $(addprefix $(PTX_BUILD)/obj/,02_naive_gpu/naive_gpu.cu.o 03_tiled/tiled.cu.o \
           04_online_softmax/online_softmax.cu.o 05_causal_bands/causal_bands.cu.o)

.PHONY: check-ptx

ifeq ($(HAVE_CUDA),)
check-ptx:
	@echo "check-ptx: needs the CUDA build and a GPU (nvcc not found, or NO_CUDA=1)" >&2; exit 1
else
check-ptx:
	@echo "== stages 02-05 as compute_$(ATTN_SM_FLOOR) PTX only, in $(PTX_BUILD)"
	+@$(PTX_MAKE) $(PTX_BUILD)/attn
	@if command -v cuobjdump >/dev/null 2>&1 || [ -x $(CUDA_HOME)/bin/cuobjdump ]; then \
	   cod=$$(command -v cuobjdump || echo $(CUDA_HOME)/bin/cuobjdump); \
	   for o in $(PTX_OBJS); do \
	     elf=$$($$cod --list-elf $$o 2>/dev/null | wc -l); ptx=$$($$cod --list-ptx $$o 2>/dev/null | tr '\n' ' '); \
	     echo "  $$o: $$elf machine-code images; PTX: $$ptx"; \
	     [ "$$elf" -eq 0 ] || { echo "check-ptx: FAIL: $$o carries machine code" >&2; exit 1; }; \
	   done; \
	 else echo "  (no cuobjdump: the objects were built with $(PTX_ONLY) alone)"; fi
	@echo "== stage 06 asked as if on an sm_$(ATTN_SM_FLOOR) GPU (ATTN_FAKE_SM=$(ATTN_SM_FLOOR)): must refuse"
	@rc=0; out=$$(ATTN_FAKE_SM=$(ATTN_SM_FLOOR) $(PTX_BUILD)/attn --stage 06 --seq 16 --dim 64 2>&1) || rc=$$?; \
	 echo "  exit $$rc: $$out"; \
	 [ $$rc -eq 1 ] && echo "$$out" | grep -q "needs sm_80" || \
	   { echo "check-ptx: FAIL: want exit 1 and 'needs sm_80'" >&2; exit 1; }
	@echo "== the test suite on that build (the driver JIT-compiles the PTX of 02-05 at first use), stage tests for $${ATTN_TEST_STAGES-02,03,04,05}"
	+@ATTN_TEST_STAGES=$${ATTN_TEST_STAGES-02,03,04,05} $(PTX_MAKE) WORKSHOP=0 check
	@echo "check-ptx: PASS: stages 02-05 ran from compute_$(ATTN_SM_FLOOR) PTX; stage 06 refused sm_$(ATTN_SM_FLOOR)"
endif
