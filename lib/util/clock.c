/*
 * clock.c - the monotonic clock (clock.h).
 */
#include <stdint.h>
#include <time.h>

#include "clock.h"

int64_t rcc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t rcc_deadline_after_ms(int64_t timeout_ms) {
  int64_t now = rcc_now_ns();
  if (timeout_ms <= 0 || timeout_ms >= (INT64_MAX - now) / 1000000LL)
    return INT64_MAX; /* none, or later than the clock can say */
  return now + timeout_ms * 1000000LL;
}
