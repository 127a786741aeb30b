/*
 * reduce.h - element-wise reductions on the CPU for every datatype and op
 * (reduce.c; reduce.cuh is the GPU's twin).
 */
#ifndef RCC_REDUCE_H
#define RCC_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

/* dst[i] = a[i] op b[i] for i < n; dst may alias a or b (exactly, not
 * partially). RINGCC_AVG reduces as RINGCC_SUM; the division by nranks is
 * rcc_reduce_avg_finish's. float16/bfloat16/float8 are computed in float and rounded
 * to nearest even; integers wrap modulo 2^bits. */
typedef void (*rcc_reduce_fn)(void *dst, const void *a, const void *b,
                              size_t n);
rcc_reduce_fn rcc_reduce_get(ringcc_datatype_t dt, ringcc_op_t op);
/* dst[i] = src[i] / nranks (integers truncate toward zero); dst may be src. */
void rcc_reduce_avg_finish(ringcc_datatype_t dt, void *dst, const void *src,
                           size_t n, int nranks);
/* premul-sum: dst[i] = src[i] * *scalar (a value of dt), by dt's product
 * (RINGCC_PROD's rounding: once, to nearest even); dst may be src. */
void rcc_reduce_scale(ringcc_datatype_t dt, void *dst, const void *src,
                      size_t n, const void *scalar);
float rcc_half_to_float(uint16_t h);
uint16_t rcc_float_to_half(float f); /* round to nearest even */
float rcc_bf16_to_float(uint16_t h);
uint16_t rcc_float_to_bf16(float f); /* round to nearest even */
/* RINGCC_FLOAT8_E4M3 / _E5M2 (dt picks): exact; round to nearest even,
 * e4m3 saturating to +-448, e5m2 overflowing to +-Inf. */
float rcc_fp8_to_float(ringcc_datatype_t dt, uint8_t v);
uint8_t rcc_float_to_fp8(ringcc_datatype_t dt, float f);
/* Kernel instruction sets. The best the CPU has is used unless
 * rcc_reduce_set_isa (tests, benchmarks) caps it; isa < 0 restores the best.
 * Returns the set now in use (lower than asked where the CPU lacks it). */
enum { RCC_ISA_PORTABLE = 0, RCC_ISA_AVX2 = 1, RCC_ISA_AVX512 = 2 };
int rcc_reduce_set_isa(int isa);

#endif /* RCC_REDUCE_H */
