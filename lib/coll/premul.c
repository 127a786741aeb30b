/*
 * premul.c - premul-sum reduction ops: ringcc_op_create_premul_sum and
 * ringcc_op_destroy (NCCL's ncclRedOpCreatePreMulSum/ncclRedOpDestroy).
 *
 * An op belongs to one communicator and is a number past RINGCC_NUM_OPS.
 * Numbers are not reused (a counter, modulo 2^30), so a destroyed op's value
 * is refused as 'op' by every later call instead of naming another op. The
 * live ops sit in a small array under comm->premul_lock: they may be made
 * and destroyed from any thread, also while a collective runs on the
 * communicator (FSDP2 makes one per reduce-scatter), and a collective copies
 * its op out at validation (rcc_premul_find). The multiply itself is coll.c's
 * (execute: each rank's input once, into staging, then a sum).
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "dtype.h"
#include "error.h"
#include "live.h"
#include "premul.h"

#define PREMUL_NUMBERS (1u << 30) /* op = RINGCC_NUM_OPS + counter */

static ringcc_result_t add_op(struct ringcc_comm *comm, int dt,
                              const void *scalar, ringcc_op_t *op) {
  pthread_mutex_lock(&comm->premul_lock);
  if (comm->npremul == comm->premul_cap) {
    int cap = comm->premul_cap ? 2 * comm->premul_cap : 4;
    void *p = realloc(comm->premul, (size_t)cap * sizeof(*comm->premul));
    if (p == NULL) {
      pthread_mutex_unlock(&comm->premul_lock);
      return RINGCC_ERR_OUT_OF_MEMORY;
    }
    comm->premul = p;
    comm->premul_cap = cap;
  }
  struct rcc_premul_op *o = &comm->premul[comm->npremul++];
  memset(o, 0, sizeof(*o));
  o->op = RINGCC_NUM_OPS + (int)(comm->premul_next++ % PREMUL_NUMBERS);
  o->dt = dt;
  memcpy(o->scalar, scalar, ringcc_datatype_size((ringcc_datatype_t)dt));
  *op = (ringcc_op_t)o->op;
  pthread_mutex_unlock(&comm->premul_lock);
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_op_create_premul_sum(ringcc_op_t *op,
                                                       const void *scalar,
                                                       ringcc_datatype_t dt,
                                                       ringcc_comm_t comm) {
  const char *fn = "ringcc_op_create_premul_sum";
  ringcc_result_t r = rcc_comm_enter(comm, fn, RCC_ENTER_QUERY);
  if (r != RINGCC_SUCCESS)
    return r;
  if (op == NULL || scalar == NULL)
    r = rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                       "%s on rank %d: argument '%s' is NULL", fn, comm->rank,
                       op == NULL ? "op" : "scalar");
  else if (!rcc_dt_valid((int)dt))
    r = rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                       "%s on rank %d: argument 'datatype' is %d, not a "
                       "ringcc_datatype_t (0..%d)", fn, comm->rank, (int)dt,
                       RINGCC_NUM_DATATYPES - 1);
  else if ((r = add_op(comm, (int)dt, scalar, op)) != RINGCC_SUCCESS)
    rcc_comm_error(comm, r, "%s on rank %d: out of memory for the op table",
                   fn, comm->rank);
  rcc_comm_leave(comm, RCC_ENTER_QUERY);
  return r;
}

RINGCC_API ringcc_result_t ringcc_op_destroy(ringcc_op_t op,
                                             ringcc_comm_t comm) {
  const char *fn = "ringcc_op_destroy";
  ringcc_result_t r = rcc_comm_enter(comm, fn, RCC_ENTER_QUERY);
  if (r != RINGCC_SUCCESS)
    return r;
  int found = 0;
  pthread_mutex_lock(&comm->premul_lock);
  for (int i = 0; i < comm->npremul && !found; i++)
    if (comm->premul[i].op == (int)op) {
      comm->premul[i] = comm->premul[--comm->npremul];
      found = 1;
    }
  pthread_mutex_unlock(&comm->premul_lock);
  if (!found)
    r = rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                       "%s on rank %d: argument 'op' is %d, %s", fn,
                       comm->rank, (int)op,
                       (int)op >= 0 && (int)op < RINGCC_NUM_OPS
                           ? "a built-in op (only ops made by "
                             "ringcc_op_create_premul_sum are destroyed)"
                           : "not a live premul-sum op of this communicator "
                             "(destroyed already, or made on another)");
  rcc_comm_leave(comm, RCC_ENTER_QUERY);
  return r;
}

int rcc_premul_find(struct ringcc_comm *comm, int op,
                    struct rcc_premul_op *out) {
  int found = 0;
  pthread_mutex_lock(&comm->premul_lock);
  for (int i = 0; i < comm->npremul && !found; i++)
    if (comm->premul[i].op == op) {
      *out = comm->premul[i];
      found = 1;
    }
  pthread_mutex_unlock(&comm->premul_lock);
  return found;
}
