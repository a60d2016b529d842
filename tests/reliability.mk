# tests/reliability.mk: fuzzing, sanitizers, leak checks and the documentation check (included by the
# root Makefile).
#
#   make fuzz [FUZZ_SECONDS=60]       libFuzzer (clang) on the .npy layer, FUZZ_SECONDS per target:
#                                     npy (npy_parse), npy_file (npy_read against npy_parse),
#                                     npy_roundtrip (npy_write and the o/lse pair -> npy_read),
#                                     npy_header (headers up to and past 1 MiB); FUZZ_TARGETS="npy ..."
#                                     narrows it; exits 1 on a crash
#   make check-asan                   host code and tests under ASan + UBSan, without CUDA, in build/asan
#   make sanitize [SANITIZE_QUICK=1]  compute-sanitizer memcheck, racecheck, initcheck, synccheck over
#                                     every GPU stage (on the GPU machine), SANITIZE_JOBS in parallel;
#                                     logs in build/sanitize/<tool>-<stage>-d<D>/
#                                     (SANITIZE_TOOLS="memcheck ...", SANITIZE_STAGES="03 ..." or "03,04",
#                                     SANITIZE_DIMS="64 128", SANITIZE_SEQS="1 17" and
#                                     SANITIZE_DTYPES="fp16" narrow it; SANITIZE_OUT=dir keeps
#                                     two runs apart, e.g. one stage set per GPU;
#                                     SANITIZE_QUICK=1: D = 64 and the smallest;
#                                     SANITIZE_RESUME=1: keep SANITIZE_OUT, run what is unfinished)
#   make leakcheck                    valgrind over build/attn's error paths (bad arguments, bad files)
#   make check-cuda-headers CUDA_HEADERS=DIR
#                                     the host C files of a CUDA build compiled (syntax only) against
#                                     another CUDA runtime's headers: .ci/run gives it 12.0's
#   make docs-check                   the tracked *.md files and the source files' header comments:
#                                     every relative link (and #anchor) resolves, every `make TARGET`
#                                     names a target, every build/attn and attn-bench command shown
#                                     parses, every file:line names what stands there and every
#                                     workshop patch applies without offset, every generated block is
#                                     what its script makes of its CSV and every run figure in prose
#                                     cites its history entry and commit (tests/docs_check.sh,
#                                     docs_refs.sh and docs_figures.sh say how; no GPU needed, about a
#                                     minute on 2 cores; not part of make check)

.PHONY: fuzz check-asan sanitize leakcheck docs-check check-cuda-headers

# ---- fuzzing ---------------------------------------------------------------------------------
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= npy npy_file npy_roundtrip npy_header
FUZZ_CC      ?= clang
FUZZ_FLAGS   := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
                -fno-omit-frame-pointer -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra $(INCLUDES)

