// gloo_bench.cc - ringcc-bench's measurement of Gloo's ring allreduce over
// Gloo's TCP transport on 127.0.0.1, for the side-by-side comparison
// (scripts/bench-compare.sh).
//
//   gloo-bench --nranks 4 -b 8 -e 64M -f 2 [--json FILE]
//
// The program forks its N ranks itself. Each creates a TCP device bound to
// 127.0.0.1 and a gloo::rendezvous::Context that meets the others through a
// gloo::rendezvous::FileStore in a fresh temporary directory (removed at the
// end), then connects the full mesh. The call:
//   gloo::allreduce(opts), Algorithm::RING, float32, gloo::sum<float>;
//   out of place: setInput(sendbuf) + setOutput(recvbuf);
//   in place: setOutput(recvbuf) only.
// The options of a size and placement are built once, before its warm-up, and
// reused by every call. Everything else - options, sizes, inputs, the timed
// loop, the check of every element, the columns and the JSON - is
// bench_common.c, the measurement of tools/ringcc-bench.c too.
//
// The parent only waits (bc_fork_ranks): when a rank fails it stops the
// others; after -T seconds (exit 124), or on SIGTERM/SIGINT/SIGHUP (exit
// 128+signal), it stops them all. The store directory is removed in every
// case.
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench_common.h"

#define PROG_NAME "gloo-bench"

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

const uint32_t kCallTag = 1;       // the measured allreduce
const uint32_t kFirstHelperTag = 1000;  // barriers, max/sum, rank list

struct GlooRank {
  int rank = 0;
  std::chrono::milliseconds timeout{600000};
  std::shared_ptr<gloo::Context> ctx;
  uint32_t next_tag = kFirstHelperTag;
  // The options of the current size and placement, and what they were made
  // for.
  std::unique_ptr<gloo::AllreduceOptions> opts;
  const float* opts_in = nullptr;
  float* opts_out = nullptr;
  size_t opts_count = 0;
};

[[noreturn]] void die_rank(const GlooRank* g, const char* what,
                           const char* why) {
  fprintf(stderr, PROG_NAME ": rank %d: %s failed: %s\n", g->rank, what, why);
  fflush(stdout);
  fflush(stderr);
  _exit(BC_EXIT_FAILED);
}

// Every helper collective gets a fresh tag, the same sequence on every rank.
template <typename T>
T allreduce_one(GlooRank* g, T mine, ReduceFn fn, const char* what) {
  T out = 0;
  try {
    gloo::AllreduceOptions o(g->ctx);
    o.setInput(&mine, 1);
    o.setOutput(&out, 1);
    o.setReduceFunction(fn);
    o.setTag(g->next_tag++);
    o.setTimeout(g->timeout);
    gloo::allreduce(o);
  } catch (const std::exception& e) {
    die_rank(g, what, e.what());
  }
  return out;
}

int gloo_call(void* ctx, const struct bc_options* o, const struct bc_plan* p,
              bool in_place, void* sbuf_v, void* rbuf_v) {
  auto* g = static_cast<GlooRank*>(ctx);
  (void)o;  // allreduce of float32 only (main() refuses the others)
  const float* in = in_place ? nullptr : static_cast<float*>(sbuf_v);
  float* rbuf = static_cast<float*>(rbuf_v);
  try {
    if (!g->opts || g->opts_in != in || g->opts_out != rbuf ||
        g->opts_count != p->arg) {
      g->opts.reset(new gloo::AllreduceOptions(g->ctx));
      if (in) g->opts->setInput(const_cast<float*>(in), p->arg);
      g->opts->setOutput(rbuf, p->arg);
      g->opts->setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
      g->opts->setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      g->opts->setTag(kCallTag);
      g->opts->setTimeout(g->timeout);
      g->opts_in = in;
      g->opts_out = rbuf;
      g->opts_count = p->arg;
    }
    gloo::allreduce(*g->opts);
  } catch (const std::exception& e) {
    char what[96];
    snprintf(what, sizeof what, "gloo::allreduce (%zu bytes, %s)", p->bytes,
             in_place ? "in place" : "out of place");
    die_rank(g, what, e.what());
  }
  return 0;
}

void gloo_barrier(void* ctx) {
  auto* g = static_cast<GlooRank*>(ctx);
  try {
    gloo::BarrierOptions o(g->ctx);
    o.setTag(g->next_tag++);
    o.setTimeout(g->timeout);
    gloo::barrier(o);
  } catch (const std::exception& e) {
    die_rank(g, "gloo::barrier", e.what());
  }
}

double gloo_max_double(void* ctx, double mine) {
  return allreduce_one<double>(static_cast<GlooRank*>(ctx), mine,
                               static_cast<ReduceFn>(&gloo::max<double>),
                               "gloo::allreduce (max of the times)");
}

