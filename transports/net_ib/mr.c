/*
 * mr.c - the verbs plugin's memory registration: the FIFOs (reg_mr), the
 * process-wide cache of user-memory registrations, and the live list of
 * connections (the cache empties when the last one closes).
 */
#include "ib.h"

/* c NULL: a listen comm (counted only). */
void rcc_ib_live_add(struct ib_comm *c) {
  pthread_mutex_lock(&rcc_ib_state.lock);
  if (c != NULL) {
    c->live_next = rcc_ib_state.live;
    rcc_ib_state.live = c;
  }
  rcc_ib_state.nlive++;
  pthread_mutex_unlock(&rcc_ib_state.lock);
}

static void cache_flush_locked(void);

/* c NULL: a listen comm (counted only). */
void rcc_ib_live_remove(struct ib_comm *c) {
  pthread_mutex_lock(&rcc_ib_state.lock);
  for (struct ib_comm **p = &rcc_ib_state.live; c != NULL && *p != NULL;
       p = &(*p)->live_next)
    if (*p == c) {
      *p = c->live_next;
      break;
    }
  if (--rcc_ib_state.nlive == 0)
    cache_flush_locked(); /* nothing can use the registrations now */
  pthread_mutex_unlock(&rcc_ib_state.lock);
}

/* ==== memory registration ================================================= */

static const char *human_bytes(size_t b, char *buf, size_t len) {
  if (b >= ((size_t)1 << 30))
    snprintf(buf, len, "%.1f GiB", (double)b / (1 << 30));
  else if (b >= ((size_t)1 << 20))
    snprintf(buf, len, "%.1f MiB", (double)b / (1 << 20));
  else
    snprintf(buf, len, "%.1f KiB", (double)b / 1024);
  return buf;
}

/* The sentence for a failed registration of bytes. */
ringcc_result_t rcc_ib_reg_error(size_t bytes, const char *what, int e,
                                 char *err, size_t errlen) {
  struct rlimit rl;
  char h[32], lim[32];
  human_bytes(bytes, h, sizeof(h));
  if ((e == ENOMEM || e == EAGAIN || e == EPERM) &&
      getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "NET/IB: registering %zu bytes (%s) of %s with %s failed: "
                    "%s; the locked-memory limit of this process is %llu "
                    "bytes (%s, ulimit -l %llu): raise it (ulimit -l "
                    "unlimited, memlock in /etc/security/limits.conf, or "
                    "docker run --ulimit memlock=-1)",
                    bytes, h, what, rcc_ib_state.dev.name, strerror(e),
                    (unsigned long long)rl.rlim_cur,
                    human_bytes((size_t)rl.rlim_cur, lim, sizeof(lim)),
                    (unsigned long long)rl.rlim_cur / 1024);
  return rcc_errf(err, errlen,
                  e == ENOMEM ? RINGCC_ERR_OUT_OF_MEMORY : RINGCC_ERR_SYSTEM,
                  "NET/IB: registering %zu bytes (%s) of %s with %s failed: "
                  "%s", bytes, h, what, rcc_ib_state.dev.name, strerror(e));
}


ringcc_result_t rcc_ib_reg_mr(void *comm, void *data, size_t bytes,
                                 void **mhandle, char *err, size_t errlen) {
  struct ib_mr *m = calloc(1, sizeof(*m));
  char why[300];
  (void)comm;
  *mhandle = NULL;
  if (m == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "NET/IB: out of memory");
  m->addr = data;
  m->bytes = bytes;
  m->device = rcc_ib_is_device_ptr(data);
  if (m->device) {
    m->mr = rcc_ib_reg_device(data, bytes, &m->how, why, sizeof(why));
    if (m->mr == NULL) {
      free(m);
      return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                      "NET/IB: registering %zu bytes of GPU memory with %s "
                      "failed: %s (set RINGCC_NET_GDR_DISABLE=1 to stage "
                      "through host memory)", bytes, rcc_ib_state.dev.name, why);
    }
  } else {
    m->how = "host";
    m->mr = IBV->reg_mr(rcc_ib_state.dev.pd, data, bytes, ACCESS_ALL);
    if (m->mr == NULL) {
      int e = errno;
      free(m);
      return rcc_ib_reg_error(bytes, "a FIFO", e, err, errlen);
    }
  }
  *mhandle = m;
  return RINGCC_SUCCESS;
}

void rcc_ib_dereg_mr(void *comm, void *mhandle) {
  struct ib_mr *m = mhandle;
  (void)comm;
  if (m == NULL)
    return;
  if (!forked_child()) /* the parent's registration, else */
    IBV->dereg_mr(m->mr);
  free(m);
}

void rcc_net_ib_force_flush(void *mhandle) {
  ((struct ib_mr *)mhandle)->device = 1;
}

