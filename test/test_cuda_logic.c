/*
 * test_cuda_logic.c - the logic of the CUDA support that a CPU can run,
 * without a GPU (make gpu-check runs the kernels where there is one):
 *
 *  - device FIFO slots: RINGCC_DEVICE_CHUNK_BYTES, and the rule that keeps
 *    one rank's device FIFOs within their memory budget however many
 *    channels and peers there are; host FIFOs keep their own slots;
 *  - the vector words of the reduction and copy kernels (vec_split.h): for
 *    every alignment of the pointers and every tail, which elements go one
 *    by one and which as 16-, 8- or 4-byte words;
 *  - P2P decided by PCI bus id from the ranks' NVML records (one visible GPU
 *    per process), NVML itself through a fake library (each probe's init
 *    shut down again), and the sentence that says why an edge between two GPUs
 *    of one host is staged through host memory;
 *  - the driver too old for the runtime: the versions the WARN names;
 *  - device channels where ranks share one GPU (every block must fit);
 *  - failures reaching the kernels: the word failure.c and error.c write,
 *    the watchdog (a status record in plain memory stands for the mapped
 *    one) that records a killed same-host peer and wakes the network engine
 *    only when a kernel starts, and the sentence for each kernel failure;
 *  - the order of a device collective's CUDA work: the staging copy of an
 *    in-place input after the wait for the previous collective; inside a
 *    graph capture no event waited for or recorded, a host node instead;
 *  - misaligned device buffers: the argument named.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "cuda.h"
#include "error.h"
#include "failure.h"
#include "gpu.h"
#include "harness.h"
#include "p2p.h"
#include "transport.h"
#include "vec_split.h"
#include "watchdog.h"

/* ---- a communicator as init would leave it, without transports ------------- */

struct fake {
  struct ringcc_comm comm;
  struct rcc_peer_info peers[64];
};

/* n ranks on one host, every one on the same GPU (P2P/same GPU), with
 * channels collective device channels. */
static void fake_comm(struct fake *f, int n, int channels) {
  memset(f, 0, sizeof(*f));
  struct ringcc_comm *c = &f->comm;
  c->nranks = n;
  c->rank = 0;
  c->peers = f->peers;
  c->nkinds = RCC_MAX_CONN_KINDS;
  c->set.nslots = 8;
  c->set.chunk_bytes = 65536;
  c->set.net_chunk_bytes = 262144;
  c->set.device_chunk_bytes = -1;
  for (int k = 0; k < RCC_MAX_CONN_KINDS; k++)
    c->kind_channels[k] = k % RCC_NUM_CONN_KINDS == RCC_CONN_COLL &&
                                  k >= RCC_CONN_DEVICE
                              ? channels
                              : 1;
  for (int r = 0; r < n; r++) {
    struct rcc_peer_info *p = &f->peers[r];
    p->rank = r;
    p->host_hash = 42;
    p->gpu.device = 0;
    p->gpu.bus_id = 0x3b00;
    memset(p->gpu.uuid, 0xaa, sizeof(p->gpu.uuid));
  }
}

/* ---- device FIFO slots --------------------------------------------------------- */

Test(cuda_logic, device_slots_within_the_memory_budget, .timeout = 10) {
  struct fake *f = malloc(sizeof(*f));
  cr_assert(f != NULL);
  const size_t budget = (size_t)1 << 30, kib = 1024;
  struct {
    int n, channels;
    int64_t asked;
    size_t want; /* with CUDA P2P; without, the default */
  } cases[] = {
      {2, 16, -1, 512 * kib},  /* an NVLink pair: the default */
      {8, 16, -1, 512 * kib},  /* 8 GPUs: 17 sets x 7 peers x 4 MiB */
      {16, 16, -1, 512 * kib}, /* 15 peers: just within 1 GiB */
      {16, 32, -1, 256 * kib}, /* 33 sets x 15 peers: halved */
      {32, 16, -1, 128 * kib}, /* 17 sets x 31 peers */
      {64, 32, -1, 64 * kib},  /* never below 64 KiB */
      {8, 16, 1 << 20, 1 << 20}, /* asked for: exactly that */
      {2, 1, 65536, 65536},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    fake_comm(f, cases[i].n, cases[i].channels);
    f->comm.set.device_chunk_bytes = cases[i].asked;
    size_t got = rcc_p2p_device_slot_bytes(&f->comm);
    size_t want = RINGCC_HAVE_CUDA || cases[i].asked > 0 ? cases[i].want
                                                         : 512 * kib;
    cr_expect_eq(got, want, "case %zu (%d ranks, %d channels): %zu, want %zu",
                 i, cases[i].n, cases[i].channels, got, want);
    size_t mem = rcc_p2p_fifo_memory(&f->comm, got, cases[i].n - 1);
    if (RINGCC_HAVE_CUDA && cases[i].asked < 0 && got > 64 * kib)
      cr_expect(mem <= budget, "case %zu: %zu MiB of device FIFOs", i,
                mem >> 20);
    /* Host FIFOs keep the shared-memory slot. */
    cr_expect_eq(rcc_transport_p2p.slot_bytes(&f->comm), 65536);
    if (RINGCC_HAVE_CUDA)
      cr_expect_eq(rcc_transport_p2p.device_slot_bytes(&f->comm), got);
  }
  free(f);
}

/* ---- vector words of reduce.cuh (vec_split.h) ----------------------------------- */

/* The widest word every pointer agrees on and that holds whole elements. */
static unsigned widest(const uintptr_t *p, int np, size_t esize) {
  for (unsigned w = 16; w >= 4; w /= 2) {
    int ok = w % esize == 0 && p[0] % esize == 0;
    for (int i = 1; i < np && ok; i++)
      ok = (p[i] - p[0]) % w == 0;
    if (ok)
      return w;
  }
  return 0;
}

/* Every alignment of up to four pointers (a, b, dst, dst2) within 32 bytes
 * and every count up to 70 (and some larger): the split covers [0, n)
 * exactly once, its words start aligned in every pointer, it uses the
 * widest word possible, and the tail is less than one word. */
