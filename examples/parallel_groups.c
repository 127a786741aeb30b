/*
 * parallel_groups.c - tensor-, pipeline- and data-parallel communicators
 * built from one world communicator, as training frameworks lay them out.
 *
 * World rank r = (dp * PP + pp) * TP + tp (Megatron's order): the TP ranks of
 * one group are consecutive, so with TP dividing the ranks per host a tensor-
 * parallel group stays inside a host (checked below with
 * ringcc_comm_split_type). Each group runs an allreduce whose exact answer
 * is known, and every rank checks it.
 *
 *   build/bin/ringcc-run -np 8 build/examples/parallel_groups -t 2 -p 2
 *   mpirun -np 8 build/examples/parallel_groups -t 4 -p 1
 *
 * -t TP (default: the ranks on this host), -p PP (default 1); DP is the rest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <ringcc.h>

static int world_rank = -1;

static void check(ringcc_result_t r, const char *what, ringcc_comm_t comm) {
  if (r == RINGCC_SUCCESS)
    return;
  fprintf(stderr, "rank %d: %s failed: %s: %s\n", world_rank, what,
          ringcc_strerror(r), ringcc_comm_last_error(comm));
  exit(1);
}

/* Allreduce of each member's world rank; every member must get the sum of
 * the world ranks in the group, which we compute from the layout. */
static int check_group(ringcc_comm_t group, const char *name,
                       long long expected_sum) {
  int size, rank;
  long long value = world_rank;
  check(ringcc_comm_size(group, &size), "ringcc_comm_size", group);
  check(ringcc_comm_rank(group, &rank), "ringcc_comm_rank", group);
  check(ringcc_allreduce(RINGCC_IN_PLACE, &value, 1, RINGCC_INT64, RINGCC_SUM,
                         group, NULL),
        name, group);
  if (value != expected_sum) {
    fprintf(stderr, "rank %d: %s group allreduce gave %lld, expected %lld\n",
            world_rank, name, value, expected_sum);
    return 1;
  }
  printf("rank %2d: %s group rank %d of %d, sum of world ranks %lld: ok\n",
         world_rank, name, rank, size, value);
  return 0;
}

int main(int argc, char **argv) {
  ringcc_comm_t world, host, tp_comm, pp_comm, dp_comm;
  int n, tp_size = 0, pp_size = 1, host_size, opt;

  while ((opt = getopt(argc, argv, "t:p:h")) != -1) {
    if (opt == 't')
      tp_size = atoi(optarg);
    else if (opt == 'p')
      pp_size = atoi(optarg);
    else {
      fprintf(stderr, "usage: %s [-t TP] [-p PP]\n", argv[0]);
      return opt == 'h' ? 0 : 2;
    }
  }
  check(ringcc_comm_init_env(&world, NULL), "ringcc_comm_init_env", NULL);
  check(ringcc_comm_rank(world, &world_rank), "ringcc_comm_rank", world);
  check(ringcc_comm_size(world, &n), "ringcc_comm_size", world);
  check(ringcc_comm_split_type(world, RINGCC_SPLIT_HOST, world_rank, &host),
        "ringcc_comm_split_type", world);
  check(ringcc_comm_size(host, &host_size), "ringcc_comm_size", host);
  if (tp_size == 0)
    tp_size = host_size;
  if (tp_size < 1 || pp_size < 1 || n % (tp_size * pp_size) != 0 ||
      host_size % tp_size != 0) {
    if (world_rank == 0)
      fprintf(stderr, "TP=%d x PP=%d must divide the %d ranks, and TP the %d "
                      "ranks per host\n", tp_size, pp_size, n, host_size);
    return 2;
  }
  int dp_size = n / (tp_size * pp_size);
  int tp = world_rank % tp_size, pp = (world_rank / tp_size) % pp_size;
  int dp = world_rank / (tp_size * pp_size);

  /* Same color = same group; the key orders the group's ranks. */
  check(ringcc_comm_split(world, dp * pp_size + pp, tp, &tp_comm), "split TP",
        world);
  check(ringcc_comm_split(world, dp * tp_size + tp, pp, &pp_comm), "split PP",
        world);
  check(ringcc_comm_split(world, pp * tp_size + tp, dp, &dp_comm), "split DP",
        world);

  /* Expected sums of world ranks over each group, from the layout. */
  long long tp_sum = 0, pp_sum = 0, dp_sum = 0;
  for (int i = 0; i < tp_size; i++)
    tp_sum += (dp * pp_size + pp) * tp_size + i;
  for (int i = 0; i < pp_size; i++)
    pp_sum += (dp * pp_size + i) * tp_size + tp;
  for (int i = 0; i < dp_size; i++)
    dp_sum += (i * pp_size + pp) * tp_size + tp;

  int bad = check_group(tp_comm, "TP", tp_sum) +
            check_group(pp_comm, "PP", pp_sum) +
            check_group(dp_comm, "DP", dp_sum);

  /* A TP group must not span hosts. Name each host by its lowest world rank
   * (a MIN over the host communicator); all members of a TP group must then
   * name the same host: the MAX and the MIN of that name agree. */
  long long host_id = world_rank, span[2];
  check(ringcc_allreduce(RINGCC_IN_PLACE, &host_id, 1, RINGCC_INT64,
                         RINGCC_MIN, host, NULL), "host id", host);
  span[0] = host_id, span[1] = -host_id;
  check(ringcc_allreduce(RINGCC_IN_PLACE, span, 2, RINGCC_INT64, RINGCC_MAX,
                         tp_comm, NULL), "TP host check", tp_comm);
  if (span[0] != -span[1]) {
    fprintf(stderr, "rank %d: its TP group spans hosts\n", world_rank);
    bad++;
  }
  if (world_rank == 0)
    printf("world %d = TP %d x PP %d x DP %d, %d ranks per host: %s\n", n,
           tp_size, pp_size, dp_size, host_size, bad ? "FAILED" : "ok");

  ringcc_comm_destroy(tp_comm);
  ringcc_comm_destroy(pp_comm);
  ringcc_comm_destroy(dp_comm);
  ringcc_comm_destroy(host);
  ringcc_comm_destroy(world);
  return bad != 0;
}
