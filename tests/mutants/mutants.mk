# tests/mutants/mutants.mk: the check's mutation suite (included by tests/tests.mk).
#
#   make mutants     every tests/mutants/*.patch, a bug planted in a CPU model, must FAIL the check
#                    (forward models at N = 129, 4097 and 16385; 12m at 129 and 1025), and each
#                    pristine model PASS it (06m at N = 2^20 + 1 too). make check runs it after the
#                    tests (not under SAN=1; MUTANTS=0 leaves it out).
#   make mutants MUTANT_N_BACKWARD="129 4097 16385"   12m at the forward's N too (half an hour on 2
#                    cores); MUTANT_N=..., MUTANT_ROWS=all, MUTANT_N_LARGE= (none), ...: see
#                    tests/mutants/run.sh
#
# The models are compiled with this build's flags and linked against its library, so that the
# mutants test the check this build has.

MUTANT_OUT ?= $(BUILD)/mutants
MUTANTS    ?= 1

.PHONY: mutants
mutants: $(LIB)
	+@MUTANT_CC="$(CC) $(CFLAGS_BASE) $(CFLAGS)" MUTANT_LINK="$(LIB) $(LDLIBS)" MUTANT_OUT="$(MUTANT_OUT)" \
	  $(if $(MUTANT_N),MUTANT_N="$(MUTANT_N)") $(if $(MUTANT_N_BACKWARD),MUTANT_N_BACKWARD="$(MUTANT_N_BACKWARD)") \
	  $(if $(MUTANT_ROWS),MUTANT_ROWS="$(MUTANT_ROWS)") $(if $(filter undefined,$(origin MUTANT_N_LARGE)),,MUTANT_N_LARGE="$(MUTANT_N_LARGE)") \
	  $(if $(MUTANT_ROWS_LARGE),MUTANT_ROWS_LARGE="$(MUTANT_ROWS_LARGE)") \
	  $(if $(MUTANT_LARGE_STAGES),MUTANT_LARGE_STAGES="$(MUTANT_LARGE_STAGES)") bash tests/mutants/run.sh
