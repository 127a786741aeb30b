/*
 * prctl_spy.c - prctl() for the test binaries, recording PR_SET_PTRACER
 * (prctl_spy.h).
 */
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "prctl_spy.h"

static int ptracer_calls;
static unsigned long ptracer_last = 12345; /* never set */

int prctl(int option, ...) {
  va_list ap;
  va_start(ap, option);
  unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
  unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
  va_end(ap);
  if (option == PR_SET_PTRACER) {
    ptracer_calls++;
    ptracer_last = a2;
  }
  return (int)syscall(SYS_prctl, option, a2, a3, a4, a5);
}

int h_ptracer_calls(void) { return ptracer_calls; }

unsigned long h_ptracer_last(void) { return ptracer_last; }
