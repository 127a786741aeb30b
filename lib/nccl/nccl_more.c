/*
 * nccl_more.c - premul-sum ops, memory and registration, and what libringcc
 * does not offer: each of those returns
 * ncclInvalidUsage and ncclGetLastError says what is not supported
 * (docs/nccl.md lists them). The functions that only the wheel's NCCL
 * (2.30) declares are declared here with its signatures (types the toolkit
 * header lacks as pointers to incomplete structs or int: the same ABI).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nccl_layer.h"

/* ---- premul-sum ---------------------------------------------------------- */

ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                       ncclDataType_t datatype,
                                       ncclScalarResidence_t residence,
                                       ncclComm_t comm) {
  const char *fn = "ncclRedOpCreatePreMulSum";
  ringcc_datatype_t dt;
  ncclResult_t r = rcc_nccl_ready(fn, comm);
  if (r == ncclSuccess)
    r = rcc_nccl_dt(fn, datatype, &dt);
  if (r != ncclSuccess)
    return r;
  if (op == NULL)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'op' is NULL", fn);
  if (residence != ncclScalarHostImmediate)
    return rcc_nccl_fail(ncclInvalidUsage, "%s: a scalar in device memory "
                         "(ncclScalarDevice) is not supported by ringcc: pass "
                         "ncclScalarHostImmediate", fn);
  ringcc_op_t rop;
  ringcc_result_t rr = ringcc_op_create_premul_sum(&rop, scalar, dt, comm->rc);
  if (rr != RINGCC_SUCCESS)
    return rcc_nccl_from(rr, comm->rc, fn);
  /* ringcc numbers its ops from RINGCC_NUM_OPS, NCCL from ncclNumOps */
  *op = (ncclRedOp_t)((int)rop - RINGCC_NUM_OPS + ncclNumOps);
  return ncclSuccess;
}
NCCL_ALIAS(ncclRedOpCreatePreMulSum)

ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char *fn = "ncclRedOpDestroy";
  ncclResult_t r = rcc_nccl_ready(fn, comm);
  if (r != ncclSuccess)
    return r;
  if ((int)op < ncclNumOps)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'op' is %d, a "
                         "built-in op", fn, (int)op);
  ringcc_op_t rop;
  if ((r = rcc_nccl_op(fn, op, &rop)) != ncclSuccess)
    return r;
  return rcc_nccl_from(ringcc_op_destroy(rop, comm->rc), comm->rc, fn);
}
NCCL_ALIAS(ncclRedOpDestroy)

/* ---- memory and registration --------------------------------------------- */

/* Memory that ranks of one host can map: device memory of the calling
 * thread's current GPU, as NCCL's; host memory where the thread uses no
 * CUDA (no current context, or a build without CUDA: docs/nccl.md). */
ncclResult_t pncclMemAlloc(void **ptr, size_t size) {
  if (ptr == NULL)
    return rcc_nccl_fail(ncclInvalidArgument, "ncclMemAlloc: argument 'ptr' "
                         "is NULL");
  int device = -1;
  ringcc_result_t r = ringcc_cuda_current_device(&device);
  if (r == RINGCC_SUCCESS)
    r = device >= 0 ? ringcc_mem_alloc_device(device, size, ptr)
                    : ringcc_mem_alloc(NULL, size, ptr);
  return rcc_nccl_from(r, NULL, "ncclMemAlloc");
}
NCCL_ALIAS(ncclMemAlloc)

ncclResult_t pncclMemFree(void *ptr) {
  return rcc_nccl_from(ringcc_mem_free(ptr), NULL, "ncclMemFree");
}
NCCL_ALIAS(ncclMemFree)

/* ringcc's registration is collective: every rank registers, in the same
 * order (docs/nccl.md). */
ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                               void **handle) {
  ncclResult_t r = rcc_nccl_ready("ncclCommRegister", comm);
  if (r != ncclSuccess)
    return r;
  if (handle == NULL)
    return rcc_nccl_fail(ncclInvalidArgument, "ncclCommRegister: argument "
                         "'handle' is NULL");
  ringcc_reg_t reg = NULL;
  r = rcc_nccl_from(ringcc_comm_register(comm->rc, buff, size, &reg), comm->rc,
                    "ncclCommRegister");
  *handle = r == ncclSuccess ? (void *)reg : NULL;
  return r;
}
NCCL_ALIAS(ncclCommRegister)

ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle) {
  ncclResult_t r = rcc_nccl_ready("ncclCommDeregister", comm);
  if (r != ncclSuccess)
    return r;
  return rcc_nccl_from(ringcc_comm_deregister(comm->rc, (ringcc_reg_t)handle),
                       comm->rc, "ncclCommDeregister");
}
NCCL_ALIAS(ncclCommDeregister)

/* ---- what ringcc does not offer -------------------------------------------- */

/* NCCL 2.30's types, incomplete here (pointers to them only). */
struct ncclWaitSignalDesc;
struct ncclDevCommRequirements;
struct ncclDevComm;
struct ncclParamHandle;

