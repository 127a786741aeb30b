/*
 * report.h - the hang report: where a rank stands in a collective, printed
 * on timeout, on demand (ringcc_comm_report) and on RINGCC_REPORT_SIGNAL.
 */
#ifndef RCC_REPORT_H
#define RCC_REPORT_H

#include <stddef.h>

struct ringcc_comm;

void rcc_report_format(const struct ringcc_comm *comm, char *buf, size_t len);
/* Installs the RINGCC_REPORT_SIGNAL handler (once per process). */
void rcc_report_signal_setup(void);
/* How many report signals the process has received (the trace flushes
 * when this changes, trace.c). */
int rcc_report_signals(void);
/* 1 once per signal received since comm last asked. */
int rcc_report_requested(struct ringcc_comm *comm);

#endif /* RCC_REPORT_H */
