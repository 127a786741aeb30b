/*
 * ringcc-model - what libringcc's cost model predicts for a collective, on
 * this machine or on the reader's cluster.
 *
 *   ringcc-model -c allreduce -n 8 -s 16GB --link nvlink4
 *   ringcc-model -c allreduce -n 8 -s 16GB --bw 900GB/s --bidir   (a datasheet)
 *   ringcc-model -c allreduce -n 8,16,64,512 -s 16GB --link ib-ndr (a table)
 *   ringcc-model -s 16GB --hosts 4 --per-host 8 --link nvlink4 --net ib-ndr
 *   ringcc-model -c allreduce -n 4 -s 64KiB --link shm     (this machine)
 *   ringcc-model --explain -c reduce_scatter -n 4
 *
 * Every number comes from the library's own code: the formulas and the
 * choice from lib/tune/model.c (rcc_model_terms, rcc_model_choose,
 * rcc_model_hierarchical), this machine's values from the tuner's file
 * (lib/tune/tuner_file.c), the --explain table from the ring schedule
 * (rcc_plan_ring, rcc_plan_step, through rcc_model_explain). It links
 * libringcc.a (TOOLS_STATIC in the Makefile).
 *
 * Each prediction is printed term by term: the bytes each rank sends, the
 * wire's time (bytes over the busiest link / its bandwidth), the latency
 * term (steps x alpha), the reduction term (bytes reduced / the rate of
 * whatever reduces), and their total.
 */
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ringcc.h"
#include "board.h"
#include "schedule.h"
#include "tuner.h"

#define PROG_NAME "ringcc-model"
#define EXIT_USAGE 2
#define MAX_NLIST 32

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
 *
 * The GPU presets (NVLink, PCIe) name the GPU that reduces: its memory
 * bandwidth / 3, since a sum reads two operands and writes one (NVIDIA's
 * datasheets: A100 SXM 80GB 2,039 GB/s, A100 PCIe 80GB 1,935 GB/s, H100 SXM
 * 3.35 TB/s, H100 PCIe 2 TB/s). The network presets do not know what
 * reduces: --reduce-bw says it, else the reduction is not counted.
 */
struct link_preset {
  const char *name;
  const char *what;
  const char *figure; /* the marketed figure and what it means */
  double bw;          /* bytes/s per direction, used by the model */
  double lat_us;
  const char *gpu;    /* the GPU whose reduction rate applies, or NULL */
};

struct gpu {
  const char *name;   /* --reduce-bw NAME */
  const char *what;
  double mem_bw;      /* bytes/s */
};

static const struct gpu gpus[] = {
    {"a100", "A100 SXM 80GB", 2.039e12},
    {"a100-pcie", "A100 PCIe 80GB", 1.935e12},
    {"h100", "H100 SXM", 3.35e12},
    {"h100-pcie", "H100 PCIe", 2.0e12},
};
#define NUM_GPUS (int)(sizeof gpus / sizeof gpus[0])

static const struct link_preset presets[] = {
    {"nvlink3", "NVLink 3 (A100 SXM, 12 links)",
     "300 GB/s per direction = 12 links x 25 GB/s; NVIDIA's \"600 GB/s\" is "
     "the bidirectional aggregate",
     300e9, 3.4, "a100"},
    {"nvlink4", "NVLink 4 (H100 SXM, 18 links)",
     "450 GB/s per direction = 18 links x 25 GB/s; NVIDIA's \"900 GB/s\" is "
     "the bidirectional aggregate",
     450e9, 3.4, "h100"},
    {"pcie4", "PCIe 4.0 x16 (A100 PCIe)",
     "31.5 GB/s per direction raw (16 GT/s x 16 lanes, 128b/130b); ~25 GB/s "
     "per direction achievable (packet overhead), which the model uses; "
     "\"64 GB/s\" figures add both directions",
     25e9, 5.7, "a100-pcie"},
    {"pcie5", "PCIe 5.0 x16 (H100 PCIe)",
     "63 GB/s per direction raw (32 GT/s x 16 lanes, 128b/130b); ~50 GB/s "
     "per direction achievable, which the model uses; \"128 GB/s\" figures "
     "add both directions",
     50e9, 5.7, "h100-pcie"},
    {"ib-hdr", "InfiniBand HDR (4x)",
     "200 Gb/s per direction = 25 GB/s (data rate, full duplex)", 25e9, 9.6,
     NULL},
    {"ib-ndr", "InfiniBand NDR (4x)",
     "400 Gb/s per direction = 50 GB/s (data rate, full duplex)", 50e9, 9.6,
     NULL},
    {"25gbe", "25 Gigabit Ethernet, kernel TCP",
     "25 Gb/s per direction = 3.125 GB/s (full duplex)", 3.125e9, 20, NULL},
    {"100gbe", "100 Gigabit Ethernet, kernel TCP",
     "100 Gb/s per direction = 12.5 GB/s (full duplex)", 12.5e9, 20, NULL},
};
#define NUM_PRESETS (int)(sizeof presets / sizeof presets[0])

static const struct gpu *find_gpu(const char *name) {
  for (int i = 0; i < NUM_GPUS; i++)
    if (strcasecmp(name, gpus[i].name) == 0)
      return &gpus[i];
  return NULL;
}

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
  int nlist[MAX_NLIST]; /* -n 8,16,64 */
  int nn;
  double bytes;
  const char *size_arg;
  const char *link_name, *bw_arg, *lat_arg;
  int bidir;
  const char *net_name, *net_bw_arg, *net_lat_arg;
  int net_bidir;
  const char *reduce_arg, *slot_arg;
  int channels;                /* --channels; 0: the tuner's choice */
  const char *channel_bw_arg;  /* --channel-bw */
  int hosts, per_host, nics;
  int explain;
};

