/*
 * ringcc-model - what libringcc's cost model predicts for a collective.
 *
 *   ringcc-model -c allreduce -n 8 -s 16GB --link nvlink4
 *   ringcc-model -c allgather -n 16 -s 1GiB --bw 400Gb/s --lat 5
 *   ringcc-model -c allreduce -n 4 -s 64KiB --link shm     (this machine)
 *   ringcc-model --explain -c reduce_scatter -n 4
 *
 * Every number comes from the library's own code: the formulas and the
 * choice from lib/tune/model.c (rcc_model_terms, rcc_model_choose), this
 * machine's values from the tuner's file (lib/tune/tuner_file.c), the --explain
 * table from the ring schedule (rcc_plan_ring, rcc_plan_step, through
 * rcc_model_explain). It links libringcc.a (TOOLS_STATIC in the Makefile).
 */
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringcc.h"
#include "board.h"
#include "schedule.h"
#include "tuner.h"

#define PROG_NAME "ringcc-model"
#define EXIT_USAGE 2

/* ---- link presets ----------------------------------------------------------
 *
 * bw: what the model uses, bytes/s per direction (a ring sends to one peer
 * while it receives from another, so one direction is what bounds it).
 * Latencies are per message handed over one edge, as the model's alpha;
 * NCCL's own model (src/graph/tuning.cc, hwLat, Ring/Simple protocol, the
 * one most like libringcc's FIFO steps) uses 3.4 us for NVLink, 5.7 us for
 * PCIe and 9.6 us for the network per step, which we take for NVLink, PCIe
 * and InfiniBand (raw verbs latency is ~1 us, e.g. ib_write_lat on HDR, but
 * a collective step also waits for the proxy and the flag). Kernel TCP over
 * Ethernet: netperf TCP_RR round trips of 25-50 us on 25/100GbE, so ~20 us
 * one way; the wire speed barely changes it.
 */
struct link_preset {
  const char *name;
  const char *what;
  const char *figure; /* the marketed figure and what it means */
  double bw;          /* bytes/s per direction, used by the model */
  double lat_us;
  double reduce_bw;   /* bytes/s of a GPU's reduction; 0: this machine's */
};

static const struct link_preset presets[] = {
    {"nvlink3", "NVLink 3 (A100 SXM, 12 links)",
     "300 GB/s per direction = 12 links x 25 GB/s; NVIDIA's \"600 GB/s\" is "
     "the bidirectional aggregate",
     300e9, 3.4, 2.039e12 / 3},
    {"nvlink4", "NVLink 4 (H100 SXM, 18 links)",
     "450 GB/s per direction = 18 links x 25 GB/s; NVIDIA's \"900 GB/s\" is "
     "the bidirectional aggregate",
     450e9, 3.4, 3.35e12 / 3},
    {"pcie4", "PCIe 4.0 x16",
     "31.5 GB/s per direction raw (16 GT/s x 16 lanes, 128b/130b); ~25 GB/s "
     "per direction achievable (packet overhead), which the model uses",
     25e9, 5.7, 0},
    {"pcie5", "PCIe 5.0 x16",
     "63 GB/s per direction raw (32 GT/s x 16 lanes, 128b/130b); ~50 GB/s "
     "per direction achievable, which the model uses",
     50e9, 5.7, 0},
    {"ib-hdr", "InfiniBand HDR (4x)",
     "200 Gb/s per direction = 25 GB/s (data rate, full duplex)", 25e9, 9.6,
     0},
    {"ib-ndr", "InfiniBand NDR (4x)",
     "400 Gb/s per direction = 50 GB/s (data rate, full duplex)", 50e9, 9.6,
     0},
    {"25gbe", "25 Gigabit Ethernet, kernel TCP",
     "25 Gb/s per direction = 3.125 GB/s (full duplex)", 3.125e9, 20, 0},
    {"100gbe", "100 Gigabit Ethernet, kernel TCP",
     "100 Gb/s per direction = 12.5 GB/s (full duplex)", 12.5e9, 20, 0},
};
#define NUM_PRESETS (int)(sizeof presets / sizeof presets[0])

