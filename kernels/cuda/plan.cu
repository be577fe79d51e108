/*
 * plan.cu: the launch helpers of plan.cuh and their per-device caches. Benchmark loops plan
 * thousands of launches and the CUDA queries behind a plan (occupancy, cluster occupancy,
 * the shared-memory opt-in) are not free, so their answers are kept, keyed by device: two
 * different GPUs in one process must each get their own answer and their own opt-in.
 */
#include "plan.cuh"

namespace nlk {

namespace {

/* The launch attributes of a kernel: programmatic dependent launch when pdl, clusters of
 * `cluster` CTAs along x when above 1. Returns how many it set. */
unsigned launch_attrs(cudaLaunchAttribute (&attr)[2], int pdl, int cluster)
{
  unsigned n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n++].val.clusterDim = {(unsigned)cluster, 1, 1};
  }
  return n;
}

/* One cached answer: a query about a kernel on a device at a launch configuration. A full
 * table stops caching (the queries still answer). */
struct Key {
  int device;
  const void *kernel;
  int cluster, block;
  size_t smem;
  bool operator==(const Key &o) const
  {
    return device == o.device && kernel == o.kernel && cluster == o.cluster && block == o.block &&
           smem == o.smem;
  }
};

template <int CAP> struct Memo {
  struct Entry { Key key; int value; };
  Entry entries[CAP];
  int used = 0;
  template <typename F> int get(const Key &key, F &&query)
  {
    for (int i = 0; i < used; i++)
      if (entries[i].key == key)
        return entries[i].value;
    const int v = query();
    if (used < CAP)
      entries[used++] = Entry{key, v};
    return v;
  }
};

Memo<512> occupancy_memo, cluster_memo, cluster_optin_memo;

/* Shared memory granted per (device, kernel), and whether the carveout was set to its
 * maximum: the attributes only grow, so a request within a grant needs no call. */
struct Grant { int device; const void *kernel; size_t bytes; bool carveout; };
Grant grants[512];
int granted;

} // namespace

int launch_kernel(nlk_norm *k, const void *kernel, int64_t grid, int block, size_t smem, void **args,
                  unsigned grid_y, int cluster, bool pdl)
{
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)grid, grid_y);
  cfg.blockDim = dim3((unsigned)block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = (cudaStream_t)k->stream;
  cfg.attrs = attr;
  cfg.numAttrs = launch_attrs(attr, pdl, cluster);
  return cuda_result(k, cudaLaunchKernelExC(&cfg, kernel, args));
}

namespace {
__global__ void zero_word(unsigned *p) { *p = 0u; }
} // namespace

/* A one-thread kernel, not cudaMemsetAsync: in a CUDA graph a memset node before the kernel
 * cost the cast-transpose 2.4-2.7 us at 4096 rows on an H100, this kernel about 0.8 us
 * (docs/kernels.md, the amax paragraph). */
cudaError_t clear_amax(const nlk_norm *k)
{
  zero_word<<<1, 1, 0, (cudaStream_t)k->stream>>>(reinterpret_cast<unsigned *>(k->amax));
  return cudaGetLastError();
}

/* Static arrays take at most 1 KB in these kernels, hence the margin below 48 KB. */
cudaError_t allow_smem(const nlk_norm *k, const void *kernel, size_t bytes, bool max_carveout)
{
  const bool big = bytes + 1024 > 48 * 1024;
  if (!big && !max_carveout)
    return cudaSuccess;
  for (int i = 0; i < granted; i++)
    if (grants[i].device == k->device && grants[i].kernel == kernel &&
        (!big || grants[i].bytes >= bytes) && (!max_carveout || grants[i].carveout))
      return cudaSuccess;
  cudaError_t e = big ? cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes)
                      : cudaSuccess;
  if (e == cudaSuccess && max_carveout)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess)
    cudaGetLastError();
  else if (granted < 512)
    grants[granted++] = Grant{k->device, kernel, bytes, max_carveout};
  return e;
}

cudaError_t allow_cluster(const nlk_norm *k, const void *kernel)
{
  return (cudaError_t)cluster_optin_memo.get(Key{k->device, kernel, 0, 0, 0}, [&] {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess)
      cudaGetLastError();
    return (int)e;
  });
}

int occupancy(const nlk_norm *k, const void *kernel, int block, size_t smem)
{
  return occupancy_memo.get(Key{k->device, kernel, 1, block, smem}, [&] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, block, smem) != cudaSuccess) {
      cudaGetLastError();
      n = 1;
    }
    return n < 1 ? 1 : n;
  });
}

int max_clusters(const nlk_norm *k, const void *kernel, int cluster, int block, size_t smem)
{
  return cluster_memo.get(Key{k->device, kernel, cluster, block, smem}, [&] {
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)cluster);
    cfg.blockDim = dim3((unsigned)block);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = launch_attrs(attr, 0, cluster);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    return n;
  });
}

} // namespace nlk

/* The elements in a pack of x's rows (row_pack_elems). */
extern "C" int nlk_cuda_pack_elems(const nlk_norm *k) { return nlk::row_pack_elems(k); }
