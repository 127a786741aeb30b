/*
 * dtype.h - datatypes and reduction ops: which values are valid. Names and
 * sizes are public (ringcc_datatype_size, ringcc_datatype_name,
 * ringcc_op_name, in dtype.c).
 */
#ifndef RCC_DTYPE_H
#define RCC_DTYPE_H

#include "ringcc.h"

static inline int rcc_dt_valid(int dt) {
  return dt >= 0 && dt < RINGCC_NUM_DATATYPES;
}
static inline int rcc_op_valid(int op) { return op >= 0 && op < RINGCC_NUM_OPS; }

#endif /* RCC_DTYPE_H */
