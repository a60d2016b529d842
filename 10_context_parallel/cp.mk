# 10_context_parallel/cp.mk: stage 10's NCCL and its own targets (included by the root Makefile).
#
#   make build/cp_bench   the ring alone, shards resident on each GPU, against one GPU at the same shape
#   make cp-proof         bash 10_context_parallel/gpu_proof.sh (the 2-GPU table; needs the GPUs)
#
# NCCL is looked for in NCCL_HOME when it is set (and only there), otherwise in the CUDA toolkit,
# then in a Python environment's nvidia-nccl-cu13/-cu12 package (PyTorch's: site-packages/nvidia/nccl,
# or nvidia/cu13, with include/ and lib/), then in /usr. A folder counts when it has include/nccl.h and lib64/, lib/ or lib/x86_64-linux-gnu/ holds
# libnccl.so or libnccl.so.2. Without NCCL stage 10 is not built, and --list, the tests and the bench
# say so. The library is linked by its path with an rpath, so nothing needs LD_LIBRARY_PATH.

ifneq ($(HAVE_CUDA),)

nccl_lib_in = $(firstword $(wildcard $(addprefix $(1)/,lib64/libnccl.so lib/libnccl.so \
    lib/x86_64-linux-gnu/libnccl.so lib64/libnccl.so.2 lib/libnccl.so.2 lib/x86_64-linux-gnu/libnccl.so.2)))
nccl_ok = $(and $(wildcard $(1)/include/nccl.h),$(call nccl_lib_in,$(1)))

ifneq ($(NCCL_HOME),)
NCCL_PLACES := $(NCCL_HOME)
else
NCCL_PLACES := $(CUDA_HOME) $(CUDA_HOME)/targets/x86_64-linux \
    $(foreach p,nvidia/nccl nvidia/cu13 nvidia/cu12,$(wildcard /opt/*/.venv/lib/python3*/site-packages/$(p) \
        /opt/*/lib/python3*/site-packages/$(p) /usr/local/lib/python3*/dist-packages/$(p) \
        /usr/local/lib/python3*/site-packages/$(p) /usr/lib/python3/dist-packages/$(p))) /usr
endif
NCCL_DIR := $(firstword $(foreach d,$(NCCL_PLACES),$(if $(call nccl_ok,$(d)),$(d))))
# Last resort, only when nothing above has it: ask the python3 on PATH where its nvidia.nccl lives.
ifeq ($(NCCL_DIR)$(NCCL_HOME),)
NCCL_PY := $(shell python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
NCCL_DIR := $(if $(NCCL_PY),$(if $(call nccl_ok,$(NCCL_PY)),$(NCCL_PY)))
endif

endif

ifneq ($(NCCL_DIR),)
NCCL_LIB    := $(call nccl_lib_in,$(NCCL_DIR))
NCCL_LIBDIR := $(patsubst %/,%,$(dir $(NCCL_LIB)))
NCCL_INFO   := $(NCCL_LIB) (headers: $(NCCL_DIR)/include)
CFLAGS_BASE += -DATTN_HAVE_NCCL=1 $(filter-out -I/usr/include,-I$(NCCL_DIR)/include)
LDLIBS      += $(NCCL_LIB) -Wl,-rpath,$(NCCL_LIBDIR)
else ifneq ($(HAVE_CUDA),)
NCCL_INFO   := not found in $(or $(NCCL_HOME),$(CUDA_HOME), a Python nvidia-nccl package or /usr): stage 10 is not built (set NCCL_HOME)
else
NCCL_INFO   := not used (no CUDA build): stage 10 is not built
endif

CP_DIR   := 10_context_parallel
CP_BENCH := $(BUILD)/cp_bench

.PHONY: cp-proof
cp-proof:
	bash $(CP_DIR)/gpu_proof.sh

ifneq ($(NCCL_DIR),)
all: $(CP_BENCH)
$(CP_BENCH): $(CP_DIR)/cp_bench_main.c $(LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@
else
$(CP_BENCH):
	@echo "$@: needs CUDA and NCCL; NCCL: $(NCCL_INFO)" >&2; exit 1
endif
