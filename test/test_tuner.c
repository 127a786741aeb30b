/*
 * test_tuner.c - the cost model (lib/tune/model.c, tuner.c, tuner_file.c,
 * tuner_text.c, and the algorithms' terms in lib/algo/),
 * ringcc-model and ringcc-bench --calibrate.
 *
 *   units     sizes, bandwidths and latencies: SI against binary, bits
 *             against bytes, and bad inputs (the message names the input)
 *   model     every formula against values computed by hand
 *   choice    one-shot for small allreduces, ring for large ones, in the pure
 *             model and through real communicators; RINGCC_ALGO forces
 *   explain   the step tables for n = 3 and 4, against tables written here
 *             by hand (the n = 4 Reduce-Scatter one is docs/algorithms.md's)
 *   file      round trip; malformed files read as "malformed", and a
 *             communicator whose file is malformed warns and uses defaults
 *   fit       alpha and beta recovered from exact synthetic times
 *   tools     ringcc-model's output and errors, ringcc-bench --calibrate
 *             writing a file the library reads
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "harness.h"
#include "tuner.h"

/* ---- helpers ------------------------------------------------------------------ */

static void expect_size(const char *s, double want) {
  double got = -1;
  char why[256] = "";
  int r = rcc_parse_size(s, &got, why, sizeof why);
  cr_expect(r == 0 && got == want, "size '%s': got %d, %.17g (%s), want %.17g",
            s, r, got, why, want);
}

static void expect_bad_size(const char *s, const char *why_has) {
  double got = -1;
  char why[256] = "";
  int r = rcc_parse_size(s, &got, why, sizeof why);
  cr_expect(r != 0, "size '%s' was accepted as %.17g", s, got);
  cr_expect(strstr(why, s) != NULL, "size '%s': message does not name it: %s",
            s, why);
  if (why_has)
    cr_expect(strstr(why, why_has) != NULL, "size '%s': message '%s' lacks '%s'",
              s, why, why_has);
}

static void expect_bw(const char *s, double want) {
  double got = -1;
  char why[256] = "";
  int r = rcc_parse_bandwidth(s, &got, why, sizeof why);
  cr_expect(r == 0 && fabs(got - want) <= 1e-9 * want,
            "bandwidth '%s': got %d, %.17g (%s), want %.17g", s, r, got, why,
            want);
}

static void expect_bad_bw(const char *s) {
  double got = -1;
  char why[256] = "";
  int r = rcc_parse_bandwidth(s, &got, why, sizeof why);
  cr_expect(r != 0, "bandwidth '%s' was accepted as %.17g", s, got);
  cr_expect(strstr(why, s) != NULL,
            "bandwidth '%s': message does not name it: %s", s, why);
}

static void expect_near(double got, double want, const char *what) {
  cr_expect(fabs(got - want) <= 1e-9 * fmax(1.0, fabs(want)),
            "%s: got %.17g, want %.17g", what, got, want);
}

/* The defaults as a hand-made model: alpha 2 us, 4 GB/s, reduce 8 GB/s. */
static const struct rcc_link_cost hand_link = {2.0, 1.0 / 4000.0, 0};
static const double hand_gamma = 1.0 / 8000.0;

