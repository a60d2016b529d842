# lib/fa2.mk: libfa2, stage 06 as a C library, and stage 06's own targets (included by the root Makefile).
#
#   make build/libfa2.a   the library alone: $(FA2_OBJS) (C API + the kernels, one object per dtype), no
#                         harness; use with fa2.h
#   make fa2-example      build/fa2_example: example_main.c linked against libfa2.a and cudart only
#   make fa2-sass         ptxas registers / spills / stack for every kernel of stage 06 and of its road at
#                         sm_80 and sm_90 (build/fa2_ptxas.txt; exit 1 on any spill), and instruction counts
#                         from the SASS when cuobjdump is found (build/fa2.sass)
#   make fa2-road-table CSV=bench/results/bench.csv
#                         the road's table in 06_fa2_full/README.md, from a `make bench` CSV
#
# The road's steps (step06*.cu) are registered stages (06a .. 06e): make check, make sanitize and
# make bench run them with every other stage.

FA2_DIR := 06_fa2_full
FA2_LIB_DIR := lib

ifneq ($(HAVE_CUDA),)

# The objects of libfa2 (the C API and stage 06's kernels), for anyone who links them elsewhere.
FA2_OBJS      := $(BUILD)/obj/$(FA2_LIB_DIR)/fa2_api.cu.o $(addprefix $(BUILD)/obj/$(FA2_DIR)/,fa2_f16.cu.o fa2_bf16.cu.o)
FA2_LIB       := $(BUILD)/libfa2.a
FA2_CUDA_HOME := $(if $(CUDA_HOME),$(CUDA_HOME),/usr/local/cuda)
FA2_CUDA_LIB  := $(firstword $(wildcard $(FA2_CUDA_HOME)/lib64 $(FA2_CUDA_HOME)/targets/x86_64-linux/lib))
FA2_LINK      := -L$(FA2_CUDA_LIB) -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm
# every kernel of the stage and of its road, one object each for the report
FA2_SASS_SRC  := fa2_f16 fa2_bf16 $(basename $(notdir $(wildcard $(FA2_DIR)/step06*.cu)))
FA2_SASS_OBJS := $(addprefix $(BUILD)/sass/,$(addsuffix .o,$(FA2_SASS_SRC)))

.PHONY: fa2-lib fa2-example fa2-sass fa2-road-table

fa2-lib: $(FA2_LIB)
$(FA2_LIB): $(FA2_OBJS)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

fa2-example: $(BUILD)/fa2_example
$(BUILD)/fa2_example: $(FA2_LIB_DIR)/example_main.c $(FA2_LIB_DIR)/fa2.h $(FA2_LIB) $(FLAGS_STAMP)
	$(CC) -std=c11 -O2 -Wall -Wextra -I$(FA2_LIB_DIR) -I$(FA2_CUDA_HOME)/include $< $(FA2_LIB) $(FA2_LINK) -o $@

# ptxas report (-Xptxas -v) for both real targets, one object per source so that make -j builds them
# side by side; the objects are kept for cuobjdump.
$(BUILD)/sass/%.o: $(FA2_DIR)/%.cu $(HEADERS) $(FA2_LIB_DIR)/fa2.mk $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	    $(INCLUDES) -DATTN_HAVE_CUDA=1 -Xptxas -v -c $< -o $@ 2> $(basename $@).ptxas

fa2-sass: $(FA2_SASS_OBJS) $(FA2_DIR)/sass_report.sh
	@cat $(addsuffix .ptxas,$(basename $(FA2_SASS_OBJS))) > $(BUILD)/fa2_ptxas.txt
	bash $(FA2_DIR)/sass_report.sh $(BUILD)/fa2_ptxas.txt $(BUILD)/fa2.sass $(FA2_SASS_OBJS)

else

# Asked for by name in a build without CUDA, the libraries say why they are not made rather than
# "No rule to make target": build/libfa2.a under the name the docs use and under this build's folder
# (build/nocuda/); build/libfa2.so too (python/python.mk answers for build/nocuda/libfa2.so).
FA2_OBJS :=
FA2_NO_CUDA := $(sort build/libfa2.a $(BUILD)/libfa2.a $(filter-out $(BUILD)/libfa2.so,build/libfa2.so))
.PHONY: fa2-lib fa2-example fa2-sass fa2-road-table
fa2-lib fa2-example fa2-sass $(FA2_NO_CUDA):
	@echo "$@: needs the CUDA build (nvcc not found, or NO_CUDA=1)" >&2; exit 1

endif

# Needs only a CSV and awk: works on any machine.
fa2-road-table:
	@test -s "$(CSV)" || { echo "fa2-road-table: no CSV at $(CSV) (make fa2-road-table CSV=path)" >&2; exit 2; }
	sh $(FA2_DIR)/road_table.sh $(CSV)
