/* test_util.h: small helpers the test files share. */
#ifndef ATTN_TEST_UTIL_H
#define ATTN_TEST_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

/* Where build/attn is: `make check` passes ATTN_BIN (build/asan/attn under the sanitizers). */
static inline const char *attn_bin(void) {
    const char *b = getenv("ATTN_BIN");
    return b && *b ? b : "build/attn";
}

/* ATTN_TEST_STAGES="02,03,04,05" narrows the tests that run stage after stage from the registry
 * (stages::match_reference and the serial whole-device tests) to those ids; unset or empty, every stage.
 * `make check-ptx` sets it: its build differs from the ordinary one in stages 02-05 alone, and the whole
 * suite there would run the other stages a second time (past one 10-minute device call). */
static inline int test_wants_stage(const char *id) {
    const char *list = getenv("ATTN_TEST_STAGES");
    if (!list || !*list) return 1;
    const size_t n = strlen(id);
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ","); /* one id of the list */
        if (len == n && !strncmp(p, id, n)) return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

/* The serial suite's whole-device tests (more heads than a grid's y, tensors past 2^31 elements, a
 * thousand runs without a leak) run the shipped stages and their deterministic modes, not the road
 * steps (idea "road: ..."): a step shares its stage's launch, 64-bit offsets and host code, and with
 * the 17 steps of 06, 08 and 09 (32 GPU stages in all, 15 without them) the serial suite ran past 8.5
 * minutes on an H100, longer than one call on the GPU machine. The parallel suite checks every step
 * at ordinary shapes; ATTN_TEST_STAGES naming a step runs it here too. */
static inline int test_wants_stage_serial(const attn_stage *s) {
    const char *list = getenv("ATTN_TEST_STAGES");
    if (list && *list) return test_wants_stage(s->id);
    return strncmp(s->idea, "road:", 5) != 0;
}

/* Skips the current test, with the reason, when stage s cannot run here. Returns only if it can. */
#define SKIP_UNLESS_RUNNABLE(s)                                                                     \
    do {                                                                                            \
        if (attn_stage_available(s) != ATTN_OK) cr_skip_test("%s", attn_last_error());             \
    } while (0)

/* Runs a shell command, captures stdout+stderr (up to cap bytes) and returns the exit status
 * (or -1 if it did not exit normally). */
static inline int run_cmd(const char *cmd, char *out, size_t cap) {
    char full[8192];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *f = popen(full, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* s as one shell word, into buf (cap bytes): in single quotes, each quote in it as '\'' . A command
 * built with a path unquoted broke where the checkout's path held a space (issue 58). */
static inline const char *sh_word(const char *s, char *buf, size_t cap) {
    size_t k = 0;
    if (cap < 3) return "''";
    buf[k++] = '\'';
    for (; *s && k + 6 < cap; s++) {
        if (*s == '\'') memcpy(buf + k, "'\\''", 4), k += 4;
        else buf[k++] = *s;
    }
    buf[k++] = '\'';
    buf[k] = '\0';
    return buf;
}

/* `bin args`, run as run_cmd runs it (bin one word, whatever it holds). */
static inline int run_bin(const char *bin, const char *args, char *out, size_t cap) {
    char cmd[4096], word[2048];
    snprintf(cmd, sizeof cmd, "%s %s", sh_word(bin, word, sizeof word), args);
    return run_cmd(cmd, out, cap);
}

/* A program (run by runner(args), its output in out) must refuse args: exit status 2 and a message
 * holding needle. */
#define EXPECT_REFUSED(runner, out, args, needle)                                                   \
    do {                                                                                            \
        int rc_ = runner(args);                                                                     \
        cr_assert_eq(rc_, 2, "'%s' exited %d, want 2; output: %s", args, rc_, out);                 \
        cr_assert(strstr(out, needle), "'%s': message lacks '%s': %s", args, needle, out);          \
    } while (0)

#endif
