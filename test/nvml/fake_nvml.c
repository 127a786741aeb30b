/*
 * fake_nvml.c - a stand-in for libnvidia-ml.so.1 (built as
 * build/test/libfakenvml.so with that soname) for test_cuda_logic: the
 * functions gpu.c loads, over a node of three GPUs, and a count of
 * nvmlInit_v2 and nvmlShutdown calls so a test can see that every probe
 * shuts NVML down again.
 *
 *   GPU 0  0000:18:00.0   NVLink to GPU 1, same PCIe switch
 *   GPU 1  0000:3B:00.0
 *   GPU 2  0000:86:00.0   no P2P with 0 or 1: other CPU socket (IOH topology)
 */
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define NGPUS 3

enum { OK = 0, ERR_INVALID_ARGUMENT = 2, ERR_UNINITIALIZED = 1,
       ERR_NOT_FOUND = 6 };
enum { P2P_OK = 0, P2P_IOH_TOPOLOGY_NOT_SUPPORTED = 3 };
enum { CAPS_READ = 0, CAPS_WRITE = 1, CAPS_NVLINK = 2 };
enum { TOPO_SINGLE = 10, TOPO_SYSTEM = 50 };

typedef struct { /* nvmlPciInfo_t (v3) */
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} pci_info;

static const char *const bus_ids[NGPUS] = {"00000000:18:00.0",
                                           "00000000:3B:00.0",
                                           "00000000:86:00.0"};
static int gpus[NGPUS]; /* the handles point here */
static int inits, shutdowns, refs;

EXPORT void fake_nvml_counts(int *init, int *shutdown) {
  *init = inits;
  *shutdown = shutdowns;
}

EXPORT int nvmlInit_v2(void) {
  inits++;
  refs++;
  return OK;
}

EXPORT int nvmlShutdown(void) {
  if (refs == 0)
    return ERR_UNINITIALIZED;
  shutdowns++;
  refs--;
  return OK;
}

EXPORT int nvmlDeviceGetCount_v2(unsigned *count) {
  if (refs == 0)
    return ERR_UNINITIALIZED;
  *count = NGPUS;
  return OK;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **dev) {
  if (refs == 0)
    return ERR_UNINITIALIZED;
  if (i >= NGPUS)
    return ERR_INVALID_ARGUMENT;
  *dev = &gpus[i];
  return OK;
}

EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev) {
  if (refs == 0)
    return ERR_UNINITIALIZED;
  for (int i = 0; i < NGPUS; i++)
    if (strcasecmp(bus, bus_ids[i]) == 0) {
      *dev = &gpus[i];
      return OK;
    }
  return ERR_NOT_FOUND;
}

static int index_of(void *dev) { return (int)((int *)dev - gpus); }

EXPORT int nvmlDeviceGetPciInfo_v3(void *dev, pci_info *pci) {
  if (refs == 0)
    return ERR_UNINITIALIZED;
  memset(pci, 0, sizeof(*pci));
  snprintf(pci->busId, sizeof(pci->busId), "%s", bus_ids[index_of(dev)]);
  return OK;
}

EXPORT int nvmlDeviceGetP2PStatus(void *a, void *b, int cap, int *status) {
  if (refs == 0)
    return ERR_UNINITIALIZED;
  int i = index_of(a), j = index_of(b);
  int pair01 = (i == 0 && j == 1) || (i == 1 && j == 0);
  (void)cap; /* read, write and NVLink alike: 0-1 have all three */
  *status = pair01 ? P2P_OK : P2P_IOH_TOPOLOGY_NOT_SUPPORTED;
  return OK;
}

EXPORT int nvmlDeviceGetTopologyCommonAncestor(void *a, void *b, int *level) {
  if (refs == 0)
    return ERR_UNINITIALIZED;
  int i = index_of(a), j = index_of(b);
  *level = i < 2 && j < 2 ? TOPO_SINGLE : TOPO_SYSTEM;
  return OK;
}

EXPORT int nvmlDeviceGetName(void *dev, char *name, unsigned len) {
  if (refs == 0)
    return ERR_UNINITIALIZED;
  snprintf(name, len, "Fake GPU %d", index_of(dev));
  return OK;
}
