/*
 * test_faults.h - what the two sources of test_faults (test/test_faults.c and
 * test/parts/faults_calls.c) share: the forked ranks of a job, and the
 * helpers test_faults.c defines for both.
 */
#ifndef TEST_FAULTS_H
#define TEST_FAULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ringcc.h"

#define MAX_RANKS 8
#define MSG_LEN 600

typedef int (*rank_fn)(int rank, int nranks, const ringcc_unique_id_t *id,
                       void *arg);

typedef struct {
  int n;
  pid_t pid[MAX_RANKS];
  int status[MAX_RANKS];
  bool reaped[MAX_RANKS];
  ringcc_unique_id_t id; /* the parent's copy */
} job_t;

typedef struct {
  ringcc_comm_t comm;
  int32_t *buf;
  size_t count;
  ringcc_result_t result;
} call_thread_t;

void job_start(job_t *j, int n, rank_fn fn, void *arg,
               const int *err_fd);
bool job_wait(job_t *j, double timeout_s);
void expect_all_exited_0(const job_t *j, const char *what);
int log_open(void);
char *log_read(int fd);
void log_dump(const char *title, int fd);
ringcc_config_t config_with(int64_t timeout_ms, int tcp);
bool wait_counter(int *counter, int want, double timeout_s);
void *allreduce_thread(void *p);
bool report_until_waiting(ringcc_comm_t comm, char *buf, size_t len);

#endif
