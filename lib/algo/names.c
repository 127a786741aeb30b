/*
 * names.c - the names of collectives and step kinds, as the logs, the hang
 * report, the trace and ringcc-model print them.
 */
#include <stdio.h>

#include "algorithms.h"
#include "schedule.h"

static const char *const coll_names[RCC_NUM_COLLS] = {
#define COLL_NAME(id, name) [RCC_COLL_##id] = name,
    RCC_COLLS(COLL_NAME)
#undef COLL_NAME
};

const char *rcc_coll_name(int coll) {
  return coll >= 0 && coll < RCC_NUM_COLLS ? coll_names[coll] : "?";
}

const char *rcc_step_kind_name(int kind) {
  static const char *const names[RCC_NUM_STEP_KINDS] = {
      [RCC_STEP_NONE] = "none",
      [RCC_STEP_SEND] = "send",
      [RCC_STEP_RECV] = "recv",
      [RCC_STEP_COPY] = "copy",
      [RCC_STEP_COPY_SEND] = "copySend",
      [RCC_STEP_RECV_COPY_SEND] = "recvCopySend",
      [RCC_STEP_RECV_REDUCE_SEND] = "recvReduceSend",
      [RCC_STEP_RECV_REDUCE_COPY] = "recvReduceCopy",
      [RCC_STEP_RECV_REDUCE_COPY_SEND] = "recvReduceCopySend",
      [RCC_STEP_SEND_RECV] = "sendRecv",
      [RCC_STEP_REDUCE_LOCAL] = "reduceLocal",
  };
  return kind >= 0 && kind < RCC_NUM_STEP_KINDS ? names[kind] : "?";
}

int rcc_step_describe(char *buf, size_t len, const struct rcc_step_label *s) {
  return snprintf(buf, len, "%s seq %llu, %s, channel %d, step %llu of %llu: "
                  "%s block %d, %zu elements", rcc_coll_name(s->coll), s->seq,
                  rcc_alg_name(s->alg), s->channel, (unsigned long long)s->step,
                  (unsigned long long)s->nsteps, rcc_step_kind_name(s->kind),
                  s->block, s->nelem);
}
