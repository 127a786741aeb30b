/*
 * agree.c - init steps every rank takes together (agree.h): an all-gather
 * through the bootstrap, so that a rank that fails makes every rank fail
 * with a message naming it, instead of leaving the others waiting.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "bootstrap.h"
#include "comm.h"
#include "error.h"

/* Bytes of each rank's reason in the second all-gather: one sentence. */
#define REASON_BYTES RCC_ERRLEN

/* After a failed phase (every rank saw the same records, so every rank
 * takes this step): the failed ranks' own sentences, all-gathered, so that
 * every rank names the first failed rank and why, not "see its log". */
static ringcc_result_t tell_reason(struct ringcc_comm *comm,
                                   ringcc_result_t mine, int first,
                                   ringcc_result_t code, const char *phase,
                                   int64_t deadline) {
  char err[RCC_ERRLEN];
  char *reasons = calloc((size_t)comm->nranks, REASON_BYTES);
  if (reasons == NULL)
    return rcc_comm_error(comm, code, "init on rank %d: rank %d failed during "
                          "%s (%s)", comm->rank, first, phase,
                          ringcc_strerror(code));
  if (mine != RINGCC_SUCCESS) {
    pthread_mutex_lock(&comm->error_lock);
    memcpy(reasons + (size_t)comm->rank * REASON_BYTES, comm->last_error,
           REASON_BYTES);
    pthread_mutex_unlock(&comm->error_lock);
  }
  ringcc_result_t r = rcc_bootstrap_allgather(comm->boot, reasons,
                                              REASON_BYTES, deadline, err,
                                              sizeof(err));
  if (mine != RINGCC_SUCCESS) {
    free(reasons);
    return mine; /* our own message is already recorded */
  }
  char *why = reasons + (size_t)first * REASON_BYTES;
  why[REASON_BYTES - 1] = '\0';
  if (r != RINGCC_SUCCESS || why[0] == '\0')
    r = rcc_comm_error(comm, code, "init on rank %d: rank %d failed during %s "
                       "(%s); its log has the reason", comm->rank, first, phase,
                       ringcc_strerror(code));
  else
    r = rcc_comm_error(comm, code, "init on rank %d: rank %d failed during %s: "
                       "%s", comm->rank, first, phase, why);
  free(reasons);
  return r;
}

ringcc_result_t rcc_agree_records(struct ringcc_comm *comm,
                                  ringcc_result_t mine, void *records,
                                  size_t bytes, const char *phase,
                                  int64_t deadline) {
  char err[RCC_ERRLEN];
  int32_t status = (int32_t)mine;
  memcpy((char *)records + (size_t)comm->rank * bytes, &status, sizeof(status));
  ringcc_result_t r = rcc_bootstrap_allgather(comm->boot, records, bytes,
                                              deadline, err, sizeof(err));
  if (r != RINGCC_SUCCESS)
    return rcc_comm_error(comm, r, "init on rank %d: %s", comm->rank, err);
  for (int p = 0; p < comm->nranks; p++) {
    memcpy(&status, (char *)records + (size_t)p * bytes, sizeof(status));
    if (status != RINGCC_SUCCESS)
      return tell_reason(comm, mine, p, (ringcc_result_t)status, phase,
                         deadline);
  }
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_agree_status(struct ringcc_comm *comm, ringcc_result_t mine,
                                 const char *phase, int64_t deadline) {
  int32_t *all = calloc((size_t)comm->nranks, sizeof(int32_t));
  if (all == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  ringcc_result_t r =
      rcc_agree_records(comm, mine, all, sizeof(int32_t), phase, deadline);
  free(all);
  return r;
}

ringcc_result_t rcc_all_agree(struct ringcc_comm *comm, int ok, int *all_ok,
                              int64_t deadline) {
  char err[RCC_ERRLEN];
  int32_t *all = calloc((size_t)comm->nranks, sizeof(int32_t));
  if (all == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  all[comm->rank] = ok;
  ringcc_result_t r = rcc_bootstrap_allgather(comm->boot, all, sizeof(int32_t),
                                              deadline, err, sizeof(err));
  if (r != RINGCC_SUCCESS) {
    free(all);
    return rcc_comm_error(comm, r, "init on rank %d: %s", comm->rank, err);
  }
  *all_ok = 1;
  for (int p = 0; p < comm->nranks; p++)
    *all_ok &= all[p] != 0;
  free(all);
  return RINGCC_SUCCESS;
}
