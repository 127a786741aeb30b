/*
 * links.c - FIFOs shared between a communicator and the ones shrunk from it
 * (links.h).
 */
#include <stdlib.h>

#include "fifo.h"
#include "links.h"

struct rcc_links {
  int refs;                        /* communicators that share them */
  const struct ringcc_comm *last;  /* the one that ran a call last */
};

int rcc_links_share(struct ringcc_comm *parent, struct ringcc_comm *child) {
  if (parent->links == NULL) {
    parent->links = calloc(1, sizeof(*parent->links));
    if (parent->links == NULL)
      return -1;
    parent->links->refs = 1;
    parent->links->last = parent;
  }
  __atomic_add_fetch(&parent->links->refs, 1, __ATOMIC_ACQ_REL);
  child->links = parent->links;
  __atomic_store_n(&child->links->last, child, __ATOMIC_RELEASE);
  return 0;
}

void rcc_links_resync(struct ringcc_comm *comm) {
  for (int k = 0; k < comm->nkinds && k < RCC_CONN_DEVICE; k++)
    for (int ch = 0; ch < comm->kind_channels[k]; ch++)
      for (int p = 0; p < comm->nranks; p++) {
        struct rcc_conn *s = rcc_send_conn(comm, k, ch, p);
        struct rcc_conn *r = rcc_recv_conn(comm, k, ch, p);
        if (s->fifo != NULL && s->head_mirror == NULL)
          s->step = __atomic_load_n(&s->fifo->tail, __ATOMIC_ACQUIRE);
        if (r->fifo != NULL && r->head_mirror == NULL)
          r->step = __atomic_load_n(&r->fifo->head, __ATOMIC_ACQUIRE);
      }
}

void rcc_links_use(struct ringcc_comm *comm) {
  struct rcc_links *l = comm->links;
  if (l == NULL || __atomic_load_n(&l->last, __ATOMIC_ACQUIRE) == comm)
    return;
  rcc_links_resync(comm);
  __atomic_store_n(&l->last, comm, __ATOMIC_RELEASE);
}

void rcc_links_drop(struct ringcc_comm *comm) {
  struct rcc_links *l = comm->links;
  comm->links = NULL;
  if (l == NULL)
    return;
  const struct ringcc_comm *me = comm;
  __atomic_compare_exchange_n(&l->last, &me, NULL, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) == 0)
    free(l);
}