/* A command's output (stdout and stderr) and exit status. */
static int run_cmd(const char *cmd, char *out, size_t len) {
  char full[2048];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  cr_assert(p != NULL, "popen %s: %s", cmd, strerror(errno));
  size_t n = fread(out, 1, len - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static const char *bin_dir(void) {
  const char *d = getenv("RINGCC_BIN_DIR");
  return d && *d ? d : "build/bin";
}

static void tmp_path(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "/tmp/ringcc-test-tuner-%d-%s", (int)getpid(), name);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f != NULL, "cannot write %s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
}

/* ---- units ----------------------------------------------------------------------- */

Test(units, sizes_si_and_binary) {
  expect_size("8", 8);
  expect_size("8B", 8);
  expect_size("16GB", 16e9);
  expect_size("16GiB", 16.0 * 1073741824.0);
  expect_size("16 GB", 16e9);
  expect_size("16KB", 16000);
  expect_size("16kB", 16000);
  expect_size("16KiB", 16384);
  expect_size("64K", 65536); /* as ringcc-bench -b/-e */
  expect_size("64k", 65536);
  expect_size("1M", 1048576);
  expect_size("1MB", 1e6);
  expect_size("1MiB", 1048576);
  expect_size("2G", 2147483648.0);
  expect_size("2T", 2.0 * 1099511627776.0);
  expect_size("3TB", 3e12);
  expect_size("1TiB", 1099511627776.0);
  expect_size("1.5GiB", 1610612736.0);
  expect_size("1.5KB", 1500);
  expect_size("2.5e3", 2500);
}

Test(units, sizes_bad) {
  expect_bad_size("", NULL);
  expect_bad_size("abc", NULL);
  expect_bad_size("-1", NULL);
  expect_bad_size("+5", NULL);
  expect_bad_size("0x10", NULL);
  expect_bad_size("inf", NULL);
  expect_bad_size("nan", NULL);
  expect_bad_size("16Gb", "bits");
  expect_bad_size("16Gbit", "bits");
  expect_bad_size("16b", "bits");
  expect_bad_size("16X", "unknown unit");
  expect_bad_size("16GiBs", "unknown unit");
  expect_bad_size("1.5", "whole number");
  expect_bad_size("0.3KiB", "whole number");
  expect_bad_size("1e400", NULL);
  expect_bad_size("99999PB", NULL);
}

Test(units, bandwidths_bits_and_bytes) {
  expect_bw("50GB/s", 50e9);
  expect_bw("50GBps", 50e9);
  expect_bw("400Gb/s", 50e9);
  expect_bw("400Gbit/s", 50e9);
  expect_bw("400Gbps", 50e9);
  expect_bw("25Gbit/s", 3.125e9);
  expect_bw("100Gbps", 12.5e9);
  expect_bw("12.5GB/s", 12.5e9);
  expect_bw("800MB/s", 800e6);
  expect_bw("800 MB/s", 800e6);
  expect_bw("32GiB/s", 32.0 * 1073741824.0);
  expect_bw("8Mibit/s", 1048576.0);
  expect_bw("1kB/s", 1000);
  expect_bw("1TB/s", 1e12);
  expect_bw("1000B/s", 1000);
}

Test(units, bandwidths_bad) {
  expect_bad_bw("50G/s");  /* bytes or bits? */
  expect_bad_bw("50GB");   /* per what? */
  expect_bad_bw("50");
  expect_bad_bw("-5GB/s");
  expect_bad_bw("0GB/s");
  expect_bad_bw("50GX/s");
  expect_bad_bw("fastGB/s");
  expect_bad_bw("50GB/h");
  expect_bad_bw("");
}

Test(units, latencies) {
  double us;
  char why[256];
  cr_expect(rcc_parse_latency_us("2", &us, why, sizeof why) == 0 && us == 2);
  cr_expect(rcc_parse_latency_us("2us", &us, why, sizeof why) == 0 && us == 2);
  cr_expect(rcc_parse_latency_us("800ns", &us, why, sizeof why) == 0 &&
            fabs(us - 0.8) < 1e-12);
  cr_expect(rcc_parse_latency_us("0.01ms", &us, why, sizeof why) == 0 &&
            fabs(us - 10) < 1e-9);
  cr_expect(rcc_parse_latency_us("2 hours", &us, why, sizeof why) != 0 &&
            strstr(why, "2 hours") != NULL, "%s", why);
  cr_expect(rcc_parse_latency_us("x", &us, why, sizeof why) != 0);
  cr_expect(rcc_parse_latency_us("-1", &us, why, sizeof why) != 0);
}

Test(units, formatting) {
  char buf[32];
  cr_expect_str_eq(rcc_format_bytes(16e9, 0, buf, sizeof buf), "16 GB");
  cr_expect_str_eq(rcc_format_bytes(65536, 1, buf, sizeof buf), "64 KiB");
  cr_expect_str_eq(rcc_format_bytes(8, 0, buf, sizeof buf), "8 B");
  cr_expect_str_eq(rcc_format_us(42.72, buf, sizeof buf), "42.72 us");
  cr_expect_str_eq(rcc_format_us(74807.0, buf, sizeof buf), "74.807 ms");
}

/* ---- the formulas ----------------------------------------------------------------- */

static void expect_terms(int coll, int alg, int n, double S, double C,
                         double a, double b, double g, double sent) {
  struct rcc_cost_terms t;
  char what[128];
  cr_assert(rcc_model_terms(coll, alg, n, S, C, &t) == 0, "%s/%s has no terms",
            rcc_coll_name(coll), rcc_alg_name(alg));
  snprintf(what, sizeof what, "%s %s n=%d S=%g", rcc_coll_name(coll),
           rcc_alg_name(alg), n, S);
  expect_near(t.alpha_count, a, what);
  expect_near(t.beta_bytes, b, what);
  expect_near(t.gamma_bytes, g, what);
  expect_near(t.bytes_sent, sent, what);
}

Test(model, terms_by_hand) {
  double S = 1e6, C = 65536;
  /* allreduce, n = 4: 2(n-1) = 6 latencies, 2(n-1)/n = 1.5 S on the wire */
  expect_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RING, 4, S, C, 6, 1.5e6, 0.75e6, 1.5e6);
  /* one-shot n/2 and tree 3 ceil(log2 n) latencies (measured, docs/tuning.md) */
  expect_terms(RCC_COLL_ALLREDUCE, RCC_ALG_ONESHOT, 4, S, C, 2, 3e6, 4e6, 3e6);
  expect_terms(RCC_COLL_ALLREDUCE, RCC_ALG_BOARD, 4, S, C, 2, 3e6, 4e6, 3e6);
  expect_terms(RCC_COLL_ALLREDUCE, RCC_ALG_TREE, 4, S, C, 6, 2e6, 1e6, 2e6);
  expect_terms(RCC_COLL_ALLREDUCE, RCC_ALG_TREE, 5, S, C, 9, 2e6, 1e6, 2e6);
  /* recursive doubling: log2 p exchanges, +2 steps when n is not a power of
   * two (fold-in before, total back after) */
  expect_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RECDOUBLING, 4, S, C, 2, 2e6, 2e6,
               2e6);
  expect_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RECDOUBLING, 6, S, C, 4, 4e6, 3e6,
               3e6);
  /* Rabenseifner: 2 log2 p exchanges of halves, 2(p-1)/p S on the wire; n = 6
   * folds: +2 steps, +2 S (the input in, the total out) */
  expect_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RABENSEIFNER, 4, S, C, 4, 1.5e6, 0.75e6,
               1.5e6);
  expect_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RABENSEIFNER, 6, S, C, 6, 3.5e6, 1.75e6,
               2.5e6);
  /* what the link changes: one-shot pays each message over tcp (n-1), half
   * a step per peer on the board ((n-1)/2), n/2 over shared-memory FIFOs;
   * an exchange costs two steps over shared memory */
  struct rcc_cost_terms t;
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_ONESHOT, 4, 8, C, &t);
  rcc_model_link_terms(RCC_LINK_TCP, RCC_ALG_ONESHOT, 4, &t);
  expect_near(t.alpha_count, 3, "one-shot over tcp, n=4");
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_ONESHOT, 4, 8, C, &t);
  rcc_model_link_terms(RCC_LINK_SHM, RCC_ALG_ONESHOT, 4, &t);
  expect_near(t.alpha_count, 2, "one-shot over shm FIFOs, n=4");
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_BOARD, 4, 8, C, &t);
  rcc_model_link_terms(RCC_LINK_SHM, RCC_ALG_BOARD, 4, &t);
  expect_near(t.alpha_count, 1.5, "one-shot over the board, n=4");
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RECDOUBLING, 8, 8, C, &t);
  rcc_model_link_terms(RCC_LINK_SHM, RCC_ALG_RECDOUBLING, 8, &t);
  expect_near(t.alpha_count, 6, "recursive doubling over shm, n=8");
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RECDOUBLING, 8, 8, C, &t);
  rcc_model_link_terms(RCC_LINK_TCP, RCC_ALG_RECDOUBLING, 8, &t);
  expect_near(t.alpha_count, 3, "recursive doubling over tcp, n=8");
  expect_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RING, 8, S, C, 14, 1.75e6, 0.875e6,
               1.75e6);
  expect_terms(RCC_COLL_REDUCE_SCATTER, RCC_ALG_RING, 4, S, C, 3, 0.75e6,
               0.75e6, 0.75e6);
  expect_terms(RCC_COLL_ALLGATHER, RCC_ALG_RING, 4, S, C, 3, 0.75e6, 0, 0.75e6);
  expect_terms(RCC_COLL_ALLTOALL, RCC_ALG_PAIRWISE, 4, S, C, 3, 0.75e6, 0,
               0.75e6);
  expect_terms(RCC_COLL_SEND, RCC_ALG_P2P, 2, S, C, 1, S, 0, S);
  expect_terms(RCC_COLL_BARRIER, RCC_ALG_DISSEMINATION, 5, 0, C, 3, 0, 0, 0);
  /* bcast of 1 MiB in 64 KiB chunks over 4 ranks: k = 16 chunks, a pipeline
   * of n-2+k = 18 stages of one chunk each */
  expect_terms(RCC_COLL_BCAST, RCC_ALG_CHAIN, 4, 1048576, C, 18, 18 * 65536.0,
               0, 1048576);
  expect_terms(RCC_COLL_REDUCE, RCC_ALG_CHAIN, 4, 1048576, C, 18, 18 * 65536.0,
               18 * 65536.0, 1048576);
  /* 100 KB over 64 KiB slots: k = 2 chunks of 50 KB */
  expect_terms(RCC_COLL_BCAST, RCC_ALG_CHAIN, 3, 100000, C, 3, 150000, 0,
               100000);
  cr_expect(rcc_model_terms(RCC_COLL_ALLGATHER, RCC_ALG_ONESHOT, 4, S, C, &t) != 0);
  cr_expect(rcc_model_terms(RCC_COLL_BCAST, RCC_ALG_RING, 4, S, C, &t) != 0);
  cr_expect_str_eq(rcc_model_formula(RCC_COLL_ALLREDUCE, RCC_ALG_RING),
                   "2(n-1)*alpha + 2(n-1)/n*S*beta + (n-1)/n*S*gamma");
}

Test(model, hierarchical_by_hand) {
  /* 4 hosts of 8 ranks, 16e9 bytes: inside alpha 3.4 us at 450 GB/s,
   * between 9.6 us at 50 GB/s, gamma 1/(1 TB/s). Reduce-scatter and
   * allgather inside move 7/8 S each; the 8 rings across hosts each move
   * 2 * 3/4 of a 2e9 shard, at half a link each (4 links per host). */
  struct rcc_link_cost in = {3.4, 1.0 / 450e3, 0}, net = {9.6, 1.0 / 50e3, 0};
  double sent = 0;
  struct rcc_prediction p =
      rcc_model_hierarchical(4, 8, 16e9, &in, &net, 0.5, 1.0 / 1e6, &sent);
  expect_near(p.latency_us, 14 * 3.4 + 6 * 9.6, "hierarchical latency");
  expect_near(p.wire_us, 2 * 14e9 / 450e3 + 3e9 / 50e3 / 0.5,
              "hierarchical wire");
  expect_near(p.reduce_us, (14e9 + 1.5e9) / 1e6, "hierarchical reduction");
  expect_near(p.bandwidth_us, p.wire_us + p.reduce_us, "hierarchical bw");
  expect_near(sent, 28e9 + 3e9, "hierarchical bytes sent");
  /* One host: the ring inside it; one rank per host: the ring across. */
  struct rcc_cost_terms t;
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RING, 8, 16e9, 65536, &t);
  struct rcc_prediction ring = rcc_model_predict(&t, &in, 1.0 / 1e6, 0);
  p = rcc_model_hierarchical(1, 8, 16e9, &in, &net, 1, 1.0 / 1e6, NULL);
  expect_near(rcc_prediction_total(p), rcc_prediction_total(ring),
              "one host = the ring");
  ring = rcc_model_predict(&t, &net, 1.0 / 1e6, 0);
  p = rcc_model_hierarchical(8, 1, 16e9, &in, &net, 1, 1.0 / 1e6, NULL);
  expect_near(rcc_prediction_total(p), rcc_prediction_total(ring),
              "one rank per host = the ring across hosts");
}