Test(cuda_logic, vector_words_for_every_alignment_and_tail, .timeout = 60) {
  static const size_t esizes[] = {1, 2, 4, 8};
  static const size_t big[] = {1000, 4097, 65536 + 3};
  long checked = 0;
  for (size_t ei = 0; ei < 4; ei++) {
    size_t es = esizes[ei];
    for (int np = 1; np <= 4; np++)
      for (unsigned code = 0; code < (1u << (5 * np)); code++) {
        uintptr_t p[4], mix = 0;
        for (int i = 0; i < np; i++) {
          p[i] = 0x10000 + ((code >> (5 * i)) & 31);
          mix |= p[i] ^ p[0];
        }
        if (p[0] % es != 0)
          continue; /* element pointers are aligned (coll.c checks) */
        int skip = 0;
        for (int i = 1; i < np; i++)
          skip |= p[i] % es != 0;
        if (skip)
          continue;
        unsigned want_word = widest(p, np, es);
        for (size_t n = 0; n < 70 + 3; n++) {
          size_t count = n < 70 ? n : big[n - 70];
          struct rcc_vec_split sp = rcc_vec_split(mix, p[0], count, es);
          checked++;
          cr_assert_eq(sp.word, want_word, "esize %zu, pointers %u: word %u, "
                       "want %u", es, code, sp.word, want_word);
          cr_assert(sp.head <= count && sp.tail_from <= count);
          if (sp.word == 0) {
            cr_assert(sp.head == count && sp.nvec == 0);
            continue;
          }
          size_t per = sp.word / es;
          cr_assert_eq(sp.head + sp.nvec * per, sp.tail_from);
          cr_assert(count - sp.tail_from < per || sp.nvec == 0,
                    "tail of %zu elements holds a whole word",
                    count - sp.tail_from);
          if (sp.nvec > 0)
            for (int i = 0; i < np; i++)
              cr_assert_eq((p[i] + sp.head * es) % sp.word, 0,
                           "pointer %d not aligned at the first word", i);
          /* The head stops at the first boundary (or the end). */
          cr_assert(sp.head * es < sp.word);
          if (sp.head < count)
            cr_assert_eq((p[0] + sp.head * es) % sp.word, 0);
          /* Without a whole word after the head, the tail takes the rest. */
          if (sp.nvec == 0)
            cr_assert((count - sp.head) * es < sp.word);
        }
      }
  }
  cr_log_info("%ld splits checked", checked);
}

/* ---- P2P by PCI bus id, and why an edge is staged (topo.c) ------------------------ */

/* Rank r on GPU bus (its own UUID), NUMA node numa, probed with NVML. */
static void nvml_gpu(struct rcc_peer_info *p, int rank, uint64_t bus, int numa) {
  memset(p, 0, sizeof(*p));
  p->rank = rank;
  p->host_hash = 42;
  p->gpu.device = 0; /* each process sees only its own GPU */
  p->gpu.bus_id = bus;
  p->gpu.numa = numa;
  p->gpu.probe = RCC_PROBE_NVML;
  memset(p->gpu.uuid, (int)(bus >> 16), sizeof(p->gpu.uuid));
}

/* What NVML told p about the GPU at bus. */
static void nvml_sees(struct rcc_peer_info *p, uint64_t bus, int status,
                      int nvlink, int level) {
  int i = p->gpu.npeer++;
  p->gpu.peer_bus[i] = bus;
  p->gpu.peer_p2p[i] = status == RCC_P2P_OK;
  p->gpu.peer_nvlink[i] = (uint8_t)nvlink;
  p->gpu.peer_status[i] = (uint8_t)status;
  p->gpu.peer_level[i] = (uint8_t)level;
}

static int path(const struct rcc_peer_info *a, const struct rcc_peer_info *b) {
  struct rcc_edge_topo e;
  rcc_topo_edge(a, b, &e);
  return rcc_topo_device_path(&e);
}

/* A host-only program on a GPU node: test/cuda/fake_cuda.c stands in for
 * the driver (loaded first under its soname libcuda.so.1), with no context
 * on the thread. Unasked, init only asks whether the thread has a context:
 * no cuInit, no primary context, no push, no CUDA runtime call, no device
 * FIFOs. Then, with a context on the thread, the same init does go to the
 * runtime (which finds no usable driver in the fake): the counts see it. */
static ringcc_comm_t init_alone(void) {
  ringcc_unique_id_t id;
  ringcc_comm_t comm = NULL;
  cr_assert_eq(ringcc_get_unique_id(&id), RINGCC_SUCCESS);
  cr_assert_eq(ringcc_comm_init(&comm, 1, &id, 0, NULL), RINGCC_SUCCESS, "%s",
               ringcc_comm_last_error(NULL));
  return comm;
}

