/*
 * proc.c - whether a process of this PID namespace is gone (proc.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"

int rcc_pid_gone(int pid) {
  char path[64], stat[256], self[32];
  if (kill(pid, 0) != 0 && errno == ESRCH)
    return 1;
  /* A /proc mounted for another PID namespace would name someone else. */
  ssize_t n = readlink("/proc/self", self, sizeof(self) - 1);
  if (n <= 0)
    return 0;
  self[n] = '\0';
  if (atoi(self) != (int)getpid())
    return 0;
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return 0;
  size_t got = fread(stat, 1, sizeof(stat) - 1, f);
  fclose(f);
  stat[got] = '\0';
  const char *paren = strrchr(stat, ')');
  return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}
