# lib/flashattn.mk: the public library, libflashattn (lib/flashattn.h) (included by the root Makefile).
#
#   make lib                    build/libflashattn.so and build/libflashattn.a (a CUDA build)
#   make flashattn-example      build/flashattn_example: lib/example_main.c linked with libflashattn.a
#
# The shared library links the CUDA runtime statically and keeps its symbols inside (--exclude-libs):
# a process that already has another CUDA runtime loaded (PyTorch) cannot interpose its own on the
# library's calls. It exports the functions flashattn.h declares and nothing else (a linker version
# script hides the rest: the stages, the suite's attn_* and hop_* helpers), and the link fails if
# anything else is exported. The static library holds the same objects; a program links the CUDA
# runtime beside it.

FLASHATTN_HEADER  := lib/flashattn.h
# The exported names: every function flashattn.h declares (a line "type name(" or "type *name("), read
# from the header itself so that the two cannot drift.
# (the sed script in a variable of its own: make counts the parentheses inside a function call)
FLASHATTN_API_SED := s/^\(const \)\{0,1\}[a-z_]\{1,\} \*\{0,1\}\(attn_[a-z_]\{1,\}\)(.*/\2/p
FLASHATTN_API     := $(shell sed -n '$(FLASHATTN_API_SED)' $(FLASHATTN_HEADER))
FLASHATTN_SO      := $(BUILD)/libflashattn.so
FLASHATTN_A       := $(BUILD)/libflashattn.a

.PHONY: lib flashattn-example

ifneq ($(HAVE_CUDA),)

# The stages the library runs (lib/flashattn.c's lists: 06-09 forward, 13 and 13d backward), what they
# are built from, and the host code they share.
FLASHATTN_OBJS := $(addprefix $(BUILD)/obj/,lib/flashattn.o common/attn.o kit/hopper_host.o \
                    06_fa2_full/stage06.o 06_fa2_full/fa2_f16.cu.o 06_fa2_full/fa2_bf16.cu.o \
                    07_tma_wgmma/tma_wgmma.cu.o 08_warp_specialized/warp_specialized.cu.o 09_overlap/overlap.cu.o \
                    13_backward_fa2/backward_fa2.cu.o 13_backward_fa2/workspace.o)
FLASHATTN_CUDA_LIBS := -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm

lib: $(FLASHATTN_SO) $(FLASHATTN_A)

$(FLASHATTN_A): $(FLASHATTN_OBJS)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

$(FLASHATTN_SO): $(FLASHATTN_OBJS)
	@printf '{ global: $(addsuffix ;,$(FLASHATTN_API)) local: *; };\n' >$@.map
	$(CC) -shared -o $@ $^ $(FLASHATTN_CUDA_LIBS) -Wl,-soname,libflashattn.so \
	    -Wl,--exclude-libs,ALL -Wl,--no-undefined -Wl,--version-script=$@.map
	@got=$$(nm -D --defined-only $@ | awk '$$2 ~ /^[TDBRVW]$$/ {print $$3}' | sed 's/@.*//' | sort | tr '\n' ' '); \
	want=$$(printf '%s\n' $(FLASHATTN_API) | sort | tr '\n' ' '); \
	if [ "$$got" != "$$want" ]; then echo "$@ exports '$$got', not '$$want'" >&2; rm -f $@; exit 1; fi

flashattn-example: $(BUILD)/flashattn_example
$(BUILD)/flashattn_example: lib/example_main.c $(FLASHATTN_HEADER) $(FLASHATTN_A) $(FLAGS_STAMP)
	$(CC) -std=c11 -O2 -Wall -Wextra -Ilib -I$(CUDA_HOME)/include $< $(FLASHATTN_A) $(FLASHATTN_CUDA_LIBS) -o $@

else

# Asked for in a build without CUDA, the library's targets say why they are not made, rather than
# "No rule to make target".
$(sort lib flashattn-example $(FLASHATTN_SO) $(FLASHATTN_A) build/libflashattn.so build/libflashattn.a):
	@echo "$@: the library needs the CUDA build (nvcc not found, or NO_CUDA=1): run it where make finds nvcc, without NO_CUDA=1" >&2; exit 1

endif
