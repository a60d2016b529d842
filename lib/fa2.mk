# lib/fa2.mk: libfa2, stage 06 as a C library (included by the root Makefile).
#
#   make build/libfa2.a   the library alone: $(FA2_OBJS) (C API + the kernels, one object per dtype), no
#                         harness; use with fa2.h
#   make fa2-example      build/fa2_example: example_main.c linked against libfa2.a and cudart only
#
# Stage 06's SASS report is tools/tools.mk's (make fa2-sass), its road table bench/bench.mk's (make
# fa2-road-table).

FA2_DIR := 06_fa2_full
FA2_LIB_DIR := lib

ifneq ($(HAVE_CUDA),)

# The objects of libfa2 (the C API and stage 06's kernels), for anyone who links them elsewhere.
FA2_OBJS      := $(BUILD)/obj/$(FA2_LIB_DIR)/fa2_api.cu.o $(addprefix $(BUILD)/obj/$(FA2_DIR)/,fa2_f16.cu.o fa2_bf16.cu.o)
FA2_LIB       := $(BUILD)/libfa2.a
FA2_CUDA_HOME := $(if $(CUDA_HOME),$(CUDA_HOME),/usr/local/cuda)
FA2_CUDA_LIB  := $(firstword $(wildcard $(FA2_CUDA_HOME)/lib64 $(FA2_CUDA_HOME)/targets/x86_64-linux/lib))
FA2_LINK      := -L$(FA2_CUDA_LIB) -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm

.PHONY: fa2-lib fa2-example

fa2-lib: $(FA2_LIB)
$(FA2_LIB): $(FA2_OBJS)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

fa2-example: $(BUILD)/fa2_example
$(BUILD)/fa2_example: $(FA2_LIB_DIR)/example_main.c $(FA2_LIB_DIR)/fa2.h $(FA2_LIB) $(FLAGS_STAMP)
	$(CC) -std=c11 -O2 -Wall -Wextra -I$(FA2_LIB_DIR) -I$(FA2_CUDA_HOME)/include $< $(FA2_LIB) $(FA2_LINK) -o $@

else

# Asked for by name in a build without CUDA, the libraries say why they are not made rather than
# "No rule to make target": build/libfa2.a under the name the docs use and under this build's folder
# (build/nocuda/); build/libfa2.so too (python/python.mk answers for build/nocuda/libfa2.so).
FA2_OBJS :=
FA2_NO_CUDA := $(sort build/libfa2.a $(BUILD)/libfa2.a $(filter-out $(BUILD)/libfa2.so,build/libfa2.so))
.PHONY: fa2-lib fa2-example
fa2-lib fa2-example $(FA2_NO_CUDA):
	@echo "$@: needs the CUDA build (nvcc not found, or NO_CUDA=1)" >&2; exit 1

endif