Test(cuda_logic, host_only_without_a_context_touches_no_driver,
     .timeout = 30) {
  char exe[PATH_MAX], lib[PATH_MAX + 32];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  cr_assert(len > 0);
  exe[len] = '\0';
  snprintf(lib, sizeof(lib), "%s/libfakecuda.so", dirname(exe));
  void *fake = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
  cr_assert(fake != NULL, "%s (make builds it)", dlerror());
  void (*set_context)(int) = (void (*)(int))dlsym(fake, "fake_cuda_set_context");
  void (*counts)(int *, int *, int *, int *, int *) =
      (void (*)(int *, int *, int *, int *, int *))dlsym(fake,
                                                         "fake_cuda_counts");
  cr_assert(set_context != NULL && counts != NULL);
  unsetenv("RINGCC_CUDA_DEVICE"); /* make test sets none */
  int queries, inits, retains, pushes, runtime;

  set_context(0);
  ringcc_comm_t comm = init_alone();
  const struct rcc_gpu_info *g = &comm->peers[0].gpu;
  counts(&queries, &inits, &retains, &pushes, &runtime);
  cr_expect_eq(g->device, -1);
  cr_expect_eq(comm->nkinds, RCC_NUM_CONN_KINDS, "device FIFOs made");
  cr_expect_eq(g->none_why, RINGCC_HAVE_CUDA ? RCC_GPU_NONE_NO_CONTEXT
                                             : RCC_GPU_NONE_NO_CUDA);
  cr_expect_eq(queries, RINGCC_HAVE_CUDA ? 1 : 0, "%d context queries",
               queries);
  cr_expect_eq(inits + retains + pushes + runtime, 0,
               "cuInit %d, retained %d, pushed %d, runtime lookups %d",
               inits, retains, pushes, runtime);
  ringcc_comm_destroy(comm);
  counts(&queries, &inits, &retains, &pushes, &runtime);
  cr_expect_eq(inits + retains + pushes + runtime, 0, "at destroy");

  set_context(1); /* the control: a context, so the runtime is asked */
  comm = init_alone();
  g = &comm->peers[0].gpu;
  counts(&queries, &inits, &retains, &pushes, &runtime);
  cr_expect_eq(g->device, -1);
  cr_expect_eq(comm->nkinds, RCC_NUM_CONN_KINDS);
  if (RINGCC_HAVE_CUDA) {
    cr_expect(runtime > 0, "the runtime never looked at the driver");
    cr_expect(g->none_why == RCC_GPU_NONE_NO_DEVICE ||
                  g->none_why == RCC_GPU_NONE_OLD_DRIVER,
              "none_why %d", g->none_why);
  } else {
    cr_expect_eq(queries + runtime, 0);
  }
  ringcc_comm_destroy(comm);
}

/* Contexts entered and left (gpu.c) against the stand-in driver: a thread
 * with no context has none after a CUDA call on GPU 3, and only GPU 3's
 * primary context exists (none on GPU 0, as cudaSetDevice(previous) made);
 * a thread whose own context is current gets it back; a context already
 * current is not pushed again. */
Test(cuda_logic, contexts_entered_and_left_as_found, .timeout = 10) {
  char exe[PATH_MAX], lib[PATH_MAX + 32], why[256];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  cr_assert(len > 0);
  exe[len] = '\0';
  snprintf(lib, sizeof(lib), "%s/libfakecuda.so", dirname(exe));
  void *fake = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
  cr_assert(fake != NULL, "%s (make builds it)", dlerror());
  void (*set_context)(int) = (void (*)(int))dlsym(fake, "fake_cuda_set_context");
  unsigned (*retained)(int *) = (unsigned (*)(int *))dlsym(fake,
                                                           "fake_cuda_retained");
  void *(*own)(void) = (void *(*)(void))dlsym(fake, "fake_cuda_thread_context");
  void *(*primary)(int) = (void *(*)(int))dlsym(fake, "fake_cuda_primary");
  int (*current)(void **) = (int (*)(void **))dlsym(fake, "cuCtxGetCurrent");
  cr_assert(set_context && retained && own && primary && current);
  struct rcc_gpu_scope scope;
  void *ctx = NULL;
  int depth;

  set_context(0); /* a thread that has not used CUDA */
  int entered = rcc_gpu_enter(3, &scope, why, sizeof(why));
  if (!RINGCC_HAVE_CUDA) {
    cr_expect_eq(entered, -1);
    cr_expect(strstr(why, "no CUDA support") != NULL, "%s", why);
    cr_expect_eq(retained(&depth), 0u);
    return;
  }
  cr_assert_eq(entered, 0, "%s", why);
  current(&ctx);
  cr_expect_eq(ctx, primary(3), "GPU 3's primary context is current");
  rcc_gpu_leave(&scope);
  current(&ctx);
  cr_expect_null(ctx, "a thread without a context has one afterwards");
  cr_expect_eq(retained(&depth), 1u << 3, "contexts on GPUs %#x",
               retained(&depth));
  cr_expect_eq(depth, 0);

  set_context(1); /* the thread's own context (another GPU's, say) */
  cr_assert_eq(rcc_gpu_enter(3, &scope, why, sizeof(why)), 0, "%s", why);
  struct rcc_gpu_scope inner;
  cr_assert_eq(rcc_gpu_enter(3, &inner, why, sizeof(why)), 0, "%s", why);
  cr_expect_eq(inner.pushed, 0, "GPU 3 already current: pushed again");
  rcc_gpu_leave(&inner);
  current(&ctx);
  cr_expect_eq(ctx, primary(3));
  rcc_gpu_leave(&scope);
  current(&ctx);
  cr_expect_eq(ctx, own(), "the thread's own context is current again");
  cr_expect_eq(retained(&depth), 1u << 3, "contexts on GPUs %#x",
               retained(&depth));
  cr_expect_eq(depth, 0);
}

/* NVML through test/nvml/fake_nvml.c, loaded first under its soname
 * libnvidia-ml.so.1 so that gpu.c's dlopen finds it: every probe pairs its
 * nvmlInit with an nvmlShutdown (NVML counts them), the library is loaded
 * once, and the peers come out by PCI bus id with their P2P status, NVLink
 * and PCIe level. */
