/*
 * test_docs.c: tests/docs_refs.sh (part of make docs-check) on a small repository made here, so that
 * each thing it must catch is planted once: a line reference whose function moved, one that names
 * nothing, and a workshop patch that applies only with an offset. Each is also shown passing once put
 * right, so the check is neither blind nor always failing. Then tests/docs_figures.sh the same way: a
 * run figure typed without a citation, citations that do not hold, a generated block edited by hand.
 */
#include <unistd.h>

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

/* ---- tests/docs_figures.sh: run figures in prose cite their run, generated blocks match their CSV -- */

/* The repository's root: make check runs the tests there; these cd into a planted tree. */
static const char *repo(void) {
    static char cwd[512];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    return cwd;
}

static void put(const char *dir, const char *rel, const char *text) {
    char path[700], cmd[800];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname %s/%s)\"", dir, rel);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* A tree with one commit (its short hash into hash) and a run log whose entry names it: run 1 read
 * 1.057x and 612.5 TFLOP/s; the report's scripts and a CSV, so that generated blocks can be made. */
static void figures_tree(const char *dir, char *hash, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && git init -q . && mkdir -p bench/results && cp %s/bench/report.sh %s/bench/report.awk bench/ && "
             "printf 'gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms\\nG,d,c,09,overlap,1,2,4096,64,0,fp16,ok,2\\n"
             "G,d,c,torch_naive,torch_naive,1,2,4096,64,0,fp16,ok,20\\n' > bench/results/bench.csv && "
             "git add -A && git -c user.name=t -c user.email=t@t commit -qm one && git rev-parse --short=7 HEAD",
             dir, repo(), repo());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(hash, cap, "%.7s", out);
    snprintf(cmd, sizeof cmd, "# Runs\n\n## 2026-12-04: run 1 at %s\n\nStage 09 read 612.5 TFLOP/s, 1.057x cuDNN.\n\n"
             "## 2026-12-05: run 2\n\nNothing measured.\n", hash);
    put(dir, "history/runs.md", cmd);
}

static int docs_figures(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cd %s && git add -A && bash %s/tests/docs_figures.sh %s", dir, repo(), dir);
    return run_cmd(cmd, out, sizeof out);
}

/* The README of issue 58: a figure typed by hand with no citation fails (1.071x, and a ratio's range
 * after its name, 09 / 08 1.14-1.29), as do a citation of a figure its entry does not hold, of an entry
 * that does not exist or does not name the commit, of a commit git does not know, of the whole log, and
 * a "not a run" mark without a why. */
Test(docs_figures, uncited_and_miscited_run_figures_are_caught) {
    char dir[] = "/tmp/attn-docs-figures.XXXXXX", hash[16], text[4096];
    cr_assert_not_null(mkdtemp(dir));
    figures_tree(dir, hash, sizeof hash);
    snprintf(text, sizeof text,
             "# Top\n\nStage 09 leads cuDNN by 1.071x at N = 4096.\n\n"
             "It read 612.5 TFLOP/s and 1.071x ([run 1 at %s](history/runs.md#2026-12-04-run-1-at-%s)).\n\n"
             "It read 612.5 TFLOP/s ([run 9 at %s](history/runs.md#2026-12-09-run-9)).\n\n"
             "It read 612.5 TFLOP/s ([run 2 at %s](history/runs.md#2026-12-05-run-2)).\n\n"
             "It read 612.5 TFLOP/s ([run 1 at abcdef1](history/runs.md#2026-12-04-run-1-at-%s)).\n\n"
             "It read 612.5 TFLOP/s ([the log, %s](history/runs.md#runs)).\n\n"
             "A tile is 64 keys, 3.1%% of the padding. <!-- not a run: -->\n\n"
             "Stage 09 schedules it: 09 / 08 1.14-1.29 at D = 128.\n\nThe check read err/tol 0.25.\n",
             hash, hash, hash, hash, hash, hash);
    put(dir, "README.md", text);
    cr_assert_eq(docs_figures(dir), 1, "%s", out);
    cr_assert(strstr(out, "README.md:3: a run figure (1.071x) with no citation"), "%s", out);
    cr_assert(strstr(out, "README.md:5: 1.071 is in none of the entries it cites"), "%s", out);
    cr_assert_null(strstr(out, "README.md:5: 612.5"), "a figure that is there was not found: %s", out);
    cr_assert(strstr(out, "README.md:7: cites history/runs.md#2026-12-09-run-9, which is no heading of that run log"), "%s",
              out);
    cr_assert(strstr(out, "README.md:9: cites commit") && strstr(out, "history/runs.md#2026-12-05-run-2, whose entry does "
                                                                       "not name it"), "%s", out);
    cr_assert(strstr(out, "README.md:11: cites commit abcdef1, which git does not know"), "%s", out);
    cr_assert(strstr(out, "README.md:13: cites history/runs.md#runs, the whole run log"), "%s", out);
    cr_assert(strstr(out, "README.md:15: <!-- not a run --> says no why"), "%s", out);
    /* a ratio's value with two decimals, named by "A / B" before it (err/tol, no spaces, is no ratio's name) */
    cr_assert(strstr(out, "README.md:17: a run figure (1.14) with no citation"), "%s", out);
    cr_assert_null(strstr(out, "README.md:19:"), "err/tol taken for a ratio's name: %s", out);
    cr_assert(strstr(out, "; 9 problems"), "%s", out);
    snprintf(text, sizeof text, "rm -rf %s", dir);
    cr_assert_eq(run_cmd(text, out, sizeof out), 0, "%s", out);
}

