/*
 * launcher.h - which launcher started this process, and the rendezvous it
 * implies, for ringcc_comm_init_env (launcher.c; the table is in
 * docs/launch.md).
 */
#ifndef RCC_LAUNCHER_H
#define RCC_LAUNCHER_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

struct rcc_launch {
  const char *launcher;       /* "torchrun", "Slurm srun", "Open MPI", ... */
  char why[256];              /* the variables that decided it */
  int rank, nranks;
  const char *rank_var, *size_var;
  /* The rendezvous: root is "host:port" where rank 0 serves it, or with
   * use_store the address of torchrun's TCPStore that carries the id. */
  char root[300];
  char root_why[512];
  int use_store;
  char job[200];              /* job key ("" none): derived port and secret */
};

/* Rank and size, and which launcher they come from (innermost wins). */
ringcc_result_t rcc_launch_detect(struct rcc_launch *l, char *err,
                                  size_t errlen);
/* Where to meet: RINGCC_ROOT, torchrun's store, MASTER_ADDR/MASTER_PORT,
 * or what the launcher's variables imply; else an error naming the launcher
 * and the variable to set. */
ringcc_result_t rcc_launch_rendezvous(struct rcc_launch *l, char *err,
                                      size_t errlen);
/* RINGCC_SECRET, else one derived from the root and job key (INFO says what
 * that protects against). Not used with a store (rank 0 makes a random one). */
ringcc_result_t rcc_launch_secret(const struct rcc_launch *l,
                                  uint8_t secret[16], char *err,
                                  size_t errlen);
/* Through torchrun's store: rank 0 makes a unique id (random secret, serving
 * the rendezvous) and sets it under a key of this run, restart and
 * init_env call; the other ranks wait for that key and read the id. */
ringcc_result_t rcc_launch_store_id(const struct rcc_launch *l,
                                    ringcc_unique_id_t *id,
                                    int64_t timeout_ms, char *err,
                                    size_t errlen);

/* The first host of a Slurm node list: "n[07-09,12],gpu1" -> "n07",
 * "rack[1-2]-node[3-4]" -> "rack1-node3". 0, or -1 when malformed. */
int rcc_slurm_first_host(const char *list, char *host, size_t len);

#endif /* RCC_LAUNCHER_H */
