#!/bin/sh
# tests/install_test.sh: the public library as a user gets it (make check-install; make check runs it).
#
#   sh tests/install_test.sh 'MAKE COMMAND'     (the make command that builds and installs the library)
#
# make lib, then make install PREFIX=<a temporary folder>; then lib/example_main.c, copied into another
# temporary folder outside the tree, is built against the installed copy alone, through pkg-config
# (PKG_CONFIG_PATH=<prefix>/lib/pkgconfig): once with the shared library (its run must load the
# installed libflashattn.so) and once with the static one. What it asserts, for each of the two:
#   - no GPU here (nvidia-smi lists none): the program exits 3, example_main.c's status for the
#     library's ATTN_ENODEV, and prints the library's "no CUDA device" reason;
#   - a GPU here: the program exits 0, its O and LSE checked against a CPU loop in double.
# And that pkg-config reports the header's FLASHATTN_VERSION. Exit 0 when all hold, 1 otherwise (2:
# bad usage); without pkg-config it skips, saying so.
set -u
[ $# -eq 1 ] || { echo "usage: sh tests/install_test.sh 'MAKE COMMAND'" >&2; exit 2; }
make_cmd=$1
root=$(pwd)
command -v pkg-config >/dev/null 2>&1 ||
    { echo "check-install: skipped: needs pkg-config (apt-get install pkg-config)"; exit 0; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/flashattn-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check-install: FAIL: $*" >&2; exit 1; }

# $make_cmd is word-split on purpose: it is a command and its arguments
$make_cmd lib || fail "make lib"
$make_cmd install "PREFIX=$tmp/prefix" || fail "make install PREFIX=$tmp/prefix"

PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
export PKG_CONFIG_PATH
want=$(sed -n 's/^#define FLASHATTN_VERSION "\(.*\)"/\1/p' lib/flashattn.h)
got=$(pkg-config --modversion flashattn) || fail "pkg-config does not find flashattn.pc in $PKG_CONFIG_PATH"
[ "$got" = "$want" ] || fail "pkg-config --modversion flashattn is '$got', the header's FLASHATTN_VERSION '$want'"
cudainc=$(pkg-config --variable=cudaincludedir flashattn)
cudalib=$(pkg-config --variable=cudalibdir flashattn)

mkdir "$tmp/src" && cp "$root/lib/example_main.c" "$tmp/src/example.c" && cd "$tmp/src" || fail "copying the example"
cc=${CC:-cc}
# shellcheck disable=SC2046 # pkg-config's output is a list of flags
$cc -std=c11 -O2 example.c $(pkg-config --cflags --libs flashattn) -I"$cudainc" -L"$cudalib" \
    -lcudart_static -ldl -lrt -lpthread -lm -o example-shared || fail "building against the shared library"
# shellcheck disable=SC2046
$cc -std=c11 -O2 example.c $(pkg-config --cflags flashattn) -I"$cudainc" \
    $(pkg-config --variable=static_libs flashattn) -o example-static || fail "building against the static library"
LD_LIBRARY_PATH="$tmp/prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
ldd ./example-shared | grep -q "$tmp/prefix/lib/libflashattn.so" ||
    fail "example-shared does not load the installed libflashattn.so: $(ldd ./example-shared | grep flashattn)"

if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then gpu=1; else gpu=0; fi
for how in shared static; do
    out=$(./example-$how 2>&1)
    rc=$?
    printf '%s\n' "$out" | sed "s/^/check-install: example-$how: /"
    if [ $gpu = 1 ]; then
        [ $rc = 0 ] || fail "example-$how exited $rc on a machine with a GPU (want 0: computed and checked)"
    else
        [ $rc = 3 ] || fail "example-$how exited $rc without a GPU (want 3, the library's ATTN_ENODEV)"
        case $out in *"no CUDA device"*) ;; *) fail "example-$how did not print the library's 'no CUDA device'" ;; esac
    fi
done
if [ $gpu = 1 ]; then
    echo "check-install: PASS: installed, built outside the tree through pkg-config (shared and static), computed and checked on the GPU"
else
    echo "check-install: PASS: installed, built outside the tree through pkg-config (shared and static); no GPU here: both said 'no CUDA device' and exited 3, as documented"
fi
