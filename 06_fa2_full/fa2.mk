# 06_fa2_full/fa2.mk: stage 06's own targets (included by the root Makefile).
#
#   make build/libfa2.a   the library alone: fa2.cu (kernel + fa2_forward), no harness; use with fa2.h
#   make fa2-example      build/fa2_example: example_main.c linked against libfa2.a and cudart only
#   make fa2-sass         ptxas registers / spills / smem for every kernel at sm_80 and sm_90
#                         (build/fa2_ptxas.txt), and instruction counts from the SASS when cuobjdump
#                         is found (build/fa2.sass)
#   make fa2-road         one benchmark per step of the road in build/road/ (run: bash 06_fa2_full/road.sh)
#                         FA2_ROAD_ARCH picks the target (default sm_90, the H200)

ifneq ($(HAVE_CUDA),)

FA2_DIR       := 06_fa2_full
FA2_OBJ       := $(BUILD)/obj/$(FA2_DIR)/fa2.cu.o
FA2_LIB       := $(BUILD)/libfa2.a
FA2_CUDA_HOME := $(if $(CUDA_HOME),$(CUDA_HOME),/usr/local/cuda)
FA2_CUDA_LIB  := $(firstword $(wildcard $(FA2_CUDA_HOME)/lib64 $(FA2_CUDA_HOME)/targets/x86_64-linux/lib))
FA2_LINK      := -L$(FA2_CUDA_LIB) -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm
FA2_SRC_DEPS  := $(FA2_DIR)/fa2.cu $(FA2_DIR)/fa2.h $(FA2_DIR)/fa2_internal.h $(FA2_DIR)/fa2_switches.h

.PHONY: fa2-lib fa2-example fa2-sass fa2-road

fa2-lib: $(FA2_LIB)
$(FA2_LIB): $(FA2_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

fa2-example: $(BUILD)/fa2_example
$(BUILD)/fa2_example: $(FA2_DIR)/example_main.c $(FA2_DIR)/fa2.h $(FA2_LIB)
	$(CC) -std=c11 -O2 -Wall -Wextra -I$(FA2_DIR) -I$(FA2_CUDA_HOME)/include $< $(FA2_LIB) $(FA2_LINK) -o $@

# ptxas report (-Xptxas -v) for both real targets; the object is thrown away.
fa2-sass: $(FA2_SRC_DEPS) $(FA2_DIR)/sass_report.sh
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCCFLAGS) -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	    -Icommon -I. -Xptxas -v -c $(FA2_DIR)/fa2.cu -o $(BUILD)/fa2_sass.o 2> $(BUILD)/fa2_ptxas.txt
	bash $(FA2_DIR)/sass_report.sh $(BUILD)/fa2_ptxas.txt $(BUILD)/fa2_sass.o $(BUILD)/fa2.sass

# ---- the road: the same fa2.cu, one build per step (only D = 64 and 128 are instantiated) ----------
FA2_ROAD_ARCH ?= -gencode arch=compute_90,code=sm_90
FA2_ROAD_STEPS := r0 r1 r2 r3 r4 x1 x3
# r0  first correct tensor-core version: 64x64 tiles, plain smem, load-then-compute, Q re-read
FA2_ROAD_r0 := -DFA2_TILE_SET=0 -DFA2_SWIZZLE=0 -DFA2_PIPE=0 -DFA2_QREGS=0
# r1  + XOR-swizzled smem
FA2_ROAD_r1 := -DFA2_TILE_SET=0 -DFA2_SWIZZLE=1 -DFA2_PIPE=0 -DFA2_QREGS=0
# r2  + Q fragments held in registers
FA2_ROAD_r2 := -DFA2_TILE_SET=0 -DFA2_SWIZZLE=1 -DFA2_PIPE=0 -DFA2_QREGS=1
# r3  + cp.async double buffering of K and V
FA2_ROAD_r3 := -DFA2_TILE_SET=0 -DFA2_SWIZZLE=1 -DFA2_PIPE=2 -DFA2_QREGS=1
# r4  + FA2's tiles (128x64 at D=128, 32 rows per warp): the final kernel (all defaults)
FA2_ROAD_r4 := -DFA2_TILE_SET=1 -DFA2_SWIZZLE=1 -DFA2_PIPE=-1 -DFA2_QREGS=1
# alternatives at the final tiles: x1 FA2's K/V ping-pong instead of double buffers, x3 no swizzle
# (x3 spills 16 bytes in D=64 causal at sm_90; the road line is D=128 non-causal, spill-free. Final
# tiles without pipelining spill 40-96 bytes everywhere, so that step is measured at 64x64: r2 -> r3)
FA2_ROAD_x1 := -DFA2_TILE_SET=1 -DFA2_SWIZZLE=1 -DFA2_PIPE=1 -DFA2_QREGS=1
FA2_ROAD_x3 := -DFA2_TILE_SET=1 -DFA2_SWIZZLE=0 -DFA2_PIPE=-1 -DFA2_QREGS=1

FA2_ROAD_BINS := $(addprefix $(BUILD)/road/road_,$(FA2_ROAD_STEPS))

fa2-road: $(FA2_ROAD_BINS)

$(BUILD)/road/fa2_%.o: $(FA2_SRC_DEPS) $(FA2_DIR)/fa2.mk
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(FA2_ROAD_ARCH) -Icommon -I. -DFA2_ROAD=1 $(FA2_ROAD_$*) -c $(FA2_DIR)/fa2.cu -o $@

$(BUILD)/road/road_%: $(FA2_DIR)/road_main.c $(BUILD)/road/fa2_%.o $(FA2_DIR)/fa2.h common/half.h
	$(CC) -std=c11 -O2 -Wall -Wextra -Icommon -I$(FA2_DIR) -I$(FA2_CUDA_HOME)/include $(FA2_ROAD_$*) $< \
	    $(BUILD)/road/fa2_$*.o $(FA2_LINK) -o $@

else

.PHONY: fa2-lib fa2-example fa2-sass fa2-road
fa2-lib fa2-example fa2-sass fa2-road:
	@echo "$@: needs the CUDA build (nvcc not found, or NO_CUDA=1)" >&2; exit 1

endif