Test(model, predictions_by_hand) {
  struct rcc_cost_terms t;
  /* ring allreduce, n = 4, 64 KiB, alpha 2 us, 4 GB/s, reduce 8 GB/s:
   * latency 6 * 2 = 12 us; bandwidth 1.5 * 65536 / 4000 = 24.576 us plus
   * 0.75 * 65536 / 8000 = 6.144 us: 42.72 us in all */
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RING, 4, 65536, 65536, &t);
  struct rcc_prediction p = rcc_model_predict(&t, &hand_link, hand_gamma, 0);
  expect_near(p.latency_us, 12.0, "ring latency");
  expect_near(p.reduce_us, 6.144, "ring reduction");
  expect_near(p.wire_us, 24.576, "ring wire");
  expect_near(p.bandwidth_us, 30.72, "ring bandwidth");
  expect_near(rcc_prediction_total(p), 42.72, "ring total");
  /* one-shot, 8 B: 2 * 2 + 3 * 8 / 4000 + 4 * 8 / 8000 = 4.01 us */
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_ONESHOT, 4, 8, 65536, &t);
  p = rcc_model_predict(&t, &hand_link, hand_gamma, 0);
  expect_near(rcc_prediction_total(p), 4.01, "one-shot total");
  /* ring allgather, n = 8, 16 GB, alpha 3.4 us, 450 GB/s: 7 * 3.4 = 23.8 us
   * + 7/8 * 16e9 / 450e3 us = 31111.11... us */
  struct rcc_link_cost nvl = {3.4, 1.0 / 450e3, 0};
  rcc_model_terms(RCC_COLL_ALLGATHER, RCC_ALG_RING, 8, 16e9, 65536, &t);
  p = rcc_model_predict(&t, &nvl, 0, 0);
  expect_near(p.latency_us, 23.8, "allgather latency");
  expect_near(p.bandwidth_us, 14e9 / 450e3, "allgather bandwidth");
  /* Beyond the cache: a 32 MiB cache and 4 ranks; an allreduce's buffers
   * are 2S per rank, beyond once 2 * 4 * 2S > 32 MiB, i.e. S > 2 MiB. */
  struct rcc_link_cost two = {2.0, 1.0 / 4000.0, 1.0 / 1000.0};
  double cache = 32.0 * 1048576;
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RING, 4, 2097152, 65536, &t);
  expect_near(t.footprint_bytes, 4 * 2 * 2097152.0, "footprint");
  p = rcc_model_predict(&t, &two, 0, cache);
  cr_expect(!p.in_memory, "2 MiB is still in cache");
  expect_near(p.bandwidth_us, 1.5 * 2097152 / 4000.0, "in-cache bandwidth");
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RING, 4, 4194304, 65536, &t);
  p = rcc_model_predict(&t, &two, 0, cache);
  cr_expect(p.in_memory, "4 MiB is beyond the cache");
  expect_near(p.bandwidth_us, 1.5 * 4194304 / 1000.0, "memory bandwidth");
  p = rcc_model_predict(&t, &two, 0, 0); /* no cache modelled: one beta */
  expect_near(p.bandwidth_us, 1.5 * 4194304 / 4000.0, "one beta");
  p = rcc_model_predict(&t, &hand_link, 0, cache); /* no beta_mem: one beta */
  expect_near(p.bandwidth_us, 1.5 * 4194304 / 4000.0, "no beta_mem");
}

Test(model, channels_by_hand) {
  struct rcc_cost_terms t;
  /* Ring allreduce, n = 4, 1 MiB on the hand link: 12 us + 393.216 us on
   * the wire + 98.304 us reducing, on one channel. */
  rcc_model_terms(RCC_COLL_ALLREDUCE, RCC_ALG_RING, 4, 1 << 20, 65536, &t);
  struct rcc_prediction one = rcc_model_predict(&t, &hand_link, hand_gamma, 0);
  expect_near(one.wire_us, 1.5 * 1048576 / 4000.0, "one channel's wire");
  cr_expect_eq(one.channels, 1);
  /* One thread runs 4 channels in turn: 4x the steps, the same bytes. */
  struct rcc_channel_model host = {.max = 4, .serial = 1};
  struct rcc_prediction p = rcc_model_channels(one, &t, 4, &host);
  expect_near(p.latency_us, 4 * 12.0, "serial channels' latency");
  expect_near(p.bandwidth_us, one.bandwidth_us, "serial channels' bandwidth");
  cr_expect_eq(p.channels, 4);
  /* Engines of a quarter of the link's rate each, running at once: one is
   * 4x slower than the wire, two 2x, four keep up, eight no faster. */
  struct rcc_channel_model dev = {
      .max = 8, .beta_us_per_byte = 4 * hand_link.beta_us_per_byte};
  p = rcc_model_channels(one, &t, 1, &dev);
  expect_near(p.engine_us, 4 * one.wire_us, "one engine");
  expect_near(p.bandwidth_us, 4 * one.wire_us + one.reduce_us, "one engine bw");
  expect_near(p.latency_us, one.latency_us, "parallel channels' latency");
  p = rcc_model_channels(one, &t, 2, &dev);
  expect_near(p.bandwidth_us, 2 * one.wire_us + one.reduce_us, "two engines");
  p = rcc_model_channels(one, &t, 4, &dev);
  expect_near(p.bandwidth_us, one.bandwidth_us, "four engines keep up");
  p = rcc_model_channels(one, &t, 8, &dev);
  expect_near(p.bandwidth_us, one.bandwidth_us, "eight: the wire bounds");
}

/* The channels the choice gives the winner of an allreduce of S bytes at
 * n = 4 on the hand link (shared memory, host or device buffers). */
static int channels_of(double S, struct rcc_channel_model ch, int device,
                       int *alg) {
  struct rcc_candidate cand[RCC_MAX_CANDIDATES];
  struct rcc_model_input in = {
      .coll = RCC_COLL_ALLREDUCE, .nranks = 4, .bytes = S,
      .ring_link = hand_link, .all_link = hand_link,
      .gamma_us_per_byte = hand_gamma, .ring_chunk_bytes = 65536,
      .all_chunk_bytes = 65536, .board_bytes = device ? 0 : 65536,
      .device = device, .forced = RINGCC_ALGO_AUTO, .channels = ch};
  int w;
  rcc_model_choose(&in, cand, &w);
  *alg = cand[w].alg;
  return cand[w].pred.channels;
}

Test(choice, channels) {
  int alg;
  /* Host buffers: one thread; more channels only add steps. */
  struct rcc_channel_model host = {.max = 8, .serial = 1,
                                   .min_bytes = 65536};
  cr_expect_eq(channels_of(64 << 20, host, 0, &alg), 1);
  cr_expect_eq(alg, RCC_ALG_RING);
  /* RINGCC_NCHANNELS: every FIFO call on all of them, the board on one. */
  host.exact = 1;
  cr_expect_eq(channels_of(64 << 20, host, 0, &alg), 8);
  cr_expect_eq(channels_of(8, host, 0, &alg), 1);
  cr_expect_eq(alg, RCC_ALG_BOARD);
  /* Device buffers, 16 blocks that together keep up with the link (as the
   * tuner assumes): one channel per 64 KiB, up to 16. */
  struct rcc_channel_model dev = {
      .max = 16, .beta_us_per_byte = 16 * hand_link.beta_us_per_byte,
      .min_bytes = 65536};
  cr_expect_eq(channels_of(8, dev, 1, &alg), 1);
  cr_expect_eq(channels_of(65536, dev, 1, &alg), 1);
  cr_expect_eq(channels_of(256 << 10, dev, 1, &alg), 4);
  cr_expect_eq(channels_of(1 << 20, dev, 1, &alg), 16);
  cr_expect_eq(channels_of(64 << 20, dev, 1, &alg), 16);
  cr_expect_eq(alg, RCC_ALG_RING);
  /* Blocks as fast as the link: one is enough; ties go to fewer. */
  dev.beta_us_per_byte = hand_link.beta_us_per_byte;
  cr_expect_eq(channels_of(64 << 20, dev, 1, &alg), 1);
}

/* ---- the choice ---------------------------------------------------------------------- */

static int winner_on(double bytes, int n, int forced, double slot,
                     int link_type, int network_only) {
  struct rcc_candidate cand[RCC_MAX_CANDIDATES];
  int winner;
  struct rcc_model_input in = {.coll = RCC_COLL_ALLREDUCE, .nranks = n,
                               .bytes = bytes, .ring_link = hand_link,
                               .all_link = hand_link,
                               .gamma_us_per_byte = hand_gamma,
                               .ring_chunk_bytes = slot, .all_chunk_bytes = slot,
                               /* one host: the board */
                               .board_bytes = link_type == RCC_LINK_SHM ? slot
                                                                        : 0,
                               .forced = forced, .all_link_type = link_type,
                               .network_only = network_only};
  /* ring, one-shot, one-shot board, tree, recursive doubling, Rabenseifner,
   * cross-memory attach, zero-copy, hierarchical zero-copy, device
   * zero-copy (the last three never runnable here: nothing is registered) */
  cr_assert(rcc_model_choose(&in, cand, &winner) == 10);
  return cand[winner].alg;
}

