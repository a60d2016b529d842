# bench/bench.mk: every stage side by side (included by the root Makefile).
#
#   make bench                 the PyTorch and Triton peers (bench/peers.py, when python3 imports torch
#                              with a GPU; they also time the C libraries through python/), then
#                              build/attn-bench over every registered stage: B=4 H=32 D=64,128
#                              N=512..16384, causal and not (no GPU: the CPU stages 01, 03m-06m, 12m,
#                              small). The backward (stages 11-14d, 12m; the backward of SDPA's flash
#                              and cuDNN backends) is part of it: rows with pass bwd, tables of their own.
#                              One merged CSV ($(CSV)), the tables on stdout (sh + awk, no Python),
#                              PNG plots when gnuplot exists. Progress and elapsed times on stderr.
#                              About 11-13 minutes on the H200, estimated (bench/README.md, "The
#                              backward": the forward alone took 432 s); SWEEP=--no-backward and
#                              SWEEP=--no-forward split it in two, each under 10 minutes
#   make bench QUICK=1         a small sweep (B=1 H=4 N=128,512,1024 D=64) in well under a minute
#   make bench COLD=1          cold L2: 4x the L2 size written before every timed run (stages and peers)
#   make bench SWEEP='--warmup-ms 0'   1 or 2 untimed runs before each point's timing instead of the default
#                              100 ms (stages and peers): rows then timed at whatever clock the point
#                              before left (bench/README.md, "Clock")
#   make bench PEERS=0         without the peers
#   make bench CSV=path        the merged CSV elsewhere (default build/bench/bench.csv; any path, spaces too)
#   make bench SWEEP='--seqs 1024,4096 --dims 128'   shape flags for the stages and the peers
#   make bench BENCH_ARGS='--stages 02,06'            flags for attn-bench alone (--help)
#   make plots CSV=path        PNGs from a CSV made elsewhere, into $(PLOTS_DIR)
#   make roofline CSV=path [CEILINGS=path]   the roofline of the CSV's stages (bench/roofline.sh): the
#                              table on stdout, roofline.png into $(PLOTS_DIR); CEILINGS defaults to the
#                              one bench/ceilings.py wrote beside the CSV (make bench measures it where
#                              PyTorch sees a GPU)
#   make bench-decode          decoding (issue 60): bench/decode_peers.py (SDPA with enable_gqa on each
#                              backend, flash-attn-4, where PyTorch sees a GPU), then attn-bench --decode
#                              (B=1,8 H=32 H_kv=8 N_q=1 N_k=8k..128k D=128: every forward stage that takes
#                              the shape), merged into $(DECODE_CSV), then its tables (report.sh decode):
#                              time, K/V bandwidth and its share of BENCH_PEAK_GBS (default 4300 GB/s).
#                              DECODE_ARGS='--seqs 32768 --batches 1' for attn-bench and the peers alike;
#                              PEERS=0 without the peers. Fails as make bench does (a FAIL row, a bad flag)
#   make bench-results CSV=path   the CSV and its PNGs into bench/results/, and the generated blocks
#                              of README.md, bench/README.md and NN_*/README.md rewritten from them
#   make road-table ROAD=08 CSV=bench/results/bench.csv
#                              a road's table in its stage's README (ROAD=06, 08 or 09: 06_fa2_full,
#                              08_warp_specialized, 09_overlap), from a `make bench` CSV
#                              (bench/road_table.sh); make fa2-road-table is ROAD=06
#
# make bench fails (make's own exit status is then 2, whatever the recipe's) when a stage FAILed its
# check, when attn-bench refuses a flag, a shape or the CSV path (its --dry-run, the same command line
# as the real run, finds these before the peers run; attn-bench's message says which), or when QUICK,
# COLD or PEERS is other than 0 or 1. BENCH_ARGS=--help prints attn-bench's help and runs nothing.

BENCH_BIN   := $(BUILD)/attn-bench
CSV         ?= $(BUILD)/bench/bench.csv
PLOTS_DIR   ?= $(BUILD)/bench
PEERS       ?= 1
PYTHON      ?= python3
SWEEP       ?=
BENCH_ARGS  ?=
BENCH_RESULTS := bench/results
# The paths as one shell word each (single-quoted, a quote in them escaped): a CSV path with a space
# was split by make's $(dir ...) and the unquoted recipe ("unknown option", and a folder named after the
# path's middle word made in the current one). BENCH_PATHS sets csv, and part: CSV less its extension,
# the stem of the two part CSVs (attn-bench's, the peers').
sh_quote    = '$(subst ','\'',$(1))'
BENCH_PATHS = csv=$(call sh_quote,$(CSV)); case "$$(basename -- "$$csv")" in *.*) part="$${csv%.*}" ;; \
              *) part="$$csv" ;; esac;
