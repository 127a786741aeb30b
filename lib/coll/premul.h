/*
 * premul.h - premul-sum ops inside the library (premul.c): what a
 * collective reads of the op it was given.
 */
#ifndef RCC_PREMUL_H
#define RCC_PREMUL_H

#include <stdint.h>

#include "ringcc.h"

struct ringcc_comm;

/* One live op: its number (the ringcc_op_t value), the datatype it was made
 * for and the scalar, as that datatype's bytes. */
struct rcc_premul_op {
  int op;
  int dt;
  unsigned char scalar[8];
};

/* Whether op (>= RINGCC_NUM_OPS) is a live premul-sum op of comm; if so
 * *out gets a copy of it. */
int rcc_premul_find(struct ringcc_comm *comm, int op,
                    struct rcc_premul_op *out);

#endif /* RCC_PREMUL_H */
