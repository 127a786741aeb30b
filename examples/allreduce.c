/*
 * allreduce.c - the smallest complete libringcc program.
 *
 * Every rank contributes a vector; after ringcc_allreduce every rank holds
 * the element-wise sum. Start it with the launcher that sets the rank and the
 * rendezvous, e.g.
 *
 *   build/bin/ringcc-run -np 4 build/examples/allreduce
 *   mpirun -np 4 build/examples/allreduce
 */
#include <stdio.h>
#include <stdlib.h>

#include <ringcc.h>

#define CHECK(call)                                                            \
  do {                                                                         \
    ringcc_result_t r_ = (call);                                               \
    if (r_ != RINGCC_SUCCESS) {                                                \
      fprintf(stderr, "%s failed: %s: %s\n", #call, ringcc_strerror(r_),      \
              ringcc_comm_last_error(comm));                                   \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

int main(void) {
  ringcc_comm_t comm = NULL;
  int rank, nranks;
  size_t count = 1 << 20;

  CHECK(ringcc_comm_init_env(&comm, NULL));
  CHECK(ringcc_comm_rank(comm, &rank));
  CHECK(ringcc_comm_size(comm, &nranks));

  float *data = malloc(count * sizeof(float));
  if (data == NULL)
    return 1;
  for (size_t i = 0; i < count; i++)
    data[i] = (float)(rank + 1); /* rank r contributes r+1 everywhere */

  /* In place: the sum replaces the input. */
  CHECK(ringcc_allreduce(data, data, count, RINGCC_FLOAT32, RINGCC_SUM, comm,
                         NULL));

  float expected = (float)nranks * (float)(nranks + 1) / 2.0f;
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++)
    wrong += data[i] != expected;
  printf("rank %d of %d: sum %.0f, %zu wrong elements\n", rank, nranks,
         (double)data[0], wrong);

  free(data);
  CHECK(ringcc_comm_destroy(comm));
  return wrong != 0;
}
