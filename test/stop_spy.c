/*
 * stop_spy.c - send() for the test binaries: the system call, or a stop
 * before it where a test armed one (stop_spy.h).
 */
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stop_spy.h"

static int armed, stopped;
static size_t armed_len, armed_off, armed_plen;
static char armed_pattern[32];

void h_stop_before_send(size_t len, size_t off, const char *pattern) {
  armed_len = len;
  armed_off = off;
  armed_plen = strlen(pattern) < sizeof(armed_pattern) ? strlen(pattern)
                                                       : sizeof(armed_pattern);
  memcpy(armed_pattern, pattern, armed_plen);
  __atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
}

int h_stopped_before_send(void) {
  return __atomic_load_n(&stopped, __ATOMIC_ACQUIRE);
}

ssize_t send(int fd, const void *buf, size_t len, int flags) {
  if (__atomic_load_n(&armed, __ATOMIC_ACQUIRE) && len == armed_len &&
      armed_off + armed_plen <= len &&
      memcmp((const char *)buf + armed_off, armed_pattern, armed_plen) == 0 &&
      __atomic_exchange_n(&armed, 0, __ATOMIC_ACQ_REL)) {
    raise(SIGSTOP);
    __atomic_store_n(&stopped, 1, __ATOMIC_RELEASE);
  }
  return (ssize_t)syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
}