/* The hand link as shared memory, and as TCP with 64 KiB slots. */
static int winner_alg(double bytes, int n, int forced, double slot) {
  return winner_on(bytes, n, forced, slot, RCC_LINK_SHM, 0);
}
static int tcp_winner(double bytes, int n, int forced) {
  return winner_on(bytes, n, forced, 65536, RCC_LINK_TCP, 1);
}

Test(choice, rabenseifner_over_the_network_only) {
  /* Where every edge is a network link the model decides: at a power of two
   * it has the ring's bytes in fewer steps (n = 4, 1 MiB: 4 steps of the
   * hand link's 2 us against 6); at n = 6 its folds move 2S more than the
   * ring at 64 MiB. With a shared-memory edge anywhere (one host, or hosts
   * of several ranks) it runs only when forced, at any size. */
  cr_expect_eq(tcp_winner(1 << 20, 4, RINGCC_ALGO_AUTO), RCC_ALG_RABENSEIFNER);
  cr_expect_eq(tcp_winner(64 << 20, 8, RINGCC_ALGO_AUTO), RCC_ALG_RABENSEIFNER);
  cr_expect_eq(tcp_winner(64 << 20, 6, RINGCC_ALGO_AUTO), RCC_ALG_RING);
  cr_expect_eq(tcp_winner(1 << 20, 4, RINGCC_ALGO_RING), RCC_ALG_RING);
  cr_expect_eq(winner_on(1 << 20, 4, RINGCC_ALGO_AUTO, 65536, RCC_LINK_TCP, 0),
               RCC_ALG_RING);
  cr_expect_eq(winner_alg(64 << 20, 8, RINGCC_ALGO_AUTO, 1 << 20),
               RCC_ALG_RING);
  cr_expect_eq(tcp_winner(64 << 20, 6, RINGCC_ALGO_RABENSEIFNER),
               RCC_ALG_RABENSEIFNER);
  cr_expect_eq(winner_alg(8, 8, RINGCC_ALGO_RABENSEIFNER, 1 << 20),
               RCC_ALG_RABENSEIFNER);
}

Test(choice, direct_then_ring_as_size_grows) {
  /* Shared memory (the hand link is shm). n = 4: one-shot 3 + 1.25e-3 S
   * ((n-1)/2 steps on the board), recursive doubling 8 + 7.5e-4 S (two
   * steps per exchange on shm), tree 12 + 6.25e-4 S, ring 12 + 4.6875e-4 S
   * (us): one-shot below 10000 B, recursive doubling to 14222 B, the ring
   * after */
  cr_expect_eq(winner_alg(8, 4, RINGCC_ALGO_AUTO, 1 << 20), RCC_ALG_BOARD);
  cr_expect_eq(winner_alg(8192, 4, RINGCC_ALGO_AUTO, 1 << 20), RCC_ALG_BOARD);
  cr_expect_eq(winner_alg(12288, 4, RINGCC_ALGO_AUTO, 1 << 20),
               RCC_ALG_RECDOUBLING);
  cr_expect_eq(winner_alg(16384, 4, RINGCC_ALGO_AUTO, 1 << 20), RCC_ALG_RING);
  cr_expect_eq(winner_alg(64 << 20, 4, RINGCC_ALGO_AUTO, 1 << 20), RCC_ALG_RING);
  /* n = 8: one-shot 7 + 2.75e-3 S, recursive doubling 12 + 1.125e-3 S,
   * tree 18 + 6.25e-4 S, ring 28 + 5.46875e-4 S: one-shot below 3077 B,
   * recursive doubling to 12000 B, tree to 128000 B, ring after */
  cr_expect_eq(winner_alg(8, 8, RINGCC_ALGO_AUTO, 1 << 20), RCC_ALG_BOARD);
  cr_expect_eq(winner_alg(2048, 8, RINGCC_ALGO_AUTO, 1 << 20), RCC_ALG_BOARD);
  cr_expect_eq(winner_alg(4096, 8, RINGCC_ALGO_AUTO, 1 << 20),
               RCC_ALG_RECDOUBLING);
  cr_expect_eq(winner_alg(8192, 8, RINGCC_ALGO_AUTO, 1 << 20),
               RCC_ALG_RECDOUBLING);
  cr_expect_eq(winner_alg(65536, 8, RINGCC_ALGO_AUTO, 1 << 20), RCC_ALG_TREE);
  cr_expect_eq(winner_alg(256 << 10, 8, RINGCC_ALGO_AUTO, 1 << 20), RCC_ALG_RING);
  cr_expect_eq(winner_alg(64 << 20, 8, RINGCC_ALGO_AUTO, 1 << 20), RCC_ALG_RING);
  /* Monotone: once the ring wins, it keeps winning; one-shot never returns. */
  int seen_ring = 0, seen_other = 0;
  for (double S = 8; S <= 1 << 30; S *= 2) {
    int a = winner_alg(S, 4, RINGCC_ALGO_AUTO, 1 << 20);
    if (seen_ring)
      cr_expect_eq(a, RCC_ALG_RING, "at %g B the ring lost again", S);
    if (a != RCC_ALG_BOARD)
      seen_other = 1;
    else
      cr_expect(!seen_other, "one-shot wins again at %g B", S);
    seen_ring |= a == RCC_ALG_RING;
  }
  /* One-shot only fits one slot; RINGCC_ALGO forces where it can run. */
  cr_expect_eq(winner_alg(8, 8, RINGCC_ALGO_AUTO, 4), RCC_ALG_TREE);
  cr_expect_eq(winner_alg(8, 4, RINGCC_ALGO_RING, 1 << 20), RCC_ALG_RING);
  cr_expect_eq(winner_alg(64, 4, RINGCC_ALGO_RECDOUBLING, 1 << 20),
               RCC_ALG_RECDOUBLING);
  cr_expect_eq(winner_alg(4 << 20, 4, RINGCC_ALGO_RECDOUBLING, 1 << 20),
               RCC_ALG_RING);
  cr_expect_eq(winner_alg(1 << 20, 4, RINGCC_ALGO_DIRECT, 1 << 20),
               RCC_ALG_BOARD);
  cr_expect_eq(winner_alg(4 << 20, 4, RINGCC_ALGO_DIRECT, 1 << 20),
               RCC_ALG_RING);
  cr_expect_eq(winner_alg(64 << 20, 4, RINGCC_ALGO_TREE, 1 << 20), RCC_ALG_TREE);
}

/* Through real communicators: the library decides as the model does. */
struct choice_result {
  int algo[4];
  size_t chunk[4];
  int channels;
  int model_is_default;
};

static const size_t choice_sizes[4] = {8, 1024, 1 << 20, 64 << 20};

static int choice_body(h_ctx_t *ctx) {
  struct choice_result *res = (struct choice_result *)ctx->arg + ctx->rank;
  struct rcc_tuning t;
  res->model_is_default = memcmp(&ctx->comm->tuner->model, &rcc_model_defaults,
                                 sizeof(rcc_model_defaults)) == 0;
  for (int i = 0; i < 4; i++) {
    rcc_tuner_choose(ctx->comm, RCC_COLL_ALLREDUCE, choice_sizes[i], 0, &t);
    res->algo[i] = t.alg;
    res->chunk[i] = t.chunk_bytes;
    res->channels = t.channels;
  }
  /* And the calls run: every collective goes through the tuner. */
  float x[256], y[256];
  for (int i = 0; i < 256; i++)
    x[i] = (float)ctx->rank;
  if (!h_ok(ctx, ringcc_allreduce(x, y, 256, RINGCC_FLOAT32, RINGCC_SUM,
                                  ctx->comm, NULL), "allreduce"))
    return 1;
  for (int i = 0; i < 256; i++)
    if (y[i] != 6.0f)
      return h_fail(ctx, "allreduce element %d is %g, want 6", i, y[i]);
  return !h_ok(ctx, ringcc_bcast(x, 256, RINGCC_FLOAT32, 0, ctx->comm, NULL),
               "bcast");
}