/* Put right, the same tree passes: the figure cited from the entry that holds it, a table under a
 * cited caption, a model's figure marked as not a run, and figures in code left alone. */
Test(docs_figures, cited_figures_and_marked_models_pass) {
    char dir[] = "/tmp/attn-docs-figures.XXXXXX", hash[16], text[4096];
    cr_assert_not_null(mkdtemp(dir));
    figures_tree(dir, hash, sizeof hash);
    snprintf(text, sizeof text,
             "# Top\n\nIt read 612.5 TFLOP/s and 1.057x ([run 1 at %s](history/runs.md#2026-12-04-run-1-at-%s)).\n\n"
             "Run 1 ([%s](history/runs.md#2026-12-04-run-1-at-%s)):\n\n| stage | TFLOP/s |\n|---|--:|\n| 09 | 612.5 |\n\n"
             "A tile is 64 keys, 3.125%% of N. <!-- not a run: the tiling's arithmetic -->\n\n"
             "```\ntime 548.2344 ms\n```\n",
             hash, hash, hash, hash);
    put(dir, "README.md", text);
    cr_assert_eq(docs_figures(dir), 0, "%s", out);
    cr_assert(strstr(out, "docs-figures: 0 generated blocks, 3 blocks quoting runs (2 cited, 3 figures found in their "
                          "entries, 1 marked not a run); 0 problems"),
              "%s", out);
    snprintf(text, sizeof text, "rm -rf %s", dir);
    cr_assert_eq(run_cmd(text, out, sizeof out), 0, "%s", out);
}

/* A generated block is what bench/report.sh makes of its CSV: as made it passes; a figure in it
 * edited by hand (1.00x for 10.0x) fails, naming the line. */
Test(docs_figures, a_generated_block_edited_by_hand_is_caught) {
    char dir[] = "/tmp/attn-docs-figures.XXXXXX", hash[16], cmd[1024];
    cr_assert_not_null(mkdtemp(dir));
    figures_tree(dir, hash, sizeof hash);
    put(dir, "README.md", "# Top\n\n<!-- bench:begin -->\n<!-- bench:end -->\n");
    snprintf(cmd, sizeof cmd, "cd %s && sh bench/report.sh readme bench/results/bench.csv", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_eq(docs_figures(dir), 0, "%s", out);
    cr_assert(strstr(out, "docs-figures: 1 generated blocks,"), "%s", out);
    snprintf(cmd, sizeof cmd, "cd %s && grep -n '(10.0x)' README.md && sed -i 's/(10.0x)/(1.00x)/' README.md", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "the block has no 10.0x: %s", out);
    cr_assert_eq(docs_figures(dir), 1, "%s", out);
    cr_assert(strstr(out, "README.md:") && strstr(out, "a generated block differs from what its script makes of its CSV"),
              "%s", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
}
