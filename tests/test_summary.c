/*
 * test_summary.c: the closing lines of `make check`. Criterion's own synthesis line does not count
 * skipped tests, so this prints, just before it, how many passed, failed and were skipped, and why
 * they were skipped (grouped by reason, e.g. "stage 02 needs a GPU: ...").
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>
#include <string.h>

#define MAX_REASONS 32
/* Criterion counts tests left out by --filter as skipped; they are subtracted and not listed. */
static char reasons[MAX_REASONS][256];
static size_t reason_count[MAX_REASONS];
static int num_reasons;
static size_t other_skips;

static size_t not_selected;

ReportHook(POST_TEST)(struct criterion_test_stats *st) {
    if (st->test_status != CR_STATUS_SKIPPED) return;
    const char *msg = st->message && *st->message ? st->message : "(no reason given)";
    /* A test left out by --filter (make check runs the `serial` suite in a phase of its own) is
     * reported by Criterion as disabled: it was not skipped, it runs in the other phase. */
    if (!strcmp(msg, "Test is disabled")) {
        not_selected++;
        return;
    }
    for (int i = 0; i < num_reasons; i++)
        if (strncmp(reasons[i], msg, sizeof reasons[i] - 1) == 0) {
            reason_count[i]++;
            return;
        }
    if (num_reasons == MAX_REASONS) {
        other_skips++;
        return;
    }
    snprintf(reasons[num_reasons], sizeof reasons[num_reasons], "%s", msg);
    reason_count[num_reasons++] = 1;
}

ReportHook(POST_ALL)(struct criterion_global_stats *st) {
    for (int i = 0; i < num_reasons; i++)
        fprintf(stderr, "[SKIP] %zu test(s): %s\n", reason_count[i], reasons[i]);
    if (other_skips) fprintf(stderr, "[SKIP] %zu test(s) for other reasons\n", other_skips);
    fprintf(stderr, "tests: %zu passed, %zu failed, %zu skipped\n", st->tests_passed,
            st->tests_failed + st->tests_crashed, st->tests_skipped - not_selected);
}
