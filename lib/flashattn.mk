# lib/flashattn.mk: the public library, libflashattn (lib/flashattn.h), and its installation (included by
# the root Makefile).
#
#   make lib                    build/libflashattn.so and build/libflashattn.a (a CUDA build)
#   make flashattn-example      build/flashattn_example: lib/example_main.c linked with libflashattn.a
#   make install PREFIX=dir     dir/include/flashattn.h, dir/lib/libflashattn.so and .a, and
#                               dir/lib/pkgconfig/flashattn.pc (PREFIX defaults to /usr/local; DESTDIR
#                               is put in front of every path, for packagers)
#   make check-install          installs into a temporary prefix and builds lib/example_main.c outside
#                               the tree against the installed copy, through pkg-config (make check
#                               runs it; tests/install_test.sh says what it asserts)
#
# The shared library links the CUDA runtime statically and keeps its symbols inside (--exclude-libs):
# a process that already has another CUDA runtime loaded (PyTorch) cannot interpose its own on the
# library's calls. It exports the functions flashattn.h declares and nothing else (a linker version
# script hides the rest: the stages, the suite's attn_* and hop_* helpers), and the link fails if
# anything else is exported. The static library holds the same objects; a program links the CUDA
# runtime beside it (flashattn.pc's Libs.private and static_libs).

FLASHATTN_HEADER  := lib/flashattn.h
# The exported names: every function flashattn.h declares (a line "type name(" or "type *name("), read
# from the header itself so that the two cannot drift.
# (the sed script in a variable of its own: make counts the parentheses inside a function call)
FLASHATTN_API_SED := s/^\(const \)\{0,1\}[a-z_]\{1,\} \*\{0,1\}\(attn_[a-z_]\{1,\}\)(.*/\2/p
FLASHATTN_API     := $(shell sed -n '$(FLASHATTN_API_SED)' $(FLASHATTN_HEADER))
# The version, one definition: FLASHATTN_VERSION in the header.
FLASHATTN_VERSION := $(shell sed -n 's/^.define FLASHATTN_VERSION "\(.*\)"/\1/p' $(FLASHATTN_HEADER))
FLASHATTN_SO      := $(BUILD)/libflashattn.so
FLASHATTN_A       := $(BUILD)/libflashattn.a
PREFIX            ?= /usr/local
PKG_CONFIG        ?= pkg-config

.PHONY: lib flashattn-example install check-install

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

# flashattn.pc: the prefix it was installed under, the CUDA runtime the library was built against (for
# the static library's users and for a program's own CUDA calls), and the static link in one variable
# (static_libs), since `pkg-config --static --libs` names -lflashattn, which a linker resolves to the
# shared library when both are installed.
install: $(FLASHATTN_SO) $(FLASHATTN_A)
	@case '$(PREFIX)' in /*) ;; *) echo "install: PREFIX must be an absolute path (got '$(PREFIX)')" >&2; exit 2;; esac
	install -d '$(DESTDIR)$(PREFIX)/include' '$(DESTDIR)$(PREFIX)/lib/pkgconfig'
	install -m 644 $(FLASHATTN_HEADER) '$(DESTDIR)$(PREFIX)/include/flashattn.h'
	install -m 755 $(FLASHATTN_SO) '$(DESTDIR)$(PREFIX)/lib/libflashattn.so'
	install -m 644 $(FLASHATTN_A) '$(DESTDIR)$(PREFIX)/lib/libflashattn.a'
	@printf '%s\n' 'prefix=$(PREFIX)' 'includedir=$${prefix}/include' 'libdir=$${prefix}/lib' \
	  'cudaincludedir=$(CUDA_HOME)/include' 'cudalibdir=$(CUDA_LIBDIR)' \
	  'static_libs=$${libdir}/libflashattn.a -L$${cudalibdir} -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm' '' \
	  'Name: flashattn' \
	  'Description: FlashAttention forward and backward on NVIDIA GPUs (sm_80 and newer), from the stage-by-stage suite' \
	  'Version: $(FLASHATTN_VERSION)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lflashattn' \
	  'Libs.private: -L$${cudalibdir} -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm' \
	  >'$(DESTDIR)$(PREFIX)/lib/pkgconfig/flashattn.pc'
	@echo "install: $(DESTDIR)$(PREFIX)/{include/flashattn.h, lib/libflashattn.so, lib/libflashattn.a, lib/pkgconfig/flashattn.pc}"

else

# Asked for in a build without CUDA, the library's targets say why they are not made, rather than
# "No rule to make target" (and install installs nothing rather than a header without a library).
$(sort lib flashattn-example install $(FLASHATTN_SO) $(FLASHATTN_A) build/libflashattn.so build/libflashattn.a):
	@echo "$@: the library needs the CUDA build (nvcc not found, or NO_CUDA=1): run it where make finds nvcc, without NO_CUDA=1" >&2; exit 1

endif

# The install test: make check runs it. In a CUDA build it installs this build's library; in a build
# without CUDA where nvcc exists all the same (NO_CUDA=1), it builds the library first for one GPU
# target, INSTALL_TEST_ARCH (the GPU's own where nvidia-smi names one, else sm_90), into its own
# folder, so that the cost is stage 06, 07-09 and 13 for one target once (about 140 s of CPU on the
# 2-core CI machine; nothing later unless they change). Without nvcc at all it skips, saying so.
INSTALL_TEST_ARCH ?= $(or $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | sed -n 's/^\([0-9]\)\.\([0-9]\)$$/sm_\1\2/p'),sm_90)
check-install:
ifneq ($(HAVE_CUDA),)
	@sh tests/install_test.sh '$(MAKE) --no-print-directory BUILD=$(BUILD)'
else ifneq ($(NVCC_FOUND),)
	@sh tests/install_test.sh '$(MAKE) --no-print-directory NO_CUDA= NVCC=$(NVCC_FOUND) ARCH=$(INSTALL_TEST_ARCH) BUILD=build/lib-$(INSTALL_TEST_ARCH)'
else
	@echo "check-install: skipped: no nvcc here (the library is CUDA code; make info says where nvcc was looked for)"
endif
