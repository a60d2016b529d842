# tests/tests.mk: `make check` builds every tests/test_*.c into one Criterion binary and runs it.
# GPU tests skip, with the reason, where there is no GPU or no CUDA build; the closing line counts
# them. Criterion comes from the system (installed by tests/ensure-criterion.sh if it can). Then the
# install test (lib/flashattn.mk's check-install), the check's mutants (tests/mutants/mutants.mk:
# bugs planted in the CPU models must FAIL the check) and the CPU break-it exercises run
# (workshop/workshop.mk); none of them under SAN=1, and MUTANTS=0 or WORKSHOP=0 leaves those two out.

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(BUILD)/test_attn
# Device code the tests run on the GPU (stage 06's building blocks, fa2_selftest.cu): linked into the
# test binary alone, in a CUDA build, and compiled by the root Makefile's rule for .cu files.
TEST_CU_OBJ := $(if $(HAVE_CUDA),$(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(wildcard tests/*.cu)))
$(TEST_CU_OBJ): $(wildcard tests/*.h)
# pkg-config's criterion.pc needs .pc files the GPU machine lacks, so link plainly.
CRITERION_LIBS ?= -lcriterion
# Criterion options: a generous per-test timeout (N=1000 references on 2 cores). Criterion runs one
# job per core by default. The serial suite holds the tests that run every GPU stage on problems of
# gigabytes (alone on the device: 16 stages x up to 17 GB take minutes), hence its longer limit. In the
# parallel phase each job's CPU reference uses 2 OpenMP threads, not one per core: one job per core,
# each with a thread per core, oversubscribed a 32-core machine 32-fold.
CHECK_ARGS ?= --timeout 300
SERIAL_CHECK_ARGS ?= --timeout 1200
PARALLEL_OMP_THREADS ?= 2
# Criterion runs one test per core and each test's OpenMP team has a thread per core too: with
# OpenMP's default spin-waiting, idle team threads burn the time slices the others need (on CI's
# 2 cores the stage tests took 117 s spinning, 53 s with passive waiting).
CHECK_ENV ?= OMP_WAIT_POLICY=passive
WORKSHOP ?= 1

include tests/mutants/mutants.mk

.PHONY: check check-body test-bin
$(TEST_BIN): $(TEST_SRC) tests/test_util.h 09_overlap/work_units.h kit/hopper_desc.h kit/grid_order.h 14_backward_hopper/backward_hopper_layout.h $(TEST_CU_OBJ) $(LIB) $(ATTN)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(TEST_SRC) $(TEST_CU_OBJ) $(LIB) $(CRITERION_LIBS) $(LDLIBS) -o $@

test-bin: $(TEST_BIN)

# One make check at a time in a tree: two at once relinked and ran the same programs under each other
# ("Text file busy") and built the workshop's broken trees in the same folders (exercises NOT CAUGHT).
# make check holds an flock on build/.check.lock (whatever BUILD is: the workshop's trees and
# build/nocuda are the tree's) on fd 9, which everything it runs inherits; a second is refused at once,
# naming the first. Without flock(1) (util-linux) the check runs unlocked, as before.
CHECK_LOCK := build/.check.lock
check:
	@mkdir -p $(dir $(CHECK_LOCK)); exec 9>>$(CHECK_LOCK); \
	 if command -v flock >/dev/null 2>&1 && ! flock -n 9; then \
	   echo "check: another make check is running in this tree ($$(cat $(CHECK_LOCK)); $(CHECK_LOCK)): two at" \
	     "once break each other's builds and workshop trees; wait for it to end" >&2; exit 2; fi; \
	 echo "pid $$$$, since $$(date '+%F %T')" >$(CHECK_LOCK); \
	 $(MAKE) --no-print-directory check-body

# The body of make check, run under its lock.
check-body:
	@sh tests/ensure-criterion.sh
	@$(MAKE) --no-print-directory $(ATTN) $(TEST_BIN) $(BENCH_BIN)
ifeq ($(HAVE_CUDA),)
	@echo "note: $(if $(filter 1,$(NO_CUDA)),NO_CUDA=1 was given,nvcc not found): the GPU stages were not built; their tests will be skipped."
endif
	@echo "== the serial suite: tests that measure the whole device, run alone"
	$(CHECK_ENV) ATTN_BIN=$(ATTN) BENCH_BIN=$(BENCH_BIN) $(TEST_BIN) $(SERIAL_CHECK_ARGS) -j1 --filter 'serial/*'
	@echo "== every other test, in parallel"
	$(CHECK_ENV) ATTN_BIN=$(ATTN) BENCH_BIN=$(BENCH_BIN) OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$(PARALLEL_OMP_THREADS)} $(TEST_BIN) $(CHECK_ARGS) --filter '!(serial/*)'
ifneq ($(SAN),1)
	@echo "== the public library installed, and a program built against it outside the tree"
	+@$(MAKE) --no-print-directory check-install
endif
ifeq ($(MUTANTS)$(SAN),1)
	@echo "== the check's mutants (tests/mutants/): each bug planted in a CPU model must FAIL the check"
	+@$(MAKE) --no-print-directory mutants
endif
ifeq ($(WORKSHOP)$(SAN),1)
	@echo "== the CPU break-it exercises (workshop/): each broken tree must FAIL its check"
	+@$(MAKE) --no-print-directory workshop-check-cpu
endif
