# workshop/workshop.mk: the break-it exercises of WORKSHOP.md (included by the root Makefile).
#
#   make workshop-check       every exercise: the CPU ones always (NO_CUDA build, a few seconds),
#                             the GPU ones where a GPU can run their stage ("skipped: no GPU"
#                             otherwise). Fails unless each broken tree FAILs the check named in
#                             its patch (or PASSes, for the exercises whose change is harmless)
#                             while the pristine tree PASSes it.
#   make workshop-check-cpu   the CPU ones alone; make check runs them after the tests
#   make workshop-check-gpu   the GPU ones alone (ARCH=sm_90 on the H200 keeps the rebuilds short)
#   WS_KEEP=1                 keep the broken trees in build/workshop/<name>/ to try other commands

WS_NOCUDA := build/nocuda

.PHONY: workshop-check workshop-check-cpu workshop-check-gpu

workshop-check: workshop-check-cpu workshop-check-gpu

workshop-check-cpu:
	+@$(MAKE) --no-print-directory NO_CUDA=1 BUILD=$(WS_NOCUDA) $(WS_NOCUDA)/attn >/dev/null
	+@MAKE="$(MAKE)" WS_NOCUDA_BUILD=$(WS_NOCUDA) bash workshop/run.sh cpu

ifneq ($(HAVE_CUDA),)
workshop-check-gpu: $(ATTN)
	+@MAKE="$(MAKE)" WS_CUDA_BUILD=$(BUILD) WS_MAKEFLAGS="$(if $(ARCH),ARCH=$(ARCH))" bash workshop/run.sh gpu
else
# no CUDA build: every GPU exercise is listed as skipped, with the reason the front end gives
workshop-check-gpu:
	+@$(MAKE) --no-print-directory NO_CUDA=1 BUILD=$(WS_NOCUDA) $(WS_NOCUDA)/attn >/dev/null
	+@MAKE="$(MAKE)" WS_CUDA_BUILD=$(WS_NOCUDA) bash workshop/run.sh gpu
endif
