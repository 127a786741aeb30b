/*
 * test_cuda_build.c - what can be checked of the CUDA support on a machine
 * without a GPU (make gpu-check runs the rest where there is one):
 *
 *  - the build: every datatype x op collective kernel is in the library's
 *    kernel objects (the FIFO kernels and the zero-copy kernels), as a host
 *    launch stub and in the sm_80 and sm_90 cubins
 *    and the compute_90 PTX of its fatbinary (read from the object: ELF, then
 *    the fatbinary's embedded cubins);
 *  - the library links no CUDA driver (libcuda) nor the shared CUDA runtime
 *    and exports only ringcc_* symbols, so it loads where there is no GPU;
 *  - the choice of path for device data, as a pure function of a simulated
 *    topology (topo.c), and the transport table's order agreeing with it;
 *  - device-buffer calls where no GPU is usable fail with a clear error and
 *    leave the communicator working;
 *  - scripts/gpu-check.sh: its plan for 8 GPUs and for one (--dry-run), its
 *    exit 77 without a GPU, shellcheck, and its tables from logs (--report).
 *
 * The rest of the host suite runs against the same (CUDA-enabled) build.
 */
#include <criterion/criterion.h>
#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "cuda.h"
#include "transport.h"
#include "harness.h"

#if RINGCC_HAVE_CUDA
#include <cuda_runtime_api.h>
static int gpu_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess)
    n = 0;
  cudaGetLastError();
  return n;
}
#else
static int gpu_count(void) { return 0; }
#endif

/* ---- the build directory ----------------------------------------------------- */

/* $(BUILD)/rel, from RINGCC_BIN_DIR (= $(BUILD)/bin, set by make test). */
static const char *build_path(const char *rel, char *buf, size_t len) {
  const char *bin = getenv("RINGCC_BIN_DIR");
  cr_assert(bin != NULL, "RINGCC_BIN_DIR is not set (run through make test)");
  snprintf(buf, len, "%s/../%s", bin, rel);
  return buf;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  cr_assert(buf != NULL);
  cr_assert(fread(buf, 1, (size_t)n, f) == (size_t)n, "cannot read %s", path);
  fclose(f);
  buf[n] = '\0';
  *len = (size_t)n;
  return buf;
}

/* ---- the kernels in the object --------------------------------------------------- */

/* Itanium C++ mangling of each datatype's device type, ringcc_datatype_t
 * order (int64_t is long, uint64_t unsigned long on LP64 Linux). */
static const char *const type_codes[RINGCC_NUM_DATATYPES] = {
    "a", "h", "i", "j", "l", "m", "6__half", "13__nv_bfloat16", "f", "d",
    NULL, NULL}; /* float8: host buffers only, no kernels (coll.c refuses) */

/* rcc_coll_kernel<T, op>(rcc_cuda_args) (exec_cuda.cu) and
 * rcc_zc_kernel<T, op>(rcc_zc_dev_args) (exec_zc_cuda.cu), as the compilers
 * name them. */
static void kernel_name(int zc, int dt, int op, char *buf, size_t len) {
  if (zc)
    snprintf(buf, len, "_Z13rcc_zc_kernelI%sLi%dEEv15rcc_zc_dev_args",
             type_codes[dt], op);
  else
    snprintf(buf, len, "_Z15rcc_coll_kernelI%sLi%dEEv13rcc_cuda_args",
             type_codes[dt], op);
}

static const void *memmem_n(const void *hay, size_t n, const char *needle,
                            size_t m) {
  return m <= n ? memmem(hay, n, needle, m) : NULL;
}

/* A section of an ELF64 file in memory, by name; NULL if absent. */
static const char *elf_section(const char *elf, size_t len, const char *name,
                               size_t *size) {
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;
  cr_assert(len >= sizeof(*eh) && memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0);
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(elf + eh->e_shoff);
  const char *names = elf + sh[eh->e_shstrndx].sh_offset;
  for (int i = 0; i < eh->e_shnum; i++)
    if (strcmp(names + sh[i].sh_name, name) == 0) {
      *size = sh[i].sh_size;
      return elf + sh[i].sh_offset;
    }
  return NULL;
}