uint64_t rcc_net_ib_flushes(void) {
  return __atomic_load_n(&rcc_ib_state.flushes, __ATOMIC_RELAXED);
}

/* ---- the registration cache (user memory) -------------------------------- */

/* Page faults of the process (all threads) and of the calling thread. */
static uint64_t faults_of(int who) {
  struct rusage ru;
  if (getrusage(who, &ru) != 0)
    return 0;
  return (uint64_t)ru.ru_minflt + (uint64_t)ru.ru_majflt;
}

static void cache_unlink(struct reg *e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    rcc_ib_state.cache = e->next;
  if (e->next)
    e->next->prev = e->prev;
  e->prev = e->next = NULL;
}

static void cache_push_front(struct reg *e) {
  e->prev = NULL;
  e->next = rcc_ib_state.cache;
  if (rcc_ib_state.cache)
    rcc_ib_state.cache->prev = e;
  rcc_ib_state.cache = e;
}

static void cache_drop_locked(struct reg *e) {
  cache_unlink(e);
  IBV->dereg_mr(e->mr);
  rcc_ib_state.stats.entries--;
  rcc_ib_state.stats.bytes -= e->bytes;
  free(e);
}

/* Drops unused entries that are retired or too old, then (beyond the cap)
 * the least recently used unused ones. */
static void cache_trim_locked(int64_t now) {
  struct reg *e = rcc_ib_state.cache, *next;
  for (; e != NULL; e = next) {
    next = e->next;
    if (e->refs == 0 && (e->retired || now - e->last_use > REG_MAX_AGE_NS)) {
      if (!e->retired)
        rcc_ib_state.stats.evictions++;
      cache_drop_locked(e);
    }
  }
  struct reg *last = rcc_ib_state.cache;
  while (last && last->next)
    last = last->next;
  for (e = last; e != NULL && rcc_ib_state.stats.bytes > rcc_ib_state.set.cache_max;
       e = next) {
    next = e->prev;
    if (e->refs == 0) {
      rcc_ib_state.stats.evictions++;
      cache_drop_locked(e);
    }
  }
}

static void cache_flush_locked(void) {
  struct reg *e = rcc_ib_state.cache, *next;
  for (; e != NULL; e = next) {
    next = e->next;
    if (e->refs == 0)
      cache_drop_locked(e);
  }
}

/* A new registration covering [p, p + len): a REG_WINDOW-aligned window
 * around it where that is mapped (one registration serves the neighbouring
 * pieces of the same buffer), else just its pages; read-only memory
 * (a send from a constant) without write access. */
/* 1 if every page of [a, b) is mapped. */
static int mapped(uintptr_t a, uintptr_t b) {
  static unsigned char vec[REG_WINDOW / 4096]; /* under rcc_ib_state.lock */
  return b <= a || (b - a <= REG_WINDOW &&
                    mincore((void *)a, b - a, vec) == 0);
}

/* Extends [lo, hi) (page aligned) down to floor and up to ceil while the
 * pages are mapped, so a registration never asks for a hole. */
static void mapped_extent(uintptr_t *lo, uintptr_t *hi, uintptr_t floor,
                          uintptr_t ceil) {
  uintptr_t in = *lo, out = floor; /* the lowest mapped start in [out, in] */
  while (in - out > 4096) {
    uintptr_t mid = (out + (in - out) / 2) & ~(uintptr_t)4095;
    if (mapped(mid, *lo))
      in = mid;
    else
      out = mid;
  }
  if (mapped(out, *lo))
    in = out;
  *lo = in;
  in = *hi, out = ceil; /* the highest mapped end in [in, out] */
  while (out - in > 4096) {
    uintptr_t mid = (in + (out - in) / 2) & ~(uintptr_t)4095;
    if (mapped(*hi, mid))
      in = mid;
    else
      out = mid;
  }
  if (mapped(*hi, out))
    in = out;
  *hi = in;
}

static struct ibv_mr *reg_host(const char *p, size_t len, int writable,
                               int *got_writable, int *e) {
  uintptr_t a = (uintptr_t)p;
  uintptr_t lo = a & ~(uintptr_t)4095, hi = (a + len + 4095) & ~(uintptr_t)4095;
  uintptr_t wlo = lo, whi = hi;
  mapped_extent(&wlo, &whi, a & ~(uintptr_t)(REG_WINDOW - 1),
                (a + len + REG_WINDOW - 1) & ~(uintptr_t)(REG_WINDOW - 1));
  uintptr_t spans[2][2] = {{wlo, whi}, {lo, hi}};
  struct ibv_mr *mr = NULL;
  for (int i = 0; i < 2 && mr == NULL; i++) {
    mr = IBV->reg_mr(rcc_ib_state.dev.pd, (void *)spans[i][0],
                     spans[i][1] - spans[i][0], ACCESS_ALL);
    *e = errno;
    if (mr == NULL && (*e == ENOMEM || *e == EAGAIN || *e == EPERM))
      return NULL; /* a limit: a smaller window will not help much */
  }
  *got_writable = mr != NULL;
  if (mr == NULL && !writable) {
    mr = IBV->reg_mr(rcc_ib_state.dev.pd, (void *)spans[1][0],
                     spans[1][1] - spans[1][0], 0);
    *e = errno;
  }
  return mr;
}