Test(cuda_logic, nvml_probed_by_bus_id_and_shut_down, .timeout = 10) {
  struct rcc_gpu_info me;
  char exe[PATH_MAX], lib[PATH_MAX + 32];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  cr_assert(len > 0);
  exe[len] = '\0';
  snprintf(lib, sizeof(lib), "%s/libfakenvml.so", dirname(exe));
  void *fake = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
  cr_assert(fake != NULL, "%s (make builds it)", dlerror());
  void (*counts)(int *, int *) =
      (void (*)(int *, int *))dlsym(fake, "fake_nvml_counts");
  cr_assert(counts != NULL);
  for (int round = 1; round <= 2; round++) {
    memset(&me, 0, sizeof(me));
    me.bus_id = rcc_topo_bus_id("0000:18:00.0");
    int found = rcc_gpu_nvml_probe("00000000:18:00.0", &me);
    int inits, shutdowns;
    counts(&inits, &shutdowns);
    if (!RINGCC_HAVE_CUDA) { /* no NVML without CUDA support */
      cr_expect_eq(found, 0);
      cr_expect_eq(inits, 0);
      continue;
    }
    cr_assert_eq(found, 1, "round %d: NVML not used", round);
    cr_expect_eq(inits, round, "round %d: %d nvmlInit", round, inits);
    cr_expect_eq(shutdowns, round, "round %d: %d nvmlShutdown for %d inits",
                 round, shutdowns, inits);
    cr_expect_eq(me.probe, RCC_PROBE_NVML);
    cr_expect_str_eq(me.name, "Fake GPU 0");
    cr_assert_eq(me.npeer, 2, "itself left out: %d peers", me.npeer);
    cr_expect_eq(me.peer_bus[0], rcc_topo_bus_id("0000:3b:00.0"));
    cr_expect(me.peer_p2p[0] && me.peer_nvlink[0]);
    cr_expect_eq(me.peer_level[0], RCC_TOPO_LEVEL_SWITCH);
    cr_expect_eq(me.peer_bus[1], rcc_topo_bus_id("0000:86:00.0"));
    cr_expect(!me.peer_p2p[1] && !me.peer_nvlink[1]);
    cr_expect_eq(me.peer_status[1], RCC_P2P_TOPOLOGY);
    cr_expect_eq(me.peer_level[1], RCC_TOPO_LEVEL_SYSTEM);
  }
  dlclose(fake);
}

Test(cuda_logic, p2p_by_pci_bus_id_and_why_staged, .timeout = 10) {
  struct rcc_peer_info a, b;
  char why[512], bus[32];
  uint64_t ba = rcc_topo_bus_id("0000:3b:00.0"), bb = rcc_topo_bus_id("0000:86:00.0");
  cr_assert_str_eq(rcc_topo_bus_name(ba, bus, sizeof(bus)), "0000:3b:00.0");
  cr_assert_eq(rcc_topo_bus_id("00000000:86:00.0"), bb, "NVML's 8-digit domain");

  /* One GPU per process (CUDA_VISIBLE_DEVICES): NVML still finds NVLink. */
  nvml_gpu(&a, 0, ba, 0);
  nvml_gpu(&b, 1, bb, 0);
  nvml_sees(&a, bb, RCC_P2P_OK, 1, RCC_TOPO_LEVEL_BOARD);
  nvml_sees(&b, ba, RCC_P2P_OK, 1, RCC_TOPO_LEVEL_BOARD);
  cr_expect_eq(path(&a, &b), RCC_PATH_P2P_NVLINK);
  cr_expect_eq(rcc_topo_staged_why(&a, &b, why, sizeof(why)), 0, "%s", why);
  cr_expect_str_eq(why, "");

  /* Across sockets: no P2P, staged, and the log says why and where. */
  nvml_gpu(&a, 0, ba, 0);
  nvml_gpu(&b, 1, bb, 1);
  nvml_sees(&a, bb, RCC_P2P_TOPOLOGY, 0, RCC_TOPO_LEVEL_SYSTEM);
  nvml_sees(&b, ba, RCC_P2P_TOPOLOGY, 0, RCC_TOPO_LEVEL_SYSTEM);
  cr_expect_eq(path(&a, &b), RCC_PATH_SHM_STAGED);
  cr_expect_eq(rcc_topo_staged_why(&a, &b, why, sizeof(why)), 1);
  cr_expect(strstr(why, "GPU 0000:3b:00.0 (NUMA 0)") && strstr(why, "GPU 0000:86:00.0 (NUMA 1)") &&
                strstr(why, "PCIe topology") && strstr(why, "interconnect"),
            "%s", why);

  /* Disabled by the variable, on either rank. */
  nvml_gpu(&a, 0, ba, 0);
  nvml_gpu(&b, 3, bb, 0);
  nvml_sees(&a, bb, RCC_P2P_OK, 0, RCC_TOPO_LEVEL_SWITCH);
  nvml_sees(&b, ba, RCC_P2P_OK, 0, RCC_TOPO_LEVEL_SWITCH);
  cr_expect_eq(path(&a, &b), RCC_PATH_P2P_PCIE);
  b.gpu.p2p_disable = 1;
  cr_expect_eq(path(&a, &b), RCC_PATH_SHM_STAGED);
  cr_expect_eq(rcc_topo_staged_why(&a, &b, why, sizeof(why)), 1);
  cr_expect(strstr(why, "RINGCC_P2P_DISABLE=1 on rank 3"), "%s", why);
  b.gpu.p2p_disable = 0;
  a.shm_disable = 1;
  cr_expect_eq(path(&a, &b), RCC_PATH_NET);
  cr_expect_eq(rcc_topo_staged_why(&a, &b, why, sizeof(why)), 1);
  cr_expect(strstr(why, "RINGCC_SHM_DISABLE=1 on rank 0"), "%s", why);

  /* No NVML and one visible GPU: nothing to probe with, and it says so. */
  nvml_gpu(&a, 0, ba, -1);
  nvml_gpu(&b, 1, bb, -1);
  a.gpu.probe = b.gpu.probe = RCC_PROBE_CUDA;
  cr_expect_eq(path(&a, &b), RCC_PATH_SHM_STAGED);
  cr_expect_eq(rcc_topo_staged_why(&a, &b, why, sizeof(why)), 1);
  cr_expect(strstr(why, "could not be probed") && strstr(why, "CUDA_VISIBLE_DEVICES"),
            "%s", why);

  /* Not staged edges: the same GPU, another host, a rank without GPU. */
  nvml_gpu(&b, 1, ba, 0);
  cr_expect_eq(rcc_topo_staged_why(&a, &b, why, sizeof(why)), 0);
  nvml_gpu(&b, 1, bb, 0);
  b.host_hash = 7;
  cr_expect_eq(rcc_topo_staged_why(&a, &b, why, sizeof(why)), 0);
  b.host_hash = 42;
  b.gpu.device = -1;
  cr_expect_eq(rcc_topo_staged_why(&a, &b, why, sizeof(why)), 0);
}

/* ---- the driver against the runtime (gpu.c) ---------------------------------------- */

