/*
 * bench_device.h - device buffers for ringcc-bench --device: the benchmark keeps
 * its host buffers for filling and checking, and with --device copies them to and
 * from cudaMalloc'd twins that the collectives use, on one stream of the
 * rank's GPU (RINGCC_CUDA_DEVICE, else the current device). The timed loop
 * ends with a stream synchronize, so a time is the enqueued calls' run time.
 *
 * Built without CUDA (RINGCC_HAVE_CUDA 0), --device says so and exits.
 */
#ifndef RCC_BENCH_DEVICE_H
#define RCC_BENCH_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#if RINGCC_HAVE_CUDA
#include <cuda_runtime_api.h>

static void dev_check(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return;
  fprintf(stderr, "ringcc-bench: %s: %s\n", what, cudaGetErrorString(e));
  exit(1);
}

/* Before ringcc_comm_init_env: the rank's GPU becomes current, with its
 * context (the library sets up device buffers for a thread that uses CUDA:
 * one with a current context, docs/cuda.md). */
static void dev_select(void) {
  const char *env = getenv("RINGCC_CUDA_DEVICE");
  int count = 0, dev = 0;
  dev_check(cudaGetDeviceCount(&count), "--device: no usable CUDA device");
  if (env != NULL && *env >= '0' && *env <= '9')
    dev = atoi(env);
  else
    dev_check(cudaGetDevice(&dev), "cudaGetDevice");
  dev_check(cudaSetDevice(dev), "cudaSetDevice");
  dev_check(cudaFree(NULL), "creating the CUDA context");
}

static void *dev_alloc(size_t bytes, void **stream) {
  void *p = NULL;
  dev_check(cudaMalloc(&p, bytes ? bytes : 64), "cudaMalloc");
  if (*stream == NULL)
    dev_check(cudaStreamCreateWithFlags((cudaStream_t *)stream,
                                        cudaStreamNonBlocking),
              "cudaStreamCreate");
  return p;
}

static void dev_put(void *dst, const void *src, size_t bytes, void *stream) {
  dev_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                            (cudaStream_t)stream), "cudaMemcpyAsync");
  dev_check(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

static void dev_get(void *dst, const void *src, size_t bytes, void *stream) {
  dev_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                            (cudaStream_t)stream), "cudaMemcpyAsync");
  dev_check(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

static void dev_sync(void *stream) {
  dev_check(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

/* -G: the timed calls captured on the stream into one graph (the one
 * graph of this process), replayed by dev_graph_launch. */
static cudaGraphExec_t dev_graph_exec;

static void dev_graph_begin(void *stream) {
  dev_check(cudaStreamBeginCapture((cudaStream_t)stream,
                                   cudaStreamCaptureModeThreadLocal),
            "-G: cudaStreamBeginCapture");
}

static void dev_graph_end(void *stream) {
  cudaGraph_t graph;
  dev_check(cudaStreamEndCapture((cudaStream_t)stream, &graph),
            "-G: cudaStreamEndCapture");
  if (dev_graph_exec) cudaGraphExecDestroy(dev_graph_exec);
  dev_check(cudaGraphInstantiate(&dev_graph_exec, graph, 0),
            "-G: cudaGraphInstantiate");
  cudaGraphDestroy(graph);
}

static void dev_graph_launch(void *stream) {
  dev_check(cudaGraphLaunch(dev_graph_exec, (cudaStream_t)stream),
            "-G: cudaGraphLaunch");
}

static void dev_free(void *p, void *stream) {
  if (p)
    cudaFree(p);
  if (stream)
    cudaStreamDestroy((cudaStream_t)stream);
}

#else /* !RINGCC_HAVE_CUDA */

static void dev_select(void) {
  fprintf(stderr, "ringcc-bench: --device needs a build with CUDA (make CUDA=1)\n");
  exit(2);
}
static void *dev_alloc(size_t bytes, void **stream) {
  (void)bytes, (void)stream;
  return NULL;
}
static void dev_put(void *dst, const void *src, size_t bytes, void *stream) {
  (void)dst, (void)src, (void)bytes, (void)stream;
}
static void dev_get(void *dst, const void *src, size_t bytes, void *stream) {
  (void)dst, (void)src, (void)bytes, (void)stream;
}
static void dev_sync(void *stream) { (void)stream; }
static void dev_free(void *p, void *stream) { (void)p, (void)stream; }
static void dev_graph_begin(void *stream) { (void)stream; }
static void dev_graph_end(void *stream) { (void)stream; }
static void dev_graph_launch(void *stream) { (void)stream; }

#endif /* RINGCC_HAVE_CUDA */
#endif /* RCC_BENCH_DEVICE_H */