/* The symbol table of an ELF64 file holds a symbol named name. */
static int elf_has_symbol(const char *elf, size_t len, const char *name) {
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(elf + eh->e_shoff);
  (void)len;
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB)
      continue;
    const Elf64_Sym *sym = (const Elf64_Sym *)(elf + sh[i].sh_offset);
    const char *str = elf + sh[sh[i].sh_link].sh_offset;
    for (size_t k = 0; k < sh[i].sh_size / sizeof(*sym); k++)
      if (strcmp(str + sym[k].st_name, name) == 0)
        return 1;
  }
  return 0;
}

/* The SM of a cubin: e_flags bits 8..15 (ABI version 8 and later), else
 * bits 0..7. */
static int cubin_sm(const Elf64_Ehdr *eh) {
  return eh->e_ident[EI_ABIVERSION] >= 8 ? (int)((eh->e_flags >> 8) & 0xff)
                                         : (int)(eh->e_flags & 0xff);
}

struct cubin {
  const char *elf;
  size_t len;
  int sm;
};

/* The cubins embedded in a fatbinary (uncompressed: --no-compress). */
static int find_cubins(const char *fat, size_t len, struct cubin *out,
                       int max) {
  int n = 0;
  for (const char *p = fat; n < max;) {
    p = memmem_n(p, len - (size_t)(p - fat), ELFMAG, SELFMAG);
    if (p == NULL)
      break;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)p;
    if (eh->e_ident[EI_CLASS] == ELFCLASS64 && eh->e_machine == EM_CUDA) {
      size_t end = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
      out[n++] = (struct cubin){p, end, cubin_sm(eh)};
      p += end;
    } else {
      p += SELFMAG;
    }
  }
  return n;
}

/* Every datatype x op instance of one kernel template in its object: the
 * host launch stub, the sm_80 and sm_90 cubins, the compute_90 PTX. */
static void every_kernel_in(const char *object, int zc) {
  char path[4096], name[128], section[160], entry[160];
  size_t len, fat_len, unused;
  char *obj = read_file(build_path(object, path, sizeof(path)), &len);
  const char *fat = elf_section(obj, len, ".nv_fatbin", &fat_len);
  cr_assert(fat != NULL, "%s has no .nv_fatbin section", path);

  struct cubin cubins[8];
  int ncubin = find_cubins(fat, fat_len, cubins, 8), sm80 = -1, sm90 = -1;
  for (int i = 0; i < ncubin; i++) {
    if (cubins[i].sm == 80)
      sm80 = i;
    if (cubins[i].sm == 90)
      sm90 = i;
  }
  cr_assert(sm80 >= 0 && sm90 >= 0,
            "%s: the fatbinary should hold sm_80 and sm_90 cubins (%d found; "
            "compressed? the build passes --no-compress)", path, ncubin);
  cr_assert(memmem_n(fat, fat_len, ".target sm_90", 13) != NULL,
            "%s: the fatbinary holds no PTX for compute_90", path);

  int missing = 0;
  for (int dt = 0; dt < RINGCC_NUM_DATATYPES; dt++)
    for (int op = 0; op < RINGCC_NUM_OPS && type_codes[dt]; op++) {
      kernel_name(zc, dt, op, name, sizeof(name));
      snprintf(section, sizeof(section), ".text.%s", name);
      snprintf(entry, sizeof(entry), ".entry %s(", name);
      const char *where[4] = {NULL, NULL, NULL, NULL};
      if (!elf_has_symbol(obj, len, name))
        where[0] = "host launch stub";
      if (!elf_section(cubins[sm80].elf, cubins[sm80].len, section, &unused))
        where[1] = "sm_80 cubin";
      if (!elf_section(cubins[sm90].elf, cubins[sm90].len, section, &unused))
        where[2] = "sm_90 cubin";
      if (!memmem_n(fat, fat_len, entry, strlen(entry)))
        where[3] = "compute_90 PTX";
      for (int w = 0; w < 4; w++)
        if (where[w]) {
          cr_log_error("kernel %s/%s: not in the %s (%s)",
                       ringcc_datatype_name((ringcc_datatype_t)dt),
                       ringcc_op_name((ringcc_op_t)op), where[w], name);
          missing++;
        }
    }
  free(obj);
  cr_assert_eq(missing, 0, "%s: %d kernel instances missing (see above)",
               path, missing);
}