Test(cuda_logic, driver_too_old_names_both_versions, .timeout = 10) {
  char msg[512];
  cr_expect_eq(rcc_gpu_min_driver_branch(13000), 580);
  cr_expect_eq(rcc_gpu_min_driver_branch(13010), 580);
  cr_expect_eq(rcc_gpu_min_driver_branch(12080), 525);
  cr_expect_eq(rcc_gpu_min_driver_branch(11080), 450);
  cr_expect_eq(rcc_gpu_min_driver_branch(10020), 0);
  /* An H100 node on R535 (CUDA 12.2) with this CUDA 13.0 build. */
  rcc_gpu_driver_message(13000, 12020, "535.104.05", msg, sizeof(msg));
  cr_expect(strstr(msg, "CUDA 13.0 runtime") && strstr(msg, "R580 or newer") &&
                strstr(msg, "535.104.05") && strstr(msg, "CUDA up to 12.2") &&
                strstr(msg, "CUDA_HOME"),
            "%s", msg);
  rcc_gpu_driver_message(12040, 0, "", msg, sizeof(msg));
  cr_expect(strstr(msg, "CUDA 12.4 runtime") && strstr(msg, "R525") &&
                strstr(msg, "cannot run it"),
            "%s", msg);
}

/* ---- device channels where ranks share a GPU (cuda.c) -------------------------------- */

Test(cuda_logic, device_channels_fit_a_shared_gpu, .timeout = 10) {
  if (!RINGCC_HAVE_CUDA)
    cr_skip_test("no CUDA in this build: no device channels");
  struct fake *f = malloc(sizeof(*f));
  cr_assert(f != NULL);
  struct { int n, sms, want; } cases[] = {
      {2, 132, 16}, {4, 132, 16}, {8, 132, 16}, /* 128 blocks on 132 SMs */
      {8, 108, 13}, {16, 132, 8}, {64, 132, 2},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    fake_comm(f, cases[i].n, 1);
    for (int r = 0; r < cases[i].n; r++)
      f->peers[r].gpu.sm_count = cases[i].sms;
    cr_expect_eq(rcc_cuda_channels(&f->comm), cases[i].want,
                 "%d ranks on one GPU of %d SMs: %d channels, want %d",
                 cases[i].n, cases[i].sms, rcc_cuda_channels(&f->comm),
                 cases[i].want);
  }
  /* Ranks on GPUs of their own (NVLink): 16, however many SMs. */
  fake_comm(f, 8, 1);
  for (int r = 0; r < 8; r++) {
    f->peers[r].gpu.sm_count = 20;
    memset(f->peers[r].gpu.uuid, r + 1, 16);
    f->peers[r].gpu.bus_id = 0x1000u * (unsigned)(r + 1);
  }
  for (int r = 0; r < 8; r++)
    for (int q = 0; q < 8; q++)
      if (q != r)
        nvml_sees(&f->peers[r], 0x1000u * (unsigned)(q + 1), RCC_P2P_OK, 1,
                  RCC_TOPO_LEVEL_BOARD);
  cr_expect_eq(rcc_cuda_channels(&f->comm), 16);
  free(f);
}

/* ---- failures reach the kernels: the word, the watchdog, the message ------------------ */

/* failure.c and error.c write the kernels' word; the first failure wins. */
Test(cuda_logic, dead_rank_and_network_error_reach_the_word, .timeout = 10) {
  struct fake *f = malloc(sizeof(*f));
  cr_assert(f != NULL);
  fake_comm(f, 4, 1);
  f->comm.nkinds = 0; /* no FIFOs to poison here */
  uint32_t word = 0;
  rcc_comm_tell_kernels(&f->comm, RINGCC_ERR_PEER_FAILED);
  cr_expect_eq(word, 0, "no word registered: nothing written");
  f->comm.fail_word = &word;
  rcc_peer_dead(&f->comm, 2, 0);
  cr_expect_eq(word, RINGCC_ERR_PEER_FAILED);
  cr_expect_eq(rcc_dead_rank(&f->comm, NULL), 2);
  rcc_comm_set_async_error(&f->comm, RINGCC_ERR_NETWORK, "socket to rank 3 "
                           "reset");
  cr_expect_eq(word, RINGCC_ERR_PEER_FAILED, "the first failure stays");
  fake_comm(f, 4, 1);
  f->comm.nkinds = 0;
  word = 0;
  f->comm.fail_word = &word;
  rcc_comm_set_async_error(&f->comm, RINGCC_ERR_NETWORK, "socket to rank 3 "
                           "reset");
  cr_expect_eq(word, RINGCC_ERR_NETWORK);
  free(f);
}

/* The sentence for each failure a kernel reports (a status record in plain
 * memory, as the kernel leaves it). */
Test(cuda_logic, kernel_failures_as_sentences, .timeout = 10) {
  struct rcc_cuda_status st;
  char msg[512];
  memset(&st, 0, sizeof(st));
  st.coll = RCC_COLL_ALLREDUCE;
  st.seq = 12;
  st.step = 3;
  st.nsteps = 14;
  st.peer = 1;
  st.code = RINGCC_ERR_PEER_FAILED;
  rcc_cuda_status_message(&st, 0, 2, "rank 3 (pid 99 on host n1) died (rank 1 "
                          "passed the news on)", NULL, msg, sizeof(msg));
  cr_expect(strstr(msg, "allreduce (seq 12) on rank 0, device kernel on GPU 2") &&
                strstr(msg, "stopped at step 3 of 14 waiting for data from rank 1") &&
                strstr(msg, "rank 3 (pid 99 on host n1) died"),
            "%s", msg);
  st.code = RINGCC_ERR_NETWORK;
  st.waiting_send = 1;
  rcc_cuda_status_message(&st, 0, 2, "", "rank 5: connection reset", msg,
                          sizeof(msg));
  cr_expect(strstr(msg, "a free slot to send to rank 1: rank 5: connection reset"),
            "%s", msg);
  st.code = RINGCC_ERR_TIMEOUT;
  rcc_cuda_status_message(&st, 0, 2, NULL, NULL, msg, sizeof(msg));
  cr_expect(strstr(msg, "timed out") && strstr(msg, "same call"), "%s", msg);
  st.code = RINGCC_ERR_INVALID_USAGE;
  st.got_bytes = 100;
  st.want_bytes = 64;
  st.got_last = 1;
  rcc_cuda_status_message(&st, 0, 2, NULL, NULL, msg, sizeof(msg));
  cr_expect(strstr(msg, "rank 1 sent 100 bytes (last piece) where 64 were "
                        "expected"), "%s", msg);
  st.code = RINGCC_ERR_ABORTED;
  st.peer = -1;
  st.captured = 1;
  rcc_cuda_status_message(&st, 0, 2, NULL, NULL, msg, sizeof(msg));
  cr_expect(strstr(msg, "(seq 12, from a CUDA graph)") &&
                strstr(msg, "was aborted") && strstr(msg, "before its first step"),
            "%s", msg);
}

