# python/python.mk: the Python module's tests (included by the root Makefile after the stages' own
# fragments). python/flashattn_stages.py loads the public library, build/libflashattn.so
# (lib/flashattn.mk: make lib), with ctypes.
#
#   make check-python      the library, then pytest on python/ (the module, its backward and autograd
#                          function, and the Triton kernel against float64 references; GPU tests skip,
#                          saying why, without a GPU)

.PHONY: check-python

check-python: $(if $(HAVE_CUDA),$(FLASHATTN_SO))
	@$(PYTHON) -c 'import pytest' 2>/dev/null || { echo "check-python: needs pytest ($(PYTHON) -m pip install pytest)" >&2; exit 1; }
	$(PYTHON) -m pytest -q -rs python/

# The bench's peers time the library too (bench/peers.py, through python/flashattn_stages.py).
ifneq ($(PEERS),0)
bench: $(if $(HAVE_CUDA),$(FLASHATTN_SO))
endif