/* ---- options ---------------------------------------------------------------- */

static const struct {
  const char *name;
  int coll;
} colls[] = {
    {"allreduce", RCC_COLL_ALLREDUCE},   {"reduce_scatter", RCC_COLL_REDUCE_SCATTER},
    {"allgather", RCC_COLL_ALLGATHER},   {"bcast", RCC_COLL_BCAST},
    {"reduce", RCC_COLL_REDUCE},         {"alltoall", RCC_COLL_ALLTOALL},
    {"sendrecv", RCC_COLL_SEND},
};
#define NUM_COLLS (int)(sizeof colls / sizeof colls[0])

struct options {
  int coll;
  const char *coll_name;
  int nranks;
  double bytes;
  const char *size_arg;
  const char *link_name;
  const char *bw_arg, *lat_arg, *reduce_arg, *slot_arg;
  int explain;
};

static void usage(FILE *f) {
  fprintf(f,
"Usage: " PROG_NAME " -c COLL -n RANKS -s SIZE (--link NAME | --bw BW --lat US)\n"
"                    [--reduce-bw BW] [--slot SIZE]\n"
"       " PROG_NAME " --explain -c COLL -n RANKS\n"
"       " PROG_NAME " --list-links\n"
"What libringcc's alpha-beta cost model (the tuner's, lib/tune/model.c) predicts\n"
"for one collective: the bytes each rank sends, the time of each algorithm\n"
"split into latency and bandwidth terms, and the one the tuner would pick.\n"
"\n"
"  -c, --coll COLL     allreduce | reduce_scatter | allgather | bcast |\n"
"                      reduce | alltoall | sendrecv (default allreduce)\n"
"  -n, --nranks N      number of ranks (2 or more)\n"
"  -s, --size SIZE     S in bytes, as ringcc-bench and nccl-tests count it:\n"
"                      the buffer (allreduce, bcast, reduce, sendrecv), the\n"
"                      gathered output (allgather), the whole input\n"
"                      (reduce_scatter), the whole send buffer (alltoall).\n"
"                      16GB = 16e9 bytes, 16GiB = 16*2^30; KB/MB/GB/TB are\n"
"                      powers of 1000, KiB/MiB/GiB/TiB of 1024, and K/M/G/T\n"
"                      alone of 1024 (as ringcc-bench -b/-e); 1.5GiB is fine\n"
"  --link NAME         a link preset (see --list-links): nvlink3 nvlink4\n"
"                      pcie4 pcie5 ib-hdr ib-ndr 25gbe 100gbe, or shm / tcp:\n"
"                      this machine's shared memory or TCP, with the values\n"
"                      of the tuner's file (ringcc-bench --calibrate) or the\n"
"                      library's defaults\n"
"  --bw BW             link bandwidth per direction: 50GB/s or 50GBps (bytes),\n"
"                      400Gb/s, 400Gbit/s or 400Gbps (bits); k M G T are\n"
"                      powers of 1000, Ki Mi Gi Ti of 1024\n"
"  --lat US            latency per message in microseconds (2, 2us, 800ns)\n"
"  --reduce-bw BW      local reduction speed (gamma = 1/BW); default: the\n"
"                      GPU's memory bandwidth / 3 for nvlink presets, else\n"
"                      this machine's (tuner's file or default)\n"
"  --slot SIZE         FIFO slot: the largest one-shot message and the\n"
"                      pipeline chunk (default 64KiB, 1MiB for --link tcp)\n"
"  --explain           print the ring's steps for -n ranks (2 to %d) as the\n"
"                      library's schedule code runs them: allreduce,\n"
"                      reduce_scatter or allgather; no -s or link needed\n"
"  --list-links        print the presets and what their figures mean\n"
"  -h, --help          print this help\n"
"\n"
"Times are the model's, not measurements: alpha*messages on the critical\n"
"path + beta*bytes over one link + gamma*bytes reduced (docs/tuning.md).\n",
          RCC_EXPLAIN_MAX_RANKS);
}