static void usage(FILE *f) {
  fprintf(f,
"Usage: " PROG_NAME " -c COLL -n RANKS[,RANKS...] -s SIZE (--link NAME | --bw BW\n"
"                    [--lat US] [--bidir]) [--reduce-bw BW|GPU|cpu|none]\n"
"                    [--slot SIZE] [--channels C] [--channel-bw BW]\n"
"       " PROG_NAME " -s SIZE --hosts H --per-host G [--link NAME | --bw BW ...]\n"
"                    [--net NAME | --net-bw BW [--net-lat US] [--net-bidir]]\n"
"                    [--nics K] [--reduce-bw ...]\n"
"       " PROG_NAME " --explain -c COLL -n RANKS\n"
"       " PROG_NAME " --list-links\n"
"What libringcc's alpha-beta cost model (the tuner's, lib/tune/model.c) predicts\n"
"for one collective, term by term: the bytes each rank sends, the time on the\n"
"wire (bytes / bandwidth), the latency term (steps x alpha), the reduction term\n"
"(bytes reduced / reduction rate) and the total, for every algorithm, and the\n"
"one the tuner would pick. Type the figures of your own cluster.\n"
"\n"
"  -c, --coll COLL     allreduce | reduce_scatter | allgather | bcast |\n"
"                      reduce | alltoall | sendrecv (default allreduce)\n"
"  -n, --nranks N      number of ranks (2 or more); a list (8,16,64,512)\n"
"                      prints a table of the total time over rank counts\n"
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
"  --bw BW             a link of your own: its bandwidth per direction, in\n"
"                      bytes (50GB/s, 50GBps, 32GiB/s) or bits (400Gb/s,\n"
"                      400Gbit/s, 400Gbps) per second; k M G T are powers of\n"
"                      1000, Ki Mi Gi Ti of 1024\n"
"  --bidir             --bw is a bidirectional figure (both directions added,\n"
"                      as NVIDIA's \"900 GB/s\" for NVLink 4): halve it\n"
"  --lat US            latency per step in microseconds (2, 2us, 800ns);\n"
"                      default 0 with --bw (the output says so)\n"
"  --reduce-bw X       the rate of whatever reduces: a bandwidth, a GPU\n"
"                      (a100, a100-pcie, h100, h100-pcie: its memory\n"
"                      bandwidth / 3), cpu (this machine's, as libringcc\n"
"                      reduces host buffers), or none. Default: the preset's\n"
"                      GPU for nvlink and pcie, this machine's CPU for shm\n"
"                      and tcp, none for a network preset or --bw\n"
"  --slot SIZE         FIFO slot: the largest one-shot message and the\n"
"                      pipeline chunk (default 64KiB, 256KiB for --link tcp)\n"
"  --channels C        split every call over exactly C channels (1 to %d), as\n"
"                      RINGCC_NCHANNELS does; default: the tuner's choice, up\n"
"                      to 16 over NVLink and 4 over PCIe (device buffers: one\n"
"                      GPU block each, running at once, one per 64 KiB of\n"
"                      the call) and 1 elsewhere (host buffers: one thread\n"
"                      runs the channels in turn, each adding its steps)\n"
"  --channel-bw BW     what one channel's engine (a GPU block) moves per\n"
"                      second; channels then run at once, up to --channels\n"
"                      or %d. Default for the GPU presets: the link's\n"
"                      bandwidth over its channels (16 or 4), the assumption\n"
"                      the library sizes them by; measure it with make\n"
"                      gpu-check\n"
"  --hosts H           a hierarchical job of H hosts ...\n"
"  --per-host G        ... of G ranks each (n = H x G): compares the flat\n"
"                      ring and tree libringcc runs with a hierarchical\n"
"                      AllReduce (reduce-scatter inside each host, AllReduce\n"
"                      across hosts, allgather inside), with the sizes where\n"
"                      one overtakes another. --link is the link inside a\n"
"                      host (default nvlink4), --net the one between hosts\n"
"                      (default ib-ndr)\n"
"  --net NAME          the link between hosts, a preset; or --net-bw BW\n"
"                      [--net-lat US] [--net-bidir] for one of your own\n"
"  --nics K            network links per host (default G: one per rank)\n"
"  --explain           print the ring's steps for -n ranks (2 to %d) as the\n"
"                      library's schedule code runs them: allreduce,\n"
"                      reduce_scatter or allgather; no -s or link needed\n"
"  --list-links        print the presets and what their figures mean\n"
"  -h, --help          print this help\n"
"\n"
"Times are the model's, not measurements: alpha*steps on the critical path +\n"
"beta*bytes over one link + gamma*bytes reduced (docs/tuning.md walks through\n"
"an example).\n",
          RCC_MAX_CHANNELS, RCC_MAX_CHANNELS, RCC_EXPLAIN_MAX_RANKS);
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
  printf("%-8s %-34s %-12s %-8s  %-10s figure\n", "name", "link", "model bw",
         "latency", "reduces");
  for (int i = 0; i < NUM_PRESETS; i++) {
    const struct link_preset *p = &presets[i];
    char bw[32];
    printf("%-8s %-34s %-12s %5.1f us  %-10s %s\n", p->name, p->what,
           rcc_format_bytes(p->bw, 0, bw, sizeof bw), p->lat_us,
           p->gpu ? p->gpu : "-", p->figure);
  }
  printf("%-8s %-34s %-12s %-8s  %-10s %s\n", "shm", "this machine's shared memory",
         "(file)", "(file)", "cpu", "alpha and beta from the tuner's file");
  printf("%-8s %-34s %-12s %-8s  %-10s %s\n", "tcp", "this machine's TCP", "(file)",
         "(file)", "cpu", "alpha and beta from the tuner's file");
  printf("model bw is bytes per second per direction; GB = 1e9 bytes.\n"
         "reduces: the GPU (--reduce-bw NAME) whose memory bandwidth / 3 is "
         "the reduction rate:");
  for (int g = 0; g < NUM_GPUS; g++)
    printf(" %s %s (%.4g TB/s)%s", gpus[g].name, gpus[g].what,
           gpus[g].mem_bw / 1e12, g + 1 < NUM_GPUS ? "," : "\n");
}

