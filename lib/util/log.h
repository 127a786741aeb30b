/*
 * log.h - the library's log: one line per message on stderr, prefixed
 * "host:pid [rank] RINGCC LEVEL" so that the output of many ranks can be
 * merged and still read. RINGCC_DEBUG=NONE|WARN|INFO|TRACE sets the level
 * (default WARN); RINGCC_DEBUG_SUBSYS adds subsystems (TUNING, ...).
 */
#ifndef RCC_LOG_H
#define RCC_LOG_H

#include "ringcc.h"

/* The process-wide level, from RINGCC_DEBUG (read once, or set by a config). */
extern int rcc_log_level;
void rcc_log_init(void);
void rcc_log_set_level(int level);
/* RINGCC_DEBUG_SUBSYS (comma list, e.g. "TUNING,INIT"; ALL): extra subsystems
 * whose INFO lines are printed. */
int rcc_log_subsys(const char *name);
/* Prints "host:pid [rank] RINGCC LEVEL message" to stderr. rank < 0: "[-]". */
void rcc_log(int level, int rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* At RINGCC_DEBUG=INFO, prints every RINGCC_* variable once per process. */
void rcc_log_env_once(void);

#define RCC_WARN(rank, ...)                                                    \
  do {                                                                         \
    if (rcc_log_level >= RINGCC_LOG_WARN)                                      \
      rcc_log(RINGCC_LOG_WARN, (rank), __VA_ARGS__);                           \
  } while (0)
#define RCC_INFO(rank, ...)                                                    \
  do {                                                                         \
    if (rcc_log_level >= RINGCC_LOG_INFO)                                      \
      rcc_log(RINGCC_LOG_INFO, (rank), __VA_ARGS__);                           \
  } while (0)
#define RCC_TRACE(rank, ...)                                                   \
  do {                                                                         \
    if (rcc_log_level >= RINGCC_LOG_TRACE)                                     \
      rcc_log(RINGCC_LOG_TRACE, (rank), __VA_ARGS__);                          \
  } while (0)

#endif /* RCC_LOG_H */
