/*
 * test_errors.c: failures reported as they happen. A last-error message survives being quoted in
 * the next one; every shell script of the repository parses, and the Criterion installer prints its
 * advice where it cannot install.
 */
#include "test_util.h"

static char out[65536];

/* The repository's root, from this file's path (make compiles tests/test_errors.c from the root). */
static const char *repo_root(void) {
    static char dir[1024];
    const char *file = __FILE__, *slash = strrchr(file, '/');
    if (!slash || slash == file) return ".";
    snprintf(dir, sizeof dir, "%.*s/..", (int)(slash - file) % 1000, file);
    return dir;
}

Test(errors, message_may_quote_the_last_error) {
    attn_fail(ATTN_EIO, "inner reason %d", 7);
    attn_fail(ATTN_EIO, "q.npy: %s", attn_last_error());
    cr_assert_str_eq(attn_last_error(), "q.npy: inner reason 7");
    /* twice more, the way the loader and the front end wrap a reason */
    attn_fail(ATTN_EIO, "%s: %s", "/d/q.npy", attn_last_error());
    cr_assert_str_eq(attn_last_error(), "/d/q.npy: q.npy: inner reason 7");
}

/* ---- the shell scripts -------------------------------------------------------------------- */

Test(errors, every_shell_script_parses) {
    char cmd[4096];
    /* sh -n for #!/bin/sh scripts (dash here: stricter than bash), bash -n for bash ones */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && n=0; for f in $(find . -name '*.sh' -not -path './build/*'); do n=$((n+1)); "
             "case \"$(head -n 1 \"$f\")\" in *bash*) sh=bash;; *) sh=sh;; esac; "
             "$sh -n \"$f\" || echo \"SYNTAX ERROR: $f\"; done; echo \"scripts: $n\"",
             repo_root());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_null(strstr(out, "SYNTAX ERROR"), "%s", out);
    int n = 0;
    const char *k = strstr(out, "scripts: ");
    cr_assert(k && sscanf(k, "scripts: %d", &n) == 1 && n >= 3, "no scripts found: %s", out);
    snprintf(cmd, sizeof cmd, "sh -n '%s/tests/ensure-criterion.sh'", repo_root());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "tests/ensure-criterion.sh: %s", out);
}

/* Without Criterion and without apt-get (a PATH holding only rm and id, a compiler that fails), the
 * installer must say what to install and exit 1, not stop on a syntax error. */
Test(errors, ensure_criterion_says_what_to_install) {
    char bin[64], cmd[4096];
    snprintf(bin, sizeof bin, "/tmp/attn-nocrit-XXXXXX");
    cr_assert_not_null(mkdtemp(bin));
    snprintf(cmd, sizeof cmd,
             "for t in rm id; do ln -s \"$(command -v $t)\" %s/$t || exit 9; done; "
             "env PATH=%s CC=/bin/false /bin/sh '%s/tests/ensure-criterion.sh'",
             bin, bin, repo_root());
    int rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 1, "exit status %d: %s", rc, out);
    cr_assert_not_null(strstr(out, "Criterion is missing and this is not a Debian/Ubuntu system"), "%s", out);
    cr_assert_not_null(strstr(out, "'-lcriterion' links"), "%s", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", bin);
    run_cmd(cmd, out, sizeof out);
}

