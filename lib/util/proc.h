/*
 * proc.h - whether a process of this PID namespace is gone.
 */
#ifndef RCC_PROC_H
#define RCC_PROC_H

/* 1 when pid (of this PID namespace) is no such process, or a zombie its
 * parent has not reaped yet (/proc/PID/stat, trusted only where this /proc
 * is our namespace's: /proc/self is getpid()); else 0. */
int rcc_pid_gone(int pid);

#endif /* RCC_PROC_H */
