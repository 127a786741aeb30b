/*
 * soak.c - a long stream of random collectives on one communicator, watching
 * each rank's memory (VmRSS), open file descriptors and threads for growth.
 *
 * Run under a launcher (scripts/soak.sh builds it and runs it under
 * ringcc-run): every rank draws the same calls from one seed
 * (random_coll.h) and checks every element of every result. Every --every
 * calls each rank samples /proc/self/status and /proc/self/fd, the samples
 * are all-gathered, and rank 0 prints a row. At the end rank 0 compares the
 * last sample with the first one (taken after --every calls, which follow
 * a warm-up of every kind of call at the largest size, so most FIFO slots
 * and staging are resident already): fds and threads must not grow at all,
 * VmRSS by at most the tolerance over the second half of the run (verdict()
 * says why), and the mappings that grew most over that half are named.
 * Exit status 0 when every result was exact and nothing grew beyond the
 * tolerance, 1 otherwise, 2 on a usage or setup error.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "random_coll.h"

#define RSS_TOLERANCE_KIB 2048 /* allocator noise; a leak of 1 KiB per call
                                  is 9 MiB over 9000 calls */

typedef struct {
  int64_t calls;
  int64_t rss_kib;
  int64_t fds;
  int64_t threads;
} sample_t;

static void usage(FILE *f) {
  fprintf(f,
          "Usage: soak [-n CALLS] [-e EVERY] [-s SEED] [-m MAX_COUNT] "
          "[-x 0|1]\n"
          "Random collectives on one communicator (start it with ringcc-run);\n"
          "every result is checked, and every EVERY calls each rank's VmRSS,\n"
          "open fds and threads are sampled. Defaults: -n 10000 -e 1000 -s 1\n"
          "-m 65536 (elements per rank's block) -x 0. -x 1: the mixed stream\n"
          "(also AllToAllv, AllGatherv, Gather, Scatter, grouped\n"
          "send/recv and requests: random_coll.h).\n");
}

static int64_t status_field(const char *name) {
  char line[256];
  size_t len = strlen(name);
  int64_t v = -1;
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL)
    return -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, name, len) == 0 && line[len] == ':') {
      v = strtoll(line + len + 1, NULL, 10);
      break;
    }
  fclose(f);
  return v;
}

static int64_t open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int64_t n = 0;
  if (d == NULL)
    return -1;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the directory's own descriptor */
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_row(const sample_t *all, int n, double secs) {
  printf("%7lld %7.1f", (long long)all[0].calls, secs);
  for (int r = 0; r < n; r++)
    printf(" %9lld", (long long)all[r].rss_kib);
  printf("  ");
  for (int r = 0; r < n; r++)
    printf(" %4lld", (long long)all[r].fds);
  printf("  ");
  for (int r = 0; r < n; r++)
    printf(" %3lld", (long long)all[r].threads);
  printf("\n");
  fflush(stdout);
}

static void print_header(int n) {
  printf("%7s %7s", "calls", "secs");
  for (int r = 0; r < n; r++)
    printf(" %5s%d KiB", "rss", r);
  printf("  ");
  for (int r = 0; r < n; r++)
    printf(" fd%-2d", r);
  printf("  ");
  for (int r = 0; r < n; r++)
    printf(" th%d", r);
  printf("\n");
}

/* Where VmRSS grew: each mapping of /proc/self/smaps (start address, size,
 * resident KiB, name), read at the mid sample and at the end; the mappings
 * that grew most are printed for the rank that grew most, so a failed
 * verdict says whether the growth is in the heap or malloc's arenas (a
 * leak's place) or in the network FIFOs (allocated one after another at
 * init, each nslots slots and a few pages, which the kernel merges into one
 * mapping: pages touched for the first time). */
#define MAPS_MAX 8192
#define GROWTH_TOP 4

typedef struct {
  uint64_t start;
  int64_t size_kib, rss_kib;
  char name[48];
} mapping_t;

typedef struct {
  int64_t size_kib, rss_mid, rss_end;
  char name[48];
} growth_t;