ringcc_result_t rcc_ib_cache_get(const char *p, size_t len, int writable,
                                 struct reg **out, char *err, size_t errlen) {
  int64_t now = rcc_now_ns();
  int device = rcc_ib_is_device_ptr(p);
  uint64_t bid = device ? rcc_ib_cu_buffer_id(p) : 0;
  *out = NULL;
  pthread_mutex_lock(&rcc_ib_state.lock);
  uint64_t faults = faults_of(RUSAGE_SELF);
  cache_trim_locked(now);
  for (struct reg *e = rcc_ib_state.cache; e != NULL; e = e->next) {
    if (e->retired || e->device != device || p < e->addr ||
        p + len > e->addr + e->bytes || (writable && !e->writable))
      continue;
    if (device ? e->buffer_id != bid : e->faults != faults) {
      /* The memory may have been freed and mapped again: its pages may not
       * be the ones this registration pinned. */
      e->retired = 1;
      rcc_ib_state.stats.stale++;
      continue;
    }
    e->refs++;
    e->last_use = now;
    cache_unlink(e);
    cache_push_front(e);
    rcc_ib_state.stats.hits++;
    *out = e;
    pthread_mutex_unlock(&rcc_ib_state.lock);
    return RINGCC_SUCCESS;
  }
  struct reg *e = calloc(1, sizeof(*e));
  int errnum = ENOMEM, w = 0;
  uint64_t mine = faults_of(RUSAGE_THREAD);
  struct ibv_mr *mr = NULL;
  const char *how = "";
  char why[300] = "";
  if (e != NULL && device) {
    /* The whole allocation: one registration per cudaMalloc. */
    cu_ptr start = 0;
    size_t size = 0;
    if (rcc_ib_cuda.pointer_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                          (cu_ptr)(uintptr_t)p) == 0 &&
        rcc_ib_cuda.pointer_attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                          (cu_ptr)(uintptr_t)p) == 0 &&
        size >= len)
      mr = rcc_ib_reg_device((void *)(uintptr_t)start, size, &how, why, sizeof(why));
    else
      mr = rcc_ib_reg_device((void *)p, len, &how, why, sizeof(why));
    errnum = errno;
    w = 1;
  } else if (e != NULL) {
    mr = reg_host(p, len, writable, &w, &errnum);
  }
  if (mr == NULL) {
    free(e);
    pthread_mutex_unlock(&rcc_ib_state.lock);
    if (device)
      return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                      "NET/IB: registering %zu bytes of GPU memory (a user "
                      "buffer) with %s failed: %s", len, rcc_ib_state.dev.name, why);
    return rcc_ib_reg_error(len, "a user buffer", errnum, err, errlen);
  }
  /* The registration faulted its pages in. If no other thread took a fault
   * meanwhile, the entries that were valid still are. */
  uint64_t after = faults_of(RUSAGE_SELF);
  if (after - faults == faults_of(RUSAGE_THREAD) - mine)
    for (struct reg *o = rcc_ib_state.cache; o != NULL; o = o->next)
      if (!o->device && o->faults == faults)
        o->faults = after;
  e->addr = mr->addr;
  e->bytes = mr->length;
  e->mr = mr;
  e->writable = w;
  e->device = device;
  e->buffer_id = bid;
  e->faults = after;
  e->refs = 1;
  e->last_use = now;
  cache_push_front(e);
  rcc_ib_state.stats.misses++;
  rcc_ib_state.stats.entries++;
  rcc_ib_state.stats.bytes += e->bytes;
  cache_trim_locked(now);
  *out = e;
  pthread_mutex_unlock(&rcc_ib_state.lock);
  return RINGCC_SUCCESS;
}

void rcc_ib_cache_put(struct reg *e) {
  if (e == NULL)
    return;
  pthread_mutex_lock(&rcc_ib_state.lock);
  if (--e->refs == 0 && (e->retired || rcc_ib_state.set.cache_max == 0))
    cache_drop_locked(e);
  pthread_mutex_unlock(&rcc_ib_state.lock);
}

void rcc_net_ib_cache_stats(struct rcc_ib_cache_stats *out) {
  pthread_mutex_lock(&rcc_ib_state.lock);
  *out = rcc_ib_state.stats;
  pthread_mutex_unlock(&rcc_ib_state.lock);
}