/* The parameters of what is not supported go unread. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define NOT_SUPPORTED(name, why, ...)                                          \
  ncclResult_t p##name(__VA_ARGS__);                                           \
  ncclResult_t p##name(__VA_ARGS__) {                                          \
    return rcc_nccl_fail(ncclInvalidUsage, #name " is not supported by "       \
                         "ringcc's libnccl: " why " (docs/nccl.md)");          \
  }                                                                            \
  NCCL_ALIAS(name)

#define NO_DEVICE_API "the device-side API (nccl_device.h) is out of scope"
#define NO_WINDOWS "symmetric memory windows are not implemented"

NOT_SUPPORTED(ncclCommWindowRegister, NO_WINDOWS, ncclComm_t comm, void *buff,
              size_t size, ncclWindow_t *win, int winFlags)
NOT_SUPPORTED(ncclCommWindowDeregister, NO_WINDOWS, ncclComm_t comm,
              ncclWindow_t win)
NOT_SUPPORTED(ncclWinGetUserPtr, NO_WINDOWS, ncclComm_t comm, ncclWindow_t win,
              void **outUserPtr)
NOT_SUPPORTED(ncclPutSignal, "one-sided operations are not implemented",
              const void *localbuff, size_t count, ncclDataType_t datatype,
              int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
              int ctx, unsigned int flags, ncclComm_t comm,
              cudaStream_t stream)
NOT_SUPPORTED(ncclSignal, "one-sided operations are not implemented",
              int peer, int sigIdx, int ctx, unsigned int flags,
              ncclComm_t comm, cudaStream_t stream)
NOT_SUPPORTED(ncclWaitSignal, "one-sided operations are not implemented",
              int nDesc, struct ncclWaitSignalDesc *signalDescs,
              ncclComm_t comm, cudaStream_t stream)
NOT_SUPPORTED(ncclCommGetUniqueId, "growing a communicator is not "
              "implemented", ncclComm_t comm, ncclUniqueId *uniqueId)
NOT_SUPPORTED(ncclCommGrow, "growing a communicator is not implemented",
              ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId,
              int rank, ncclComm_t *newcomm, ncclConfig_t *config)
NOT_SUPPORTED(ncclCommSuspend, "suspending a communicator's buffers is not "
              "implemented", ncclComm_t comm, int flags)
NOT_SUPPORTED(ncclCommResume, "suspending a communicator's buffers is not "
              "implemented", ncclComm_t comm)
NOT_SUPPORTED(ncclCommMemStats, "memory statistics are not kept",
              ncclComm_t comm, int stat, uint64_t *value)
NOT_SUPPORTED(ncclDevCommCreate, NO_DEVICE_API, ncclComm_t comm,
              const struct ncclDevCommRequirements *reqs,
              struct ncclDevComm *outDevComm)
NOT_SUPPORTED(ncclDevCommDestroy, NO_DEVICE_API, ncclComm_t comm,
              const struct ncclDevComm *devComm)
NOT_SUPPORTED(ncclGetLsaMultimemDevicePointer, NO_DEVICE_API,
              ncclWindow_t window, size_t offset, void **outPtr)
NOT_SUPPORTED(ncclGetPeerDevicePointer, NO_DEVICE_API, ncclWindow_t window,
              size_t offset, int peer, void **outPtr)

/* NCCL 2.30's parameter API: ringcc's settings are its environment
 * variables (docs/nccl.md), not NCCL's parameter table. */
#define NO_PARAMS "NCCL's parameter table does not exist here"
NOT_SUPPORTED(ncclParamBind, NO_PARAMS, struct ncclParamHandle **out,
              const char *key)
NOT_SUPPORTED(ncclParamGetI8, NO_PARAMS, struct ncclParamHandle *h, int8_t *out)
NOT_SUPPORTED(ncclParamGetI16, NO_PARAMS, struct ncclParamHandle *h,
              int16_t *out)
NOT_SUPPORTED(ncclParamGetI32, NO_PARAMS, struct ncclParamHandle *h,
              int32_t *out)
NOT_SUPPORTED(ncclParamGetI64, NO_PARAMS, struct ncclParamHandle *h,
              int64_t *out)
NOT_SUPPORTED(ncclParamGetU8, NO_PARAMS, struct ncclParamHandle *h,
              uint8_t *out)
NOT_SUPPORTED(ncclParamGetU16, NO_PARAMS, struct ncclParamHandle *h,
              uint16_t *out)
NOT_SUPPORTED(ncclParamGetU32, NO_PARAMS, struct ncclParamHandle *h,
              uint32_t *out)
NOT_SUPPORTED(ncclParamGetU64, NO_PARAMS, struct ncclParamHandle *h,
              uint64_t *out)
NOT_SUPPORTED(ncclParamGetStr, NO_PARAMS, struct ncclParamHandle *h,
              const char **out)
NOT_SUPPORTED(ncclParamGet, NO_PARAMS, struct ncclParamHandle *h, void *out,
              int maxLen, int *len)
NOT_SUPPORTED(ncclParamGetParameter, NO_PARAMS, const char *key,
              const char **value, int *valueLen)
NOT_SUPPORTED(ncclParamGetAllParameterKeys, NO_PARAMS, const char ***table,
              int *tableLen)

void pncclParamDumpAll(void);
void pncclParamDumpAll(void) {
  rcc_nccl_fail(ncclInvalidUsage, "ncclParamDumpAll: " NO_PARAMS);
}
NCCL_ALIAS(ncclParamDumpAll)

/* NCCL re-reads NCCL_DEBUG after this; ringcc reads its variables at each
 * communicator's init already: nothing to reset. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* the header's */
void pncclResetDebugInit(void) {}
NCCL_ALIAS(ncclResetDebugInit)
