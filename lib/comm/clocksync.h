/*
 * clocksync.h - the init step of RINGCC_TRACE (clocksync.c): every rank's
 * clock against rank 0's, then the trace buffer.
 */
#ifndef RCC_CLOCKSYNC_H
#define RCC_CLOCKSYNC_H

#include <stdint.h>

#include "ringcc.h"

struct ringcc_comm;

/* Where any rank traces (its peer info has a trace id), every rank takes
 * part: ranks on another host than rank 0 measure their clock's offset
 * against rank 0's by ping-pong over the FIFOs, and ranks that trace open
 * their trace (rcc_trace_open). Nothing happens where no rank traces.
 * Collective: every rank gets the same result. */
ringcc_result_t rcc_trace_setup(struct ringcc_comm *comm, int64_t deadline);

#endif /* RCC_CLOCKSYNC_H */