/* A fake network engine: counts the watchdog's notifications. */
static int engine_notified;
static void fake_notify(struct rcc_conn *c) {
  (void)c;
  __atomic_fetch_add(&engine_notified, 1, __ATOMIC_RELAXED);
}

static int wait_for(const uint32_t *word, uint32_t want, int ms) {
  for (int i = 0; i < ms; i++) {
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) == want)
      return 1;
    usleep(1000);
  }
  return 0;
}

/* The engine sleeps while a kernel only waits in its stream and joins when
 * it starts; idle, the watchdog does nothing. */
Test(cuda_logic, watchdog_wakes_the_engine_when_a_kernel_starts,
     .timeout = 20) {
  struct fake *f = malloc(sizeof(*f));
  cr_assert(f != NULL);
  fake_comm(f, 1, 1); /* no peers to look at */
  static struct rcc_conn_ops ops = {.notify = fake_notify};
  struct rcc_conn engine = {.ops = &ops};
  struct rcc_cuda_status st;
  struct rcc_watchdog w;
  memset(&st, 0, sizeof(st));
  engine_notified = 0;
  cr_assert_eq(rcc_watchdog_start(&w, &f->comm, &st.started, &st.done,
                                  &engine), 0);
  usleep(50000);
  cr_expect_eq(__atomic_load_n(&w.checks, __ATOMIC_RELAXED), 0,
               "idle: no looks");
  rcc_watchdog_kick(&w); /* a kernel queued behind compute */
  cr_expect(rcc_watchdog_pending(&w));
  usleep(30000);
  cr_expect_eq(__atomic_load_n(&engine_notified, __ATOMIC_RELAXED), 0,
               "not started: the engine sleeps");
  __atomic_store_n(&st.started, 1, __ATOMIC_RELEASE); /* it starts */
  int woke = 0;
  for (int i = 0; i < 500 && !woke; i++, usleep(1000))
    woke = __atomic_load_n(&engine_notified, __ATOMIC_RELAXED) > 0;
  cr_expect(woke, "the engine was not told the kernel started");
  __atomic_store_n(&st.done, 1, __ATOMIC_RELEASE); /* it ends */
  for (int i = 0; i < 100 && rcc_watchdog_pending(&w); i++)
    usleep(1000);
  cr_expect(!rcc_watchdog_pending(&w));
  uint32_t checks = __atomic_load_n(&w.checks, __ATOMIC_RELAXED);
  usleep(60000);
  cr_expect_eq(__atomic_load_n(&w.checks, __ATOMIC_RELAXED), checks,
               "idle again: no more looks");
  rcc_watchdog_stop(&w);
  free(f);
}

/* Ranks as processes; the last one dies while the others' (fake) kernels
 * wait: each survivor's watchdog records it within the host executor's
 * bounds and the kernels' word says RINGCC_ERR_PEER_FAILED. */
static int watchdog_sees_a_death(h_ctx_t *ctx) {
  struct ringcc_comm *comm = ctx->comm;
  int victim = ctx->nranks - 1;
  if (ringcc_barrier(ctx->comm, NULL) != RINGCC_SUCCESS)
    return h_fail(ctx, "barrier: %s", ringcc_comm_last_error(ctx->comm));
  if (ctx->rank == victim) {
    usleep(100000);
    raise(SIGKILL);
  }
  struct rcc_cuda_status st;
  struct rcc_watchdog w;
  memset(&st, 0, sizeof(st));
  comm->fail_word = &st.failed; /* as cuda.c registers the mapped word */
  if (rcc_watchdog_start(&w, comm, &st.started, &st.done, NULL) != 0)
    return h_fail(ctx, "rcc_watchdog_start failed");
  rcc_watchdog_kick(&w);
  st.started = 1; /* a kernel waits */
  double t0 = h_now_s();
  int seen = wait_for(&st.failed, RINGCC_ERR_PEER_FAILED, 5000);
  double took = h_now_s() - t0;
  st.done = 1;
  rcc_watchdog_stop(&w);
  comm->fail_word = NULL;
  int told = -1, dead = rcc_dead_rank(comm, &told);
  if (!seen || dead != victim)
    return h_fail(ctx, "after %.2f s: word %u, dead rank %d (want %d)", took,
                  st.failed, dead, victim);
  if (took > 2.0)
    return h_fail(ctx, "the death took %.2f s to reach the kernels' word",
                  took);
  char why[256];
  rcc_dead_describe(comm, why, sizeof(why));
  printf("rank %d: word set after %.3f s: %s\n", ctx->rank, took, why);
  return 0;
}

Test(cuda_logic, watchdog_records_a_dead_peer_for_the_kernels,
     .timeout = 60) {
  h_run_opts_t o = {.nranks = 3, .body = watchdog_sees_a_death,
                    .timeout_s = 30, .name = "watchdog"};
  /* The victim's death is the point: h_run reports it as a failed rank, so
   * the survivors' verdicts are checked from their output. */
  cr_redirect_stdout();
  h_run(&o);
  fflush(stdout);
  char out[4096] = "";
  FILE *so = cr_get_redirected_stdout();
  size_t n = fread(out, 1, sizeof(out) - 1, so);
  out[n] = '\0';
  cr_expect(strstr(out, "rank 0: word set after") &&
                strstr(out, "rank 1: word set after"),
            "survivors did not both see rank 2 die: %s", out);
}

