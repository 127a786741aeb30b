/*
 * env.c - the one place environment variables are read (env.h).
 */
#include <stdlib.h>

#include "env.h"

const char *rcc_getenv(const char *name) {
  const char *v = getenv(name);
  return (v != NULL && *v != '\0') ? v : NULL;
}
