/*
 * error.h - how a failure is reported: one sentence (what failed, on which
 * rank, with which peer, and why) and a ringcc_result_t.
 *
 *   rcc_errf                 code that has no communicator fills err[errlen]
 *                            and its caller adds the context
 *   rcc_comm_error           the communicator's last error (and the log)
 *   rcc_thread_error         calls without a usable communicator: a
 *                            thread-local message, ringcc_comm_last_error(NULL)
 *   rcc_comm_set_async_error the first failure a background thread (a
 *                            network proxy) sees; every wait checks it
 *   rcc_comm_set_fatal       the communicator's sticky failure (any thread)
 *   rcc_comm_tell_kernels    device kernels waiting in its FIFOs leave
 *
 * last_error is written under comm->error_lock, so that a thread asking for
 * the async error (ringcc_comm_get_async_error) and a thread whose call
 * fails never write it at once.
 */
#ifndef RCC_ERROR_H
#define RCC_ERROR_H

#include <stddef.h>

#include "ringcc.h"

#define RCC_ERRLEN 512

struct ringcc_comm;

ringcc_result_t rcc_errf(char *err, size_t errlen, ringcc_result_t code,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Records a failure on comm (last_error, log: INFO for a bad argument, WARN
 * otherwise) and returns code. */
ringcc_result_t rcc_comm_error(struct ringcc_comm *comm, ringcc_result_t code,
                               const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ringcc_result_t rcc_thread_error(ringcc_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* This thread's last such message (ringcc_comm_last_error(NULL), live.c). */
const char *rcc_thread_last_error(void);
/* Records the first asynchronous failure (from any thread); later ones are
 * dropped. Kernels that may be waiting learn of it (rcc_comm_tell_kernels). */
void rcc_comm_set_async_error(struct ringcc_comm *comm, ringcc_result_t code,
                              const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The communicator is unusable from now on, with code unless it already was
 * (the first wins); returns the code it has. Any thread. */
ringcc_result_t rcc_comm_set_fatal(struct ringcc_comm *comm,
                                   ringcc_result_t code);
/* The call that ran inside comm failed with r: makes comm unusable unless
 * r is RINGCC_SUCCESS, RINGCC_ERR_OUT_OF_MEMORY (nothing moved) or a
 * failure its executor marked local (comm->failed_locally: every FIFO in a
 * known state, docs/reliability.md "Which failures leave the communicator
 * usable"); returns r. The calling thread is inside comm. */
ringcc_result_t rcc_comm_end_call(struct ringcc_comm *comm, ringcc_result_t r);
/* Its sticky failure, RINGCC_SUCCESS while none. Any thread. */
ringcc_result_t rcc_comm_fatal(const struct ringcc_comm *comm);
/* Makes last_error msg, as one writer (any thread); no log line. */
void rcc_comm_set_last_error(struct ringcc_comm *comm, const char *msg);
/* Device kernels that wait in this communicator's FIFOs leave with code
 * (the first code told wins) through the word comm->fail_word points to,
 * where a CUDA side registered one; nothing otherwise. Any thread. */
void rcc_comm_tell_kernels(struct ringcc_comm *comm, ringcc_result_t code);

#endif /* RCC_ERROR_H */