__attribute__((noreturn, format(printf, 1, 2))) static void usage_error(
    const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, PROG_NAME ": ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '" PROG_NAME " --help'.\n");
  exit(EXIT_USAGE);
}

static void list_links(void) {
  printf("%-8s %-34s %-12s %-8s  figure\n", "name", "link", "model bw",
         "latency");
  for (int i = 0; i < NUM_PRESETS; i++) {
    const struct link_preset *p = &presets[i];
    char bw[32];
    printf("%-8s %-34s %-12s %5.1f us  %s\n", p->name, p->what,
           rcc_format_bytes(p->bw, 0, bw, sizeof bw), p->lat_us, p->figure);
  }
  printf("%-8s %-34s %-12s %-8s  %s\n", "shm", "this machine's shared memory",
         "(file)", "(file)", "alpha and beta from the tuner's file");
  printf("%-8s %-34s %-12s %-8s  %s\n", "tcp", "this machine's TCP", "(file)",
         "(file)", "alpha and beta from the tuner's file");
  printf("model bw is bytes per second per direction; GB = 1e9 bytes.\n");
}

static void parse_args(int argc, char **argv, struct options *o) {
  static const struct option longopts[] = {
      {"coll", required_argument, NULL, 'c'},
      {"nranks", required_argument, NULL, 'n'},
      {"size", required_argument, NULL, 's'},
      {"link", required_argument, NULL, 'L'},
      {"bw", required_argument, NULL, 'B'},
      {"lat", required_argument, NULL, 'T'},
      {"reduce-bw", required_argument, NULL, 'R'},
      {"slot", required_argument, NULL, 'S'},
      {"explain", no_argument, NULL, 'E'},
      {"list-links", no_argument, NULL, 'l'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  char why[300];
  int c;

  *o = (struct options){.coll = RCC_COLL_ALLREDUCE, .coll_name = "allreduce"};
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":c:n:s:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'c': {
      int found = -1;
      for (int k = 0; k < NUM_COLLS; k++)
        if (strcmp(optarg, colls[k].name) == 0)
          found = k;
      if (found < 0)
        usage_error("-c '%s': not a collective (allreduce, reduce_scatter, "
                    "allgather, bcast, reduce, alltoall, sendrecv)", optarg);
      o->coll = colls[found].coll;
      o->coll_name = colls[found].name;
      break;
    }
    case 'n': {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (*optarg == '\0' || *end != '\0' || v < 2 || v > 1 << 20)
        usage_error("-n '%s': the number of ranks must be an integer from 2 "
                    "to %d", optarg, 1 << 20);
      o->nranks = (int)v;
      break;
    }
    case 's':
      if (rcc_parse_size(optarg, &o->bytes, why, sizeof why) != 0)
        usage_error("-s: %s", why);
      o->size_arg = optarg;
      break;
    case 'L': o->link_name = optarg; break;
    case 'B': o->bw_arg = optarg; break;
    case 'T': o->lat_arg = optarg; break;
    case 'R': o->reduce_arg = optarg; break;
    case 'S': o->slot_arg = optarg; break;
    case 'E': o->explain = 1; break;
    case 'l': list_links(); exit(0);
    case 'h': usage(stdout); exit(0);
    case ':': usage_error("option %s needs a value", argv[optind - 1]);
    default: usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc)
    usage_error("unexpected argument '%s'", argv[optind]);
}

/* ---- the link ---------------------------------------------------------------- */

struct link {
  char name[64];
  char describe[1400];
  struct rcc_link_cost cost;
  double cache_bytes;
  double gamma_us_per_byte;
  char gamma_from[1400];
  double slot_bytes;
  int type; /* enum rcc_link: tcp where a message costs system calls */
};