static int read_maps(mapping_t *m, int max) {
  FILE *f = fopen("/proc/self/smaps", "r");
  char line[512];
  int n = -1;
  if (f == NULL)
    return 0;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long long a, b;
    long long kib;
    char path[256] = "";
    /* A mapping's line ("start-end perms ..."); no field line parses so. */
    if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %255s", &a, &b, path) >= 2) {
      if (n + 1 >= max)
        break;
      n++;
      m[n] = (mapping_t){a, (int64_t)((b - a) >> 10), 0, ""};
      snprintf(m[n].name, sizeof m[n].name, "%s", path[0] ? path : "anon");
    } else if (n >= 0 && sscanf(line, "Rss: %lld kB", &kib) == 1) {
      m[n].rss_kib = kib;
    }
  }
  fclose(f);
  return n + 1;
}

/* The GROWTH_TOP mappings of now that grew most since then. */
static void growth_of(const mapping_t *then, int nthen, const mapping_t *now,
                      int nnow, growth_t *top) {
  memset(top, 0, GROWTH_TOP * sizeof *top);
  for (int i = 0; i < nnow; i++) {
    int64_t before = 0;
    for (int j = 0; j < nthen; j++)
      if (then[j].start == now[i].start) {
        before = then[j].rss_kib;
        break;
      }
    int64_t g = now[i].rss_kib - before;
    for (int k = 0; k < GROWTH_TOP; k++)
      if (g > top[k].rss_end - top[k].rss_mid) {
        memmove(&top[k + 1], &top[k], (GROWTH_TOP - 1 - k) * sizeof *top);
        top[k] = (growth_t){now[i].size_kib, before, now[i].rss_kib, ""};
        snprintf(top[k].name, sizeof top[k].name, "%s", now[i].name);
        break;
      }
  }
}

/* The kinds of calls drawn: -x 1, RC_NUM_ALL_KINDS. */
static int kinds = RC_NUM_KINDS;

/* Rank 0: growth of fds and threads between the warm-up sample and the
 * last one, and of VmRSS over the second half of the run (from the sample
 * mid): memory a run first touches late (the slots of network FIFOs are
 * allocated when a link is made and become resident where a message first
 * passes through them rather than landing in the caller's buffer) rises and
 * levels off, where a leak grows as fast in the second half as in the
 * first. Both RSS figures are printed. */