Test(choice, through_communicators, .timeout = 120) {
  struct choice_result *res = h_shared_alloc(4 * sizeof(*res));
  setenv("RINGCC_TUNER_FILE", "none", 1);
  cr_assert(h_run_simple(4, choice_body, res, 60));
  for (int r = 0; r < 4; r++) {
    cr_expect(res[r].model_is_default, "rank %d: not the defaults", r);
    cr_expect_eq(res[r].algo[0], RCC_ALG_BOARD, "rank %d, 8 B", r);
    cr_expect_eq(res[r].algo[3], RCC_ALG_RING, "rank %d, 64 MiB", r);
    for (int i = 0; i < 4; i++)
      cr_expect_eq(res[r].algo[i], res[0].algo[i], "ranks 0 and %d disagree",
                   r);
    cr_expect_eq(res[r].chunk[3], 65536, "chunk = one shm slot");
    cr_expect_eq(res[r].channels, 1);
  }
  h_shared_free(res, 4 * sizeof(*res));
}

/* Every collective logs its prediction under RINGCC_DEBUG_SUBSYS=TUNING. */
static int every_coll_body(h_ctx_t *ctx) {
  float in[64] = {0}, out[64 * 2];
  ringcc_comm_t c = ctx->comm;
  return !(h_ok(ctx, ringcc_allreduce(in, out, 4, RINGCC_FLOAT32, RINGCC_SUM,
                                      c, NULL), "allreduce") &&
           h_ok(ctx, ringcc_reduce_scatter(in, out, 2, RINGCC_FLOAT32,
                                           RINGCC_SUM, c, NULL),
                "reduce_scatter") &&
           h_ok(ctx, ringcc_allgather(in, out, 2, RINGCC_FLOAT32, c, NULL),
                "allgather") &&
           h_ok(ctx, ringcc_bcast(out, 4, RINGCC_FLOAT32, 0, c, NULL), "bcast") &&
           h_ok(ctx, ringcc_reduce(in, out, 4, RINGCC_FLOAT32, RINGCC_SUM, 1, c,
                                   NULL), "reduce") &&
           h_ok(ctx, ringcc_alltoall(in, out, 2, RINGCC_FLOAT32, c, NULL),
                "alltoall") &&
           h_ok(ctx, ringcc_barrier(c, NULL), "barrier"));
}

Test(choice, tuning_log_for_every_collective, .timeout = 120) {
  char log[128], cmd[300], out[65536];
  tmp_path(log, sizeof log, "tuning.log");
  setenv("RINGCC_TUNER_FILE", "none", 1);
  setenv("RINGCC_DEBUG", "INFO", 1);
  setenv("RINGCC_DEBUG_SUBSYS", "TUNING", 1);
  fflush(stderr);
  int saved = dup(2);
  FILE *f = fopen(log, "w");
  cr_assert(f != NULL);
  dup2(fileno(f), 2);
  bool passed = h_run_simple(2, every_coll_body, NULL, 60);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  fclose(f);
  cr_assert(passed);
  snprintf(cmd, sizeof cmd, "grep 'RINGCC INFO TUNING' %s", log);
  run_cmd(cmd, out, sizeof out);
  static const char *const want[] = {
      "TUNING allreduce S=16 B, 2 ranks (ring edges shm, all edges shm): ring ",
      "-> one-shot board, chunk 65536 B, 1 channel",
      "TUNING reduce_scatter S=16 B, 2 ranks", "TUNING allgather S=16 B",
      "TUNING bcast S=16 B", "-> chain, chunk",
      "TUNING reduce S=16 B", "TUNING alltoall S=16 B", "-> pairwise",
      "TUNING barrier S=0 B", "-> dissemination",
      "(latency 2.00 us + bandwidth "};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    cr_expect(strstr(out, want[i]) != NULL, "no '%s' in the TUNING log:\n%s",
              want[i], out);
  unlink(log);
}

/* ---- --explain ---------------------------------------------------------------------- */

static char *explain_text(int coll, int n) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert(f != NULL);
  cr_assert(rcc_model_explain(f, coll, n) == 0);
  fclose(f);
  return buf;
}

/* The table part only: from the header line to the blank line after it. */
static void expect_table(int coll, int n, const char *want) {
  char *text = explain_text(coll, n);
  char *table = strstr(text, "| step |");
  cr_assert(table != NULL, "no table in:\n%s", text);
  char *end = strstr(table, "\n\n");
  if (end)
    end[1] = '\0';
  cr_expect_str_eq(table, want, "%s n=%d:\n%s", rcc_coll_name(coll), n, table);
  free(text);
}

Test(explain, reduce_scatter_n4_is_the_docs_table) {
  expect_table(RCC_COLL_REDUCE_SCATTER, 4,
"| step | kind | rank 0 | rank 1 | rank 2 | rank 3 |\n"
"|---|---|---|---|---|---|\n"
"| 0 | send | send B3(0) | send B0(1) | send B1(2) | send B2(3) |\n"
"| 1 | recvReduceSend | recv B2(3), +own, send B2(3,0) | recv B3(0), +own, send B3(0,1) | recv B0(1), +own, send B0(1,2) | recv B1(2), +own, send B1(2,3) |\n"
"| 2 | recvReduceSend | recv B1(2,3), +own, send B1(2,3,0) | recv B2(3,0), +own, send B2(3,0,1) | recv B3(0,1), +own, send B3(0,1,2) | recv B0(1,2), +own, send B0(1,2,3) |\n"
"| 3 | recvReduceCopy | recv B0(1,2,3), +own \xe2\x86\x92 **B0** | recv B1(2,3,0), +own \xe2\x86\x92 **B1** | recv B2(3,0,1), +own \xe2\x86\x92 **B2** | recv B3(0,1,2), +own \xe2\x86\x92 **B3** |\n");
}

Test(explain, allreduce_n3) {
  expect_table(RCC_COLL_ALLREDUCE, 3,
"| step | kind | rank 0 | rank 1 | rank 2 |\n"
"|---|---|---|---|---|\n"
"| 0 | send | send C2(0) | send C0(1) | send C1(2) |\n"
"| 1 | recvReduceSend | recv C1(2), +own, send C1(2,0) | recv C2(0), +own, send C2(0,1) | recv C0(1), +own, send C0(1,2) |\n"
"| 2 | recvReduceCopySend | recv C0(1,2), +own \xe2\x86\x92 **C0**, send it | recv C1(2,0), +own \xe2\x86\x92 **C1**, send it | recv C2(0,1), +own \xe2\x86\x92 **C2**, send it |\n"
"| 3 | recvCopySend | recv **C2**, copy, send it | recv **C0**, copy, send it | recv **C1**, copy, send it |\n"
"| 4 | recv | recv **C1**, copy | recv **C2**, copy | recv **C0**, copy |\n");
}

Test(explain, allreduce_n4) {
  expect_table(RCC_COLL_ALLREDUCE, 4,
"| step | kind | rank 0 | rank 1 | rank 2 | rank 3 |\n"
"|---|---|---|---|---|---|\n"
"| 0 | send | send C3(0) | send C0(1) | send C1(2) | send C2(3) |\n"
"| 1 | recvReduceSend | recv C2(3), +own, send C2(3,0) | recv C3(0), +own, send C3(0,1) | recv C0(1), +own, send C0(1,2) | recv C1(2), +own, send C1(2,3) |\n"
"| 2 | recvReduceSend | recv C1(2,3), +own, send C1(2,3,0) | recv C2(3,0), +own, send C2(3,0,1) | recv C3(0,1), +own, send C3(0,1,2) | recv C0(1,2), +own, send C0(1,2,3) |\n"
"| 3 | recvReduceCopySend | recv C0(1,2,3), +own \xe2\x86\x92 **C0**, send it | recv C1(2,3,0), +own \xe2\x86\x92 **C1**, send it | recv C2(3,0,1), +own \xe2\x86\x92 **C2**, send it | recv C3(0,1,2), +own \xe2\x86\x92 **C3**, send it |\n"
"| 4 | recvCopySend | recv **C3**, copy, send it | recv **C0**, copy, send it | recv **C1**, copy, send it | recv **C2**, copy, send it |\n"
"| 5 | recvCopySend | recv **C2**, copy, send it | recv **C3**, copy, send it | recv **C0**, copy, send it | recv **C1**, copy, send it |\n"
"| 6 | recv | recv **C1**, copy | recv **C2**, copy | recv **C3**, copy | recv **C0**, copy |\n");
}

