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
static char reasons[MAX_REASONS][256];
static size_t reason_count[MAX_REASONS];
static int num_reasons;
static size_t other_skips;

ReportHook(POST_TEST)(struct criterion_test_stats *st) {
    if (st->test_status != CR_STATUS_SKIPPED) return;
    const char *msg = st->message && *st->message ? st->message : "(no reason given)";
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
    /* Tests left out by --filter (make check runs the `serial` suite in a phase of its own) never
     * reach POST_TEST, yet Criterion counts them as skipped: they were not skipped, they run in the
     * other phase. Only the skips reported with a reason count. */
    size_t skipped = other_skips;
    for (int i = 0; i < num_reasons; i++) skipped += reason_count[i];
    for (int i = 0; i < num_reasons; i++)
        fprintf(stderr, "[SKIP] %zu test(s): %s\n", reason_count[i], reasons[i]);
    if (other_skips) fprintf(stderr, "[SKIP] %zu test(s) for other reasons\n", other_skips);
    fprintf(stderr, "tests: %zu passed, %zu failed, %zu skipped\n", st->tests_passed,
            st->tests_failed + st->tests_crashed, skipped);
}
