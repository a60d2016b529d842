#!/bin/sh
# Makes sure Criterion (the test framework) can be compiled against. On Debian or Ubuntu it installs
# libcriterion-dev with apt-get when it may (root, or sudo without a password); otherwise it stops
# with the exact command to run.
set -u
# The probe program goes into a new private directory (mktemp -d: created exclusively, mode 0700): at
# /tmp/attn-crit-$$.c, a name known before the run, a link planted there was written through (as root,
# into any file).
have_criterion() {
    d=$(mktemp -d "${TMPDIR:-/tmp}/attn-crit.XXXXXX") ||
        { echo "error: cannot create a temporary directory in ${TMPDIR:-/tmp} for the Criterion probe" >&2; exit 1; }
    printf '#include <criterion/criterion.h>\nTest(a, b) { cr_assert(1); }\n' >"$d/probe.c"
    ${CC:-cc} "$d/probe.c" -o "$d/probe" -lcriterion >/dev/null 2>&1
    rc=$?
    rm -rf "$d"
    return $rc
}
have_criterion && exit 0
cmd="apt-get update && apt-get install -y libcriterion-dev"
if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "Criterion is missing: installing it ($cmd)"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libcriterion-dev) >/dev/null || {
            echo "error: installing libcriterion-dev failed; run: $cmd" >&2; exit 1; }
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        echo "Criterion is missing: installing it (sudo $cmd)"
        (sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libcriterion-dev) >/dev/null || {
            echo "error: installing libcriterion-dev failed; run: sudo $cmd" >&2; exit 1; }
    else
        echo "error: Criterion is missing. Install it with: sudo $cmd" >&2
        exit 1
    fi
    have_criterion && exit 0
    echo "error: Criterion was installed but a test program still does not build" >&2
    exit 1
fi
echo "error: Criterion is missing and this is not a Debian/Ubuntu system: install Criterion 2.4" \
    "from its release or your package manager so that '-lcriterion' links" >&2
exit 1
