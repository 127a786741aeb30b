/*
 * proc.h - what /proc/PID/stat says of a process: whether it is gone, its
 * name and the fields after it.
 */
#ifndef RCC_PROC_H
#define RCC_PROC_H

#include <stddef.h>

/* 1 when pid (of this PID namespace) is no such process, or a zombie its
 * parent has not reaped yet (/proc/PID/stat, trusted only where this /proc
 * is our namespace's: /proc/self is getpid()); else 0. */
int rcc_pid_gone(int pid);

/* Reads /proc/PID/stat into buf (len bytes, NUL-terminated) and returns the
 * fields after the command name (from the state letter on), with the name
 * (without its parentheses) in name when name is not NULL; NULL where pid
 * has no such file or the line has no name in parentheses. */
const char *rcc_proc_stat(int pid, char *buf, size_t len, char *name,
                          size_t namelen);

#endif /* RCC_PROC_H */
