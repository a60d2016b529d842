# FlashAttention-2, stage by stage.
#
#   make              build build/attn with the GPU stages when nvcc is found, else build/nocuda/attn
#   make info         which nvcc (PATH, /usr/local/cuda/bin/nvcc, CUDA_HOME or NVCC), the build folder
#   make clean        remove build/ (every build's folder) and compile_commands.json
#   make check        build and run the Criterion tests (installs Criterion on Debian/Ubuntu if it can)
#   make bench        every stage side by side (see bench/bench.mk)
#   make ARCH=sm_86   build the GPU code for one other target instead of the defaults (below)
#
# Stages are found by their folders (NN_name/); every .c and .cu file in them, and in the layer
# folders of LAYER_DIRS (below), is built into build/libattn.a. Files named *_main.c hold a main() and
# are linked into their own programs. Folders may add targets in a fragment of their own, NAME/*.mk,
# included below.

# gcc, as the README's prerequisites say (make's built-in default, cc, does not count as a choice).
ifeq ($(origin CC),default)
CC      := gcc
endif
comma   := ,
# nvcc: NVCC=path, else CUDA_HOME/bin/nvcc when CUDA_HOME is set (CUDA_HOME= alone: no nvcc), else the
# nvcc on PATH, else /usr/local/cuda/bin/nvcc (where the CUDA installers put it, often not on PATH).
# NO_CUDA=1 builds only the CPU parts even where nvcc exists. `make info` says which one it took.
ifeq ($(origin CUDA_HOME),undefined)
NVCC_ON_PATH := $(shell command -v nvcc 2>/dev/null)
ifneq ($(NVCC_ON_PATH),)
CUDA_HOME    := $(patsubst %/bin/nvcc,%,$(NVCC_ON_PATH))
NVCC_FROM    := found on PATH
else ifneq ($(wildcard /usr/local/cuda/bin/nvcc),)
CUDA_HOME    := /usr/local/cuda
NVCC_FROM    := not on PATH: the fallback /usr/local/cuda/bin/nvcc
endif
else
NVCC_FROM    := from CUDA_HOME
endif
ifneq ($(filter command line environment%,$(origin NVCC)),)
NVCC_FROM    := from NVCC=
endif
NVCC    ?= $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc,)
# the nvcc found, even under NO_CUDA=1 (make check-install builds the library with it: lib/flashattn.mk)
NVCC_FOUND := $(NVCC)
ifeq ($(NO_CUDA),1)
NVCC    :=
endif
# A build without CUDA (NO_CUDA=1, or no nvcc found: the same objects) gets its own folder, so that
# its objects never mix with a CUDA build's.
ifeq ($(NVCC),)
BUILD   ?= build/nocuda
else
BUILD   ?= build
endif

# The folders beside the stages, each a layer of the house (its README.md says what it holds and why
# there). Every one is on the include path, so that a file includes another by its bare name
# ("harness.h"); a stage's own headers are named with their folder ("06_fa2_full/stage06.h"), from -I.
LAYER_DIRS := common kit lib suite
INCLUDES   := $(addprefix -I,$(LAYER_DIRS)) -I.

# -fPIC: the same objects go into build/libattn.a and into the shared libraries of python/python.mk.
CFLAGS_BASE := -std=c11 -O2 -g -fPIC -Wall -Wextra -Wshadow -Wno-unused-parameter -fopenmp -D_POSIX_C_SOURCE=200809L $(INCLUDES)
CFLAGS  ?=
LDLIBS  := -fopenmp -lm
# SAN=1: host code under AddressSanitizer and UndefinedBehaviorSanitizer (make check-asan).
ifeq ($(SAN),1)
CFLAGS_BASE += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -DATTN_SAN=1
LDLIBS      += -fsanitize=address,undefined
endif