Test(cuda_build, every_kernel_in_host_stubs_cubins_and_ptx, .timeout = 60) {
  if (!RINGCC_HAVE_CUDA)
    cr_skip_test("built with CUDA=0: no kernels");
  every_kernel_in("obj/lib/exec/exec_cuda.o", 0);
  every_kernel_in("obj/lib/exec/exec_zc_cuda.o", 1);
}

/* ---- the library as it loads on a machine without GPU ------------------------ */

Test(cuda_build, library_needs_no_cuda_driver_and_exports_ringcc_only,
     .timeout = 60) {
  char path[4096], cmd[8300], line[512];
  build_path("lib/libringcc.so", path, sizeof(path));
  snprintf(cmd, sizeof(cmd), "ldd '%s' 2>&1", path);
  FILE *p = popen(cmd, "r");
  cr_assert(p != NULL);
  char deps[8192] = "";
  while (fgets(line, sizeof(line), p))
    if (strlen(deps) + strlen(line) < sizeof(deps))
      strcat(deps, line);
  cr_assert_eq(pclose(p), 0, "ldd %s failed", path);
  cr_assert(deps[0] != '\0');
  cr_expect(strstr(deps, "libcuda") == NULL && strstr(deps, "libnvidia") == NULL,
            "libringcc.so depends on the CUDA driver or runtime:\n%s", deps);
  cr_expect(strstr(deps, "not found") == NULL, "ldd:\n%s", deps);
  /* The sanitizer runtimes bring libstdc++ themselves. */
  if (strstr(deps, "libasan") == NULL && strstr(deps, "libtsan") == NULL &&
      strstr(deps, "libubsan") == NULL)
    cr_expect(strstr(deps, "libstdc++") == NULL,
              "libringcc.so depends on libstdc++:\n%s", deps);

  snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s' 2>&1", path);
  p = popen(cmd, "r");
  cr_assert(p != NULL);
  int exported = 0;
  while (fgets(line, sizeof(line), p)) {
    char addr[64], type[8], sym[400];
    if (sscanf(line, "%63s %7s %399s", addr, type, sym) != 3)
      continue;
    if (strcmp(type, "A") == 0) /* the version node, RINGCC_0 */
      continue;
    cr_expect(strncmp(sym, "ringcc_", 7) == 0, "exported: %s", sym);
    exported++;
  }
  int rc = pclose(p);
  if (rc != 0)
    cr_skip_test("nm is not available here");
  cr_assert(exported > 20, "only %d symbols exported?", exported);
}

/* ---- which path device data takes ------------------------------------------------ */

struct path_case {
  struct rcc_edge_topo e;
  int want;
  const char *name;
};