# The roofline's ceilings (bench/ceilings.py), beside the CSV: CSV less its extension, then _ceilings.csv.
CEILINGS    ?= $(basename $(CSV))_ceilings.csv
BENCH_FLAGS = $(if $(filter-out 0,$(QUICK)),--quick) $(if $(filter-out 0,$(COLD)),--cold)
BENCH_COMMIT = $(shell c=$$(git rev-parse --short HEAD 2>/dev/null) && \
  { git diff --quiet HEAD -- 2>/dev/null && echo $$c || echo $$c-dirty; } || echo unknown)

.PHONY: bench bench-peers bench-decode plots roofline bench-results fa2-road-table road-table
DECODE_CSV  ?= $(BUILD)/bench/decode.csv
DECODE_ARGS ?=

$(BENCH_BIN): bench/bench_main.c $(LIB) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

# The peers time the shared libraries too: python/python.mk adds them to this rule's prerequisites.
# The power limit (and the peak SM clock for the peers' rows, which attn-bench reads from CUDA for its own)
# are nvidia-smi's, of GPU 0, asked once after the sweep and filled into the merged CSV
# (report.sh merge --set): neither writer can know the limit, and without nvidia-smi (or where it answers
# [N/A]) the rows keep them empty, which the report shows as "not recorded".
# Before anything runs: the switches take 0 or 1 (QUICK=no used to mean yes), and attn-bench checks its
# flags, shapes and CSV path (--dry-run), so that a bad one stops here, with attn-bench's status,
# before the peers' minutes and before old results are shown as new ones.
bench: $(BENCH_BIN)
	@for v in "QUICK=$(QUICK)" "COLD=$(COLD)" "PEERS=$(PEERS)"; do case "$${v#*=}" in ''|0|1) ;; \
	  *) echo "bench: $${v%%=*} must be 0 or 1 (got '$${v#*=}')" >&2; exit 2 ;; esac; done
	@$(BENCH_PATHS) mkdir -p -- "$$(dirname -- "$$csv")"
	@$(BENCH_PATHS) out=$$($(call sh_quote,$(BENCH_BIN)) $(BENCH_FLAGS) --dry-run --csv "$${part}_stages.csv" \
	  --commit $(BENCH_COMMIT) $(SWEEP) $(BENCH_ARGS) 2>&1) || { rc=$$?; printf '%s\n' "$$out" >&2; exit $$rc; }; \
	case "$$out" in *"--dry-run: the flags"*) ;; *) printf '%s\n' "$$out"; exit 0 ;; esac # BENCH_ARGS=--help
	@$(BENCH_PATHS) rm -f "$${part}_peers.csv" "$${part}_stages.csv" "$${part}_ceilings.csv"; t0=$$(date +%s); rc=0; \
	if [ "$(PEERS)" = 0 ]; then :; elif command -v $(PYTHON) >/dev/null 2>&1; then \
	  $(PYTHON) bench/peers.py $(BENCH_FLAGS) --csv "$${part}_peers.csv" --commit $(BENCH_COMMIT) $(SWEEP) \
	    || echo "bench: bench/peers.py failed; going on without the peers" >&2; \
	  $(PYTHON) bench/ceilings.py --csv "$${part}_ceilings.csv" || echo "bench: no ceilings, so no roofline" >&2; \
	else echo "peers: skipped: $(PYTHON) not found" >&2; fi; \
	$(call sh_quote,$(BENCH_BIN)) $(BENCH_FLAGS) --csv "$${part}_stages.csv" --commit $(BENCH_COMMIT) $(SWEEP) \
	  $(BENCH_ARGS) || rc=$$?; \
	if [ ! -f "$${part}_stages.csv" ]; then [ $$rc -ne 0 ] || rc=1; \
	  echo "bench: attn-bench wrote no CSV (exit $$rc): $$csv left as it was" >&2; exit $$rc; fi; \
	set -- "$${part}_stages.csv"; [ ! -f "$${part}_peers.csv" ] || set -- "$$@" "$${part}_peers.csv"; \
	facts=""; smi=$$(nvidia-smi --query-gpu=power.limit,clocks.max.sm --format=csv,noheader,nounits -i 0 2>/dev/null | head -n 1) || smi=""; \
	pw=$$(echo $${smi%%,*}); mhz=$$(echo $${smi#*,}); \
	case $$pw in ''|*[!0-9.]*) ;; *) facts="--set power_limit_w=$$pw" ;; esac; \
	case $$mhz in ''|*[!0-9]*) ;; *) facts="$$facts --set sm_clock_mhz=$$mhz" ;; esac; \
	sh bench/report.sh merge $$facts "$$csv" "$$@" || rc=1; \
	echo; sh bench/report.sh tables "$$csv" || rc=1; \
	sh bench/report.sh plots "$$csv" $(call sh_quote,$(PLOTS_DIR)) || true; \
	[ ! -s "$${part}_ceilings.csv" ] || sh bench/roofline.sh plot "$$csv" "$${part}_ceilings.csv" $(call sh_quote,$(PLOTS_DIR)) || true; \
	echo "bench: $$csv, $$(( $$(date +%s) - t0 )) s in all (peers, stages, tables, plots)" >&2; exit $$rc

