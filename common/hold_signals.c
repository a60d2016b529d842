/*
 * hold_signals.c: the signal hold of hold_signals.h (why it is a handler and a mask: there).
 */
#include "hold_signals.h"

#include <string.h>

static const int held[ATTN_NUM_HELD_SIGNALS] = ATTN_HELD_SIGNALS;
static volatile sig_atomic_t noted; /* the first signal that arrived during the hold, or 0 */

static void note_signal(int sig) {
    if (!noted) noted = sig;
}

void attn_signals_hold(attn_held_signals *h) {
    sigset_t block;
    sigemptyset(&block);
    for (int i = 0; i < ATTN_NUM_HELD_SIGNALS; i++) sigaddset(&block, held[i]);
    noted = 0;
    pthread_sigmask(SIG_BLOCK, &block, &h->mask);
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_handler = note_signal;
    a.sa_flags = SA_RESTART; /* a worker's system call goes on rather than failing with EINTR */
    sigfillset(&a.sa_mask);
    for (int i = 0; i < ATTN_NUM_HELD_SIGNALS; i++) {
        struct sigaction *old = &h->action[i];
        sigaction(held[i], NULL, old);
        /* a signal the process ignores (nohup's SIGHUP, a background job's SIGINT) stays ignored */
        if (old->sa_handler != SIG_IGN) sigaction(held[i], &a, NULL);
    }
}

void attn_signals_release(attn_held_signals *h) {
    for (int i = 0; i < ATTN_NUM_HELD_SIGNALS; i++) sigaction(held[i], &h->action[i], NULL);
    /* still blocked here: raised now, it waits for the mask below and then takes its own action */
    if (noted) raise(noted);
    pthread_sigmask(SIG_SETMASK, &h->mask, NULL);
}
