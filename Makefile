# FlashAttention-2, stage by stage.
#
#   make              build build/attn (and the GPU stages when nvcc is found)
#   make check        build and run the Criterion tests (installs Criterion on Debian/Ubuntu if it can)
#   make bench        every stage side by side (see bench/bench.mk)
#   make ARCH=sm_86   build the GPU code for one other target instead of the default sm_80 + sm_90
#
# Stages are found by their folders (NN_name/); every .c and .cu file in them is built into
# build/libattn.a. Files named *_main.c hold a main() and are linked into their own programs.
# Folders may add targets in a fragment of their own, NAME/*.mk, included below.

CC      ?= gcc
# A build without CUDA (NO_CUDA=1) gets its own folder, so its objects never mix with a CUDA build's.
ifeq ($(NO_CUDA),1)
BUILD   ?= build/nocuda
else
BUILD   ?= build
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null))
NVCC    ?= $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc,)
# Set NO_CUDA=1 to build only the CPU parts even where nvcc exists.
ifeq ($(NO_CUDA),1)
NVCC :=
endif

CFLAGS_BASE := -std=c11 -O2 -g -Wall -Wextra -Wshadow -Wno-unused-parameter -fopenmp -D_POSIX_C_SOURCE=200809L -Icommon -I.
CFLAGS  ?=
LDLIBS  := -fopenmp -lm
# SAN=1: host code under AddressSanitizer and UndefinedBehaviorSanitizer (make check-asan).
ifeq ($(SAN),1)
CFLAGS_BASE += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -DATTN_SAN=1
LDLIBS      += -fsanitize=address,undefined
endif

STAGE_DIRS := $(sort $(wildcard [0-9][0-9]_*))
MAIN_SRC   := $(wildcard common/*_main.c $(addsuffix /*_main.c,$(STAGE_DIRS)))
C_SRC      := $(filter-out $(MAIN_SRC),$(wildcard common/*.c $(addsuffix /*.c,$(STAGE_DIRS))))
CU_SRC     := $(wildcard common/*.cu $(addsuffix /*.cu,$(STAGE_DIRS)))
HEADERS    := $(wildcard common/*.h common/*.cuh $(addsuffix /*.h,$(STAGE_DIRS)) $(addsuffix /*.cuh,$(STAGE_DIRS)))

ifneq ($(NVCC),)
HAVE_CUDA := 1
# Default: sm_80 and sm_90 machine code plus sm_90 PTX for newer GPUs to JIT.
ifeq ($(ARCH),)
NVCC_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
else
NVCC_ARCH := -gencode arch=compute_$(subst sm_,,$(ARCH)),code=$(ARCH)
endif
NVCCFLAGS ?= -O3 -std=c++17 -lineinfo
NVCCFLAGS_ALL = $(NVCCFLAGS) $(NVCC_ARCH) -Icommon -I. -DATTN_HAVE_CUDA=1 -Xcompiler -Wall
CFLAGS_BASE += -DATTN_HAVE_CUDA=1 -I$(CUDA_HOME)/include
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

.PHONY: all clean check check-asan info
all: $(ATTN)

info:
	@echo "stages: $(STAGE_DIRS)"
	@echo "nvcc:   $(if $(NVCC),$(NVCC),not found: GPU stages are not built)"

$(BUILD)/obj/%.o: %.c $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS_ALL) -c $< -o $@

$(LIB): $(C_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^
ifeq ($(HAVE_CUDA),)
	@echo "note: no nvcc (or NO_CUDA=1), so the GPU stages were not built (CPU stage 01 only)."
endif

$(ATTN): common/attn_main.c $(LIB)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

include tests/tests.mk
-include $(sort $(filter-out tests/tests.mk,$(wildcard */*.mk)))

clean:
	rm -rf $(BUILD)
