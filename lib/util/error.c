/*
 * error.c - failures reported as one sentence and a code (error.h), and the
 * public names of the codes.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "comm.h"
#include "error.h"
#include "log.h"

static _Thread_local char thread_error[RCC_ERRLEN];

static const char *const result_names[RINGCC_NUM_RESULTS] = {
    [RINGCC_SUCCESS] = "RINGCC_SUCCESS: no error",
    [RINGCC_ERR_INVALID_ARGUMENT] = "RINGCC_ERR_INVALID_ARGUMENT: invalid argument",
    [RINGCC_ERR_INVALID_USAGE] = "RINGCC_ERR_INVALID_USAGE: invalid usage",
    [RINGCC_ERR_SYSTEM] = "RINGCC_ERR_SYSTEM: system call failed",
    [RINGCC_ERR_CUDA] = "RINGCC_ERR_CUDA: CUDA call failed",
    [RINGCC_ERR_NETWORK] = "RINGCC_ERR_NETWORK: network error",
    [RINGCC_ERR_TIMEOUT] = "RINGCC_ERR_TIMEOUT: timed out",
    [RINGCC_ERR_PEER_FAILED] = "RINGCC_ERR_PEER_FAILED: a peer rank failed",
    [RINGCC_ERR_ABORTED] = "RINGCC_ERR_ABORTED: communicator aborted",
    [RINGCC_ERR_UNSUPPORTED] = "RINGCC_ERR_UNSUPPORTED: not supported",
    [RINGCC_ERR_OUT_OF_MEMORY] = "RINGCC_ERR_OUT_OF_MEMORY: out of memory",
    [RINGCC_ERR_INTERNAL] = "RINGCC_ERR_INTERNAL: internal error (a bug in libringcc)",
};

RINGCC_API const char *ringcc_strerror(ringcc_result_t r) {
  if ((int)r < 0 || r >= RINGCC_NUM_RESULTS)
    return "unknown ringcc_result_t value";
  return result_names[r];
}

ringcc_result_t rcc_errf(char *err, size_t errlen, ringcc_result_t code,
                         const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

ringcc_result_t rcc_comm_error(struct ringcc_comm *comm, ringcc_result_t code,
                               const char *fmt, ...) {
  char msg[RCC_ERRLEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  rcc_comm_set_last_error(comm, msg);
  if (code == RINGCC_ERR_INVALID_ARGUMENT)
    RCC_INFO(comm->rank, "%s", msg);
  else
    RCC_WARN(comm->rank, "%s", msg);
  return code;
}

void rcc_comm_set_last_error(struct ringcc_comm *comm, const char *msg) {
  pthread_mutex_lock(&comm->error_lock);
  snprintf(comm->last_error, sizeof(comm->last_error), "%s", msg);
  pthread_mutex_unlock(&comm->error_lock);
}

ringcc_result_t rcc_comm_set_fatal(struct ringcc_comm *comm,
                                   ringcc_result_t code) {
  int expected = RINGCC_SUCCESS;
  if (code == RINGCC_SUCCESS ||
      __atomic_compare_exchange_n((int *)&comm->fatal, &expected, (int)code, 0,
                                  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return code;
  return (ringcc_result_t)expected;
}

ringcc_result_t rcc_comm_end_call(struct ringcc_comm *comm,
                                  ringcc_result_t r) {
  int local = comm->failed_locally;
  comm->failed_locally = 0;
  if (r != RINGCC_SUCCESS && r != RINGCC_ERR_OUT_OF_MEMORY && !local)
    rcc_comm_set_fatal(comm, r);
  return r;
}

ringcc_result_t rcc_comm_fatal(const struct ringcc_comm *comm) {
  return (ringcc_result_t)__atomic_load_n((const int *)&comm->fatal,
                                          __ATOMIC_ACQUIRE);
}

void rcc_comm_tell_kernels(struct ringcc_comm *comm, ringcc_result_t code) {
  uint32_t *word = __atomic_load_n(&comm->fail_word, __ATOMIC_ACQUIRE);
  uint32_t none = 0;
  if (word != NULL && code != RINGCC_SUCCESS)
    __atomic_compare_exchange_n(word, &none, (uint32_t)code, 0,
                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

ringcc_result_t rcc_thread_error(ringcc_result_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(thread_error, sizeof(thread_error), fmt, ap);
  va_end(ap);
  if (code == RINGCC_ERR_INVALID_ARGUMENT)
    RCC_INFO(-1, "%s", thread_error);
  else
    RCC_WARN(-1, "%s", thread_error);
  return code;
}

const char *rcc_thread_last_error(void) { return thread_error; }

void rcc_comm_set_async_error(struct ringcc_comm *comm, ringcc_result_t code,
                              const char *fmt, ...) {
  int expected = 0;
  /* Claim with a placeholder, write the message, then publish the code. */
  if (!__atomic_compare_exchange_n(&comm->async_error, &expected, -1, 0,
                                   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(comm->async_message, sizeof(comm->async_message), fmt, ap);
  va_end(ap);
  RCC_WARN(comm->rank, "%s", comm->async_message);
  __atomic_store_n(&comm->async_error, (int)code, __ATOMIC_RELEASE);
  rcc_comm_tell_kernels(comm, code);
}