long long gloo_sum_ll(void* ctx, long long mine) {
  return allreduce_one<int64_t>(static_cast<GlooRank*>(ctx), mine,
                                static_cast<ReduceFn>(&gloo::sum<int64_t>),
                                "gloo::allreduce (sum of #wrong)");
}

void gloo_allgather_bytes(void* ctx, const void* mine, void* all,
                          size_t bytes) {
  auto* g = static_cast<GlooRank*>(ctx);
  try {
    gloo::AllgatherOptions o(g->ctx);
    o.setInput(static_cast<uint8_t*>(const_cast<void*>(mine)), bytes);
    o.setOutput(static_cast<uint8_t*>(all), bytes * (size_t)g->ctx->size);
    o.setTag(g->next_tag++);
    o.setTimeout(g->timeout);
    gloo::allgather(o);
  } catch (const std::exception& e) {
    die_rank(g, "gloo::allgather (rank list)", e.what());
  }
}

void gloo_abort_job(void* ctx) {
  (void)ctx;
  fflush(stdout);
  fflush(stderr);
  _exit(BC_EXIT_FAILED);
}

// What every rank needs from the parent.
struct RankArgs {
  std::string store_dir;
  std::string library;
};

int rank_main(const struct bc_options* op, int rank, void* arg) {
  const struct bc_options& o = *op;
  const RankArgs& args = *static_cast<const RankArgs*>(arg);
  const std::string& store_dir = args.store_dir;
  const std::string& library = args.library;
  GlooRank g;
  g.rank = rank;
  g.timeout = std::chrono::milliseconds((int64_t)o.watchdog_s * 1000);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    attr.ai_family = AF_INET;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    auto rctx = std::make_shared<gloo::rendezvous::Context>(rank, o.nranks);
    rctx->setTimeout(g.timeout);
    rctx->connectFullMesh(store, dev);
    g.ctx = rctx;
  } catch (const std::exception& e) {
    die_rank(&g, "rendezvous (FileStore + TCP on 127.0.0.1)", e.what());
  }
  struct bc_backend be = {};
  be.prog = PROG_NAME;
  be.library = library.c_str();
  be.call_desc =
      "gloo::allreduce(Algorithm::RING, gloo::sum<float>; setInput(sendbuf) + "
      "setOutput(recvbuf), in place setOutput only), TCP on 127.0.0.1, host "
      "buffers";
  be.rs_in_place_at_own_block = true;  // unused: allreduce only
  be.ctx = &g;
  be.call = gloo_call;
  be.barrier = gloo_barrier;
  be.max_double = gloo_max_double;
  be.sum_ll = gloo_sum_ll;
  be.allgather_bytes = gloo_allgather_bytes;
  be.abort_job = gloo_abort_job;
  int status = bc_run(&be, &o, rank, o.nranks);
  gloo_barrier(&g);  // nobody leaves while another still reads
  g.opts.reset();
  return status;
}

// ---- the parent ----------------------------------------------------------------

// The FileStore keeps one file per key in the directory.
void remove_store(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      unlink((dir + "/" + e->d_name).c_str());
    }
    closedir(d);
  }
  if (rmdir(dir.c_str()) != 0)
    fprintf(stderr, PROG_NAME ": cannot remove %s: %s\n", dir.c_str(),
            strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  struct bc_options o;
  char err[512];
  const char* usage_err =
      bc_parse_options(argc, argv, BC_OPT_FORK | BC_OPT_IN_PLACE, &o, err,
                       sizeof err);
  if (usage_err == nullptr && o.coll != BC_ALLREDUCE) {
    snprintf(err, sizeof err, "-c %s: only allreduce is measured for Gloo",
             bc_coll_name(o.coll));
    usage_err = err;
  }
  if (usage_err) {
    fprintf(stderr, PROG_NAME ": %s\nTry '" PROG_NAME " --help'.\n", usage_err);
    return BC_EXIT_USAGE;
  }
  if (o.help) {
    bc_usage(stdout, PROG_NAME, " --nranks N", BC_OPT_FORK | BC_OPT_IN_PLACE);
    return 0;
  }

  char tmpl[] = "/tmp/ringcc-gloo-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    fprintf(stderr, PROG_NAME ": mkdtemp %s: %s\n", tmpl, strerror(errno));
    return BC_EXIT_FAILED;
  }
  std::string store_dir = tmpl;
  char library[96];
  snprintf(library, sizeof library, "Gloo %d.%d.%d (headers), FileStore %s",
           GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, tmpl);

  RankArgs args{store_dir, library};
  int status = bc_fork_ranks(PROG_NAME, &o, rank_main, &args);
  remove_store(store_dir);
  return status;
}