Test(explain, allgather_n3_and_n4) {
  expect_table(RCC_COLL_ALLGATHER, 3,
"| step | kind | rank 0 | rank 1 | rank 2 |\n"
"|---|---|---|---|---|\n"
"| 0 | copySend | copy own B0, send it | copy own B1, send it | copy own B2, send it |\n"
"| 1 | recvCopySend | recv B2, copy, send it | recv B0, copy, send it | recv B1, copy, send it |\n"
"| 2 | recv | recv B1, copy | recv B2, copy | recv B0, copy |\n");
  expect_table(RCC_COLL_ALLGATHER, 4,
"| step | kind | rank 0 | rank 1 | rank 2 | rank 3 |\n"
"|---|---|---|---|---|---|\n"
"| 0 | copySend | copy own B0, send it | copy own B1, send it | copy own B2, send it | copy own B3, send it |\n"
"| 1 | recvCopySend | recv B3, copy, send it | recv B0, copy, send it | recv B1, copy, send it | recv B2, copy, send it |\n"
"| 2 | recvCopySend | recv B2, copy, send it | recv B3, copy, send it | recv B0, copy, send it | recv B1, copy, send it |\n"
"| 3 | recv | recv B1, copy | recv B2, copy | recv B3, copy | recv B0, copy |\n");
}

Test(explain, reduce_scatter_n3_and_bytes) {
  expect_table(RCC_COLL_REDUCE_SCATTER, 3,
"| step | kind | rank 0 | rank 1 | rank 2 |\n"
"|---|---|---|---|---|\n"
"| 0 | send | send B2(0) | send B0(1) | send B1(2) |\n"
"| 1 | recvReduceSend | recv B1(2), +own, send B1(2,0) | recv B2(0), +own, send B2(0,1) | recv B0(1), +own, send B0(1,2) |\n"
"| 2 | recvReduceCopy | recv B0(1,2), +own \xe2\x86\x92 **B0** | recv B1(2,0), +own \xe2\x86\x92 **B1** | recv B2(0,1), +own \xe2\x86\x92 **B2** |\n");
  char *text = explain_text(RCC_COLL_ALLREDUCE, 4);
  cr_expect(strstr(text, "Each rank sends 6 messages of S/4 bytes") != NULL,
            "%s", text);
  cr_expect(strstr(text, "WARNING") == NULL, "%s", text);
  free(text);
  for (int n = 2; n <= RCC_EXPLAIN_MAX_RANKS; n++) { /* consistent for all n */
    text = explain_text(RCC_COLL_ALLREDUCE, n);
    cr_expect(strstr(text, "WARNING") == NULL, "n=%d:\n%s", n, text);
    free(text);
  }
  FILE *devnull = fopen("/dev/null", "w");
  cr_expect(rcc_model_explain(devnull, RCC_COLL_BCAST, 4) != 0);
  cr_expect(rcc_model_explain(devnull, RCC_COLL_ALLREDUCE, 1) != 0);
  cr_expect(rcc_model_explain(devnull, RCC_COLL_ALLREDUCE,
                              RCC_EXPLAIN_MAX_RANKS + 1) != 0);
  fclose(devnull);
}

/* ---- the file --------------------------------------------------------------------------- */

static const char *const good_file =
    "# a comment\n"
    "version=1\n"
    "host=node1\n"
    "date=2026-11-29T19:40:00Z\n"
    "nranks=4\n"
    "shm.alpha_us=3.5\n"
    "  shm.beta_ns_per_byte = 0.5  \n"
    "shm.beta_mem_ns_per_byte=1.5\n"
    "\n"
    "tcp.alpha_us=45\n"
    "tcp.beta_ns_per_byte=2\n"
    "tcp.beta_mem_ns_per_byte=0\n"
    "gamma_ns_per_byte=0.25\n"
    "cache_bytes=33554432\n";

Test(file, good_file_and_round_trip) {
  char path[128], err[512];
  struct rcc_model m = rcc_model_defaults;
  struct rcc_tuner_file_info info;
  tmp_path(path, sizeof path, "good.conf");
  write_text(path, good_file);
  cr_assert_eq(rcc_tuner_read_file(path, &m, &info, err, sizeof err), 1, "%s",
               err);
  expect_near(m.link[RCC_LINK_SHM].alpha_us, 3.5, "shm alpha");
  expect_near(m.link[RCC_LINK_SHM].beta_us_per_byte, 0.5e-3, "shm beta");
  expect_near(m.link[RCC_LINK_TCP].alpha_us, 45, "tcp alpha");
  expect_near(m.link[RCC_LINK_TCP].beta_us_per_byte, 2e-3, "tcp beta");
  expect_near(m.gamma_us_per_byte, 0.25e-3, "gamma");
  expect_near(m.link[RCC_LINK_SHM].beta_mem_us_per_byte, 1.5e-3, "shm beta_mem");
  expect_near(m.link[RCC_LINK_TCP].beta_mem_us_per_byte, 0, "tcp beta_mem");
  expect_near(m.cache_bytes, 33554432, "cache");
  cr_expect_str_eq(info.host, "node1");
  cr_expect_eq(info.nranks, 4);
  /* write, read back */
  char dir[160], path2[200];
  tmp_path(dir, sizeof dir, "dir");
  snprintf(path2, sizeof path2, "%s/sub/tuner.conf", dir);
  struct rcc_model back = rcc_model_defaults;
  cr_assert_eq(rcc_tuner_write_file(path2, &m, &info, "line one\nline two",
                                    err, sizeof err), RINGCC_SUCCESS, "%s", err);
  cr_assert_eq(rcc_tuner_read_file(path2, &back, &info, err, sizeof err), 1,
               "%s", err);
  cr_expect(memcmp(&back, &m, sizeof m) == 0, "round trip changed values");
  unlink(path2);
  snprintf(path2, sizeof path2, "%s/sub", dir);
  rmdir(path2);
  rmdir(dir);
  /* no file */
  cr_expect_eq(rcc_tuner_read_file("/nonexistent/ringcc/tuner.conf", &m, &info,
                                   err, sizeof err), 0);
  unlink(path);
}

static void expect_malformed(const char *name, const char *text,
                             const char *err_has) {
  char path[128], err[512] = "";
  struct rcc_model m = rcc_model_defaults;
  struct rcc_tuner_file_info info;
  tmp_path(path, sizeof path, name);
  write_text(path, text);
  int r = rcc_tuner_read_file(path, &m, &info, err, sizeof err);
  cr_expect_eq(r, -1, "%s: read as %d", name, r);
  cr_expect(memcmp(&m, &rcc_model_defaults, sizeof m) == 0,
            "%s: the model changed", name);
  cr_expect(strstr(err, err_has) != NULL, "%s: '%s' lacks '%s'", name, err,
            err_has);
  unlink(path);
}

Test(file, malformed_files) {
  expect_malformed("noversion", "shm.alpha_us=1\n", "version");
  expect_malformed("version2", "version=2\n", "unsupported version");
  expect_malformed("noeq", "version=1\nshm.alpha_us 3\n", "line 2");
  expect_malformed("notnumber", "version=1\nshm.alpha_us=abc\n", "line 2");
  expect_malformed("negative", "version=1\nshm.alpha_us=-3\n", "shm.alpha_us");
  expect_malformed("zerobeta", "version=1\nshm.beta_ns_per_byte=0\n",
                   "shm.beta_ns_per_byte");
  expect_malformed("infbeta", "version=1\ntcp.beta_ns_per_byte=inf\n", "line 2");
  expect_malformed("nan", "version=1\ngamma_ns_per_byte=nan\n", "line 2");
  expect_malformed("trailing", "version=1\nshm.alpha_us=3us\n", "line 2");
  expect_malformed("unknown", "version=1\nshm.alpah_us=3\n", "unknown key");
  expect_malformed("missing", "version=1\nshm.alpha_us=3\n",
                   "no shm.beta_ns_per_byte");
  expect_malformed("binary", "\x01\x02\xff\xfe garbage\n", "line 1");
  char longline[600];
  memset(longline, 'x', sizeof longline);
  memcpy(longline, "version=1\nhost=", 15);
  longline[sizeof longline - 2] = '\n';
  longline[sizeof longline - 1] = '\0';
  expect_malformed("longline", longline, "longer than");
  char path[128], err[512];
  struct rcc_model m = rcc_model_defaults;
  struct rcc_tuner_file_info info;
  tmp_path(path, sizeof path, "adir");
  mkdir(path, 0700);
  cr_expect_eq(rcc_tuner_read_file(path, &m, &info, err, sizeof err), -1);
  rmdir(path);
}

/* A communicator whose file is malformed: a WARN, the defaults, no crash. */
static int malformed_body(h_ctx_t *ctx) {
  int *ok = (int *)ctx->arg + ctx->rank;
  *ok = memcmp(&ctx->comm->tuner->model, &rcc_model_defaults,
               sizeof(rcc_model_defaults)) == 0;
  float x = 1, y = 0;
  if (!h_ok(ctx, ringcc_allreduce(&x, &y, 1, RINGCC_FLOAT32, RINGCC_SUM,
                                  ctx->comm, NULL), "allreduce"))
    return 1;
  return y == 2.0f ? 0 : h_fail(ctx, "allreduce gave %g", y);
}

