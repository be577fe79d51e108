/*
 * tile.cuh: the shared-memory tile of the tiled transposes (transpose.cu's tr_tiled, and
 * whatever else stages a tile to write it transposed): its swizzled layout and its
 * transposing read, which casts to fp8 or copies the bits.
 */
#ifndef NLK_TILE_CUH
#define NLK_TILE_CUH

#include "device.cuh"

namespace nlk {

/* What an element becomes: the same bits, or fp8 with the scale. */
enum class Cast { COPY, E4M3, E5M2 };

template <typename TI, Cast C>
using OutT = std::conditional_t<C == Cast::COPY, TI,
                                std::conditional_t<C == Cast::E4M3, __nv_fp8_e4m3, __nv_fp8_e5m2>>;

/* The 16-byte chunk q (of 4 / E) of V words, one per row, each holding 4 / E elements: the
 * elements at position q of every word, in row order (a register transpose by byte permutes). */
template <int E> __device__ __forceinline__ uint4 column_chunk(const unsigned (&w)[16 / E], int q)
{
  uint4 c;
  unsigned *o = reinterpret_cast<unsigned *>(&c);
  if constexpr (E == 4) {
    o[0] = w[0]; o[1] = w[1]; o[2] = w[2]; o[3] = w[3];
  } else if constexpr (E == 2) {
    const unsigned sel = q ? 0x7632u : 0x5410u;
#pragma unroll
    for (int p = 0; p < 4; p++)
      o[p] = __byte_perm(w[2 * p], w[2 * p + 1], sel);
  } else {
    const unsigned sel = (unsigned)q | ((unsigned)(q + 4) << 4);  /* byte q of each word */
#pragma unroll
    for (int p = 0; p < 4; p++)
      o[p] = __byte_perm(__byte_perm(w[4 * p], w[4 * p + 1], sel),
                         __byte_perm(w[4 * p + 2], w[4 * p + 3], sel), 0x5410);
  }
  return c;
}

/* The 16-byte yt chunk q (of 4 / sizeof(TS)) of V tile words, one per row: the tile elements
 * at position q of every word, in row order, cast to TO. The same bits: a register transpose
 * by byte permutes (column_chunk); a cast: element by element. */
template <typename TS, Cast C, int V>
__device__ __forceinline__ uint4 column_out(const unsigned (&w)[V], int q, float scale)
{
  using TO = OutT<TS, C>;
  static_assert(V * sizeof(TO) == 16, "a yt chunk is 16 bytes");
  if constexpr (C == Cast::COPY) {
    return column_chunk<sizeof(TS)>(w, q);
  } else {
    float f[V], unused = 0.f;
#pragma unroll
    for (int k = 0; k < V; k++)
      f[k] = to_f(reinterpret_cast<const TS *>(&w[k])[q]);
    const Pack<TO, V> o = to_fp8_pack<TO>(f, scale, unused);
    return *reinterpret_cast<const uint4 *>(&o);
  }
}

/* The pack of VI elements of row i from column j, element by element (no alignment asked):
 * the chunk that N cuts, zeros past N. */
template <typename TS, int VI>
__device__ __forceinline__ Pack<TS, VI> pack_elems(const void *x, int64_t i, int64_t sx, int j, int N)
{
  Pack<TS, VI> p;
#pragma unroll
  for (int e = 0; e < VI; e++)
    p.v[e] = j + e < N ? static_cast<const TS *>(x)[i * sx + j + e] : TS{};
  return p;
}

/* A tile of tile_m rows of tile_n elements of TS (both powers of two) in shared memory, read
 * back transposed into yt chunks of V output elements (16 bytes). Rows are pw words long,
 * each row's words XOR-swizzled by swz(row). Every extent is held as its log2: the index
 * arithmetic is shifts and masks (a runtime divisor costs a reciprocal and a dozen
 * instructions per use, which made the transposes issue-bound). The transposing read has a
 * warp take RB blocks of V rows at CW = 32 / RB word columns; the swizzle puts the RB row
 * blocks of a word column in different banks: rb * CW, within the row. A multiple of CW (>= 4
 * words) keeps a 16-byte chunk of a row whole. Limits: tile_m >= V, tile_n x sizeof(TS) >= 16. */
template <typename TS, int V> struct Tile {
  static constexpr int ES = sizeof(TS), LV = V == 16 ? 4 : V == 8 ? 3 : 2;
  unsigned char *base;
  int lpw;   /* log2 of the words per row */
  int lrb;   /* log2 of the row blocks per warp (at most 8 blocks) */
  int lcw;   /* log2 of the word columns per warp, 32 / rb */
  int reads; /* word columns of V rows: the transposing read's work items */

  __device__ __forceinline__ Tile(unsigned char *tile, int tile_m, int tile_n) : base(tile)
  {
    const int lnrb = (__ffs(tile_m) - 1) - LV; /* row blocks: tile_m / V */
    lpw = (__ffs(tile_n) - 1) + (ES == 4 ? 0 : ES == 2 ? -1 : -2);
    lrb = lnrb < 3 ? lnrb : 3;
    lcw = 5 - lrb;
    reads = 1 << (lnrb + lpw);
  }
  __device__ __forceinline__ int swz(int r) const
  {
    return (((r >> LV) & ((1 << lrb) - 1)) << lcw) & ((1 << lpw) - 1);
  }
  /* where column col (a multiple of 16 / ES, or any column of a tile of 4-byte elements) of
   * row r sits, as a chunk of P */
  template <typename P> __device__ __forceinline__ P *at(int r, int col) const
  {
    const int word = ((col * ES) >> 2) ^ swz(r);
    return reinterpret_cast<P *>(base + ((size_t)r << (lpw + 2)) + (size_t)word * 4);
  }

  /* Stages rows i0 .. i0 + tile_m - 1, columns j0 .. j0 + tile_n - 1 of x into the tile, the
   * CTA's threads taking 16-byte chunks in turn: with vec (x and its rows 16-byte aligned)
   * cp.async copies, all in flight at once and holding no registers (committed here; the
   * caller waits), and element loads for a chunk that N cuts (zeros past N) or for every
   * chunk without vec. Rows past M and chunks past N are
   * not loaded: their slots keep stale data that no store reads. last: x is read for the last
   * time (an evict_first policy, which lifts a keeping store's evict_last). */
  __device__ __forceinline__ void stage(const void *x, int64_t sx, int64_t i0, int j0, int64_t M,
                                        int N, int tile_m, int tile_n, bool vec, bool last) const
  {
    constexpr int VI = 16 / ES, LVI = VI == 16 ? 4 : VI == 8 ? 3 : 2;
    const int lcpr = (__ffs(tile_n) - 1) - LVI; /* log2 of the 16-byte chunks per tile row */
    const int loads = tile_m << lcpr;
    for (int c = threadIdx.x; c < loads; c += blockDim.x) {
      const int r = c >> lcpr, col = (c & ((1 << lcpr) - 1)) << LVI;
      const int64_t i = i0 + r;
      const int j = j0 + col;
      if (i >= M || j >= N)
        continue;
      Pack<TS, VI> *dst = at<Pack<TS, VI>>(r, col);
      if (vec && j + VI <= N) {
        copy_async(dst, row_packs<TS, VI>(const_cast<void *>(x), i, sx) + j / VI, last);
      } else {
        *dst = pack_elems<TS, VI>(x, i, sx, j, N);
      }
    }
    copy_commit();
  }

  /* The transposing read: each of the CTA's threads takes word columns of V rows, casts the
   * 4 / ES elements of the words into as many yt chunks and stores each to its yt row (so a
   * warp's stores are RB x 16 contiguous bytes of 32 / RB yt rows). The tile's row 0 is row
   * i0 of x and its column 0 column j0; rows past M and columns past N are not stored. vec:
   * 16-byte stores (yt and its row stride aligned), else element by element. */
  template <Cast C>
  __device__ __forceinline__ void put_transposed(int64_t i0, int j0, int64_t M, int N, void *yt,
                                                 int64_t syt, bool vec, float scale) const
  {
    using TO = OutT<TS, C>;
    constexpr int W = 4 / ES;
    for (int it = threadIdx.x; it < reads; it += blockDim.x) {
      const int rb = ((it >> (lrb + lpw)) << lrb) | (it & ((1 << lrb) - 1));
      const int wc = (it >> lrb) & ((1 << lpw) - 1);
      const int r0 = rb * V, jc = j0 + wc * W;
      const int64_t i = i0 + r0;
      if (i >= M || jc >= N)
        continue;
      unsigned w[V];
      const int word = wc ^ swz(r0);
#pragma unroll
      for (int k = 0; k < V; k++)
        w[k] = reinterpret_cast<const unsigned *>(base)[((size_t)(r0 + k) << lpw) + word];
      const bool full = vec && i + V <= M;
#pragma unroll
      for (int q = 0; q < W; q++) {
        const int j = jc + q;
        if (j >= N)
          break;
        const uint4 part = column_out<TS, C, V>(w, q, scale);
        TO *row = static_cast<TO *>(yt) + (int64_t)j * syt + i;
        if (full) {
          __stcs(reinterpret_cast<uint4 *>(row), part);
        } else {
          /* unrolled, so that the chunk stays in registers */
          const TO *e = reinterpret_cast<const TO *>(&part);
#pragma unroll
          for (int k = 0; k < V; k++)
            if (i + k < M)
              row[k] = e[k];
        }
      }
    }
  }
};

} // namespace nlk

#endif
