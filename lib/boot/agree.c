/*
 * agree.c - init steps every rank takes together (agree.h): an all-gather
 * through the bootstrap, so that a rank that fails makes every rank fail
 * with a message naming it, instead of leaving the others waiting.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "bootstrap.h"
#include "comm.h"
#include "error.h"

/* A status below 0 is not a failure of the rank's own (agree.h). */
static int own_failure(int32_t status) { return status > 0; }

ringcc_result_t rcc_agree_records(struct ringcc_comm *comm,
                                  ringcc_result_t mine, void *records,
                                  size_t bytes, const char *phase,
                                  int64_t deadline) {
  char err[RCC_ERRLEN], why[RCC_ERRLEN];
  int32_t status = (int32_t)mine, code;
  if (own_failure(status)) {
    /* Every rank learns it, and this rank's sentence, in one trip round
     * the ring, wherever it stands (bootstrap.h). */
    pthread_mutex_lock(&comm->error_lock);
    memcpy(why, comm->last_error, sizeof(why));
    pthread_mutex_unlock(&comm->error_lock);
    rcc_bootstrap_fail(comm->boot, status, why);
    return mine; /* our own message is already recorded */
  }
  memcpy((char *)records + (size_t)comm->rank * bytes, &status, sizeof(status));
  ringcc_result_t r = rcc_bootstrap_allgather(comm->boot, records, bytes,
                                              deadline, err, sizeof(err));
  if (r != RINGCC_SUCCESS) {
    int who = rcc_bootstrap_failure(comm->boot, &code, why, sizeof(why));
    if (who >= 0 && who != comm->rank)
      return rcc_comm_error(comm, (ringcc_result_t)code,
                            "init on rank %d: rank %d failed during %s: %s",
                            comm->rank, who, phase, why);
    return rcc_comm_error(comm, r, "init on rank %d: %s", comm->rank, err);
  }
  for (int p = 0; p < comm->nranks; p++) {
    memcpy(&status, (char *)records + (size_t)p * bytes, sizeof(status));
    if (status != 0) /* stopped for a failure that never came round */
      return rcc_comm_error(comm, RINGCC_ERR_INTERNAL, "init on rank %d: "
                            "rank %d stopped during %s for a failure no rank "
                            "reports", comm->rank, p, phase);
  }
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_agree_news(struct ringcc_comm *comm) {
  int32_t status;
  int rank;
  if (rcc_bootstrap_news(comm->boot, &status, &rank) == 0)
    return RINGCC_SUCCESS;
  /* A failure on its way round, or the previous rank gone: the agreement
   * that follows meets it and names it. */
  return (ringcc_result_t)RCC_AGREE_INTERRUPTED;
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