Test(cuda_build, device_path_selection, .timeout = 10) {
  /* same_host, shm_disable, p2p_disable, device_capable, same_gpu,
   * p2p_access, nvlink */
  static const struct path_case cases[] = {
      {{1, 0, 0, 1, 0, 1, 1}, RCC_PATH_P2P_NVLINK, "P2P/NVLink"},
      {{1, 0, 0, 1, 0, 1, 0}, RCC_PATH_P2P_PCIE, "P2P/PCIe"},
      {{1, 0, 0, 1, 1, 0, 0}, RCC_PATH_P2P_SAME_GPU, "P2P/same GPU"},
      {{1, 0, 0, 1, 1, 1, 1}, RCC_PATH_P2P_SAME_GPU, "P2P/same GPU"},
      {{1, 0, 0, 1, 0, 0, 0}, RCC_PATH_SHM_STAGED, "SHM/staged"},
      {{1, 0, 1, 1, 0, 1, 1}, RCC_PATH_SHM_STAGED, "SHM/staged"},
      {{1, 0, 1, 1, 1, 0, 0}, RCC_PATH_SHM_STAGED, "SHM/staged"},
      {{1, 0, 0, 0, 0, 0, 0}, RCC_PATH_SHM_STAGED, "SHM/staged"},
      {{1, 1, 0, 1, 0, 1, 1}, RCC_PATH_NET, "NET/staged"},
      {{0, 0, 0, 1, 0, 1, 1}, RCC_PATH_NET, "NET/staged"},
      {{0, 0, 0, 1, 1, 0, 0}, RCC_PATH_NET, "NET/staged"},
      {{0, 1, 1, 0, 0, 0, 0}, RCC_PATH_NET, "NET/staged"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int got = rcc_topo_device_path(&cases[i].e);
    cr_expect_eq(got, cases[i].want, "case %zu: got %s, want %s", i,
                 rcc_topo_path_name(got), cases[i].name);
    cr_expect_str_eq(rcc_topo_path_name(got), cases[i].name);
  }
}

/* Two ranks' all-gathered records, as init would have them. */
static void fake_peer(struct rcc_peer_info *p, int rank, uint64_t host,
                      int device, uint8_t uuid, uint64_t bus) {
  memset(p, 0, sizeof(*p));
  p->rank = rank;
  p->host_hash = host;
  p->gpu.device = device;
  p->gpu.bus_id = bus;
  memset(p->gpu.uuid, uuid, sizeof(p->gpu.uuid));
}

static void can_reach(struct rcc_peer_info *p, uint64_t bus, int nvlink) {
  p->gpu.peer_bus[p->gpu.npeer] = bus;
  p->gpu.peer_p2p[p->gpu.npeer] = 1;
  p->gpu.peer_nvlink[p->gpu.npeer] = (uint8_t)nvlink;
  p->gpu.npeer++;
}

static int path_of(const struct rcc_peer_info *a,
                   const struct rcc_peer_info *b) {
  struct rcc_edge_topo e;
  rcc_topo_edge(a, b, &e);
  return rcc_topo_device_path(&e);
}

Test(cuda_build, topology_facts_from_peer_records, .timeout = 10) {
  struct rcc_peer_info a, b;
  uint64_t bus_a = rcc_topo_bus_id("0000:3b:00.0");
  uint64_t bus_b = rcc_topo_bus_id("0000:5e:00.0");
  cr_assert(bus_a != 0 && bus_b != 0 && bus_a != bus_b);
  cr_assert_eq(rcc_topo_bus_id("garbage"), 0);

  fake_peer(&a, 0, 42, 0, 0xaa, bus_a); /* two ranks on one GPU */
  fake_peer(&b, 1, 42, 0, 0xaa, bus_a);
  cr_expect_eq(path_of(&a, &b), RCC_PATH_P2P_SAME_GPU);

  fake_peer(&b, 1, 42, 1, 0xbb, bus_b); /* another GPU, no peer access */
  cr_expect_eq(path_of(&a, &b), RCC_PATH_SHM_STAGED);
  can_reach(&a, bus_b, 1); /* one way only is not enough */
  cr_expect_eq(path_of(&a, &b), RCC_PATH_SHM_STAGED);
  can_reach(&b, bus_a, 1);
  cr_expect_eq(path_of(&a, &b), RCC_PATH_P2P_NVLINK);
  cr_expect_eq(path_of(&b, &a), RCC_PATH_P2P_NVLINK);
  b.gpu.peer_nvlink[0] = 0; /* PCIe on one side: PCIe */
  cr_expect_eq(path_of(&a, &b), RCC_PATH_P2P_PCIE);
  b.gpu.p2p_disable = 1; /* RINGCC_P2P_DISABLE=1 on either rank */
  cr_expect_eq(path_of(&a, &b), RCC_PATH_SHM_STAGED);
  b.gpu.p2p_disable = 0;
  a.shm_disable = 1; /* RINGCC_SHM_DISABLE=1: the network, staged */
  cr_expect_eq(path_of(&a, &b), RCC_PATH_NET);
  a.shm_disable = 0;
  b.host_hash = 43; /* another host */
  cr_expect_eq(path_of(&a, &b), RCC_PATH_NET);
  b.host_hash = 42;
  b.gpu.device = -1; /* a rank without GPU */
  cr_expect_eq(path_of(&a, &b), RCC_PATH_SHM_STAGED);
}

/* The transport table agrees with the path: p2p first (for P2P paths of a
 * device-capable communicator), then shm, then net. */
Test(cuda_build, transport_table_follows_the_path, .timeout = 10) {
  struct ringcc_comm comm;
  struct rcc_peer_info a, b;
  memset(&comm, 0, sizeof(comm));
  comm.nkinds = RCC_MAX_CONN_KINDS;
  cr_assert(rcc_num_transports >= 3);
  cr_assert_eq(rcc_transports[0], &rcc_transport_p2p);
  cr_assert_eq(rcc_transports[1], &rcc_transport_shm);
  cr_assert_eq(rcc_transports[2], &rcc_transport_net);

  uint64_t bus_a = 0x3b00, bus_b = 0x5e00;
  struct {
    int same_gpu, reach, host, shm_off;
    const struct rcc_transport *want;
  } cases[] = {
      {1, 0, 42, 0, &rcc_transport_p2p}, {0, 1, 42, 0, &rcc_transport_p2p},
      {0, 0, 42, 0, &rcc_transport_shm}, {0, 1, 43, 0, &rcc_transport_net},
      {0, 1, 42, 1, &rcc_transport_net},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    fake_peer(&a, 0, 42, 0, 0xaa, bus_a);
    fake_peer(&b, 1, (uint64_t)cases[i].host, cases[i].same_gpu ? 0 : 1,
              cases[i].same_gpu ? 0xaa : 0xbb,
              cases[i].same_gpu ? bus_a : bus_b);
    if (cases[i].reach) {
      can_reach(&a, bus_b, 0);
      can_reach(&b, bus_a, 0);
    }
    a.shm_disable = b.shm_disable = cases[i].shm_off;
    const struct rcc_transport *got = NULL;
    for (int t = 0; t < rcc_num_transports && got == NULL; t++)
      if (rcc_transports[t]->can_connect(&comm, &a, &b))
        got = rcc_transports[t];
    if (!RINGCC_HAVE_CUDA && cases[i].want == &rcc_transport_p2p)
      cases[i].want = &rcc_transport_shm; /* no P2P without CUDA */
    cr_expect_eq(got, cases[i].want, "case %zu: %s, want %s", i,
                 got ? got->name : "none", cases[i].want->name);
  }
  /* Host-only communicators (some rank without GPU) never use p2p. */
  comm.nkinds = RCC_NUM_CONN_KINDS;
  fake_peer(&a, 0, 42, 0, 0xaa, bus_a);
  fake_peer(&b, 1, 42, 0, 0xaa, bus_a);
  cr_expect(!rcc_transport_p2p.can_connect(&comm, &a, &b));
}

/* ---- device-buffer calls without a usable GPU ------------------------------------- */

static int stream_without_gpu(h_ctx_t *ctx) {
  /* A stream and buffers no GPU of this machine could have made: the call
   * must say why it cannot run, not touch them. */
  void *stream = (void *)(uintptr_t)0x1000;
  void *fake = (void *)(uintptr_t)0x7ff000000000ull;
  const char *want = RINGCC_HAVE_CUDA ? "no CUDA device is usable"
                                      : "no CUDA support";
  struct {
    const char *call;
    ringcc_result_t r;
  } calls[] = {
      {"ringcc_allreduce", ringcc_allreduce(fake, fake, 1024, RINGCC_FLOAT32,
                                            RINGCC_SUM, ctx->comm, stream)},
      {"ringcc_bcast", ringcc_bcast(fake, 16, RINGCC_INT8, 0, ctx->comm,
                                    stream)},
      {"ringcc_barrier", ringcc_barrier(ctx->comm, stream)},
  };
  for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
    if (calls[i].r != RINGCC_ERR_UNSUPPORTED)
      return h_fail(ctx, "%s with a stream and no GPU returned %s, expected "
                         "RINGCC_ERR_UNSUPPORTED", calls[i].call,
                    ringcc_strerror(calls[i].r));
  const char *msg = ringcc_comm_last_error(ctx->comm);
  if (strstr(msg, want) == NULL || strstr(msg, "stream") == NULL)
    return h_fail(ctx, "the message \"%s\" should say \"%s\" and name the "
                       "argument 'stream'", msg, want);
  /* Nothing was sent: the communicator still works. */
  int32_t in = ctx->rank + 1, out = 0;
  ringcc_result_t r = ringcc_allreduce(&in, &out, 1, RINGCC_INT32, RINGCC_SUM,
                                       ctx->comm, NULL);
  int n = ctx->nranks;
  if (r != RINGCC_SUCCESS || out != n * (n + 1) / 2)
    return h_fail(ctx, "the host allreduce afterwards: %s, %d (want %d)",
                  ringcc_strerror(r), out, n * (n + 1) / 2);
  ringcc_result_t async = RINGCC_SUCCESS;
  if (ringcc_comm_get_async_error(ctx->comm, &async) != RINGCC_SUCCESS ||
      async != RINGCC_SUCCESS)
    return h_fail(ctx, "ringcc_comm_get_async_error: %s", ringcc_strerror(async));
  return 0;
}

Test(cuda_build, device_calls_without_gpu_fail_clearly, .timeout = 90) {
  /* RINGCC_CUDA_DEVICE=none (make test sets it: the host suite stays
   * host-only on GPU machines too) is "no GPU" on any machine. */
  setenv("RINGCC_CUDA_DEVICE", "none", 1);
  cr_assert(h_run_simple(2, stream_without_gpu, NULL, 45));
  /* And where there really is no GPU or driver, the same without it. */
  unsetenv("RINGCC_CUDA_DEVICE");
  if (gpu_count() > 0)
    cr_skip_test("this machine has a GPU: make gpu-check covers it");
  cr_assert(h_run_simple(2, stream_without_gpu, NULL, 45));
}

/* ---- the cuda_device setting ------------------------------------------------------ */

static ringcc_result_t init_one(const ringcc_config_t *cfg) {
  ringcc_unique_id_t id;
  ringcc_comm_t comm = NULL;
  ringcc_result_t r = ringcc_get_unique_id(&id);
  cr_assert_eq(r, RINGCC_SUCCESS);
  r = ringcc_comm_init(&comm, 1, &id, 0, cfg);
  if (comm)
    ringcc_comm_destroy(comm);
  return r;
}

Test(cuda_build, cuda_device_setting, .timeout = 30) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cr_assert_eq(cfg.cuda_device, -1, "RINGCC_CONFIG_INIT leaves it unset");
  setenv("RINGCC_CUDA_DEVICE", "gpu0", 1);
  cr_expect_eq(init_one(NULL), RINGCC_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(ringcc_comm_last_error(NULL), "RINGCC_CUDA_DEVICE") != NULL,
            "%s", ringcc_comm_last_error(NULL));
  setenv("RINGCC_CUDA_DEVICE", "NONE", 1);
  cr_expect_eq(init_one(NULL), RINGCC_SUCCESS, "%s",
               ringcc_comm_last_error(NULL));
  unsetenv("RINGCC_CUDA_DEVICE");
  cfg.cuda_device = -5;
  cr_expect_eq(init_one(&cfg), RINGCC_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(ringcc_comm_last_error(NULL), "cuda_device") != NULL,
            "%s", ringcc_comm_last_error(NULL));
  cfg.cuda_device = RINGCC_CUDA_DEVICE_NONE;
  cr_expect_eq(init_one(&cfg), RINGCC_SUCCESS, "%s",
               ringcc_comm_last_error(NULL));
  if (gpu_count() == 0) { /* a device asked for where there is none: host-only */
    cfg.cuda_device = 3;
    cr_expect_eq(init_one(&cfg), RINGCC_SUCCESS, "%s",
                 ringcc_comm_last_error(NULL));
  }
}

