# python/python.mk: the fast stages as shared libraries, for python/flashattn_stages.py (ctypes) and
# any other language with a C FFI. Included by the root Makefile after the stages' own fragments.
#
#   make build/libfa2.so   stage 06 (fa2_forward, fa2_status_string, fa2_last_error; see lib/fa2.h)
#   make build/libbackward_fa2.so   stage 13, the backward (backward_fa2_backward; lib/backward_lib.h)
#   make shared-libs       every library listed below
#   make check-python      the libraries, then pytest on python/ (the module, its backward and autograd
#                          function, and the Triton kernel against float64 references; GPU tests skip,
#                          saying why, without a GPU)
#
# The objects are the ones build/libattn.a is made of (compiled with -fPIC for this), linked with the
# static CUDA runtime, whose symbols stay inside the library (--exclude-libs): a process that already
# has another CUDA runtime loaded (PyTorch) cannot interpose its own on the library's calls.
# Each library exports its API alone, NAME_forward, NAME_status_string and NAME_last_error (a linker
# version script hides the rest: the argument checks that skip the device-memory test, the launchers,
# the suite's attn_* and hop_* helpers), and the link fails if anything else is exported.
# One line per stage: $(eval $(call shared_lib,NAME,OBJECTS)) makes $(BUILD)/libNAME.so; a library whose
# API is not NAME_forward names its functions after NAME_ in a third argument (the backward's:
# "backward workspace_bytes" below), NAME_status_string and NAME_last_error always.

SHARED_LIBS :=

ifneq ($(HAVE_CUDA),)

# The exported names of library $(1) whose API functions are $(2) (default: forward)
lib_api = $(foreach f,$(or $(2),forward) status_string last_error,$(1)_$(f))

define shared_lib
SHARED_LIBS += $(BUILD)/lib$(1).so
$(BUILD)/lib$(1).so: $(2)
	@printf '{ global: $(addsuffix ;,$(call lib_api,$(1),$(3))) local: *; };\n' >$$@.map
	$$(CC) -shared -o $$@ $$^ -L$$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm \
	    -Wl,--exclude-libs,ALL -Wl,--no-undefined -Wl,--version-script=$$@.map
	@got=$$$$(nm -D --defined-only $$@ | awk '$$$$2 ~ /^[TDBRVW]$$$$/ {print $$$$3}' | sed 's/@.*//' | sort | tr '\n' ' '); \
	want=$$$$(printf '%s\n' $(call lib_api,$(1),$(3)) | sort | tr '\n' ' '); \
	if [ "$$$$got" != "$$$$want" ]; then echo "$$@ exports '$$$$got', not '$$$$want'" >&2; rm -f $$@; exit 1; fi
endef

# Stage 06: its kernel objects as lib/fa2.mk names them (FA2_OBJS once it lists several files).
$(eval $(call shared_lib,fa2,$(or $(FA2_OBJS),$(FA2_OBJ))))
# Stages 07-09 (sm_90 only): the kernel, its NAME_forward (lib/stage_lib.h) and the host code they share.
HOPPER_LIB_OBJS := $(addprefix $(BUILD)/obj/,kit/hopper_host.o lib/stage_lib.o common/attn.o)
$(eval $(call shared_lib,tma_wgmma,$(BUILD)/obj/07_tma_wgmma/tma_wgmma.cu.o $(BUILD)/obj/lib/tma_wgmma_lib.o $(HOPPER_LIB_OBJS)))
$(eval $(call shared_lib,warp_specialized,$(BUILD)/obj/08_warp_specialized/warp_specialized.cu.o $(BUILD)/obj/lib/warp_specialized_lib.o $(HOPPER_LIB_OBJS)))
$(eval $(call shared_lib,overlap,$(BUILD)/obj/09_overlap/overlap.cu.o $(BUILD)/obj/lib/overlap_lib.o $(HOPPER_LIB_OBJS)))
# Stage 13, the backward (sm_80 or newer): backward_fa2_backward and backward_fa2_workspace_bytes
# (lib/backward_lib.h), the kernels, the workspace's size and the checks stage_lib.c shares.
BACKWARD_LIB_OBJS := $(addprefix $(BUILD)/obj/,13_backward_fa2/backward_fa2.cu.o 13_backward_fa2/workspace.o \
                       lib/backward_lib.o lib/stage_lib.o common/attn.o)
$(eval $(call shared_lib,backward_fa2,$(BACKWARD_LIB_OBJS),backward workspace_bytes))

else

$(sort $(BUILD)/libfa2.so $(BUILD)/libbackward_fa2.so build/libbackward_fa2.so) shared-libs:
	@echo "$@: needs the CUDA build (nvcc not found, or NO_CUDA=1)" >&2; exit 1

endif

.PHONY: shared-libs check-python
shared-libs: $(SHARED_LIBS)

check-python: $(SHARED_LIBS)
	@$(PYTHON) -c 'import pytest' 2>/dev/null || { echo "check-python: needs pytest ($(PYTHON) -m pip install pytest)" >&2; exit 1; }
	$(PYTHON) -m pytest -q -rs python/

ifneq ($(PEERS),0)
bench: $(SHARED_LIBS)
endif