$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_check.h suite/npy.c common/attn.c suite/npy.h common/attn.h
	@sh tests/fuzz/run_fuzz.sh --probe $(FUZZ_CC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $< suite/npy.c common/attn.c -lm -o $@

# Every target runs, even after one has crashed; the status is 1 if any did.
fuzz: $(addprefix $(BUILD)/fuzz_,$(FUZZ_TARGETS))
	@rc=0; for t in $(FUZZ_TARGETS); do \
	     sh tests/fuzz/run_fuzz.sh $(BUILD)/fuzz_$$t $(BUILD)/fuzz/$$t $(FUZZ_SECONDS) || rc=1; done; \
	 exit $$rc

# ---- host code under AddressSanitizer + UndefinedBehaviorSanitizer ----------------------------
# ASan and the CUDA driver do not mix, so this build has no CUDA (GPU tests skip). Criterion runs
# each test in a child process and ignores how that child exits after its test passed, so a leak
# that LSan reports at the child's exit would not fail the run: the output is kept in
# build/asan/check.log and any sanitizer report in it fails the target.
ASAN_BUILD ?= build/asan
# The suppressions file by its absolute path (a test that changes directory still finds it), in double
# quotes inside the option string (the sanitizers' option parser takes a quoted value, so a path with
# a space or a colon works) and the whole in single quotes for the shell.
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1 \
            LSAN_OPTIONS='suppressions="$(CURDIR)/tests/lsan.supp":print_suppressions=0' \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

check-asan:
	@mkdir -p $(ASAN_BUILD)
	@{ $(ASAN_ENV) $(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) SAN=1 NO_CUDA=1 check 2>&1; \
	   echo $$? >$(ASAN_BUILD)/check.rc; } | tee $(ASAN_BUILD)/check.log
	@rc=$$(cat $(ASAN_BUILD)/check.rc); \
	 n=$$(grep -cE 'ERROR: (Address|Leak)Sanitizer|runtime error:' $(ASAN_BUILD)/check.log); \
	 if [ "$$n" -gt 0 ]; then \
	     echo "check-asan: FAIL: $$n sanitizer reports (see $(ASAN_BUILD)/check.log):"; \
	     grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:|^SUMMARY:' $(ASAN_BUILD)/check.log | head -n 20; \
	     exit 1; \
	 fi; \
	 if [ "$$rc" -ne 0 ]; then echo "check-asan: FAIL: make check exited with $$rc"; exit 1; fi; \
	 echo "check-asan: PASS: no ASan, LSan or UBSan reports"

# ---- compute-sanitizer over the GPU stages ---------------------------------------------------
# One compute-sanitizer process per (tool, stage, D) triple, SANITIZE_JOBS at a time (each is mostly
# CPU: the sanitizer instruments the kernels; the shapes are small; the full set is 4 tools x 46
# (stage, D) pairs = 184 processes with stage 10 built), then one table per (tool, stage).
# SANITIZE_OUT: its own folder lets two runs (two GPUs, two stage sets) go side by side.
SANITIZE_OUT ?= $(BUILD)/sanitize
SANITIZE_JOBS ?= $(shell nproc 2>/dev/null || echo 4)

# SANITIZE_RESUME=1 keeps SANITIZE_OUT and runs only the processes that have not finished there (a
# summary row written), so that the whole set, over 10 minutes, can be run across several limited
# sessions with the same variables; the table counts every finished process of the plan
# (tests/sanitize.sh parallel).
sanitize: $(ATTN)
	@HAVE_CUDA=$(HAVE_CUDA) CUDA_HOME=$(CUDA_HOME) SANITIZE_OUT=$(SANITIZE_OUT) SANITIZE_JOBS=$(SANITIZE_JOBS) \
	 SANITIZE_RESUME=$(SANITIZE_RESUME) \
	 bash tests/sanitize.sh parallel $(ATTN)

# ---- the host code against the oldest CUDA runtime the README takes --------------------------------
# `make` asks for nvcc 12+, but the build machine has one toolkit: a runtime call newer than 12.0 can
# creep in unguarded and break every older build (hopper_host.c did, with 12.5's
# cudaGetDriverEntryPointByVersion). This compiles the host C of build/libattn.a, the front ends and,
# where Criterion's header is found, the tests against CUDA_HEADERS (a folder with cuda_runtime_api.h,
# e.g. from the nvidia-cuda-runtime-cu12 wheel) instead of the installed toolkit's. Only what an older
# runtime changes is an error: a function or type it lacks, a signature it differs in (other warnings
# are the normal build's business, and NVIDIA's headers are system headers here). Not compiled: the
# kernels (that needs the old nvcc itself) and stage 10's NCCL paths (nccl.h is not in the runtime).
CUDA_HOST_SRC := $(C_SRC) $(MAIN_SRC) bench/bench_main.c
CUDA_HEADERS_ERRORS := -Werror=implicit-function-declaration -Werror=incompatible-pointer-types \
                       -Werror=int-conversion -Werror=implicit-int
check-cuda-headers:
	@test -f "$(CUDA_HEADERS)/cuda_runtime_api.h" || \
	  { echo "check-cuda-headers: CUDA_HEADERS must name a folder with cuda_runtime_api.h (got '$(CUDA_HEADERS)')" >&2; exit 2; }
	@v=$$(sed -n 's/^#define CUDART_VERSION *\([0-9]*\).*/\1/p' "$(CUDA_HEADERS)/cuda_runtime_api.h"); \
	 files="$(CUDA_HOST_SRC)"; \
	 if echo '#include <criterion/criterion.h>' | $(CC) -E -x c - >/dev/null 2>&1; then files="$$files $(TEST_SRC)"; \
	 else echo "check-cuda-headers: criterion/criterion.h not found: the tests are not compiled"; fi; \
	 n=0; for f in $$files; do \
	   $(CC) -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L $(CUDA_HEADERS_ERRORS) \
	     -DATTN_HAVE_CUDA=1 -DATTN_CUDA_CORES_MIN_SM=70 -isystem "$(CUDA_HEADERS)" $(INCLUDES) -fsyntax-only "$$f" || \
	     { echo "check-cuda-headers: FAIL: $$f against CUDART_VERSION $$v"; exit 1; }; \
	   n=$$((n + 1)); \
	 done; \
	 echo "check-cuda-headers: $$n host files compile against CUDART_VERSION $$v"

# ---- valgrind over the front end's error paths -----------------------------------------------
leakcheck: $(ATTN)
	@SANITIZE_DIR='$(BUILD)/leakcheck' bash tests/sanitize.sh leakcheck '$(ATTN)'

# ---- the documentation's links and commands --------------------------------------------------
docs-check: $(ATTN) $(BENCH_BIN)
	@ATTN='$(ATTN)' BENCH_BIN='$(BENCH_BIN)' bash tests/docs_check.sh