Test(file, malformed_file_gives_defaults, .timeout = 120) {
  char path[128], log[128], cmd[600], out[8192];
  tmp_path(path, sizeof path, "bad.conf");
  tmp_path(log, sizeof log, "bad.log");
  write_text(path, "version=1\nshm.alpha_us=oops\n");
  setenv("RINGCC_TUNER_FILE", path, 1);
  int *ok = h_shared_alloc(2 * sizeof(int));
  /* The ranks' stderr goes to a file, to find the warning in it. */
  fflush(stderr);
  int saved = dup(2);
  FILE *f = fopen(log, "w");
  cr_assert(f != NULL);
  dup2(fileno(f), 2);
  bool passed = h_run_simple(2, malformed_body, ok, 60);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  fclose(f);
  cr_assert(passed);
  cr_expect(ok[0] && ok[1], "a rank did not use the defaults");
  snprintf(cmd, sizeof cmd, "cat %s", log);
  run_cmd(cmd, out, sizeof out);
  cr_expect(strstr(out, "RINGCC WARN tuner:") != NULL &&
                strstr(out, "line 2") != NULL && strstr(out, "defaults") != NULL,
            "no warning naming the line:\n%s", out);
  h_shared_free(ok, 2 * sizeof(int));
  unlink(path);
  unlink(log);
}

/* ---- the fit -------------------------------------------------------------------------------- */

