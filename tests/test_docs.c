/*
 * test_docs.c: tests/docs_refs.sh (part of make docs-check) on a small repository made here, so that
 * each thing it must catch is planted once: a line reference whose function moved, one that names
 * nothing, and a workshop patch that applies only with an offset. Each is also shown passing once put
 * right, so the check is neither blind nor always failing.
 */
#include "test_util.h"

static char out[16384];

/* A git work tree in dir: src/a.c (foo at line 5), README.md with `readme` as its text, and
 * workshop/x.patch changing foo's body with its hunk at line `hunk` (6 is where it is). */
static void make_tree(const char *dir, const char *readme, int hunk) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && mkdir -p src workshop && printf '/* a.c */\\n#include <stdio.h>\\n\\n/* foo: one */\\n"
             "int foo(void) {\\n    return 1;\\n}\\n' > src/a.c && printf '%%s\\n' '%s' > README.md && "
             "printf 'Exercise: x\\n\\n--- a/src/a.c\\n+++ b/src/a.c\\n@@ -%d,2 +%d,2 @@\\n-    return 1;\\n+    return 2;\\n"
             " }\\n' > workshop/x.patch && git init -q . && git add -A",
             dir, readme, hunk, hunk);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
}

static int docs_refs(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "bash tests/docs_refs.sh %s", dir);
    return run_cmd(cmd, out, sizeof out);
}

static void remove_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
}

Test(docs_refs, a_moved_function_an_unnamed_line_and_an_offset_patch_are_caught) {
    char dir[] = "/tmp/attn-docs-refs.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    make_tree(dir, "foo is at `src/a.c:2-3` (`foo`); see also `src/a.c:5`.", 4);
    cr_assert_eq(docs_refs(dir), 1, "%s", out);
    cr_assert(strstr(out, "README.md:1: `src/a.c:2-3` (`foo`): foo is not in lines 2-3 of src/a.c (it is at line 4 now)"),
              "%s", out);
    cr_assert(strstr(out, "README.md:1: `src/a.c:5` names nothing to check"), "%s", out);
    cr_assert(strstr(out, "workshop/x.patch:1: applies only at 6 (offset 2 lines)"), "%s", out);
    cr_assert(strstr(out, "docs-refs: 2 line references, 1 patches checked; 3 problems"), "%s", out);
    remove_tree(dir);
}

Test(docs_refs, references_and_patches_that_point_where_they_say_pass) {
    char dir[] = "/tmp/attn-docs-refs.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    make_tree(dir, "foo is at `src/a.c:4-7` (`foo`), and `a.c:5` (`foo`) by its bare name.", 6);
    cr_assert_eq(docs_refs(dir), 0, "%s", out);
    cr_assert(strstr(out, "docs-refs: 2 line references, 1 patches checked; 0 problems"), "%s", out);
    remove_tree(dir);
}