# Decoding's rows: the peers' CSV and attn-bench's share attn-bench --decode's columns, so the merge keeps
# the first header and every row. attn-bench checks its flags and the CSV path first (--dry-run).
bench-decode: $(BENCH_BIN)
	@case "$(PEERS)" in ''|0|1) ;; *) echo "bench-decode: PEERS must be 0 or 1 (got '$(PEERS)')" >&2; exit 2 ;; esac
	@csv=$(call sh_quote,$(DECODE_CSV)); part="$${csv%.*}"; mkdir -p -- "$$(dirname -- "$$csv")"; \
	$(call sh_quote,$(BENCH_BIN)) --decode --dry-run --csv "$${part}_stages.csv" $(DECODE_ARGS) || exit $$?; \
	rm -f "$${part}_stages.csv" "$${part}_peers.csv"; rc=0; \
	if [ "$(PEERS)" != 0 ] && command -v $(PYTHON) >/dev/null 2>&1; then \
	  $(PYTHON) bench/decode_peers.py --csv "$${part}_peers.csv" --commit $(BENCH_COMMIT) $(DECODE_ARGS) \
	    || echo "bench-decode: bench/decode_peers.py failed; going on without the peers" >&2; fi; \
	$(call sh_quote,$(BENCH_BIN)) --decode --csv "$${part}_stages.csv" --commit $(BENCH_COMMIT) $(DECODE_ARGS) || rc=$$?; \
	[ -f "$${part}_stages.csv" ] || { echo "bench-decode: attn-bench wrote no CSV (exit $$rc)" >&2; exit 1; }; \
	set -- "$${part}_stages.csv"; [ ! -f "$${part}_peers.csv" ] || set -- "$$@" "$${part}_peers.csv"; \
	awk 'FNR == 1 && NR != 1 { next } { print }' "$$@" > "$$csv.tmp" && mv -f "$$csv.tmp" "$$csv" || rc=1; \
	echo; sh bench/report.sh decode "$$csv" || rc=1; echo "bench-decode: $$csv" >&2; exit $$rc

# The same as make bench (the peers run whenever PyTorch with CUDA is there); kept as a name.
bench-peers: bench

plots:
	@sh bench/report.sh plots $(call sh_quote,$(CSV)) $(call sh_quote,$(PLOTS_DIR))

roofline:
	@sh bench/roofline.sh table $(call sh_quote,$(CSV)) $(call sh_quote,$(CEILINGS))
	@sh bench/roofline.sh plot $(call sh_quote,$(CSV)) $(call sh_quote,$(CEILINGS)) $(call sh_quote,$(PLOTS_DIR))

bench-results:
	@$(BENCH_PATHS) test -s "$$csv" || { echo "bench-results: no CSV at $$csv (make bench-results CSV=path)" >&2; exit 1; }
	@mkdir -p $(BENCH_RESULTS)
	@$(BENCH_PATHS) if ! [ "$$csv" -ef $(BENCH_RESULTS)/bench.csv ]; then \
	  cp -- "$$csv" $(BENCH_RESULTS)/bench.csv && echo "bench-results: $$csv -> $(BENCH_RESULTS)/bench.csv"; fi
	@sh bench/report.sh plots $(BENCH_RESULTS)/bench.csv $(BENCH_RESULTS)
	@if [ -s $(call sh_quote,$(CEILINGS)) ]; then \
	  [ $(call sh_quote,$(CEILINGS)) -ef $(BENCH_RESULTS)/bench_ceilings.csv ] || cp -- $(call sh_quote,$(CEILINGS)) $(BENCH_RESULTS)/bench_ceilings.csv; \
	  sh bench/roofline.sh plot $(BENCH_RESULTS)/bench.csv $(BENCH_RESULTS)/bench_ceilings.csv $(BENCH_RESULTS); fi
	@sh bench/report.sh readme $(BENCH_RESULTS)/bench.csv

# Needs only a CSV, awk and build/attn (the registry's road steps; make NO_CUDA=1 builds one): works on
# any machine.
ROAD ?= 06
road-table: $(ATTN)
	@$(BENCH_PATHS) test -s "$$csv" || { echo "road-table: no CSV at $$csv (make road-table ROAD=08 CSV=path)" >&2; exit 2; }
	ROAD=$(call sh_quote,$(ROAD)) ATTN=$(ATTN) sh bench/road_table.sh $(call sh_quote,$(CSV))
fa2-road-table:
	@$(MAKE) --no-print-directory road-table ROAD=06 CSV=$(call sh_quote,$(CSV))