/* ---- scripts/gpu-check.sh, as far as a machine without a GPU can check it ---------- */

static char *run_script(const char *cmd, int *status) {
  size_t cap = 1 << 16, n = 0;
  char *out = calloc(1, cap);
  cr_assert(out != NULL);
  FILE *p = popen(cmd, "r");
  cr_assert(p != NULL, "popen %s", cmd);
  for (size_t got; n < cap - 1 && (got = fread(out + n, 1, cap - 1 - n, p)) > 0;)
    n += got;
  int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

/* The sum of the caps the plan prints ("caps add up to N s"), or -1. */
static int plan_caps(const char *out) {
  const char *at = strstr(out, "caps add up to ");
  return at ? atoi(at + strlen("caps add up to ")) : -1;
}

/* One call of the device tool has ten minutes: the plan's caps add up to at
 * most 540 s, and a step that cannot run says why instead of failing. */
Test(cuda_build, gpu_check_plan_fits_one_device_call, .timeout = 60) {
  int st;
  if (access("scripts/gpu-check.sh", X_OK) != 0)
    cr_skip_test("run from the repository root (make test does)");
  char *out = run_script("env -u CUDA_MPS_PIPE_DIRECTORY "
                         "GPU_CHECK_OUT=/tmp/rcc-gpu-out-plan "
                         "scripts/gpu-check.sh --dry-run --gpus 1 2>&1", &st);
  cr_expect_eq(st, 0, "%s", out);
  int caps = plan_caps(out);
  cr_expect(caps > 0 && caps <= 540, "1 GPU: caps add up to %d s:\n%s", caps,
            out);
  /* In order of value: build first, then the kernels, then the suite at 1,
   * 2, 4 thread ranks, processes, graphs, the sweeps, NCCL. */
  static const char *const order[] = {
      "build ", "WERROR=0", "arch=compute_90", "sm_90 -j", "reduce_bw",
      "--threads 1", "--threads 2", "--threads 4", "procs-2", "--graph",
      "RINGCC_ALGO=ring", "-e 1G", "--copy-bw", "perf-zc",
      "RINGCC_ALGO=zerocopy", "--register -b 8 -e 256M",
      "--backend nccl --threads 1", "nccl-dropin", "nothing was run"};
  const char *at = out;
  for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
    const char *next = strstr(at, order[i]);
    cr_expect(next != NULL, "1 GPU: no '%s' after what came before:\n%s",
              order[i], out);
    if (next)
      at = next;
  }
  cr_expect(strstr(out, "/tmp/rcc-gpu-out-plan") != NULL,
            "GPU_CHECK_OUT is not where the logs go:\n%s", out);
  if (access("/tmp/nvidia-mps/control", F_OK) != 0)
    cr_expect(strstr(out, "procs-2         0s  skipped: one GPU and no MPS") !=
                  NULL, "1 GPU without MPS: procs-2 not skipped:\n%s", out);
  cr_expect(strstr(out, "--threads 8") == NULL && strstr(out, "--kill") == NULL,
            "1 GPU: steps beyond the budget's plan:\n%s", out);
  free(out);
  /* GPU_CHECK_DRY=1 is --dry-run; two GPUs: NCCL with two ranks, processes
   * spread over them. */
  out = run_script("GPU_CHECK_DRY=1 scripts/gpu-check.sh --gpus 2 2>&1", &st);
  cr_expect_eq(st, 0, "%s", out);
  caps = plan_caps(out);
  cr_expect(caps > 0 && caps <= 540, "2 GPUs: caps add up to %d s", caps);
  cr_expect(strstr(out, "--backend nccl --threads 2 --spread") &&
                strstr(out, "ringcc-run -np 2") && strstr(out, "nothing was run"),
            "2 GPUs:\n%s", out);
  free(out);
  /* One GPU under MPS (its control pipe): two process ranks share it. */
  char mps[] = "/tmp/rcc-mps-plan-XXXXXX", cmd[256];
  cr_assert(mkdtemp(mps) != NULL);
  snprintf(cmd, sizeof(cmd), "mkfifo %s/control && CUDA_MPS_PIPE_DIRECTORY=%s "
           "scripts/gpu-check.sh --dry-run --gpus 1 2>&1; rm -rf %s", mps, mps,
           mps);
  out = run_script(cmd, &st);
  cr_expect(st == 0 && strstr(out, "ringcc-run -np 2") != NULL &&
                strstr(out, "procs-2        40s") != NULL,
            "1 GPU under MPS:\n%s", out);
  caps = plan_caps(out);
  cr_expect(caps > 0 && caps <= 540, "under MPS: caps add up to %d s", caps);
  free(out);
  /* A budget over one call's is refused. */
  out = run_script("scripts/gpu-check.sh --dry-run --budget 600 2>&1", &st);
  cr_expect_eq(st, 2, "--budget 600: exit %d:\n%s", st, out);
  cr_expect(strstr(out, "at most 540") != NULL, "%s", out);
  free(out);
  if (gpu_count() == 0 && access("/dev/nvidia0", F_OK) != 0) {
    out = run_script("scripts/gpu-check.sh 2>&1", &st);
    cr_expect_eq(st, 77, "without a GPU: exit %d:\n%s", st, out);
    cr_expect(strstr(out, "no GPU") != NULL, "%s", out);
    free(out);
  }
  out = run_script("command -v shellcheck >/dev/null 2>&1 && "
                   "shellcheck scripts/gpu-check.sh 2>&1 || "
                   "{ command -v shellcheck >/dev/null || echo no-shellcheck; }",
                   &st);
  if (strstr(out, "no-shellcheck") == NULL)
    cr_expect_eq(st, 0, "shellcheck scripts/gpu-check.sh:\n%s", out);
  free(out);
}

