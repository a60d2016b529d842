/*
 * hold_signals.h: hold the signals while files are half-written. The front ends write their results
 * to temporary files and rename them into place (build/attn --save: up to five files, renamed in
 * turn; attn-bench: its CSV). A Ctrl-C, SIGTERM or SIGHUP between the first create and the last rename
 * would leave the temporary files behind, or a new o.npy beside the old lse.npy. Held, such a signal is
 * noted and takes its usual effect at attn_signals_release (the process ends, its files whole).
 *
 * Blocking the signal in the writing thread is not enough: the front ends run OpenMP, and a signal
 * sent to the process goes to any thread that does not block it (a worker ended the process mid-write
 * before this was a handler). So the signals below get a handler, for every thread, that only notes
 * the signal; the caller's thread also blocks them, so that its writes are never interrupted. A handler
 * still running on a worker when the hold ends acts on the signal itself (hold_signals.c), so none is
 * lost. SIGXFSZ (past a file size limit, sent to the writing thread) is ignored during the hold
 * instead: the write then fails with EFBIG, which the writers report, and the temporary files go.
 * The cost: a Ctrl-C during the write waits for it (about a second per GB on a local disk); a wait for
 * another process (the --save directory's lock) asks attn_signals_noted and stops at once. SIGKILL
 * and SIGSTOP cannot be held. One hold at a time (no nesting).
 */
#ifndef ATTN_HOLD_SIGNALS_H
#define ATTN_HOLD_SIGNALS_H

#include <signal.h>

typedef struct {
    sigset_t mask; /* the caller's thread's mask before */
} attn_held_signals;

void attn_signals_hold(attn_held_signals *h);
/* The actions and mask put back; a signal noted meanwhile raised again (the first one noted). */
void attn_signals_release(attn_held_signals *h);
/* During a hold: the first signal noted so far, or 0. A wait inside the hold (npy_out_commit_wait's for
 * the directory's lock) asks it, so that a Ctrl-C ends the wait rather than waiting with it. */
int attn_signals_noted(void);

#endif