static void parse_nlist(const char *arg, struct options *o) {
  const char *p = arg;
  o->nn = 0;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || (*end != ',' && *end != '\0') || v < 2 || v > 1 << 20 ||
        o->nn == MAX_NLIST)
      usage_error("-n '%s': the number of ranks must be an integer from 2 to "
                  "%d, or a list of at most %d of them (8,16,64)", arg,
                  1 << 20, MAX_NLIST);
    o->nlist[o->nn++] = (int)v;
    p = *end == ',' ? end + 1 : end;
  }
  if (o->nn == 0)
    usage_error("-n '%s': no number of ranks", arg);
}

static int parse_count(const char *opt, const char *arg, int lo) {
  char *end;
  long v = strtol(arg, &end, 10);
  if (*arg == '\0' || *end != '\0' || v < lo || v > 1 << 20)
    usage_error("%s '%s': an integer from %d to %d", opt, arg, lo, 1 << 20);
  return (int)v;
}

static void parse_args(int argc, char **argv, struct options *o) {
  enum { LINK = 256, BW, LAT, BIDIR, REDUCE, SLOT, EXPLAIN, LIST, HOSTS,
         PERHOST, NET, NETBW, NETLAT, NETBIDIR, NICS, CHANNELS, CHANNELBW };
  static const struct option longopts[] = {
      {"coll", required_argument, NULL, 'c'},
      {"nranks", required_argument, NULL, 'n'},
      {"size", required_argument, NULL, 's'},
      {"link", required_argument, NULL, LINK},
      {"bw", required_argument, NULL, BW},
      {"lat", required_argument, NULL, LAT},
      {"bidir", no_argument, NULL, BIDIR},
      {"reduce-bw", required_argument, NULL, REDUCE},
      {"slot", required_argument, NULL, SLOT},
      {"channels", required_argument, NULL, CHANNELS},
      {"channel-bw", required_argument, NULL, CHANNELBW},
      {"explain", no_argument, NULL, EXPLAIN},
      {"list-links", no_argument, NULL, LIST},
      {"hosts", required_argument, NULL, HOSTS},
      {"per-host", required_argument, NULL, PERHOST},
      {"net", required_argument, NULL, NET},
      {"net-bw", required_argument, NULL, NETBW},
      {"net-lat", required_argument, NULL, NETLAT},
      {"net-bidir", no_argument, NULL, NETBIDIR},
      {"nics", required_argument, NULL, NICS},
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
    case 'n': parse_nlist(optarg, o); break;
    case 's':
      if (rcc_parse_size(optarg, &o->bytes, why, sizeof why) != 0)
        usage_error("-s: %s", why);
      o->size_arg = optarg;
      break;
    case LINK: o->link_name = optarg; break;
    case BW: o->bw_arg = optarg; break;
    case LAT: o->lat_arg = optarg; break;
    case BIDIR: o->bidir = 1; break;
    case REDUCE: o->reduce_arg = optarg; break;
    case SLOT: o->slot_arg = optarg; break;
    case CHANNELS:
      o->channels = parse_count("--channels", optarg, 1);
      if (o->channels > RCC_MAX_CHANNELS)
        usage_error("--channels %d: at most %d", o->channels,
                    RCC_MAX_CHANNELS);
      break;
    case CHANNELBW: o->channel_bw_arg = optarg; break;
    case EXPLAIN: o->explain = 1; break;
    case LIST: list_links(); exit(0);
    case HOSTS: o->hosts = parse_count("--hosts", optarg, 1); break;
    case PERHOST: o->per_host = parse_count("--per-host", optarg, 1); break;
    case NET: o->net_name = optarg; break;
    case NETBW: o->net_bw_arg = optarg; break;
    case NETLAT: o->net_lat_arg = optarg; break;
    case NETBIDIR: o->net_bidir = 1; break;
    case NICS: o->nics = parse_count("--nics", optarg, 1); break;
    case 'h': usage(stdout); exit(0);
    case ':': usage_error("option %s needs a value", argv[optind - 1]);
    default: usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc)
    usage_error("unexpected argument '%s'", argv[optind]);
}

/* ---- links and the reduction ---------------------------------------------------- */

struct link {
  char name[64];
  char describe[1400];
  char bw_note[600];   /* how --bw was read */
  struct rcc_link_cost cost;
  double bw;           /* bytes/s per direction */
  double cache_bytes;
  double slot_bytes;
  int type;            /* enum rcc_link: tcp where a message costs syscalls */
  int machine;         /* shm or tcp: this machine's values */
  int lat_given;       /* 0: --bw without --lat, alpha = 0 */
  const char *gpu;     /* the preset's GPU, or NULL */
};