/* This machine's model: the tuner's file, else the defaults. */
static void machine_model(struct rcc_model *m, char *from, size_t len) {
  char path[512], why[512];
  struct rcc_tuner_file_info info;
  *m = rcc_model_defaults;
  if (rcc_tuner_file_path(path, sizeof path, why, sizeof why) != 0) {
    snprintf(from, len, "the library's defaults (%s)", why);
    return;
  }
  int r = rcc_tuner_read_file(path, m, &info, why, sizeof why);
  if (r > 0)
    snprintf(from, len, "%s, calibrated on %s at %s", path, info.host,
             info.date);
  else if (r == 0)
    snprintf(from, len, "the library's defaults (no %s: run ringcc-bench "
             "--calibrate)", path);
  else
    snprintf(from, len, "the library's defaults (%s)", why);
}

static void resolve_link(const struct options *o, struct link *l) {
  struct rcc_model machine;
  char from[1000], why[300];
  double bw;

  machine_model(&machine, from, sizeof from);
  l->gamma_us_per_byte = machine.gamma_us_per_byte;
  snprintf(l->gamma_from, sizeof l->gamma_from, "this machine's float32 sum, "
           "from %s", from);
  l->slot_bytes = 65536;
  l->type = RCC_LINK_SHM;
  if (o->link_name && (o->bw_arg || o->lat_arg))
    usage_error("use either --link or --bw with --lat, not both");
  if (o->link_name == NULL) {
    if (o->bw_arg == NULL || o->lat_arg == NULL)
      usage_error("give --link NAME, or --bw and --lat (see --list-links)");
    if (rcc_parse_bandwidth(o->bw_arg, &bw, why, sizeof why) != 0)
      usage_error("--bw: %s", why);
    if (rcc_parse_latency_us(o->lat_arg, &l->cost.alpha_us, why, sizeof why) != 0)
      usage_error("--lat: %s", why);
    l->cost.beta_us_per_byte = 1e6 / bw;
    l->cost.beta_mem_us_per_byte = 0;
    snprintf(l->name, sizeof l->name, "custom");
    snprintf(l->describe, sizeof l->describe, "--bw %s --lat %s", o->bw_arg,
             o->lat_arg);
  } else if (strcmp(o->link_name, "shm") == 0 || strcmp(o->link_name, "tcp") == 0) {
    int k = o->link_name[0] == 's' ? RCC_LINK_SHM : RCC_LINK_TCP;
    l->cost = machine.link[k];
    l->cache_bytes = machine.cache_bytes;
    if (k == RCC_LINK_TCP)
      l->slot_bytes = 262144; /* RINGCC_NET_CHUNK_BYTES */
    l->type = k;
    snprintf(l->name, sizeof l->name, "%s", o->link_name);
    snprintf(l->describe, sizeof l->describe, "this machine's %s, per "
             "direction as a collective of the calibrated rank count sees "
             "it, from %s", k == RCC_LINK_SHM ? "shared memory" : "TCP", from);
  } else {
    const struct link_preset *p = NULL;
    for (int i = 0; i < NUM_PRESETS; i++)
      if (strcmp(o->link_name, presets[i].name) == 0)
        p = &presets[i];
    if (p == NULL)
      usage_error("--link '%s': unknown (nvlink3 nvlink4 pcie4 pcie5 ib-hdr "
                  "ib-ndr 25gbe 100gbe shm tcp)", o->link_name);
    l->cost = (struct rcc_link_cost){p->lat_us, 1e6 / p->bw, 0};
    /* InfiniBand and Ethernet are networks: a message costs the proxy's
     * work, as over TCP here; NVLink and PCIe are driven like memory. */
    if (strncmp(p->name, "ib-", 3) == 0 || strstr(p->name, "gbe") != NULL)
      l->type = RCC_LINK_TCP;
    snprintf(l->name, sizeof l->name, "%s", p->name);
    snprintf(l->describe, sizeof l->describe, "%s: %s", p->what, p->figure);
    if (p->reduce_bw > 0) {
      l->gamma_us_per_byte = 1e6 / p->reduce_bw;
      snprintf(l->gamma_from, sizeof l->gamma_from, "the GPU's memory "
               "bandwidth / 3 (a sum reads two operands and writes one)");
    }
  }
  if (o->reduce_arg) {
    if (rcc_parse_bandwidth(o->reduce_arg, &bw, why, sizeof why) != 0)
      usage_error("--reduce-bw: %s", why);
    l->gamma_us_per_byte = 1e6 / bw;
    snprintf(l->gamma_from, sizeof l->gamma_from, "--reduce-bw %s",
             o->reduce_arg);
  }
  if (o->slot_arg &&
      (rcc_parse_size(o->slot_arg, &l->slot_bytes, why, sizeof why) != 0 ||
       l->slot_bytes < 1))
    usage_error("--slot: %s", l->slot_bytes < 1 ? "must be at least 1 byte" : why);
}