STAGE_DIRS := $(sort $(wildcard [0-9][0-9]_*))
SRC_DIRS   := $(LAYER_DIRS) $(STAGE_DIRS)
MAIN_SRC   := $(wildcard $(addsuffix /*_main.c,$(SRC_DIRS)))
C_SRC      := $(filter-out $(MAIN_SRC),$(wildcard $(addsuffix /*.c,$(SRC_DIRS))))
CU_SRC     := $(wildcard $(addsuffix /*.cu,$(SRC_DIRS)))
HEADERS    := $(wildcard $(addsuffix /*.h,$(SRC_DIRS)) $(addsuffix /*.cuh,$(SRC_DIRS)))

ifneq ($(NVCC),)
HAVE_CUDA := 1
# GPU targets, per folder. Stages 02-05 use only CUDA cores (fp32 FFMA, shuffles, plain loads), so
# they carry machine code from the oldest GPU nvcc still builds for: sm_70 (V100) with CUDA 12, sm_75
# (T4) with CUDA 13, which dropped sm_70. Everything else (stage 06: cp.async, ldmatrix, bf16 mma)
# gets sm_80 and sm_90, plus sm_90 PTX that newer GPUs compile when they load it. A folder's own .mk
# (or the command line) may set NVCC_ARCH_<folder> to choose its targets; ARCH=sm_XX builds every
# folder for that one target instead (stage 06 needs sm_80 or newer).
NVCC_GPU_ARCHS := $(shell $(NVCC) --list-gpu-arch 2>/dev/null)
ATTN_SM_FLOOR  := $(if $(filter compute_70,$(NVCC_GPU_ARCHS)),70,75)
ifeq ($(ARCH),)
ARCH_SM80_UP    := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                   -gencode arch=compute_90,code=compute_90
ARCH_CUDA_CORES := -gencode arch=compute_$(ATTN_SM_FLOOR),code=sm_$(ATTN_SM_FLOOR) \
                   $(if $(filter 70,$(ATTN_SM_FLOOR)),-gencode arch=compute_75$(comma)code=sm_75) $(ARCH_SM80_UP)
else
ARCH_SM80_UP    := -gencode arch=compute_$(subst sm_,,$(ARCH)),code=$(ARCH)
ARCH_CUDA_CORES := $(ARCH_SM80_UP)
endif
NVCC_ARCH_02_naive_gpu      ?= $(ARCH_CUDA_CORES)
NVCC_ARCH_03_tiled          ?= $(ARCH_CUDA_CORES)
NVCC_ARCH_04_online_softmax ?= $(ARCH_CUDA_CORES)
NVCC_ARCH_05_causal_bands   ?= $(ARCH_CUDA_CORES)
# the targets of one source file: its folder's NVCC_ARCH_<folder>, else ARCH_SM80_UP
nvcc_arch = $(or $(NVCC_ARCH_$(firstword $(subst /, ,$(1)))),$(ARCH_SM80_UP))
# The Hopper stages (07 on: wgmma, setmaxnreg) are sm_90a code whatever ARCH says: their folders' .mk
# fragments set NVCC_ARCH_<folder> to this.
NVCC_ARCH_SM90A := -gencode arch=compute_90a,code=sm_90a
NVCCFLAGS ?= -O3 -std=c++17 -lineinfo
NVCCFLAGS_ALL = $(NVCCFLAGS) $(INCLUDES) -DATTN_HAVE_CUDA=1 -Xcompiler -Wall -Xcompiler -fPIC
# the registry's lower bound for stages 02-05 follows what was built for them
CFLAGS_BASE += -DATTN_HAVE_CUDA=1 -DATTN_CUDA_CORES_MIN_SM=$(ATTN_SM_FLOOR) -I$(CUDA_HOME)/include
CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/targets/x86_64-linux/lib))
LDLIBS      += -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lpthread -lstdc++
CU_OBJ := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(CU_SRC))
else
HAVE_CUDA :=
CU_OBJ :=
endif

C_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(C_SRC))
LIB   := $(BUILD)/libattn.a
ATTN  := $(BUILD)/attn

.PHONY: all clean check check-asan info format-check
all: $(ATTN)

NVCC_INFO = $(if $(filter 1,$(NO_CUDA)),not used (NO_CUDA=1): the GPU stages are not built,$(if $(NVCC),$(NVCC) ($(NVCC_FROM)),$(if \
  $(filter undefined,$(origin CUDA_HOME)),not found (not on PATH$(comma) nor at /usr/local/cuda/bin/nvcc),not looked for (CUDA_HOME is set$(comma) and empty)): the GPU stages are not built))
info:
	@echo "stages: $(STAGE_DIRS)"
	@echo "nvcc:   $(NVCC_INFO)"
	@echo "build:  $(BUILD)/ ($(CC)$(if $(ARCH), ARCH=$(ARCH)))"
	@echo "nccl:   $(NCCL_INFO)"

# Every setting that goes into a compile or a link, one per line, in $(BUILD)/obj/.flags (in obj/, so
# that workshop/run.sh's copy of the objects takes it along). The file is rewritten only when they
# change (ARCH=sm_86 after a default build, CFLAGS=..., NCCL found later), and everything compiled or
# linked here depends on it: a change of settings rebuilds the folder's objects and programs, the same
# settings again rebuild nothing. (Sources and headers are tracked as before.)
FLAGS_STAMP := $(BUILD)/obj/.flags
FLAGS_TEXT   = CC=$(CC) | $(CFLAGS_BASE) $(CFLAGS) | LDLIBS=$(LDLIBS) \
               | NVCC=$(NVCC) | $(NVCCFLAGS_ALL) $(foreach d,$(SRC_DIRS),| $(d): $(call nvcc_arch,$(d)/))
.PHONY: FORCE
FORCE:
$(FLAGS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@tmp=$@.$$$$.tmp; printf '%s\n' '$(subst ','\'',$(FLAGS_TEXT))' | tr '|' '\n' | sed 's/^ *//; s/ *$$//' >$$tmp; \
	 if cmp -s $$tmp $@; then rm -f $$tmp; else \
	   [ ! -f $@ ] || echo "build settings changed since the last build in $(BUILD)/: rebuilding"; mv -f $$tmp $@; fi

$(BUILD)/obj/%.o: %.c $(HEADERS) Makefile $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(HEADERS) Makefile $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS_ALL) $(call nvcc_arch,$<) -c $< -o $@

$(LIB): $(C_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^
	@# A static library links the first of two same-named functions and drops the other without a word:
	@# the CPU model's stage06c_run once stood in for road step 06c's and crashed it on device pointers.
	@dup=$$(nm -g --defined-only $@ 2>/dev/null | awk 'NF == 3 && $$2 ~ /^[TDBR]$$/ { print $$3 }' | sort | uniq -d); \
	 if [ -n "$$dup" ]; then echo "error: defined twice in $@ (rename one): $$dup" >&2; rm -f $@; exit 1; fi
ifeq ($(HAVE_CUDA),)
	@echo "note: no nvcc (or NO_CUDA=1), so the GPU stages were not built (the CPU stages only: 01, the models 03m-06m, the backward model 12m and the decoding model 15m)."
endif

$(ATTN): suite/attn_main.c $(LIB) $(FLAGS_STAMP)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

# compile_commands.json: every compile command of this build (the pattern rules' own flags), for clangd
# and other tools; make NO_CUDA=1 compile_commands.json leaves the CUDA files out.
CDB_C  := $(C_SRC) $(MAIN_SRC) $(wildcard tests/test_*.c)
CDB_CU := $(if $(HAVE_CUDA),$(CU_SRC) $(wildcard tests/*.cu))
.PHONY: compile_commands.json
compile_commands.json:
	@{ $(foreach f,$(CDB_C),printf '  {"directory": "%s", "file": "%s", "command": "%s"},\n' \
	      "$(CURDIR)" "$(f)" "$(CC) $(CFLAGS_BASE) $(CFLAGS) -c $(f)";) \
	   $(foreach f,$(CDB_CU),printf '  {"directory": "%s", "file": "%s", "command": "%s"},\n' \
	      "$(CURDIR)" "$(f)" "$(NVCC) $(NVCCFLAGS_ALL) -c $(f)";) } > $@.tmp
	@{ echo '['; sed '$$ s/},$$/}/' $@.tmp; echo ']'; } > $@ && rm -f $@.tmp
	@echo "compile_commands.json: $(words $(CDB_C) $(CDB_CU)) files"

# The files clang-format (.clang-format) checks. Listed, not globbed: files written before the
# .clang-format existed join the list once they are formatted (clang-format -i FILE).
FORMAT_DIRS    := 06_fa2_full 07_tma_wgmma 08_warp_specialized 09_overlap 14_backward_hopper 15_decode lib
FORMAT_CHECKED := $(wildcard $(foreach d,$(FORMAT_DIRS),$(d)/*.c $(d)/*.h $(d)/*.cu $(d)/*.cuh)) \
                  $(wildcard kit/hopper*.cuh kit/hopper_host.* kit/hopper_desc.h kit/grid_order.h kit/wgmma_ops.cuh kit/fast_math.cuh kit/launch_opt_in.cuh \
                            kit/device_sm.h kit/backward_prep.cuh kit/backward_workspace.h suite/hold_signals.*) \
                  suite/attn_main.c 10_context_parallel/cp_bench_main.c \
                  tests/fa2_selftest.cu tests/fa2_selftest.h tests/test_fa2_blocks.c tests/test_flashattn.c tests/test_work_units.c tests/test_hopper_desc.c tests/test_grid_order.c tests/test_backward_hopper_layout.c \
                  tests/test_cli.c tests/test_context_parallel.c tests/mutants/mutant_check.c tests/mutants/shadow/tiles_cpu.h tests/test_decode.c
CLANG_FORMAT   ?= clang-format
format-check:
	@command -v $(CLANG_FORMAT) >/dev/null 2>&1 || \
	  { echo "format-check: $(CLANG_FORMAT) not found (apt-get install clang-format)" >&2; exit 1; }
	$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_CHECKED)
	@echo "format-check: $(words $(FORMAT_CHECKED)) files follow .clang-format"

include tests/tests.mk
-include $(sort $(filter-out tests/tests.mk,$(wildcard */*.mk)))

# The programs the fragments compile and link directly follow the settings too ($< stays their source).
$(TEST_BIN) $(BENCH_BIN) $(CP_BENCH): $(FLAGS_STAMP)

# Everything any build made, whatever the settings of this call (build/nocuda, build/asan, ... are
# inside build/), and a BUILD=folder elsewhere when one is given.
clean:
	rm -rf build compile_commands.json $(filter-out build build/%,$(BUILD))