Test(fit, recovers_exact_values) {
  struct rcc_fit_sample s[32];
  int n = 0;
  struct rcc_model truth = rcc_model_defaults, fitted = rcc_model_defaults;
  char err[256];
  truth.link[RCC_LINK_SHM] = (struct rcc_link_cost){3.0, 1.0 / 2500.0,
                                                     1.0 / 700.0};
  truth.link[RCC_LINK_TCP] = (struct rcc_link_cost){40.0, 1.0 / 900.0, 0};
  truth.gamma_us_per_byte = 1.0 / 6000.0;
  truth.cache_bytes = 32.0 * 1048576; /* 1 MiB in cache, 32 MiB beyond */
  fitted.cache_bytes = truth.cache_bytes;
  static const double sizes[] = {8, 1024, 65536, 1 << 20, 32 << 20};
  for (int l = 0; l < RCC_NUM_LINKS; l++)
    for (int i = 0; i < 5; i++)
      for (int k = 0; k < 3; k++) {
        static const int coll[] = {RCC_COLL_ALLREDUCE, RCC_COLL_ALLREDUCE,
                                   RCC_COLL_SEND};
        static const int alg[] = {RCC_ALG_RING, RCC_ALG_ONESHOT, RCC_ALG_P2P};
        struct rcc_cost_terms t;
        s[n] = (struct rcc_fit_sample){coll[k], alg[k], l, 4, sizes[i], 65536, 0};
        rcc_model_terms(coll[k], alg[k], 4, sizes[i], 65536, &t);
        rcc_model_link_terms(l, alg[k], 4, &t);
        /* TCP: beyond the cache at the same beta, so one beta fits */
        s[n].time_us = rcc_prediction_total(rcc_model_predict(
            &t, &truth.link[l], truth.gamma_us_per_byte, truth.cache_bytes));
        n++;
      }
  /* gamma fitted with the rest (ring and one-shot weigh it differently) */
  cr_assert_eq(rcc_model_fit(s, n, 1, &fitted, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  for (int l = 0; l < RCC_NUM_LINKS; l++) {
    cr_expect(fabs(fitted.link[l].alpha_us / truth.link[l].alpha_us - 1) < 1e-6,
              "%s alpha %g", rcc_link_name(l), fitted.link[l].alpha_us);
    cr_expect(fabs(fitted.link[l].beta_us_per_byte /
                       truth.link[l].beta_us_per_byte - 1) < 1e-6,
              "%s beta %g", rcc_link_name(l), fitted.link[l].beta_us_per_byte);
  }
  cr_expect(fabs(fitted.link[RCC_LINK_SHM].beta_mem_us_per_byte * 700 - 1) <
                1e-6, "shm beta_mem %g",
            fitted.link[RCC_LINK_SHM].beta_mem_us_per_byte);
  /* TCP's samples beyond the cache fit beta_mem = beta */
  cr_expect(fabs(fitted.link[RCC_LINK_TCP].beta_mem_us_per_byte * 900 - 1) <
                1e-6, "tcp beta_mem %g",
            fitted.link[RCC_LINK_TCP].beta_mem_us_per_byte);
  cr_expect(fabs(fitted.gamma_us_per_byte / truth.gamma_us_per_byte - 1) < 1e-6,
            "gamma %g", fitted.gamma_us_per_byte);
  /* gamma given: the same alpha and beta */
  fitted = rcc_model_defaults;
  fitted.gamma_us_per_byte = truth.gamma_us_per_byte;
  fitted.cache_bytes = truth.cache_bytes;
  cr_assert_eq(rcc_model_fit(s, n, 0, &fitted, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  cr_expect(fabs(fitted.link[RCC_LINK_TCP].beta_us_per_byte /
                     truth.link[RCC_LINK_TCP].beta_us_per_byte - 1) < 1e-6);
  cr_expect_eq(fitted.gamma_us_per_byte, truth.gamma_us_per_byte);
  /* noisy times (+-30%, fixed pattern): still close, all positive */
  for (int i = 0; i < n; i++)
    s[i].time_us *= 1.0 + 0.3 * ((i * 7) % 5 - 2) / 2.0;
  fitted = rcc_model_defaults;
  fitted.cache_bytes = truth.cache_bytes;
  cr_assert_eq(rcc_model_fit(s, n, 1, &fitted, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  for (int l = 0; l < RCC_NUM_LINKS; l++)
    cr_expect(fitted.link[l].beta_us_per_byte > 0 &&
                  fitted.link[l].alpha_us >= 0 &&
                  fabs(fitted.link[l].beta_us_per_byte /
                           truth.link[l].beta_us_per_byte - 1) < 0.5,
              "%s beta %g", rcc_link_name(l), fitted.link[l].beta_us_per_byte);
  /* Nothing measured: nothing to fit. */
  for (int i = 0; i < n; i++)
    s[i].time_us = 0;
  cr_expect_neq(rcc_model_fit(s, n, 1, &fitted, err, sizeof err),
                RINGCC_SUCCESS);
}

/* ---- the tools ------------------------------------------------------------------------------ */

/* The line of out that starts with prefix (a table row), or NULL. */
static const char *row_of(const char *out, const char *prefix) {
  for (const char *line = out; line && *line;) {
    if (strncmp(line, prefix, strlen(prefix)) == 0)
      return line;
    line = strchr(line, '\n');
    line = line ? line + 1 : NULL;
  }
  return NULL;
}

/* Whether the row starting with prefix holds text (before its newline). */
static bool row_has(const char *out, const char *prefix, const char *text) {
  const char *row = row_of(out, prefix);
  if (row == NULL)
    return false;
  const char *end = strchr(row, '\n');
  const char *at = strstr(row, text);
  return at != NULL && (end == NULL || at < end);
}

static const char *us_text(double us, char *buf, size_t len) {
  return rcc_format_us(us, buf, len);
}

Test(tools, ringcc_model_output_and_errors, .timeout = 60) {
  char cmd[1024], out[32768], t[32];
  const char *bin = bin_dir();
  snprintf(cmd, sizeof cmd,
           "RINGCC_TUNER_FILE=none %s/ringcc-model -c allreduce -n 8 -s 16GB "
           "--link nvlink4", bin);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect(strstr(out, "16000000000 bytes") != NULL, "%s", out);
  cr_expect(strstr(out, "450 GB/s per direction (3.6 Tb/s)") != NULL, "%s",
            out);
  cr_expect(strstr(out, "900 GB/s\" is the bidirectional aggregate") != NULL,
            "%s", out);
  cr_expect(strstr(out, "reduction: 1.117 TB/s, on the GPU: the H100 SXM's") !=
                NULL, "%s", out);
  /* The ring's terms, each computed here: 2(n-1)/n S = 28 GB over 450 GB/s,
   * 2(n-1) steps of 3.4 us, (n-1)/n S reduced at 3.35 TB/s / 3. */
  const char *ring = "  ring ";
  cr_expect(row_has(out, ring, "28 GB (1.75 S)"), "%s", out);
  cr_expect(row_has(out, ring, us_text(28e9 / 450e3, t, sizeof t)), "%s", out);
  cr_expect(row_has(out, ring, us_text(14 * 3.4, t, sizeof t)), "%s", out);
  cr_expect(row_has(out, ring, us_text(14e9 * 3 / 3.35e6, t, sizeof t)),
            "%s", out);
  double ring_total = 28e9 / 450e3 + 14 * 3.4 + 14e9 * 3 / 3.35e6;
  cr_expect(row_has(out, ring, us_text(ring_total, t, sizeof t)), "%s", out);
  cr_expect(strstr(out, "winner: ring") != NULL, "%s", out);

  /* The same link typed from a datasheet: bidirectional 900 GB/s, the
   * latency, the GPU. */
  snprintf(cmd, sizeof cmd, "%s/ringcc-model -n 8 -s 16GB --bw 900GB/s "
           "--bidir --lat 3.4 --reduce-bw h100", bin);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect(row_has(out, ring, us_text(ring_total, t, sizeof t)), "%s", out);
  cr_expect(strstr(out, "--bw 900GB/s is a bidirectional figure (both "
                        "directions added), so 450 GB/s per direction") != NULL,
            "%s", out);

  /* --bw alone: no latency, no reduction, both said. */
  snprintf(cmd, sizeof cmd, "%s/ringcc-model -n 8 -s 16GB --bw 900GB/s", bin);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect(strstr(out, "latency: 0 (no --lat given") != NULL, "%s", out);
  cr_expect(strstr(out, "reduction: not counted") != NULL, "%s", out);
  cr_expect(strstr(out, "add --bidir: 450 GB/s per direction") != NULL, "%s",
            out);
  cr_expect(row_has(out, ring, us_text(28e9 / 900e3, t, sizeof t)), "%s", out);
  cr_expect(row_has(out, ring, "0.00 us     0.00 us"), "%s", out);

  /* Bits and bytes: the same link in five spellings. */
  static const char *const same[] = {"400Gb/s", "400Gbps", "400Gbit/s",
                                     "50GB/s", "50GBps"};
  for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s/ringcc-model -c allgather -n 4 -s 1GiB "
             "--bw %s --lat 2", bin, same[i]);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
    cr_expect(strstr(out, "1073741824 bytes") != NULL, "%s", out);
    cr_expect(strstr(out, "bandwidth: 50 GB/s per direction (400 Gb/s)") !=
                  NULL, "%s: %s", same[i], out);
  }
  snprintf(cmd, sizeof cmd, "%s/ringcc-model -n 4 -s 1GiB --bw 32GiB/s", bin);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect(strstr(out, "34.36 GB/s per direction (274.9 Gb/s)") != NULL, "%s",
            out);

  snprintf(cmd, sizeof cmd,
           "RINGCC_TUNER_FILE=none %s/ringcc-model -c allreduce -n 4 -s 8 "
           "--link shm", bin);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect(strstr(out, "winner: one-shot") != NULL, "%s", out);
  cr_expect(strstr(out, "this machine's CPU") != NULL, "%s", out);

  /* A table over rank counts: the ring's total at each n, by hand. */
  snprintf(cmd, sizeof cmd, "%s/ringcc-model -n 8,16,64,512 -s 16GB --link "
           "nvlink4", bin);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  static const int ns[] = {8, 16, 64, 512};
  for (size_t i = 0; i < 4; i++) {
    int n = ns[i];
    char prefix[32];
    double f = (n - 1.0) / n;
    double total = 2 * (n - 1) * 3.4 + 2 * f * 16e9 / 450e3 +
                   f * 16e9 * 3 / 3.35e6;
    snprintf(prefix, sizeof prefix, "  %7d ", n);
    cr_expect(row_has(out, prefix, us_text(total, t, sizeof t)),
              "n = %d: no %s in\n%s", n, t, out);
  }

  /* Hierarchical: 4 hosts of 8 on NVLink 4, NDR between. */
  snprintf(cmd, sizeof cmd, "%s/ringcc-model -s 16GB --hosts 4 --per-host 8",
           bin);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  double hier = 2 * 7 * 3.4 + 2 * 3 * 9.6 + 2 * (7.0 / 8) * 16e9 / 450e3 +
                2 * (3.0 / 4) * 2e9 / 50e3 +
                (7.0 / 8 * 16e9 + 3.0 / 4 * 2e9) * 3 / 3.35e6;
  cr_expect(row_has(out, "  hierarchical ", us_text(hier, t, sizeof t)),
            "no %s in\n%s", t, out);
  /* The flat ring and tree, both on one NDR link: equal where
   * 62*alpha + 31/32*(2 beta + gamma) S = 15*alpha + (2 beta + gamma) S. */
  double cross = (62 - 15) * 9.6 / ((2 / 50e3 + 3 / 3.35e6) / 32);
  char want[128], b[32];
  snprintf(want, sizeof want, "ring (flat) = tree (flat) at S = %s: tree "
           "(flat) faster below", rcc_format_bytes(round(cross), 0, b,
                                                   sizeof b));
  cr_expect(strstr(out, want) != NULL, "no '%s' in\n%s", want, out);
  cr_expect(strstr(out, "fastest at this size: hierarchical") != NULL, "%s",
            out);

  static const struct {
    const char *args, *names;
  } bad[] = {
      {"-n 4 -s 16Gb --link shm", "16Gb"},
      {"-n 4 -s 16X --link shm", "-s"},
      {"-n 4 -s 1M --bw 50G/s --lat 1", "--bw"},
      {"-n 4 -s 1M --bw 50GB/s --lat 1h", "--lat"},
      {"-n 4 -s 1M --link warp9", "warp9"},
      {"-n 1 -s 1M --link shm", "-n"},
      {"-n 4,x -s 1M --link shm", "-n"},
      {"-c allsum -n 4 -s 1M --link shm", "allsum"},
      {"-n 4 -s 1M", "--link"},
      {"-n 4 -s 1M --link nvlink4 --bw 50GB/s", "either"},
      {"-n 4 -s 1M --link nvlink4 --reduce-bw fast", "--reduce-bw"},
      {"-s 1M --hosts 2", "--per-host"},
      {"-n 4 -s 1M --hosts 2 --per-host 2", "-n"},
      {"-n 4 -s 1M --link shm --net ib-ndr", "--hosts"},
      {"-c allgather -s 1M --hosts 2 --per-host 2", "allreduce"},
      {"--explain -c bcast -n 4", "bcast"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s/ringcc-model %s", bin, bad[i].args);
    cr_expect_eq(run_cmd(cmd, out, sizeof out), 2, "%s: status", cmd);
    cr_expect(strstr(out, bad[i].names) != NULL, "%s: message lacks '%s':\n%s",
              cmd, bad[i].names, out);
  }
  snprintf(cmd, sizeof cmd, "%s/ringcc-model --help", bin);
  cr_expect_eq(run_cmd(cmd, out, sizeof out), 0);
  cr_expect(strstr(out, "--explain") != NULL && strstr(out, "--link") != NULL &&
            strstr(out, "--hosts") != NULL && strstr(out, "--bidir") != NULL);
  snprintf(cmd, sizeof cmd, "%s/ringcc-model --explain -c reduce_scatter -n 4",
           bin);
  cr_expect_eq(run_cmd(cmd, out, sizeof out), 0);
  cr_expect(strstr(out, "| 3 | recvReduceCopy | recv B0(1,2,3)") != NULL, "%s",
            out);
}

Test(tools, calibrate_writes_a_file_the_library_reads, .timeout = 600) {
  char cmd[1024], out[16384], path[128], err[512];
  struct rcc_model m = rcc_model_defaults;
  struct rcc_tuner_file_info info;
  tmp_path(path, sizeof path, "calibrated.conf");
  snprintf(cmd, sizeof cmd, "RINGCC_TUNER_FILE=%s %s/ringcc-run -np 2 "
           "--timeout 500 %s/ringcc-bench --calibrate", path, bin_dir(),
           bin_dir());
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect(strstr(out, "# wrote") != NULL, "%s", out);
  cr_assert_eq(rcc_tuner_read_file(path, &m, &info, err, sizeof err), 1, "%s",
               err);
  cr_expect_eq(info.nranks, 2);
  for (int l = 0; l < RCC_NUM_LINKS; l++)
    cr_expect(m.link[l].beta_us_per_byte > 0 && m.link[l].alpha_us >= 0);
  cr_expect(m.gamma_us_per_byte >= 0); /* 0: the fit put it in beta */
  unlink(path);
}
