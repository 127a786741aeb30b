/*
 * proc.c - what /proc/PID/stat says of a process (proc.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"

int rcc_pid_gone(int pid) {
  char stat[256], self[32];
  if (kill(pid, 0) != 0 && errno == ESRCH)
    return 1;
  /* A /proc mounted for another PID namespace would name someone else. */
  ssize_t n = readlink("/proc/self", self, sizeof(self) - 1);
  if (n <= 0)
    return 0;
  self[n] = '\0';
  if (atoi(self) != (int)getpid())
    return 0;
  const char *state = rcc_proc_stat(pid, stat, sizeof(stat), NULL, 0);
  return state != NULL && (state[0] == 'Z' || state[0] == 'X');
}

const char *rcc_proc_stat(int pid, char *buf, size_t len, char *name,
                          size_t namelen) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (f == NULL || len == 0) {
    if (f != NULL)
      fclose(f);
    return NULL;
  }
  size_t got = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[got] = '\0';
  const char *open = strchr(buf, '('), *close = strrchr(buf, ')');
  if (open == NULL || close == NULL || close < open || close[1] != ' ')
    return NULL;
  if (name != NULL && namelen > 0)
    snprintf(name, namelen, "%.*s", (int)(close - open - 1), open + 1);
  return close + 2;
}
