/*
 * mem.c - ringcc_mem_alloc / ringcc_mem_free: memory peers on the same host
 * can map, and the process's table of it (mem.h).
 *
 * Host memory is a memfd: a shared-memory file with no name, so that no
 * segment is left in /dev/shm whatever happens to the process (a killed
 * rank's pages go when the last mapping of them goes). The file stays open
 * while the memory is allocated, so a peer can open it as /proc/PID/fd/FD
 * when the communicator registers it (registry.c). Device memory comes from
 * mem_cuda.c.
 *
 * The table is a list under one lock, touched by allocation, freeing and
 * registration, never by a collective: a registration holds a reference to
 * its block, and a call reads only the block's live flag.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "live.h"
#include "log.h"
#include "mem.h"
#include "topo.h"

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rcc_mem_block *table;

static size_t page_round(size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (bytes + page - 1) / page * page;
}

static ringcc_result_t host_alloc(size_t bytes, struct rcc_mem_block *b,
                                  char *err, size_t errlen) {
  int fd = memfd_create("ringcc-mem", MFD_CLOEXEC);
  if (fd < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "memfd_create failed: %s",
                    strerror(errno));
  if (ftruncate(fd, (off_t)bytes) != 0) {
    int e = errno;
    close(fd);
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "cannot size a shared segment to %zu bytes: %s", bytes,
                    strerror(e));
  }
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "cannot map %zu bytes of shared memory: %s", bytes,
                    strerror(e));
  }
  b->base = p;
  b->fd = fd;
  b->device = -1;
  return RINGCC_SUCCESS;
}

/* Unmaps a block's memory and closes its file (the record may stay). */
static void unmap_block(struct rcc_mem_block *b) {
  if (b->device >= 0)
    rcc_cuda_mem_free(b->base, b->bytes, b->cuda);
  else
    munmap(b->base, b->bytes);
  if (b->fd >= 0)
    close(b->fd);
  b->fd = -1;
}

/* Takes b out of the table and frees the record; table_lock held. */
static void unlink_block(struct rcc_mem_block *b) {
  for (struct rcc_mem_block **p = &table; *p != NULL; p = &(*p)->next)
    if (*p == b) {
      *p = b->next;
      free(b);
      return;
    }
}

/* On device (-1: host memory); comm, where given, gets the messages. */
static ringcc_result_t mem_alloc(struct ringcc_comm *comm, int device,
                                 size_t size, void **ptr) {
  char err[RCC_ERRLEN];
  ringcc_result_t r;

  if (ptr == NULL)
    return comm ? rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                                 "ringcc_mem_alloc: argument 'ptr' is NULL")
                : rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                                   "ringcc_mem_alloc: argument 'ptr' is NULL");
  *ptr = NULL;
  if (size == 0 || size > (size_t)PTRDIFF_MAX / 2)
    return comm ? rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                                 "ringcc_mem_alloc: argument 'size' is %zu; "
                                 "it must be > 0 and < 2^62", size)
                : rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                                   "ringcc_mem_alloc: argument 'size' is %zu; "
                                   "it must be > 0 and < 2^62", size);
  struct rcc_mem_block *b = calloc(1, sizeof(*b));
  if (b == NULL)
    return rcc_thread_error(RINGCC_ERR_OUT_OF_MEMORY,
                            "ringcc_mem_alloc: out of memory");
  b->bytes = page_round(size);
  b->fd = -1;
  if (device >= 0) {
    b->device = device;
    r = rcc_cuda_mem_alloc(device, &b->bytes, (void **)&b->base, &b->fd,
                           &b->cuda, err, sizeof(err));
  } else {
    r = host_alloc(b->bytes, b, err, sizeof(err));
  }
  if (r != RINGCC_SUCCESS) {
    free(b);
    if (comm != NULL)
      return rcc_comm_error(comm, r, "ringcc_mem_alloc on rank %d: %zu bytes "
                            "of %s memory: %s", comm->rank, size,
                            device >= 0 ? "device" : "host", err);
    return rcc_thread_error(r, "ringcc_mem_alloc: %zu bytes: %s", size, err);
  }
  b->live = 1;
  pthread_mutex_lock(&table_lock);
  b->next = table;
  table = b;
  pthread_mutex_unlock(&table_lock);
  RCC_TRACE(comm ? comm->rank : -1, "ringcc_mem_alloc: %zu bytes of %s memory "
            "at %p", b->bytes, device >= 0 ? "device" : "host",
            (void *)b->base);
  *ptr = b->base;
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_mem_alloc(ringcc_comm_t comm, size_t size,
                                            void **ptr) {
  if (comm == NULL)
    return mem_alloc(NULL, -1, size, ptr);
  /* A live communicator (live.c); it only tells which memory. */
  ringcc_result_t r = rcc_comm_enter(comm, "ringcc_mem_alloc", RCC_ENTER_QUERY);
  if (r != RINGCC_SUCCESS)
    return r;
  r = mem_alloc(comm, comm->peers[comm->rank].gpu.device, size, ptr);
  rcc_comm_leave(comm, RCC_ENTER_QUERY);
  return r;
}

RINGCC_API ringcc_result_t ringcc_mem_alloc_device(int device, size_t size,
                                                   void **ptr) {
  if (device < 0) {
    if (ptr != NULL)
      *ptr = NULL;
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_mem_alloc_device: argument 'device' is "
                            "%d; it must be a CUDA device index (>= 0)",
                            device);
  }
  return mem_alloc(NULL, device, size, ptr);
}

RINGCC_API ringcc_result_t ringcc_mem_free(void *ptr) {
  if (ptr == NULL)
    return RINGCC_SUCCESS; /* as free(NULL) */
  pthread_mutex_lock(&table_lock);
  struct rcc_mem_block *b = table;
  while (b != NULL && !(b->base == ptr && rcc_mem_live(b)))
    b = b->next;
  if (b == NULL) {
    pthread_mutex_unlock(&table_lock);
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_mem_free: argument 'ptr' (%p) is not "
                            "memory of ringcc_mem_alloc (or was freed "
                            "already)", ptr);
  }
  __atomic_store_n(&b->live, 0, __ATOMIC_RELEASE);
  unmap_block(b);
  if (b->refs > 0)
    RCC_INFO(-1, "ringcc_mem_free: %p was still registered (%d "
             "registrations); they no longer count, and their handles stay "
             "valid for ringcc_comm_deregister", ptr, b->refs);
  else
    unlink_block(b);
  pthread_mutex_unlock(&table_lock);
  return RINGCC_SUCCESS;
}

struct rcc_mem_block *rcc_mem_find(const void *p, size_t bytes) {
  const char *c = p;
  pthread_mutex_lock(&table_lock);
  struct rcc_mem_block *b = table;
  for (; b != NULL; b = b->next)
    if (rcc_mem_live(b) && c >= b->base && c <= b->base + b->bytes &&
        bytes <= (size_t)(b->base + b->bytes - c))
      break;
  if (b != NULL)
    b->refs++;
  pthread_mutex_unlock(&table_lock);
  return b;
}

void rcc_mem_release(struct rcc_mem_block *b) {
  if (b == NULL)
    return;
  pthread_mutex_lock(&table_lock);
  if (--b->refs == 0 && !rcc_mem_live(b))
    unlink_block(b);
  pthread_mutex_unlock(&table_lock);
}
