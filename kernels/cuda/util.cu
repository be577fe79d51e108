/*
 * util.cu: buffer fills and small launch-geometry queries. Fills use one thread per element
 * with a grid-stride loop over the logical rows x cols elements (strided rows), so any
 * pattern width and any stride work; fills are not on any timed path.
 */
#include "common.cuh"

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

extern "C" int64_t nlk_cuda_blockrow_max_n(const nlk_norm *k)
{
  const int elt = k->dt == NLK_F32 ? 4 : 2;
  return (int64_t)32 * nlk::MAX_ITEMS * nlk::pick_vec(k, elt);
}
