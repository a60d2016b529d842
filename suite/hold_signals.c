/*
 * hold_signals.c: the signal hold of hold_signals.h (why it is a handler and a mask: there).
 */
#include "hold_signals.h"

#include <stdatomic.h>
#include <string.h>

/* the terminal's, the system's and the shell's ways of ending a process; SIGXFSZ last, ignored */
static const int held[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGALRM, SIGUSR1, SIGUSR2, SIGXFSZ};
#define NUM_HELD (int)(sizeof held / sizeof held[0])
static struct sigaction before[NUM_HELD]; /* the actions before the hold, for the handler too */
static atomic_int holding, noted;         /* lock-free ints: safe in a handler */

/* Notes the signal. If the hold ended while it ran (release read `noted` before this wrote it), it
 * acts as the process would have without the hold: the action before, then the signal again. Release
 * clears `holding` before reading `noted` and this writes `noted` before reading `holding` (both
 * sequentially consistent), so at least one of the two sees the signal. */
static void note_signal(int sig) {
    int none = 0;
    atomic_compare_exchange_strong(&noted, &none, sig);
    if (atomic_load(&holding)) return;
    for (int i = 0; i < NUM_HELD; i++)
        if (held[i] == sig) sigaction(sig, &before[i], NULL);
    raise(sig); /* blocked in this handler; taken when it returns */
}

void attn_signals_hold(attn_held_signals *h) {
    sigset_t block;
    sigemptyset(&block);
    /* SIGXFSZ is not blocked: blocked, an ignored signal stays pending on Linux and ends the process
     * at the release; unblocked and ignored, it is dropped */
    for (int i = 0; i < NUM_HELD; i++)
        if (held[i] != SIGXFSZ) sigaddset(&block, held[i]);
    atomic_store(&noted, 0);
    atomic_store(&holding, 1);
    pthread_sigmask(SIG_BLOCK, &block, &h->mask);
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_flags = SA_RESTART; /* a worker's system call goes on rather than failing with EINTR */
    sigfillset(&a.sa_mask);
    for (int i = 0; i < NUM_HELD; i++) {
        sigaction(held[i], NULL, &before[i]);
        /* a signal the process ignores (nohup's SIGHUP, a background job's SIGINT) stays ignored */
        if (before[i].sa_handler == SIG_IGN) continue;
        a.sa_handler = held[i] == SIGXFSZ ? SIG_IGN : note_signal;
        sigaction(held[i], &a, NULL);
    }
}

void attn_signals_release(attn_held_signals *h) {
    atomic_store(&holding, 0);
    const int sig = atomic_load(&noted);
    for (int i = 0; i < NUM_HELD; i++) sigaction(held[i], &before[i], NULL);
    /* still blocked here: raised now, it waits for the mask below and then takes its own action */
    if (sig) raise(sig);
    pthread_sigmask(SIG_SETMASK, &h->mask, NULL);
}

int attn_signals_noted(void) { return atomic_load(&noted); }