/* ---- output ------------------------------------------------------------------- */

static void print_row(const char *name, struct rcc_prediction p,
                      const char *formula,
                      const char *note) {
  char lat[32], bw[32], tot[32];
  printf("  %-18s %12s %12s %12s   %s%s%s\n", name,
         rcc_format_us(p.latency_us, lat, sizeof lat),
         rcc_format_us(p.bandwidth_us, bw, sizeof bw),
         rcc_format_us(rcc_prediction_total(p), tot, sizeof tot), formula,
         note ? "\n            " : "", note ? note : "");
}

static void predict(const struct options *o) {
  struct link l;
  struct rcc_candidate cand[RCC_MAX_CANDIDATES];
  int winner;
  char a[32], b[32], c[32];

  resolve_link(o, &l);
  int host_shm = o->link_name != NULL && strcmp(o->link_name, "shm") == 0;
  struct rcc_model_input in = {
      .coll = o->coll, .nranks = o->nranks, .bytes = o->bytes,
      .ring_link = l.cost, .all_link = l.cost,
      .gamma_us_per_byte = l.gamma_us_per_byte,
      .cache_bytes = l.cache_bytes,
      .chunk_bytes = l.slot_bytes, .slot_bytes = l.slot_bytes,
      /* This machine's shared memory: host buffers, with the board and
       * cross-memory attach; a GPU link preset: device buffers. */
      .board_bytes = host_shm ? fmin(l.slot_bytes, RCC_BOARD_MAX_BYTES) : 0,
      .cma = host_shm, .device = l.type == RCC_LINK_SHM && !host_shm,
      .forced = RINGCC_ALGO_AUTO, .all_link_type = l.type,
      .network_only = l.type == RCC_LINK_TCP};
  int count = rcc_model_choose(&in, cand, &winner);

  /* Say the size in the kind of unit it was given in first. */
  size_t arglen = strlen(o->size_arg);
  int binary = strchr(o->size_arg, 'i') != NULL ||
               (arglen > 0 && strchr("kKmMgGtT", o->size_arg[arglen - 1]));
  printf("%s of S = %s (%.0f bytes, %s) over %d ranks\n", o->coll_name,
         rcc_format_bytes(o->bytes, binary, a, sizeof a), o->bytes,
         rcc_format_bytes(o->bytes, !binary, b, sizeof b), o->nranks);
  printf("link %s: %s\n", l.name, l.describe);
  printf("  model: alpha %.3g us per message, beta = 1/(%s/s) per direction\n",
         l.cost.alpha_us, rcc_format_bytes(1e6 / l.cost.beta_us_per_byte, 0, c,
                                           sizeof c));
  if (l.cache_bytes > 0 && l.cost.beta_mem_us_per_byte > 0)
    printf("         while all ranks' buffers fit the %s cache; 1/(%s/s) "
           "beyond it (%s here)\n",
           rcc_format_bytes(l.cache_bytes, 1, a, sizeof a),
           rcc_format_bytes(1e6 / l.cost.beta_mem_us_per_byte, 0, b, sizeof b),
           cand[0].pred.in_memory ? "beyond" : "in cache");
  if (o->coll != RCC_COLL_ALLGATHER && o->coll != RCC_COLL_BCAST &&
      o->coll != RCC_COLL_ALLTOALL && o->coll != RCC_COLL_SEND)
    printf("  reduction: gamma = %s%s%s, %s\n",
           l.gamma_us_per_byte > 0 ? "1/(" : "0 (the calibration put its "
                                             "cost into beta)",
           l.gamma_us_per_byte > 0
               ? rcc_format_bytes(1e6 / l.gamma_us_per_byte, 0, c, sizeof c)
               : "",
           l.gamma_us_per_byte > 0 ? "/s)" : "", l.gamma_from);
  printf("  slot (pipeline chunk, largest one-shot message): %s\n\n",
         rcc_format_bytes(l.slot_bytes, 1, c, sizeof c));

  printf("bytes each rank sends:\n");
  for (int i = 0; i < count; i++) {
    const struct rcc_cost_terms *t = &cand[i].terms;
    printf("  %-18s %s (%.4g S)\n", rcc_alg_name(cand[i].alg),
           rcc_format_bytes(t->bytes_sent, 0, a, sizeof a),
           o->bytes > 0 ? t->bytes_sent / o->bytes : 0.0);
  }
  printf("\npredicted time:\n  %-18s %12s %12s %12s   %s\n", "algorithm",
         "latency", "bandwidth", "total", "formula (n ranks, S bytes)");
  for (int i = 0; i < count; i++) {
    char note[200] = "";
    if (!cand[i].runnable)
      snprintf(note, sizeof note, "(libringcc does not run it here: %s)",
               cand[i].why_not);
    print_row(rcc_alg_name(cand[i].alg), cand[i].pred,
              rcc_model_formula(o->coll, cand[i].alg), note[0] ? note : NULL);
  }
  printf("\nwinner: %s (the tuner's choice: the fastest that libringcc runs "
         "at this size)\n", rcc_alg_name(cand[winner].alg));
  if (o->coll == RCC_COLL_ALLREDUCE)
    printf("tree: the double binary tree (Sanders, Speck and Traeff 2009; "
           "NCCL 2.4): each rank sends about 2S; 2*ceil(log2 n) messages deep,\n"
           "  counted as 3*ceil(log2 n) steps, one-shot as n/2 ((n-1)/2 over shared\n"
           "  memory, where it runs on the board; n-1 over tcp) and a recursive-\n"
           "  doubling exchange as 2 over shared memory (measured on a host-driven\n"
           "  transport; docs/tuning.md)\n");
}

int main(int argc, char **argv) {
  struct options o;
  parse_args(argc, argv, &o);
  if (o.explain) {
    if (o.nranks == 0)
      usage_error("--explain needs -n RANKS (2 to %d)", RCC_EXPLAIN_MAX_RANKS);
    if (o.nranks > RCC_EXPLAIN_MAX_RANKS)
      usage_error("--explain: -n %d is too many to print; use 2 to %d",
                  o.nranks, RCC_EXPLAIN_MAX_RANKS);
    if (o.coll != RCC_COLL_ALLREDUCE && o.coll != RCC_COLL_REDUCE_SCATTER &&
        o.coll != RCC_COLL_ALLGATHER)
      usage_error("--explain: -c %s has no ring table; use allreduce, "
                  "reduce_scatter or allgather", o.coll_name);
    return rcc_model_explain(stdout, o.coll, o.nranks) == 0 ? 0 : 1;
  }
  if (o.nranks == 0)
    usage_error("-n RANKS is required");
  if (o.size_arg == NULL)
    usage_error("-s SIZE is required");
  predict(&o);
  return 0;
}
