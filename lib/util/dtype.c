/*
 * dtype.c - the datatypes' names and sizes and the ops' names (public).
 */
#include <stddef.h>

#include "dtype.h"

static const struct {
  const char *name;
  size_t size;
} datatypes[RINGCC_NUM_DATATYPES] = {
    [RINGCC_INT8] = {"int8", 1},       [RINGCC_UINT8] = {"uint8", 1},
    [RINGCC_INT32] = {"int32", 4},     [RINGCC_UINT32] = {"uint32", 4},
    [RINGCC_INT64] = {"int64", 8},     [RINGCC_UINT64] = {"uint64", 8},
    [RINGCC_FLOAT16] = {"float16", 2}, [RINGCC_BFLOAT16] = {"bfloat16", 2},
    [RINGCC_FLOAT32] = {"float32", 4}, [RINGCC_FLOAT64] = {"float64", 8},
    [RINGCC_FLOAT8_E4M3] = {"float8_e4m3", 1},
    [RINGCC_FLOAT8_E5M2] = {"float8_e5m2", 1},
};

RINGCC_API size_t ringcc_datatype_size(ringcc_datatype_t dt) {
  return rcc_dt_valid(dt) ? datatypes[dt].size : 0;
}

RINGCC_API const char *ringcc_datatype_name(ringcc_datatype_t dt) {
  return rcc_dt_valid(dt) ? datatypes[dt].name : NULL;
}

RINGCC_API const char *ringcc_op_name(ringcc_op_t op) {
  static const char *const names[RINGCC_NUM_OPS] = {"sum", "prod", "min",
                                                    "max", "avg"};
  return rcc_op_valid(op) ? names[op] : NULL;
}
