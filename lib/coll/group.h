/*
 * group.h - groups and requests (group.c): what coll.c and comm.c ask of
 * them. The public calls (ringcc_group_start/end/end_async, ringcc_test,
 * ringcc_wait) are defined in group.c.
 */
#ifndef RCC_GROUP_H
#define RCC_GROUP_H

#include "exec.h"
#include "ringcc.h"

struct ringcc_comm;
struct call; /* coll.c's, opaque here */

/* 1 while this thread is between ringcc_group_start and its group_end. */
int rcc_group_recording(void);

/* Keeps a validated collective for the group's end: kept is the caller's
 * copy, which the group owns from now on (drop frees it; also on failure);
 * run executes it inside the communicator (entered for a call). */
ringcc_result_t rcc_group_add_call(struct ringcc_comm *comm, struct call *kept,
                                   ringcc_result_t (*run)(struct call *),
                                   void (*drop)(struct call *));
/* Keeps a validated send or receive on host memory (peer may be this rank). */
ringcc_result_t rcc_group_add_p2p(struct ringcc_comm *comm, const char *fn,
                                  const struct rcc_p2p_op *op);

/* Before a blocking call on comm from the user's thread: waits until comm's
 * requests in flight have completed, so the call runs after them. comm is
 * looked up, not read. */
void rcc_group_drain(struct ringcc_comm *comm);

/* Destroy (is_abort 0), before anything else: RINGCC_ERR_INVALID_USAGE
 * while requests are in flight on comm, else its progress thread ends.
 * Abort (1), once the communicator is closing: the requests in flight
 * complete with RINGCC_ERR_ABORTED and the thread ends. In a forked child
 * the parent's thread is not there: only the record is dropped. */
ringcc_result_t rcc_group_comm_close(struct ringcc_comm *comm, const char *fn,
                                     int is_abort);

#endif /* RCC_GROUP_H */
