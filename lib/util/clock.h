/*
 * clock.h - the monotonic clock every deadline is measured on.
 */
#ifndef RCC_CLOCK_H
#define RCC_CLOCK_H

#include <stdint.h>

int64_t rcc_now_ns(void); /* CLOCK_MONOTONIC */
/* now + timeout_ms, or INT64_MAX when timeout_ms <= 0 (no deadline). */
int64_t rcc_deadline_after_ms(int64_t timeout_ms);

#endif /* RCC_CLOCK_H */