/* The tables, from logs as the programs write them (--report). */
Test(cuda_build, gpu_check_tables_from_logs, .timeout = 60) {
  char dir[] = "/tmp/rcc-gpu-check-XXXXXX", path[256], cmd[512];
  int st;
  if (access("scripts/gpu-check.sh", X_OK) != 0)
    cr_skip_test("run from the repository root (make test does)");
  cr_assert(mkdtemp(dir) != NULL);
  snprintf(path, sizeof(path), "%s/gpu/logs", dir);
  snprintf(cmd, sizeof(cmd), "mkdir -p %s", path);
  cr_assert(system(cmd) == 0);
  static const struct { const char *file, *text; } logs[] = {
      {"perf-ring.log", "ARPERF ringcc 2 8 9.000 0.001 0.001 1\n"
                        "ARPERF ringcc 2 268435456 900.000 298.3 298.3 1\n"
                        "ARPERF copy 1 1073741824 2000.000 536.9\n"},
      {"perf-zc.log", "ARPERF ringcc 2 8 7.000 0.001 0.001 1\n"
                      "ARPERF ringcc 2 268435456 600.000 447.4 447.4 1\n"},
      {"perf-nccl.log", "ARPERF nccl 1 8 6.000 0.001 0.000 1\n"
                        "ARPERF nccl 1 268435456 500.000 536.9 0.000 1\n"},
      {"threads-2.log", "gpu_suite: 2 ranks (threads, p2p): 6000 device "
                        "collectives checked, 0 wrong elements, 12.0 s\n"},
      {"threads-4.log", "gpu_suite: 4 ranks (threads, p2p): 3000 device "
                        "collectives checked, 2 wrong elements, 20.0 s\n"},
  };
  for (size_t i = 0; i < sizeof(logs) / sizeof(logs[0]); i++) {
    char file[320];
    snprintf(file, sizeof(file), "%s/%s", path, logs[i].file);
    FILE *f = fopen(file, "w");
    cr_assert(f != NULL);
    fputs(logs[i].text, f);
    fclose(f);
  }
  snprintf(cmd, sizeof(cmd), "GPU_CHECK_OUT=%s/gpu scripts/gpu-check.sh "
           "--report --gpus 1 2>&1", dir);
  char *out = run_script(cmd, &st);
  cr_expect_eq(st, 0, "%s", out);
  cr_expect(strstr(out, "2 suite runs, 9000 device collectives checked") != NULL,
            "%s", out);
  cr_expect(strstr(out, "| 268435456 | 298.30 | 900.00 | 447.40 | 600.00 | "
                        "536.90 | 0.00 | 500.00 |") != NULL, "%s", out);
  cr_expect(strstr(out, "refuses two ranks on one GPU") != NULL, "%s", out);
  cr_expect(strstr(out, "ring 256 MiB busbw >= 50% of the floor: 55.6% met") !=
                NULL, "%s", out);
  cr_expect(strstr(out, "zero-copy 256 MiB busbw >= 75% of the floor: 83.3% "
                        "met") != NULL, "%s", out);
  /* The library's best 8 B time: zero-copy's 7 us here, the ring's 9. */
  cr_expect(strstr(out, "8 B AllReduce latency <= 10 us: 7.00 us met") != NULL,
            "%s", out);
  cr_expect(strstr(out, "| perf-zc | logged |") != NULL, "%s", out);
  free(out);
  /* The same tables in summary.md, in the output folder. */
  snprintf(cmd, sizeof(cmd), "grep -c 'of the floor' %s/gpu/summary.md", dir);
  out = run_script(cmd, &st);
  cr_expect(st == 0 && atoi(out) == 2, "summary.md: %s", out);
  free(out);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  cr_expect(system(cmd) == 0);
}
