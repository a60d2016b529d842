# tools/tools.mk: what the compiler made of the kernels (included by the root Makefile).
#
#   make fa2-sass         ptxas registers / spills / stack for every kernel of stage 06 and of its road at
#                         sm_80 and sm_90 (build/fa2_ptxas.txt; exit 1 on any spill), and instruction counts
#                         from the SASS when cuobjdump is found (build/fa2.sass)
#   make diff A=03m B=04m the code of two stages (or road steps) side by side, without their header comments
#   python3 tools/ncu_bytes.py   on a GPU with Nsight Compute: the bytes model of stages 02, 03, 06, 09 against
#                         ncu's DRAM and L2 counters (the pending table of README.md, "Bytes moved")

SASS_STAGE_DIR := 06_fa2_full

ifneq ($(HAVE_CUDA),)

# every kernel of the stage and of its road, one object each for the report
FA2_SASS_SRC  := fa2_f16 fa2_bf16 $(basename $(notdir $(wildcard $(SASS_STAGE_DIR)/step06*.cu)))
FA2_SASS_OBJS := $(addprefix $(BUILD)/sass/,$(addsuffix .o,$(FA2_SASS_SRC)))

.PHONY: fa2-sass

# ptxas report (-Xptxas -v) for both real targets, one object per source so that make -j builds them
# side by side; the objects are kept for cuobjdump.
$(BUILD)/sass/%.o: $(SASS_STAGE_DIR)/%.cu $(HEADERS) tools/tools.mk $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	    $(INCLUDES) -DATTN_HAVE_CUDA=1 -Xptxas -v -c $< -o $@ 2> $(basename $@).ptxas

fa2-sass: $(FA2_SASS_OBJS) tools/sass_report.sh
	@cat $(addsuffix .ptxas,$(basename $(FA2_SASS_OBJS))) > $(BUILD)/fa2_ptxas.txt
	bash tools/sass_report.sh $(BUILD)/fa2_ptxas.txt $(BUILD)/fa2.sass $(FA2_SASS_OBJS)

else

.PHONY: fa2-sass
fa2-sass:
	@echo "$@: needs the CUDA build (nvcc not found, or NO_CUDA=1)" >&2; exit 1

endif

# make diff A=03m B=04m: the code of two stages or road steps side by side, their header comments left
# out (tools/stage_diff.sh; each stage's file is the registry's `source`, build/attn --source ID).
.PHONY: diff
diff: $(ATTN)
	@[ -n "$(A)" ] && [ -n "$(B)" ] || { echo "diff: name two stages: make diff A=03m B=04m" >&2; exit 2; }
	@ATTN=$(ATTN) sh tools/stage_diff.sh $(A) $(B)
