/*
 * stop_spy.h - a process that stops itself at a precise point of a
 * handshake.
 *
 * test/stop_spy.c defines send() for every test binary (they link
 * libringcc.a statically, so the library's calls come here): it makes the
 * system call, unless armed. Armed with h_stop_before_send(), the first
 * send() of this process whose buffer is exactly len bytes and holds at
 * offset off the bytes of pattern stops the process (SIGSTOP) before those
 * bytes leave; someone else sends SIGCONT. So a test stops a real rank
 * between a challenge and its answer, where a signal sent from outside
 * would land only by chance. A file of its own (as prctl_spy.c), so that
 * the library does not call into a test program.
 */
#ifndef RCC_STOP_SPY_H
#define RCC_STOP_SPY_H

#include <stddef.h>

void h_stop_before_send(size_t len, size_t off, const char *pattern);
/* 1 once the armed send stopped this process (and it was continued). */
int h_stopped_before_send(void);

#endif /* RCC_STOP_SPY_H */