/* ---- the order of a collective's CUDA work (cuda.c) -------------------------------- */

static int index_of(const int *steps, int n, int step) {
  for (int i = 0; i < n; i++)
    if (steps[i] == step)
      return i;
  return -1;
}

/* The staging copy of an in-place input comes after the wait for the
 * communicator's previous kernel (which may still be writing that buffer on
 * another stream); a capture neither waits for nor records the
 * communicator's event, and tells the watchdog from a host node. */
Test(cuda_logic, enqueue_order_for_staging_and_capture, .timeout = 10) {
  int steps[RCC_CUDA_MAX_STEPS];
  for (int have_last = 0; have_last < 2; have_last++)
    for (int capture = 0; capture < 2; capture++)
      for (int stage = 0; stage < 2; stage++) {
        int n = rcc_cuda_recipe(have_last, capture, stage, steps);
        int wait = index_of(steps, n, RCC_CUDA_WAIT_LAST);
        int alloc = index_of(steps, n, RCC_CUDA_STAGE_ALLOC);
        int copy = index_of(steps, n, RCC_CUDA_STAGE_COPY);
        int kick = index_of(steps, n, RCC_CUDA_HOST_KICK);
        int kernel = index_of(steps, n, RCC_CUDA_KERNEL);
        int record = index_of(steps, n, RCC_CUDA_RECORD_LAST);
        int free_ = index_of(steps, n, RCC_CUDA_STAGE_FREE);
        const char *c = capture ? "captured" : "eager";
        cr_assert(kernel >= 0, "%s: no kernel", c);
        /* Captured: an external wait and record, so that replays are
         * ordered against direct calls on other streams both ways. */
        cr_expect_eq(wait >= 0, have_last || capture,
                     "%s, have_last %d: wait %d", c, have_last, wait);
        cr_expect(record >= 0, "%s: no record", c);
        cr_expect_eq(kick >= 0, capture, "%s: host node %d", c, kick);
        cr_expect_eq(copy >= 0, stage);
        if (stage) {
          cr_expect(alloc < copy && copy < kernel && kernel < free_,
                    "%s: alloc %d copy %d kernel %d free %d", c, alloc, copy,
                    kernel, free_);
          if (wait >= 0)
            cr_expect(wait < copy, "the staging copy (%d) must come after "
                      "the wait for the previous collective (%d)", copy, wait);
        }
        if (wait >= 0)
          cr_expect(wait < kernel);
        if (record >= 0)
          cr_expect(kernel < record);
        if (kick >= 0)
          cr_expect(kick < kernel && kick > copy && kick > wait);
      }
}

/* ---- one GPU shared: channels, hardware queues, processes, MPS --------------------- */

Test(cuda_logic, channels_capped_by_the_sms_of_a_shared_gpu, .timeout = 10) {
  cr_expect_eq(rcc_cuda_channel_cap(1, 132), RCC_MAX_CHANNELS);
  cr_expect_eq(rcc_cuda_channel_cap(4, 0), RCC_MAX_CHANNELS, "SMs unknown");
  cr_expect_eq(rcc_cuda_channel_cap(4, 132), 32 < RCC_MAX_CHANNELS ? 32
                                                                 : RCC_MAX_CHANNELS);
  cr_expect_eq(rcc_cuda_channel_cap(8, 132), 16);
  cr_expect_eq(rcc_cuda_channel_cap(200, 132), 1, "never below one");
  /* RINGCC_NCHANNELS=32 with 8 thread ranks on a GPU of 132 SMs: 16
   * (comm.c applies rcc_cuda_channel_limit as it does to the links'
   * choice). */
  struct fake *f = malloc(sizeof(*f));
  cr_assert(f != NULL);
  fake_comm(f, 8, 1);
  for (int r = 0; r < 8; r++)
    f->peers[r].gpu.sm_count = 132;
  cr_expect_eq(rcc_cuda_channel_limit(&f->comm), 16);
  free(f);
}

Test(cuda_logic, thread_ranks_within_the_hardware_queues, .timeout = 10) {
  cr_expect_eq(rcc_cuda_hw_queues(NULL), 8, "the driver's default");
  cr_expect_eq(rcc_cuda_hw_queues(""), 8);
  cr_expect_eq(rcc_cuda_hw_queues("junk"), 8);
  cr_expect_eq(rcc_cuda_hw_queues("0"), 8);
  cr_expect_eq(rcc_cuda_hw_queues("4"), 4);
  cr_expect_eq(rcc_cuda_hw_queues("32"), 32);
  cr_expect_eq(rcc_cuda_hw_queues("64"), 32, "the driver caps it at 32");
  struct fake *f = malloc(sizeof(*f));
  cr_assert(f != NULL);
  /* 6 ranks: 4 threads of pid 100 on the GPU, 2 of pid 200. */
  fake_comm(f, 6, 1);
  for (int r = 0; r < 6; r++) {
    f->peers[r].pid = r < 4 ? 100 : 200;
    f->peers[r].pid_space = 7;
  }
  cr_expect_eq(rcc_cuda_threads_per_gpu(&f->comm), 4);
  /* The same pid in another pid namespace is another process. */
  f->peers[3].pid_space = 8;
  cr_expect_eq(rcc_cuda_threads_per_gpu(&f->comm), 3);
  /* On another GPU: not sharing its queues. */
  f->peers[3].pid_space = 7;
  f->peers[2].gpu.bus_id = 0x4000;
  memset(f->peers[2].gpu.uuid, 0xbb, sizeof(f->peers[2].gpu.uuid));
  cr_expect_eq(rcc_cuda_threads_per_gpu(&f->comm), 3);
  free(f);
}