struct reduction {
  double gamma_us_per_byte; /* 0: not counted */
  char from[1400];
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

/* A link from a preset (name) or from --bw / --lat (opt names the options
 * for messages: "--bw" or "--net-bw"). */
static void resolve_link(const char *name, const char *bw_arg,
                         const char *lat_arg, int bidir, const char *opt_link,
                         const char *opt_bw, const char *opt_lat,
                         struct link *l) {
  char why[300];
  memset(l, 0, sizeof(*l));
  l->slot_bytes = 65536;
  l->type = RCC_LINK_SHM;
  l->lat_given = 1;
  if (name && (bw_arg || lat_arg || bidir))
    usage_error("use either %s or %s (with %s), not both", opt_link, opt_bw,
                opt_lat);
  if (name == NULL) {
    double bw;
    if (bw_arg == NULL)
      usage_error("give %s NAME, or %s BW (see --list-links)", opt_link,
                  opt_bw);
    if (rcc_parse_bandwidth(bw_arg, &bw, why, sizeof why) != 0)
      usage_error("%s: %s", opt_bw, why);
    l->bw = bidir ? bw / 2 : bw;
    if (lat_arg != NULL &&
        rcc_parse_latency_us(lat_arg, &l->cost.alpha_us, why, sizeof why) != 0)
      usage_error("%s: %s", opt_lat, why);
    l->lat_given = lat_arg != NULL;
    l->cost.beta_us_per_byte = 1e6 / l->bw;
    snprintf(l->name, sizeof l->name, "custom");
    snprintf(l->describe, sizeof l->describe, "%s %s%s%s%s", opt_bw, bw_arg,
             bidir ? " (bidirectional)" : "", lat_arg ? " with latency " : "",
             lat_arg ? lat_arg : "");
    char a[32], b[32];
    if (bidir)
      snprintf(l->bw_note, sizeof l->bw_note, "%s %s is a bidirectional "
               "figure (both directions added), so %s/s per direction",
               opt_bw, bw_arg, rcc_format_bytes(l->bw, 0, a, sizeof a));
    else
      snprintf(l->bw_note, sizeof l->bw_note, "%s %s is taken per direction; "
               "if it is a bidirectional figure (NVIDIA's \"900 GB/s\" for "
               "NVLink 4 is), add --bidir: %s/s per direction", opt_bw, bw_arg,
               rcc_format_bytes(l->bw / 2, 0, b, sizeof b));
    return;
  }
  if (strcmp(name, "shm") == 0 || strcmp(name, "tcp") == 0) {
    struct rcc_model machine;
    char from[1000];
    int k = name[0] == 's' ? RCC_LINK_SHM : RCC_LINK_TCP;
    machine_model(&machine, from, sizeof from);
    l->cost = machine.link[k];
    l->bw = 1e6 / l->cost.beta_us_per_byte;
    l->cache_bytes = machine.cache_bytes;
    if (k == RCC_LINK_TCP)
      l->slot_bytes = 262144; /* RINGCC_NET_CHUNK_BYTES */
    l->type = k;
    l->machine = 1;
    snprintf(l->name, sizeof l->name, "%s", name);
    snprintf(l->describe, sizeof l->describe, "this machine's %s, per "
             "direction as a collective of the calibrated rank count sees "
             "it, from %s", k == RCC_LINK_SHM ? "shared memory" : "TCP", from);
    return;
  }
  const struct link_preset *p = NULL;
  for (int i = 0; i < NUM_PRESETS; i++)
    if (strcmp(name, presets[i].name) == 0)
      p = &presets[i];
  if (p == NULL)
    usage_error("%s '%s': unknown (nvlink3 nvlink4 pcie4 pcie5 ib-hdr ib-ndr "
                "25gbe 100gbe shm tcp)", opt_link, name);
  l->bw = p->bw;
  l->cost = (struct rcc_link_cost){p->lat_us, 1e6 / p->bw, 0};
  /* InfiniBand and Ethernet are networks: a message costs the proxy's
   * work, as over TCP here; NVLink and PCIe are driven like memory. */
  if (p->gpu == NULL)
    l->type = RCC_LINK_TCP;
  l->gpu = p->gpu;
  snprintf(l->name, sizeof l->name, "%s", p->name);
  snprintf(l->describe, sizeof l->describe, "%s: %s", p->what, p->figure);
}

/* The reduction rate: where it runs (see --reduce-bw). */
static void resolve_reduction(const struct options *o, const struct link *l,
                              struct reduction *r) {
  char why[300], a[32];
  const struct gpu *g;
  r->gamma_us_per_byte = 0;
  if (o->reduce_arg != NULL) {
    double bw;
    if (strcasecmp(o->reduce_arg, "none") == 0) {
      snprintf(r->from, sizeof r->from, "not counted (--reduce-bw none)");
    } else if (strcasecmp(o->reduce_arg, "cpu") == 0) {
      struct rcc_model m;
      char from[1000];
      machine_model(&m, from, sizeof from);
      r->gamma_us_per_byte = m.gamma_us_per_byte;
      snprintf(r->from, sizeof r->from, "this machine's CPU (float32 sum), "
               "from %s", from);
    } else if ((g = find_gpu(o->reduce_arg)) != NULL) {
      r->gamma_us_per_byte = 3e6 / g->mem_bw;
      snprintf(r->from, sizeof r->from, "the %s's memory bandwidth %s/s / 3 "
               "(a sum reads two operands and writes one)", g->what,
               rcc_format_bytes(g->mem_bw, 0, a, sizeof a));
    } else if (rcc_parse_bandwidth(o->reduce_arg, &bw, why, sizeof why) == 0) {
      r->gamma_us_per_byte = 1e6 / bw;
      snprintf(r->from, sizeof r->from, "--reduce-bw %s", o->reduce_arg);
    } else {
      usage_error("--reduce-bw: %s; or a GPU (a100, a100-pcie, h100, "
                  "h100-pcie), cpu or none", why);
    }
  } else if (l->gpu != NULL) {
    g = find_gpu(l->gpu);
    r->gamma_us_per_byte = 3e6 / g->mem_bw;
    snprintf(r->from, sizeof r->from, "on the GPU: the %s's memory bandwidth "
             "%s/s / 3 (a sum reads two operands and writes one)", g->what,
             rcc_format_bytes(g->mem_bw, 0, a, sizeof a));
  } else if (l->machine) {
    struct rcc_model m;
    char from[1000];
    machine_model(&m, from, sizeof from);
    r->gamma_us_per_byte = m.gamma_us_per_byte;
    snprintf(r->from, sizeof r->from, "%s", m.gamma_us_per_byte > 0
             ? "this machine's CPU (libringcc reduces host buffers there)"
             : "0: the calibration put its cost into beta");
  } else {
    snprintf(r->from, sizeof r->from, "not counted: nothing says what "
             "reduces on this link (give --reduce-bw: h100, a100, cpu or a "
             "rate)");
  }
}

/* ---- printing ---------------------------------------------------------------------- */

static int reduces(int coll) {
  return coll == RCC_COLL_ALLREDUCE || coll == RCC_COLL_REDUCE_SCATTER ||
         coll == RCC_COLL_REDUCE;
}

/* "400 Gb/s": a rate in bits per second, SI prefixes. */
static const char *format_bits(double bytes_per_s, char *buf, size_t len) {
  static const char *const prefix[] = {"", "k", "M", "G", "T", "P"};
  double v = bytes_per_s * 8;
  int i = 0;
  while (v >= 1000 && i < 5)
    v /= 1000, i++;
  snprintf(buf, len, "%.4g %sb/s", v, prefix[i]);
  return buf;
}

static void print_link(const char *label, const struct link *l) {
  char a[32], b[32], c[32];
  printf("%s %s: %s\n", label, l->name, l->describe);
  printf("  bandwidth: %s/s per direction (%s), what the model uses (beta = "
         "1/bandwidth); a figure that adds both directions would read "
         "%s/s\n", rcc_format_bytes(l->bw, 0, a, sizeof a),
         format_bits(l->bw, b, sizeof b),
         rcc_format_bytes(2 * l->bw, 0, c, sizeof c));
  if (l->bw_note[0])
    printf("    (%s)\n", l->bw_note);
  if (l->lat_given)
    printf("  latency: alpha = %.3g us per step\n", l->cost.alpha_us);
  else
    printf("  latency: 0 (no --lat given: the latency term is left out; "
           "give --lat US to count it)\n");
  if (l->cache_bytes > 0 && l->cost.beta_mem_us_per_byte > 0)
    printf("  beyond the %s cache: %s/s\n",
           rcc_format_bytes(l->cache_bytes, 1, a, sizeof a),
           rcc_format_bytes(1e6 / l->cost.beta_mem_us_per_byte, 0, b,
                            sizeof b));
}

static void print_reduction(int coll, const struct reduction *r) {
  char a[32];
  if (!reduces(coll))
    return;
  if (r->gamma_us_per_byte > 0)
    printf("reduction: %s/s, %s\n",
           rcc_format_bytes(1e6 / r->gamma_us_per_byte, 0, a, sizeof a),
           r->from);
  else
    printf("reduction: %s\n", r->from);
}

/* The size in the unit it was given in first, then the other. */
static void print_size(const struct options *o, char *buf, size_t len) {
  char a[32], b[32];
  size_t arglen = strlen(o->size_arg);
  int binary = strchr(o->size_arg, 'i') != NULL ||
               (arglen > 0 && strchr("kKmMgGtT", o->size_arg[arglen - 1]));
  snprintf(buf, len, "%s (%.0f bytes, %s)",
           rcc_format_bytes(o->bytes, binary, a, sizeof a), o->bytes,
           rcc_format_bytes(o->bytes, !binary, b, sizeof b));
}

static void term_row(const char *name, double sent, double S,
                     struct rcc_prediction p, const char *note) {
  char a[32], w[32], l[32], r[32], t[32], col[48];
  snprintf(col, sizeof col, "%s (%.4g S)", rcc_format_bytes(sent, 0, a, sizeof a),
           S > 0 ? sent / S : 0.0);
  int engine = p.engine_us > p.wire_us; /* the channels bound it */
  rcc_format_us(engine ? p.engine_us : p.wire_us, w, sizeof w);
  if (engine)
    strcat(w, "+");
  printf("  %-19s %18s %13s %11s %11s %12s %3d%s%s\n", name, col, w,
         rcc_format_us(p.latency_us, l, sizeof l),
         rcc_format_us(p.reduce_us, r, sizeof r),
         rcc_format_us(rcc_prediction_total(p), t, sizeof t), p.channels,
         note ? "   " : "", note ? note : "");
}

static void term_header(void) {
  printf("  %-19s %18s %13s %11s %11s %12s %3s\n", "algorithm", "sends/rank",
         "wire", "latency", "reduction", "total", "ch");
}

static void term_legend(void) {
  printf("  (wire: bytes over the busiest link / bandwidth, + where the "
         "channels'\n   engines are slower than the link and bound it "
         "instead; latency: steps x alpha;\n   reduction: bytes reduced / "
         "reduction rate; total: their sum; ch: channels)\n");
}

/* ---- one link, one or several rank counts -------------------------------------------- */

struct single {
  struct link l;
  struct reduction red;
  struct rcc_channel_model ch;
  char ch_note[600];
};

/* The channels the tuner may use (tuner.c, channel_model): device buffers
 * over a GPU preset get up to rcc_cuda_channels' figure for the link (16
 * over NVLink, 4 over PCIe), one block each, running at once, each taken to
 * move the link's bandwidth over that many; host buffers one, run by one
 * thread. --channels and --channel-bw change both. */
static void resolve_channels(const struct options *o, struct single *m) {
  const struct link *l = &m->l;
  int device = l->gpu != NULL, given_bw = o->channel_bw_arg != NULL;
  int max = device ? (strncmp(l->name, "nvlink", 6) == 0 ? 16 : 4) : 1;
  char why[300] = "", a[32];
  double bw = 0;
  if (given_bw &&
      (rcc_parse_bandwidth(o->channel_bw_arg, &bw, why, sizeof why) != 0 ||
       bw <= 0))
    usage_error("--channel-bw: %s", bw <= 0 && why[0] == 0 ? "must be > 0"
                                                             : why);
  if (given_bw && !device && o->channels == 0)
    max = RCC_MAX_CHANNELS;
  m->ch = (struct rcc_channel_model){
      .max = o->channels > 0 ? o->channels : max,
      .exact = o->channels > 0,
      .serial = !device && !given_bw,
      .min_bytes = 64 << 10,
  };
  if (given_bw)
    m->ch.beta_us_per_byte = 1e6 / bw;
  else if (device)
    m->ch.beta_us_per_byte = l->cost.beta_us_per_byte * max;
  int off = snprintf(m->ch_note, sizeof m->ch_note, "%s %d",
                     m->ch.exact ? "exactly" : "up to", m->ch.max);
  if (m->ch.serial)
    snprintf(m->ch_note + off, sizeof m->ch_note - (size_t)off,
             " (host buffers: one thread runs the channels in turn, each\n"
             "  adding its steps' alphas and no bandwidth)");
  else
    snprintf(m->ch_note + off, sizeof m->ch_note - (size_t)off,
             "%s%s, running at once,\n  each moving at most %s/s (%s)",
             m->ch.exact ? "" : ", one per 64 KiB of the call",
             device ? " (device buffers: a GPU block each)" : "",
             rcc_format_bytes(1e6 / m->ch.beta_us_per_byte, 0, a, sizeof a),
             given_bw ? "--channel-bw"
                      : "the link's bandwidth over its channels: an "
                        "assumption;\n  make gpu-check measures it");
}

static int choose(const struct options *o, const struct single *m, int n,
                  struct rcc_candidate cand[RCC_MAX_CANDIDATES], int *winner) {
  int host_shm = m->l.machine && m->l.type == RCC_LINK_SHM;
  struct rcc_model_input in = {
      .coll = o->coll, .nranks = n, .bytes = o->bytes,
      .ring_link = m->l.cost, .all_link = m->l.cost,
      .gamma_us_per_byte = m->red.gamma_us_per_byte,
      .cache_bytes = m->l.cache_bytes,
      .ring_chunk_bytes = m->l.slot_bytes, .all_chunk_bytes = m->l.slot_bytes,
      /* This machine's shared memory: host buffers, with the board and
       * cross-memory attach; a GPU link preset: device buffers. */
      .board_bytes = host_shm ? fmin(m->l.slot_bytes, RCC_BOARD_MAX_BYTES) : 0,
      .cma = host_shm, .device = m->l.gpu != NULL,
      .forced = RINGCC_ALGO_AUTO, .all_link_type = m->l.type,
      .network_only = m->l.type == RCC_LINK_TCP, .channels = m->ch};
  int count = rcc_model_choose(&in, cand, winner), kept = 0;
  /* The one-shot board and cross-memory attach run on this machine's
   * shared memory only: elsewhere they are no candidates worth a line. */
  for (int i = 0; i < count; i++) {
    if (!host_shm && rcc_algorithms[cand[i].alg].exec != RCC_EXEC_FIFO)
      continue;
    if (i == *winner)
      *winner = kept;
    cand[kept++] = cand[i];
  }
  return kept;
}

static void predict_one(const struct options *o, const struct single *m) {
  struct rcc_candidate cand[RCC_MAX_CANDIDATES];
  int winner, n = o->nlist[0];
  char size[128], c[32];
  int count = choose(o, m, n, cand, &winner);

  print_size(o, size, sizeof size);
  printf("%s of S = %s over %d ranks\n", o->coll_name, size, n);
  print_link("link", &m->l);
  print_reduction(o->coll, &m->red);
  printf("slot (pipeline chunk, largest one-shot message): %s\n",
         rcc_format_bytes(m->l.slot_bytes, 1, c, sizeof c));
  printf("channels: %s\n\n", m->ch_note);

  printf("the terms of each algorithm:\n");
  term_header();
  for (int i = 0; i < count; i++) {
    char note[200] = "";
    if (!cand[i].runnable)
      snprintf(note, sizeof note, "(libringcc does not run it here: %s)",
               cand[i].why_not);
    term_row(rcc_alg_name(cand[i].alg), cand[i].terms.bytes_sent, o->bytes,
             cand[i].pred, note[0] ? note : NULL);
  }
  term_legend();
  printf("\nformulas (n ranks, S bytes; alpha per step, beta = 1/bandwidth, "
         "gamma = 1/reduction rate):\n");
  for (int i = 0; i < count; i++)
    printf("  %-19s %s\n", rcc_alg_name(cand[i].alg),
           rcc_model_formula(o->coll, cand[i].alg));
  printf("\nwinner: %s on %d channel%s (the tuner's choice: the fastest "
         "that libringcc runs at this size)\n", rcc_alg_name(cand[winner].alg),
         cand[winner].pred.channels, cand[winner].pred.channels == 1 ? "" : "s");
  if (o->coll == RCC_COLL_ALLREDUCE)
    printf("tree: the double binary tree (Sanders, Speck and Traeff 2009; "
           "NCCL 2.4): each rank sends about 2S; 2*ceil(log2 n) messages deep,\n"
           "  counted as 3*ceil(log2 n) steps, one-shot as n/2 ((n-1)/2 over shared\n"
           "  memory, where it runs on the board; n-1 over tcp) and a recursive-\n"
           "  doubling exchange as 2 over shared memory (measured on a host-driven\n"
           "  transport; docs/tuning.md)\n");
}

/* A table column: the RINGCC_ALGO spelling, where the algorithm has one. */
static const char *short_name(int alg) {
  int setting = rcc_algorithms[alg].setting;
  return setting != RINGCC_ALGO_AUTO ? rcc_algo_setting_name(setting)
                                     : rcc_alg_name(alg);
}

static void predict_table(const struct options *o, const struct single *m) {
  struct rcc_candidate cand[RCC_MAX_CANDIDATES];
  int winner, count;
  char size[128], a[32], b[32];

  print_size(o, size, sizeof size);
  printf("%s of S = %s, by rank count\n", o->coll_name, size);
  print_link("link", &m->l);
  print_reduction(o->coll, &m->red);
  printf("channels: %s\n", m->ch_note);
  count = choose(o, m, o->nlist[0], cand, &winner);
  printf("\ntotal time of each algorithm (* libringcc does not run it at "
         "this size):\n  %7s %20s", "n", "ring sends/rank");
  for (int i = 0; i < count; i++)
    printf(" %14.14s", short_name(cand[i].alg));
  printf("   winner\n");
  for (int k = 0; k < o->nn; k++) {
    int n = o->nlist[k];
    count = choose(o, m, n, cand, &winner);
    snprintf(b, sizeof b, "%s (%.4g S)",
             rcc_format_bytes(cand[0].terms.bytes_sent, 0, a, sizeof a),
             o->bytes > 0 ? cand[0].terms.bytes_sent / o->bytes : 0.0);
    printf("  %7d %20s", n, b);
    for (int i = 0; i < count; i++) {
      char cell[40];
      snprintf(cell, sizeof cell, "%s%s",
               rcc_format_us(rcc_prediction_total(cand[i].pred), a, sizeof a),
               cand[i].runnable ? " " : "*");
      printf(" %14s", cell);
    }
    printf("   %s x%d\n", rcc_alg_name(cand[winner].alg),
           cand[winner].pred.channels);
  }
  printf("(sends/rank: the ring's; columns by RINGCC_ALGO spelling; winner x "
         "its channels; for the terms of one rank count, give -n alone)\n");
}

/* ---- hierarchical ------------------------------------------------------------------- */

struct hier {
  int hosts, per_host, nics;
  struct link in, net;
  struct reduction red;
  double share; /* of one network link each cross-host ring gets */
};

enum { FLAT_RING, FLAT_TREE, HIER, NUM_HIER };
static const char *const hier_names[NUM_HIER] = {"ring (flat)", "tree (flat)",
                                                 "hierarchical"};

/* The flat ring and tree over all H x G ranks run at the pace of the
 * slowest edge, the network's (one link per host edge); the hierarchical
 * AllReduce uses both links (rcc_model_hierarchical). */
static struct rcc_prediction hier_predict(const struct hier *h, int which,
                                          double S, double *sent) {
  int n = h->hosts * h->per_host;
  struct rcc_link_cost slow = h->net.cost;
  if (h->hosts == 1)
    slow = h->in.cost;
  if (which == HIER)
    return rcc_model_hierarchical(h->hosts, h->per_host, S, &h->in.cost,
                                  &h->net.cost, h->share,
                                  h->red.gamma_us_per_byte, sent);
  struct rcc_cost_terms t;
  rcc_model_terms(RCC_COLL_ALLREDUCE, which == FLAT_RING ? RCC_ALG_RING
                                                         : RCC_ALG_TREE,
                  n, S, 65536, &t);
  if (sent != NULL)
    *sent = t.bytes_sent;
  return rcc_model_predict(&t, &slow, h->red.gamma_us_per_byte, 0);
}

static double hier_total(const struct hier *h, int which, double S) {
  return rcc_prediction_total(hier_predict(h, which, S, NULL));
}

/* -1, 0 or 1 as a is faster, as fast (to 1e-9), or slower than b at S. */
static int faster(const struct hier *h, int a, int b, double S) {
  double ta = hier_total(h, a, S), tb = hier_total(h, b, S);
  double eps = 1e-9 * fmax(ta, tb);
  return ta < tb - eps ? -1 : ta > tb + eps ? 1 : 0;
}

/* The sizes (1 B to 1 TB) where a and b take equally long: changes of
 * which is faster on a grid of 8 points per factor of 2, refined by
 * bisection. Prints one line per crossing, or that one always wins. */
static void crossovers(const struct hier *h, int a, int b) {
  double prev_s = 1;
  int prev = faster(h, a, b, 1), found = 0, ever = prev;
  char x[32];
  for (double s = pow(2, 0.125); s <= 1.0e12; s *= pow(2, 0.125)) {
    int now = faster(h, a, b, s);
    ever |= now;
    if (now != 0 && prev != 0 && now != prev) {
      double lo = prev_s, hi = s;
      for (int i = 0; i < 60; i++) {
        double mid = sqrt(lo * hi);
        if (faster(h, a, b, mid) == prev)
          lo = mid;
        else
          hi = mid;
      }
      printf("  %s = %s at S = %s: %s faster below, %s above\n",
             hier_names[a], hier_names[b],
             rcc_format_bytes(round(hi), 0, x, sizeof x),
             prev < 0 ? hier_names[a] : hier_names[b],
             prev < 0 ? hier_names[b] : hier_names[a]);
      found = 1;
    }
    if (now != 0)
      prev_s = s, prev = now;
  }
  if (!ever)
    printf("  %s and %s take equally long at every size\n", hier_names[a],
           hier_names[b]);
  else if (!found)
    printf("  %s vs %s: %s is faster at every size from 1 B to 1 TB\n",
           hier_names[a], hier_names[b],
           prev < 0 ? hier_names[a] : hier_names[b]);
}

static void predict_hier(const struct options *o) {
  struct hier h;
  char size[128], a[32];
  memset(&h, 0, sizeof h);
  h.hosts = o->hosts;
  h.per_host = o->per_host;
  h.nics = o->nics ? o->nics : o->per_host;
  resolve_link(o->link_name || o->bw_arg ? o->link_name : "nvlink4", o->bw_arg,
               o->lat_arg, o->bidir, "--link", "--bw", "--lat", &h.in);
  resolve_link(o->net_name || o->net_bw_arg ? o->net_name : "ib-ndr",
               o->net_bw_arg, o->net_lat_arg, o->net_bidir, "--net",
               "--net-bw", "--net-lat", &h.net);
  resolve_reduction(o, &h.in, &h.red);
  h.share = fmin(1.0, (double)h.nics / h.per_host);
  int n = h.hosts * h.per_host;

  print_size(o, size, sizeof size);
  printf("allreduce of S = %s over %d hosts x %d ranks = %d ranks\n", size,
         h.hosts, h.per_host, n);
  print_link("inside a host:", &h.in);
  print_link("between hosts:", &h.net);
  printf("  %d network link%s per host: the hierarchical AllReduce runs %d "
         "rings across hosts at once, each with %.3g of a link (%s/s); a "
         "flat ring or tree crosses on one link per host edge\n",
         h.nics, h.nics == 1 ? "" : "s", h.per_host, h.share,
         rcc_format_bytes(h.net.bw * h.share, 0, a, sizeof a));
  print_reduction(RCC_COLL_ALLREDUCE, &h.red);

  printf("\nthe terms of each algorithm:\n");
  term_header();
  int best = 0;
  for (int w = 0; w < NUM_HIER; w++) {
    double sent;
    struct rcc_prediction p = hier_predict(&h, w, o->bytes, &sent);
    term_row(hier_names[w], sent, o->bytes, p,
             w == HIER ? "(a model: libringcc runs the flat ones today)"
                       : NULL);
    if (hier_total(&h, w, o->bytes) < hier_total(&h, best, o->bytes))
      best = w;
  }
  term_legend();
  printf("\nformulas (H hosts, G ranks each, n = H*G; _in: inside a host, "
         "_net: between hosts):\n"
         "  ring (flat)         2(n-1)*alpha_net + 2(n-1)/n*S*beta_net + "
         "(n-1)/n*S*gamma\n"
         "  tree (flat)         3*ceil(log2 n)*alpha_net + 2*S*beta_net + "
         "S*gamma\n"
         "  hierarchical        2(G-1)*alpha_in + 2(G-1)/G*S*beta_in "
         "[reduce-scatter, allgather inside]\n"
         "                      + 2(H-1)*alpha_net + 2(H-1)/H*(S/G)*beta_net/"
         "share [AllReduce of S/G across]\n"
         "                      + ((G-1)/G + (H-1)/(H*G))*S*gamma, share = "
         "min(1, NICs/G)\n");
  printf("\nfastest at this size: %s\n", hier_names[best]);
  printf("\ncrossover sizes:\n");
  crossovers(&h, FLAT_RING, FLAT_TREE);
  crossovers(&h, FLAT_RING, HIER);
  crossovers(&h, FLAT_TREE, HIER);
}

/* ---- main ---------------------------------------------------------------------------- */

static void explain(const struct options *o) {
  if (o->nn == 0)
    usage_error("--explain needs -n RANKS (2 to %d)", RCC_EXPLAIN_MAX_RANKS);
  if (o->nn > 1 || o->nlist[0] > RCC_EXPLAIN_MAX_RANKS)
    usage_error("--explain: -n %d is too many to print; use one of 2 to %d",
                o->nlist[o->nn - 1], RCC_EXPLAIN_MAX_RANKS);
  if (o->coll != RCC_COLL_ALLREDUCE && o->coll != RCC_COLL_REDUCE_SCATTER &&
      o->coll != RCC_COLL_ALLGATHER)
    usage_error("--explain: -c %s has no ring table; use allreduce, "
                "reduce_scatter or allgather", o->coll_name);
  exit(rcc_model_explain(stdout, o->coll, o->nlist[0]) == 0 ? 0 : 1);
}

int main(int argc, char **argv) {
  struct options o;
  parse_args(argc, argv, &o);
  if (o.explain)
    explain(&o);
  if (o.size_arg == NULL)
    usage_error("-s SIZE is required");
  if (o.hosts || o.per_host) {
    if (!o.hosts || !o.per_host)
      usage_error("--hosts and --per-host go together");
    if (o.nn > 0)
      usage_error("-n with --hosts: the ranks are --hosts x --per-host");
    if (o.coll != RCC_COLL_ALLREDUCE)
      usage_error("--hosts models an allreduce (-c %s)", o.coll_name);
    if (o.slot_arg || o.channels || o.channel_bw_arg)
      usage_error("--slot, --channels and --channel-bw do not apply to "
                  "--hosts");
    predict_hier(&o);
    return 0;
  }
  if (o.net_name || o.net_bw_arg || o.net_lat_arg || o.net_bidir || o.nics)
    usage_error("--net, --net-bw, --net-lat, --net-bidir and --nics go with "
                "--hosts and --per-host");
  if (o.nn == 0)
    usage_error("-n RANKS is required");
  struct single m;
  char why[300];
  resolve_link(o.link_name, o.bw_arg, o.lat_arg, o.bidir, "--link", "--bw",
               "--lat", &m.l);
  if (o.slot_arg &&
      (rcc_parse_size(o.slot_arg, &m.l.slot_bytes, why, sizeof why) != 0 ||
       m.l.slot_bytes < 1))
    usage_error("--slot: %s", m.l.slot_bytes < 1 ? "must be at least 1 byte"
                                                  : why);
  resolve_reduction(&o, &m.l, &m.red);
  resolve_channels(&o, &m);
  if (o.nn == 1)
    predict_one(&o, &m);
  else
    predict_table(&o, &m);
  return 0;
}