static int verdict(const sample_t *first, const sample_t *mid,
                   const sample_t *last, int n, int64_t calls, int64_t wrong,
                   const int64_t *by_kind, const growth_t *where) {
  int64_t rss_all = INT64_MIN, rss_grow = INT64_MIN, fd_grow = INT64_MIN,
          th_grow = INT64_MIN;
  int all_rank = 0, rss_rank = 0, fd_rank = 0, th_rank = 0;
  for (int r = 0; r < n; r++) {
    int64_t g = last[r].rss_kib - first[r].rss_kib;
    if (g > rss_all)
      rss_all = g, all_rank = r;
    g = last[r].rss_kib - mid[r].rss_kib;
    if (g > rss_grow)
      rss_grow = g, rss_rank = r;
    g = last[r].fds - first[r].fds;
    if (g > fd_grow)
      fd_grow = g, fd_rank = r;
    g = last[r].threads - first[r].threads;
    if (g > th_grow)
      th_grow = g, th_rank = r;
  }
  printf("calls by kind:");
  for (int k = 0; k < kinds; k++)
    printf(" %s %lld", rc_kind_names[k], (long long)by_kind[k]);
  printf("\n");
  printf("results: %lld calls, every element checked, %lld wrong\n",
         (long long)calls, (long long)wrong);
  printf("growth from call %lld to call %lld (largest over the ranks):\n",
         (long long)first[0].calls, (long long)last[0].calls);
  printf("  VmRSS   %+lld KiB (rank %d); from call %lld: %+lld KiB (rank %d; "
         "tolerance %d KiB)\n",
         (long long)rss_all, all_rank, (long long)mid[0].calls,
         (long long)rss_grow, rss_rank, RSS_TOLERANCE_KIB);
  printf("  fds     %+lld (rank %d; tolerance 0)\n", (long long)fd_grow,
         fd_rank);
  printf("  threads %+lld (rank %d; tolerance 0)\n", (long long)th_grow,
         th_rank);
  printf("  where rank %d grew from call %lld (the mappings that grew "
         "most):\n", rss_rank, (long long)mid[0].calls);
  for (int k = 0; k < GROWTH_TOP; k++)
    if (where[rss_rank * GROWTH_TOP + k].rss_end >
        where[rss_rank * GROWTH_TOP + k].rss_mid) {
      const growth_t *g = &where[rss_rank * GROWTH_TOP + k];
      printf("    %+lld KiB: %lld -> %lld KiB resident of %lld KiB, %s\n",
             (long long)(g->rss_end - g->rss_mid), (long long)g->rss_mid,
             (long long)g->rss_end, (long long)g->size_kib, g->name);
    }
  int ok = wrong == 0 && rss_grow <= RSS_TOLERANCE_KIB && fd_grow <= 0 &&
           th_grow <= 0;
  printf("verdict: %s\n", ok ? "PASS (no fd or thread growth after warm-up, "
                               "RSS level over the second half, every result "
                               "exact)"
                             : "FAIL");
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  int64_t calls = 10000, every = 1000;
  uint64_t seed = 1;
  size_t max_count = 65536;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (v == NULL) {
      usage(stderr);
      return 2;
    }
    if (strcmp(argv[i], "-n") == 0)
      calls = strtoll(v, NULL, 0);
    else if (strcmp(argv[i], "-e") == 0)
      every = strtoll(v, NULL, 0);
    else if (strcmp(argv[i], "-s") == 0)
      seed = strtoull(v, NULL, 0);
    else if (strcmp(argv[i], "-m") == 0)
      max_count = (size_t)strtoull(v, NULL, 0);
    else if (strcmp(argv[i], "-x") == 0)
      kinds = strtol(v, NULL, 0) ? RC_NUM_ALL_KINDS : RC_NUM_KINDS;
    else {
      usage(stderr);
      return 2;
    }
    i++;
  }
  if (calls < 2 * every || every < 1 || max_count < 1) {
    fprintf(stderr, "soak: need -n >= 2 * -e >= 2 and -m >= 1\n");
    return 2;
  }

  ringcc_comm_t comm;
  int rank, n;
  if (ringcc_comm_init_env(&comm, NULL) != RINGCC_SUCCESS) {
    fprintf(stderr, "soak: init: %s\n", ringcc_comm_last_error(NULL));
    return 2;
  }
  ringcc_comm_rank(comm, &rank);
  ringcc_comm_size(comm, &n);
  rc_rank_t s;
  sample_t mine, *all = calloc((size_t)n, sizeof *all);
  sample_t *first = calloc((size_t)n, sizeof *first);
  sample_t *mid = calloc((size_t)n, sizeof *mid);
  mapping_t *maps_mid = calloc(MAPS_MAX, sizeof *maps_mid);
  mapping_t *maps_end = calloc(MAPS_MAX, sizeof *maps_end);
  growth_t top[GROWTH_TOP];
  growth_t *where = calloc((size_t)n * GROWTH_TOP, sizeof *where);
  int nmaps_mid = 0;
  if (!rc_rank_init(&s, rank, n, max_count) || all == NULL || first == NULL ||
      mid == NULL || maps_mid == NULL || maps_end == NULL || where == NULL) {
    fprintf(stderr, "soak: rank %d: out of memory\n", rank);
    return 2;
  }
  /* Touch the buffers once, so their pages count from the start. Not with
   * zeros: the compiler may fold malloc and a memset of zeros into a calloc,
   * which touches no fresh page. */
  size_t bytes = rc_rank_bytes(n, max_count);
  memset(s.send, 0x5a, bytes), memset(s.recv, 0x5a, bytes);
  memset(s.expect, 0x5a, bytes);

  /* Warm-up: FIFO slots are touched (become resident) only as far as the
   * largest message written into them, and staging for in-place calls grows
   * to the largest call; 16 calls of every kind at the largest size (8-byte
   * elements), twice round every FIFO's slots, get there before sampling. */
  for (int k = 0; k < kinds; k++)
    for (int i = 0; i < 16; i++) {
      rc_call_t big = {(enum rc_kind)k, max_count, RINGCC_UINT64, RINGCC_SUM,
                       i % n, i % 2, (uint64_t)i};
      if (rc_run(&s, &big, comm) != 0) {
        fprintf(stderr, "soak: rank %d: warm-up %s failed: %s\n", rank,
                rc_kind_names[k], ringcc_comm_last_error(comm));
        return 1;
      }
    }

  int64_t wrong = 0, by_kind[RC_NUM_ALL_KINDS] = {0};
  int rc = 0;
  double start = now_s();
  if (rank == 0) {
    printf("soak: %d ranks, %lld random collectives (seed %llu, up to %zu "
           "elements per block), sampling every %lld calls\n",
           n, (long long)calls, (unsigned long long)seed, max_count,
           (long long)every);
    print_header(n);
  }
  for (int64_t i = 0; i < calls; i++) {
    rc_call_t c;
    rc_draw_from(seed, (uint64_t)i, n, max_count, kinds, &c);
    by_kind[c.kind]++;
    int res = rc_run(&s, &c, comm);
    if (res == RC_WRONG_DATA) {
      wrong++;
    } else if (res != 0) {
      char what[160];
      rc_describe(&c, what, sizeof what);
      fprintf(stderr, "soak: rank %d: call %lld (%s) failed: %s\n", rank,
              (long long)i, what, ringcc_comm_last_error(comm));
      return 1;
    }
    if ((i + 1) % every != 0)
      continue;
    mine = (sample_t){i + 1, status_field("VmRSS"), open_fds(),
                      status_field("Threads")};
    ringcc_result_t r = ringcc_allgather(&mine, all, sizeof mine, RINGCC_UINT8,
                                         comm, NULL);
    /* Wrong results anywhere: one allreduce of the counts, below. */
    if (r != RINGCC_SUCCESS) {
      fprintf(stderr, "soak: rank %d: allgather of the samples: %s\n", rank,
              ringcc_comm_last_error(comm));
      return 1;
    }
    if (i + 1 == every)
      memcpy(first, all, (size_t)n * sizeof *all);
    if (i + 1 <= calls / 2 + every / 2 || i + 1 == every) { /* nearest half */
      memcpy(mid, all, (size_t)n * sizeof *all);
      nmaps_mid = read_maps(maps_mid, MAPS_MAX);
    }
    if (rank == 0)
      print_row(all, n, now_s() - start);
  }
  /* After the last sample (the loop's last call took it). */
  growth_of(maps_mid, nmaps_mid, maps_end, read_maps(maps_end, MAPS_MAX), top);
  if (ringcc_allgather(top, where, sizeof top, RINGCC_UINT8, comm, NULL) !=
      RINGCC_SUCCESS) {
    fprintf(stderr, "soak: rank %d: allgather of the mappings: %s\n", rank,
            ringcc_comm_last_error(comm));
    return 1;
  }
  int64_t total_wrong = wrong;
  if (ringcc_allreduce(&wrong, &total_wrong, 1, RINGCC_INT64, RINGCC_SUM, comm,
                       NULL) != RINGCC_SUCCESS) {
    fprintf(stderr, "soak: rank %d: allreduce: %s\n", rank,
            ringcc_comm_last_error(comm));
    return 1;
  }
  if (rank == 0) {
    printf("%.1f s, %.0f calls/s\n", now_s() - start,
           (double)calls / (now_s() - start));
    rc = verdict(first, mid, all, n, calls, total_wrong, by_kind, where);
  }
  ringcc_comm_destroy(comm);
  rc_rank_free(&s);
  free(all);
  free(first);
  free(mid);
  free(maps_mid);
  free(maps_end);
  free(where);
  return rc;
}
