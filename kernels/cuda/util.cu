/*
 * util.cu: buffer fills and kernel names. Fills use one thread per element with a
 * grid-stride loop over the logical rows x cols elements (strided rows), so any pattern
 * width and any stride work; fills are not on any timed path.
 */
#include <cxxabi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "nlk_cuda.h"

template <typename T>
__global__ void fill_kernel(T *p, int64_t rows, int64_t cols, int64_t stride, T value)
{
  int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    p[(i / cols) * stride + i % cols] = value;
}

template <typename T>
static cudaError_t fill(void *p, int64_t rows, int64_t cols, int64_t stride, uint64_t pattern,
                        cudaStream_t s)
{
  int64_t n = rows * cols;
  int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  fill_kernel<T><<<blocks, 256, 0, s>>>((T *)p, rows, cols, stride, (T)pattern);
  return cudaGetLastError();
}

extern "C" int nlk_cuda_fill(void *p, int64_t rows, int64_t cols, int64_t stride, int elt_size,
                             uint64_t pattern, void *stream)
{
  cudaStream_t s = (cudaStream_t)stream;
  switch (elt_size) {
  case 1: return (int)fill<unsigned char>(p, rows, cols, stride, pattern, s);
  case 2: return (int)fill<unsigned short>(p, rows, cols, stride, pattern, s);
  case 4: return (int)fill<unsigned int>(p, rows, cols, stride, pattern, s);
  case 8: return (int)fill<unsigned long long>(p, rows, cols, stride, pattern, s);
  default: return (int)cudaErrorInvalidValue;
  }
}

/* Demangled, without the return type, the parameter list (every kernel of a family takes
 * the same argument struct) and the namespaces every kernel shares. */
extern "C" void nlk_cuda_kernel_name(const void *kernel, char *buf, size_t cap)
{
  const char *mangled = NULL;
  char *plain;
  int status = -1;
  if (cap == 0)
    return;
  buf[0] = '\0';
  if (!kernel || cudaFuncGetName(&mangled, kernel) != cudaSuccess || !mangled) {
    cudaGetLastError();
    return;
  }
  plain = abi::__cxa_demangle(mangled, NULL, NULL, &status);
  const char *src = status == 0 && plain ? plain : mangled;
  const char *end = status == 0 && plain ? strrchr(src, '(') : NULL;
  size_t n = 0;
  if (end && strncmp(src, "void ", 5) == 0)
    src += 5;
  for (const char *s = src; *s && s != end && n + 1 < cap;) {
    static const char *const drop[] = {"(anonymous namespace)::", "nlk::"};
    int skipped = 0;
    for (const char *d : drop)
      if (strncmp(s, d, strlen(d)) == 0) {
        s += strlen(d);
        skipped = 1;
      }
    if (!skipped)
      buf[n++] = *s++;
  }
  buf[n] = '\0';
  free(plain);
}
