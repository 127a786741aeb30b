/*
 * live.h - which communicators are alive, and which calls are inside them
 * (live.c): every public call on a ringcc_comm_t enters through
 * rcc_comm_enter and leaves through rcc_comm_leave; destroy and abort close
 * with rcc_live_begin_close / rcc_live_end_close.
 */
#ifndef RCC_LIVE_H
#define RCC_LIVE_H

#include <stdint.h>

#include "ringcc.h"

struct ringcc_comm;

/* What a call does inside: a query (rank, size, report: any number at once,
 * from any thread) or a call that moves data (a collective, split: one at a
 * time; destroy refuses while one runs). */
enum { RCC_ENTER_QUERY = 0, RCC_ENTER_CALL = 1 };

/* The end of a successful init: comm joins the table of live communicators
 * (its magic word, its process and fork generation set). 0, or -1 when out
 * of memory. */
int rcc_live_add(struct ringcc_comm *comm);

/* fn's way in: RINGCC_ERR_INVALID_ARGUMENT (a thread error) when comm is
 * NULL or not a live communicator (destroyed already, never made, or its
 * memory overwritten: the magic word), without reading the memory of one
 * that is not; RINGCC_ERR_INVALID_USAGE when comm was inherited across
 * fork(), is being destroyed, or (kind CALL) another thread's call runs in
 * it. Success counts the call in: rcc_comm_leave must follow. */
ringcc_result_t rcc_comm_enter(struct ringcc_comm *comm, const char *fn,
                               int kind);
void rcc_comm_leave(struct ringcc_comm *comm, int kind);

/* Destroy (is_abort 0) and abort (1), first half: */
enum {
  RCC_CLOSE_OPEN,   /* closing: no call may enter; rcc_live_end_close next */
  RCC_CLOSE_FORKED, /* comm was inherited across fork(): it is out of this
                       process's table; free its memory only */
  RCC_CLOSE_REFUSED /* not live (INVALID_ARGUMENT), or destroy while a
                       collective runs / another thread closes it
                       (INVALID_USAGE): *code and the message say which */
};
int rcc_live_begin_close(struct ringcc_comm *comm, const char *fn,
                         int is_abort, ringcc_result_t *code);
/* Second half: waits up to wait_ms for the calls inside to leave, then takes
 * comm out of the table. 1 when none is inside (free it), 0 when one still
 * is (its memory must be kept: leaked). */
int rcc_live_end_close(struct ringcc_comm *comm, int wait_ms);

/* ringcc_comm_revoke: waits up to wait_ms for the call that moves data on
 * comm (another thread's, kind CALL) to leave. 1 when none is inside; 0
 * past wait_ms, with *inside the name of the call still there. */
int rcc_live_wait_idle(struct ringcc_comm *comm, int64_t wait_ms,
                       const char **inside);

#endif /* RCC_LIVE_H */
