/*
 * log.c - the library's log lines (log.h).
 *
 * RINGCC_DEBUG=WARN|INFO|TRACE sets the process-wide level (default: WARN).
 * Every line is prefixed "host:pid [rank] RINGCC LEVEL" so that the output of
 * many ranks can be merged and still read.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "env.h"
#include "log.h"

int rcc_log_level = RINGCC_LOG_WARN;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static char log_host[64];

static int parse_level(const char *s) {
  if (s == NULL || *s == '\0')
    return RINGCC_LOG_WARN;
  if (strcasecmp(s, "NONE") == 0 || strcmp(s, "0") == 0)
    return RINGCC_LOG_NONE;
  if (strcasecmp(s, "WARN") == 0)
    return RINGCC_LOG_WARN;
  if (strcasecmp(s, "INFO") == 0)
    return RINGCC_LOG_INFO;
  if (strcasecmp(s, "TRACE") == 0)
    return RINGCC_LOG_TRACE;
  fprintf(stderr, "RINGCC WARN RINGCC_DEBUG=%s is not one of NONE, WARN, "
                  "INFO, TRACE; using WARN\n", s);
  return RINGCC_LOG_WARN;
}

static void log_init_once(void) {
  if (gethostname(log_host, sizeof(log_host)) != 0)
    strcpy(log_host, "?");
  log_host[sizeof(log_host) - 1] = '\0';
  char *dot = strchr(log_host, '.');
  if (dot)
    *dot = '\0';
  rcc_log_level = parse_level(rcc_getenv("RINGCC_DEBUG"));
}

void rcc_log_init(void) { pthread_once(&log_once, log_init_once); }

int rcc_log_subsys(const char *name) {
  static const char *spec;
  static int read;
  if (!__atomic_load_n(&read, __ATOMIC_ACQUIRE)) {
    spec = rcc_getenv("RINGCC_DEBUG_SUBSYS");
    __atomic_store_n(&read, 1, __ATOMIC_RELEASE);
  }
  if (spec == NULL)
    return 0;
  if (strcasestr(spec, "ALL") != NULL)
    return 1;
  size_t len = strlen(name);
  for (const char *p = spec; (p = strcasestr(p, name)) != NULL; p += len)
    if ((p == spec || p[-1] == ',') && (p[len] == '\0' || p[len] == ','))
      return 1;
  return 0;
}

void rcc_log_set_level(int level) {
  rcc_log_init();
  rcc_log_level = level;
}

void rcc_log(int level, int rank, const char *fmt, ...) {
  static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char line[1024];
  int off;
  va_list ap;

  rcc_log_init();
  if (rank >= 0)
    off = snprintf(line, sizeof(line), "%s:%d [%d] RINGCC %s ", log_host,
                   (int)getpid(), rank, names[level & 3]);
  else
    off = snprintf(line, sizeof(line), "%s:%d [-] RINGCC %s ", log_host,
                   (int)getpid(), names[level & 3]);
  va_start(ap, fmt);
  vsnprintf(line + off, sizeof(line) - (size_t)off - 1, fmt, ap);
  va_end(ap);
  /* One write per line so that lines of concurrent ranks do not interleave. */
  size_t len = strlen(line);
  line[len++] = '\n';
  fwrite(line, 1, len, stderr);
}

extern char **environ;

/* At INFO, once per process: every RINGCC_* variable set (secrets masked). */
static void log_env(void) {
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "RINGCC_", 7) != 0)
      continue;
    if (strncmp(*e, "RINGCC_SECRET=", 14) == 0)
      rcc_log(RINGCC_LOG_INFO, -1, "environment: RINGCC_SECRET=(set, not shown)");
    else
      rcc_log(RINGCC_LOG_INFO, -1, "environment: %s", *e);
  }
}

void rcc_log_env_once(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  rcc_log_init();
  if (rcc_log_level >= RINGCC_LOG_INFO)
    pthread_once(&once, log_env);
}