Test(cuda_logic, processes_on_one_gpu_need_mps, .timeout = 10) {
  struct fake *f = malloc(sizeof(*f));
  cr_assert(f != NULL);
  int a = -1, b = -1;
  fake_comm(f, 4, 1); /* all threads of one process: no sharing */
  for (int r = 0; r < 4; r++)
    f->peers[r].pid = 100, f->peers[r].pid_space = 7;
  cr_expect_eq(rcc_cuda_shared_gpu_processes(&f->comm, &a, &b), 0);
  f->peers[2].pid = 300; /* rank 2 another process on the same GPU */
  cr_expect_eq(rcc_cuda_shared_gpu_processes(&f->comm, &a, &b), 1);
  cr_expect(a == 0 && b == 2, "pair %d, %d", a, b);
  /* Each process on a GPU of its own: fine. */
  f->peers[2].gpu.bus_id = 0x4000;
  memset(f->peers[2].gpu.uuid, 0xbb, sizeof(f->peers[2].gpu.uuid));
  cr_expect_eq(rcc_cuda_shared_gpu_processes(&f->comm, &a, &b), 0);
  /* On another host: not one GPU, whatever the bus id says. */
  f->peers[2].gpu = f->peers[0].gpu;
  f->peers[2].host_hash = 43;
  cr_expect_eq(rcc_cuda_shared_gpu_processes(&f->comm, &a, &b), 0);
  f->peers[2].host_hash = 42;

  /* MPS: its control pipe, as nvidia-cuda-mps-control -d makes it. */
  char dir[] = "/tmp/rcc-mps-XXXXXX", path[64], why[RCC_ERRLEN];
  cr_assert(mkdtemp(dir) != NULL);
  cr_expect_eq(rcc_cuda_mps_running(dir), 0);
  snprintf(path, sizeof(path), "%s/control", dir);
  FILE *plain = fopen(path, "w"); /* a plain file is no daemon */
  cr_assert(plain != NULL);
  fclose(plain);
  cr_expect_eq(rcc_cuda_mps_running(dir), 0);
  unlink(path);
  cr_assert(mkfifo(path, 0600) == 0);
  cr_expect_eq(rcc_cuda_mps_running(dir), 1);
  setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
  cr_expect_eq(rcc_cuda_shared_refused(&f->comm, why, sizeof(why)), 0,
               "under MPS processes may share the GPU");
  unlink(path);
  cr_expect_eq(rcc_cuda_shared_refused(&f->comm, why, sizeof(why)), 1);
  cr_expect(strstr(why, "ranks 0 and 2") && strstr(why, "MPS") &&
                strstr(why, "nvidia-cuda-mps-control") &&
                strstr(why, "host buffers"),
            "the way out is named: %s", why);
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  rmdir(dir);
  free(f);
}

/* ---- frees that wait for no spinning kernel (gpu.h) ---------------------------------- */

static int fake_pending[4];
static int event_is_pending(void *event) {
  return fake_pending[(int)(intptr_t)event];
}
static int freed[8];
static void count_free(void *arg) { freed[(int)(intptr_t)arg]++; }

Test(cuda_logic, frees_deferred_while_kernels_are_pending, .timeout = 10) {
  rcc_gpu_set_event_query(event_is_pending);
  memset(freed, 0, sizeof(freed));
  /* Two communicators' last-kernel events, on devices 0 and 1 (handles are
   * indexes into fake_pending here). */
  rcc_gpu_track(0, (void *)(intptr_t)1);
  rcc_gpu_track(1, (void *)(intptr_t)2);
  fake_pending[1] = 1, fake_pending[2] = 0;
  cr_expect_eq(rcc_gpu_quiet(0), 0);
  cr_expect_eq(rcc_gpu_quiet(1), 1);
  cr_expect_eq(rcc_gpu_quiet(-1), 0);
  /* device -1: no context entered (the test has no GPU). A free on a quiet
   * device runs at once; one while a kernel is pending waits. */
  rcc_gpu_free_when_quiet(-1, count_free, (void *)(intptr_t)3);
  cr_expect_eq(freed[3], 0, "freed while a kernel was pending");
  cr_expect_eq(rcc_gpu_sweep(), 1);
  cr_expect_eq(freed[3], 0);
  fake_pending[1] = 0; /* the kernel ended */
  cr_expect_eq(rcc_gpu_sweep(), 0);
  cr_expect_eq(freed[3], 1, "the deferred free ran once");
  cr_expect_eq(rcc_gpu_sweep(), 0);
  cr_expect_eq(freed[3], 1);
  rcc_gpu_free_when_quiet(-1, count_free, (void *)(intptr_t)4);
  cr_expect_eq(freed[4], 1, "quiet: freed at once");
  /* An untracked event no longer holds frees back. */
  fake_pending[2] = 1;
  rcc_gpu_untrack((void *)(intptr_t)2);
  cr_expect_eq(rcc_gpu_quiet(-1), 1);
  rcc_gpu_untrack((void *)(intptr_t)1);
  rcc_gpu_set_event_query(NULL);
}

/* ---- misaligned device buffers (cuda.c; coll.c names the argument) ------------------ */

Test(cuda_logic, misaligned_device_buffers_are_named, .timeout = 10) {
  char *base = (char *)(uintptr_t)0x7f0000001000ull;
  cr_expect_null(rcc_cuda_misaligned(base, "sendbuf", base + 64, "recvbuf", 8));
  cr_expect_str_eq(rcc_cuda_misaligned(base + 2, "sendbuf", base, "recvbuf", 4),
                   "sendbuf");
  cr_expect_str_eq(rcc_cuda_misaligned(base + 8, "sendbuf", base + 4,
                                       "recvbuf", 8), "recvbuf");
  cr_expect_str_eq(rcc_cuda_misaligned(NULL, "sendbuf", base + 1, "buf", 2),
                   "buf");
  cr_expect_null(rcc_cuda_misaligned(base + 1, "sendbuf", base + 3, "recvbuf",
                                     1), "int8 has no alignment");
  cr_expect_null(rcc_cuda_misaligned(NULL, "sendbuf", NULL, "recvbuf", 8));
}
