# bench/bench.mk: every stage side by side (included by the root Makefile).
#
#   make bench                 the sweep: B=4 H=32 D=64,128 N=512..16384, causal and not, on a GPU
#                              machine; without a GPU (or nvcc) stage 01 alone at B=1 H=4
#                              N=256,512,1024, saying why the GPU stages were skipped. Tables on
#                              stdout, progress on stderr, CSV to $(CSV). Before the sweep it runs
#                              the PyTorch peers (bench/peers.py), which print why and do nothing
#                              unless python3 imports torch with a CUDA GPU; their rows are merged
#                              into the tables and the CSV. Then PNG plots when gnuplot exists.
#   make bench QUICK=1         a small sweep (B=1 H=4 N=128,512,1024 D=64) in well under a minute
#   make bench CSV=path        CSV elsewhere (default build/bench/bench.csv)
#   make bench PEERS=0         without the PyTorch peers
#   make bench SWEEP='--seqs 1024,4096 --dims 128'   shape flags for the stages and the peers
#   make bench BENCH_ARGS='--stages 02,06'            flags for attn-bench alone (--help)
#   make plots CSV=path        PNGs from a CSV made elsewhere, into $(PLOTS_DIR)
#   make bench-results CSV=path   the CSV and its PNGs into bench/results/, and the bench
#                              sections of README.md and NN_*/README.md rewritten from them
#
# Exit status of make bench: that of attn-bench, i.e. non-zero when a stage FAILed its check.

BENCH_BIN   := $(BUILD)/attn-bench
CSV         ?= $(BUILD)/bench/bench.csv
PLOTS_DIR   ?= $(BUILD)/bench
PEERS       ?= 1
PYTHON      ?= python3
SWEEP       ?=
BENCH_ARGS  ?=
BENCH_RESULTS := bench/results
BENCH_PEERS_CSV = $(basename $(CSV))_peers.csv
BENCH_QUICK = $(if $(filter-out 0,$(QUICK)),--quick)
BENCH_COMMIT = $(shell c=$$(git rev-parse --short HEAD 2>/dev/null) && \
  { git diff --quiet HEAD -- 2>/dev/null && echo $$c || echo $$c-dirty; } || echo unknown)

.PHONY: bench bench-peers plots bench-results

$(BENCH_BIN): bench/bench_main.c $(LIB) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

bench: $(BENCH_BIN)
	@mkdir -p $(dir $(CSV))
	@rm -f $(BENCH_PEERS_CSV)
	@if [ "$(PEERS)" != 0 ]; then \
	  if command -v $(PYTHON) >/dev/null 2>&1; then \
	    $(PYTHON) bench/peers.py $(BENCH_QUICK) --csv $(BENCH_PEERS_CSV) --commit $(BENCH_COMMIT) $(SWEEP) \
	      || echo "bench: bench/peers.py failed; going on without the peers" >&2; \
	  else echo "peers: skipped: $(PYTHON) not found" >&2; fi; \
	fi
	@rc=0; $(BENCH_BIN) $(BENCH_QUICK) --csv $(CSV) --commit $(BENCH_COMMIT) \
	  $$([ -s $(BENCH_PEERS_CSV) ] && echo --peers $(BENCH_PEERS_CSV)) $(SWEEP) $(BENCH_ARGS) || rc=$$?; \
	  sh bench/plot.sh $(CSV) $(PLOTS_DIR) || true; exit $$rc

# The same as make bench (the peers run whenever PyTorch with CUDA is there); kept as a name.
bench-peers: bench

plots:
	@sh bench/plot.sh $(CSV) $(PLOTS_DIR)

bench-results: $(BENCH_BIN)
	@test -s "$(CSV)" || { echo "bench-results: no CSV at $(CSV) (make bench-results CSV=path)" >&2; exit 1; }
	@mkdir -p $(BENCH_RESULTS)
	@if [ "$(abspath $(CSV))" != "$(abspath $(BENCH_RESULTS)/bench.csv)" ]; then \
	  cp "$(CSV)" $(BENCH_RESULTS)/bench.csv && echo "bench-results: $(CSV) -> $(BENCH_RESULTS)/bench.csv"; fi
	@sh bench/plot.sh $(BENCH_RESULTS)/bench.csv $(BENCH_RESULTS)
	@ATTN_BENCH=$(BENCH_BIN) sh bench/update_readme.sh $(BENCH_RESULTS)/bench.csv
