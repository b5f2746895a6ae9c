// tree_verify, variant "sm90a": the maths of the portable variant (kernels_cu/tree_verify.cu: problem, grid,
// split-KV, masking by selection, numerics) on Hopper's asynchronous machinery. Built for sm_90a only.
//
// CTA = 64 (query, head) rows of one request x one split, 3 warpgroups (tree_verify.cuh):
//   - warpgroup 0, the producer: one thread walks the split's 64-key blocks and issues TMA copies
//     (cp.async.bulk.tensor, 128-byte swizzle) of the paged cache into a ring of kSm90aStages stages, one copy
//     per (page piece, 64-column slab), completing on the stage's "full" mbarrier; it gives its registers to
//     the consumers (setmaxnreg).
//   - warpgroups 1 and 2, the consumers: each waits for a stage, computes S = q·kᵀ for all 64 rows x 64 keys
//     with wgmma (q tile and KV tile both read from shared memory), does the online softmax in registers, and
//     O += P·V for its own 256 of the 512 output columns with wgmma (P from registers, V = the same KV tile
//     read as an MN-major operand), then releases the stage on its "empty" mbarrier.
// Both consumers compute the same S (the same instructions on the same data: the same bits), so their softmax
// statistics agree without an exchange; that costs S twice per block (a simplification: FlashMLA instead
// splits the work of S between its warpgroups and swaps P through shared memory).
//
// Keys and rows. A split covers keys [kbeg, kend) (kend cut at the tile's last query's own tree row, as in
// portable); blocks start at kbeg rounded down to 64, so with a page size dividing 64 (or a multiple of 64)
// every block is whole pages (or one piece of a page), which is what a TMA box can fetch. Keys before kbeg
// in the first block are the request's own (finite) rows, masked out by selection. Only pages holding keys
// below kend are fetched (a block-table entry past the request's need is never read); in the last block,
// the rows at or past kend (stale rows of an earlier block, or rows of the last page past prefix_len + Q,
// which may hold NaN) are zeroed in shared memory before any wgmma reads the stage, so P·V never multiplies
// a non-finite value (0 x NaN = NaN; TV.3.1). Prefix-only blocks (every key below prefix_len and inside the
// split) skip the mask altogether.
//
// Layout of a 64-row tile (q, or a KV stage): 9 slabs of 64 columns; slab c holds row r's columns
// 64c .. 64c+63 at 8192c + 128r, its 16-byte chunk k stored at chunk k ^ (r % 8) (the 128-byte swizzle TMA
// writes and wgmma reads). The q tile is written by the threads themselves in the same layout.
#include "common.cuh"
#include "tree_verify.cuh"

namespace {

constexpr int kRows = 64;                   // rows per CTA = wgmma M
constexpr int kBN = tv::kSm90aBlockN;       // keys per block = wgmma N of S, K of P·V
constexpr int kStages = tv::kSm90aStages;
constexpr int kSlab = tv::kSm90aSlabBytes;  // bytes per 64-column slab of a 64-row tile
constexpr int kTile = tv::kSm90aTileBytes;
constexpr int kSlabs = tv::kHeadDim / 64;   // 9
constexpr int kCols = tv::kLatent / 2;      // output columns per consumer warpgroup (256)
static_assert(tv::m_tile(tv::kSm90a) == kRows && tv::threads(tv::kSm90a) == 384 && kBN == 64, "the layout below");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// ------------------------------------------------------------------------------------------------ mbarrier
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Generic-proxy writes to shared memory (the q tile, zeroed rows) made visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The consumers' own barrier (named barrier 1, 256 threads): the producer never joins it.
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// ------------------------------------------------------------------------------------------------ TMA
// Box {64 columns, box_rows rows, 1 page} of the cache viewed as [pages][page_size][576] (innermost first in
// the coordinates), into shared memory at dst, completing `bytes` on the mbarrier.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tmap, int col, int row, int page, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(tmap), "r"(col), "r"(row), "r"(page), "r"(bar)
      : "memory");
}

// ------------------------------------------------------------------------------------------------ wgmma
// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte offsets (>> 4).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr >> 4) & 0x3FFF) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

#define TV_D32(d)                                                                                              \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define TV_R32                                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"

// D[64x64] (+)= A[64x16] · B[16x64], A and B K-major in shared memory (S = q·kᵀ).
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TV_R32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : TV_D32(d)
      : "l"(a), "l"(b), "r"(accumulate));
}

// D[64x64] += A[64x16] · B[16x64], A in registers (P), B MN-major in shared memory (V).
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TV_R32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : TV_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// Bit `col` of visibility row `row` of one request ([Q, W] words): does query `row` see tree row `col`?
__device__ __forceinline__ bool tree_bit(const uint32_t* __restrict__ vis_b, int W, int row, int col) {
  return (__ldg(vis_b + static_cast<size_t>(row) * W + (col >> 5)) >> (col & 31)) & 1u;
}

// ------------------------------------------------------------------------------------------------ the CTA
__device__ __forceinline__ void tree_verify_sm90a_cta(
    const uint16_t* __restrict__ q, const void* kv_map, const int* __restrict__ block_table,
    const int* __restrict__ prefix_lens, const uint32_t* __restrict__ visibility, float scale, int Q, int H,
    int page_size, int max_pages, const long long* __restrict__ split_chunk, const long long* __restrict__ split_off,
    uint16_t* __restrict__ out, float* __restrict__ lse, float* __restrict__ part_o, float* __restrict__ part_lse) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sKV = sQ + kTile;
  const uint32_t bar0 = sQ + tv::sm90a_bar_offset();
  auto full_bar = [&](int st) { return bar0 + 8 * st; };
  auto empty_bar = [&](int st) { return bar0 + 8 * (kStages + st); };

  const int tid = threadIdx.x, wg = tid >> 7;
  const int b = blockIdx.z, s = blockIdx.y;
  const int P = prefix_lens[b];
  const long long n_keys = static_cast<long long>(P) + Q;
  const long long chunk = split_chunk[b];
  const long long n_split = tv::n_splits(n_keys, chunk);
  if (s >= n_split) return;  // the grid is sized for the request with the most splits
  const bool split = n_split > 1;
  const long long QH = static_cast<long long>(Q) * H;
  const long long R0 = static_cast<long long>(blockIdx.x) * kRows;
  const long long rows_here = QH - R0 < kRows ? QH - R0 : kRows;
  const int i_max = static_cast<int>((R0 + rows_here - 1) / H);  // the tile's last query
  const int W = (Q + 31) >> 5;

  long long ke = static_cast<long long>(s) * chunk + chunk;
  if (ke > n_keys) ke = n_keys;
  if (ke > static_cast<long long>(P) + i_max + 1) ke = static_cast<long long>(P) + i_max + 1;
  const int kbeg = static_cast<int>(static_cast<long long>(s) * chunk);
  const int kend = static_cast<int>(ke > kbeg ? ke : kbeg);
  const int kb0 = kbeg / kBN * kBN;  // blocks start 64-aligned
  const int nblk = kend > kbeg ? (kend - kb0 + kBN - 1) / kBN : 0;

  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      mbar_init(full_bar(st), 1);
      mbar_init(empty_bar(st), 8);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // q tile (all threads): 64 rows x 72 chunks of 16 bytes into the swizzled layout; rows past Q·H are zero.
  {
    const uint4* q_rows = reinterpret_cast<const uint4*>(q + (static_cast<size_t>(b) * QH + R0) * tv::kHeadDim);
    for (int i = tid; i < kRows * 72; i += tv::kSm90aThreads) {
      const int r = i / 72, c = i % 72;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (r < rows_here) v = __ldg(q_rows + static_cast<size_t>(r) * 72 + c);
      *reinterpret_cast<uint4*>(smem + (c >> 3) * kSlab + r * 128 + (((c & 7) ^ (r & 7)) << 4)) = v;
    }
    fence_async_smem();
  }
  __syncthreads();

  if (wg == 0) {  // ------------------------------------------------ producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid != 0) return;
    // The descriptor was written to global memory by the host: acquire it for the tensormap proxy.
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(kv_map) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(kv_map) : "memory");
    const int* bt = block_table + static_cast<size_t>(b) * max_pages;
    const int box_rows = page_size < kBN ? page_size : kBN;
    for (int j = 0; j < nblk; ++j) {
      const int st = j % kStages;
      if (j >= kStages) mbar_wait(empty_bar(st), ((j / kStages) + 1) & 1);
      const int k0 = kb0 + j * kBN;
      const int hi = kend - k0 < kBN ? kend - k0 : kBN;   // keys of this block that are needed
      const int pieces = (hi + box_rows - 1) / box_rows;  // boxes (whole pages, or 64-row pieces of one)
      mbar_expect_tx(full_bar(st), static_cast<uint32_t>(pieces * box_rows * tv::kHeadDim * 2));
      for (int pc = 0; pc < pieces; ++pc) {
        const int p = k0 + pc * box_rows;
        const int page = bt[p / page_size];
        const uint32_t dst = sKV + st * kTile + pc * box_rows * 128;
        for (int c = 0; c < kSlabs; ++c) tma_load_3d(dst + c * kSlab, kv_map, c * 64, p % page_size, page, full_bar(st));
      }
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int ct = tid - 128;          // 0..255 over both consumer warpgroups
  const int half = wg - 1;           // output columns 256·half .. +256
  const int w = (tid >> 5) & 3, lane = tid & 31;
  const int ra = 16 * w + (lane >> 2);  // this thread's rows: ra and ra + 8
  int qi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long R = R0 + ra + 8 * h;
    qi[h] = R < QH ? static_cast<int>(R / H) : Q - 1;
  }
  const uint32_t* vis_b = visibility + static_cast<size_t>(b) * Q * W;

  float o[4][32];
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int e = 0; e < 32; ++e) o[n][e] = 0.f;
  float m_run[2] = {neg_inf(), neg_inf()}, l_run[2] = {0.f, 0.f};

  for (int j = 0; j < nblk; ++j) {
    const int st = j % kStages;
    const int k0 = kb0 + j * kBN;
    const uint32_t sK = sKV + st * kTile;
    mbar_wait(full_bar(st), (j / kStages) & 1);
    if (k0 + kBN > kend) {  // last block: zero the rows at or past kend before any wgmma reads them
      const int nv = kend - k0;
      for (int i = ct; i < (kBN - nv) * kSlabs * 8; i += 256) {
        const int r = nv + i / (kSlabs * 8), c = i % (kSlabs * 8);
        *reinterpret_cast<uint4*>(smem + kTile + st * kTile + (c >> 3) * kSlab + r * 128 + ((c & 7) << 4)) =
            make_uint4(0u, 0u, 0u, 0u);
      }
      fence_async_smem();
      consumers_sync();
    }

    // S = q·kᵀ: 36 k-steps of 16 dims; within a slab a k-step moves 32 bytes along the swizzled row.
    float sc[32];
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < 36; ++ks) {
      const uint32_t off = (ks >> 2) * kSlab + (ks & 3) * 32;
      wgmma_ss(sc, desc_sw128(sQ + off, 16, 1024), desc_sw128(sK + off, 16, 1024), ks > 0);
    }
    wg_commit();
    wg_wait0();

    // Softmax step. sc[4i + e]: row ra (e < 2) or ra + 8 (e >= 2), key 8i + 2·(lane % 4) + (e & 1).
    const bool plain = k0 >= kbeg && k0 + kBN <= kend && k0 + kBN <= P;  // prefix keys, all inside the split
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1, p = k0 + 8 * i + 2 * (lane & 3) + (e & 1);
        const bool seen = plain || (p >= kbeg && p < kend && (p < P || tree_bit(vis_b, W, qi[h], p - P)));
        sc[4 * i + e] = seen ? sc[4 * i + e] * scale : neg_inf();  // replaced, never added to
        mx[h] = fmaxf(mx[h], sc[4 * i + e]);
      }
    float alpha[2], m_use[2], sum[2] = {0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m_run[h], mx[h]);
      m_use[h] = m_new == neg_inf() ? 0.f : m_new;  // a row with nothing seen yet keeps P = 0
      alpha[h] = expf(m_run[h] - m_use[h]);         // 0 while m_run = -inf
      m_run[h] = m_new;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[4 * i + e] = expf(sc[4 * i + e] - m_use[e >> 1]);  // exp(-inf) = 0 exactly for masked keys
        sum[e >> 1] += sc[4 * i + e];
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 1);
      sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 2);
      l_run[h] = l_run[h] * alpha[h] + sum[h];
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 32; ++e) o[n][e] *= alpha[(e >> 1) & 1];

    // O += P·V: 4 k-steps of 16 keys (P's accumulator layout is the A-fragment layout), 4 slabs of 64 columns.
    // V is MN-major: one instruction spans one 64-column slab (one swizzle atom wide), so only the stride
    // between 8-key row groups (1024 bytes) is used; both offsets of the descriptor carry it.
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t a[4] = {pack_bf16(sc[8 * kk], sc[8 * kk + 1]), pack_bf16(sc[8 * kk + 2], sc[8 * kk + 3]),
                             pack_bf16(sc[8 * kk + 4], sc[8 * kk + 5]), pack_bf16(sc[8 * kk + 6], sc[8 * kk + 7])};
#pragma unroll
      for (int n = 0; n < 4; ++n)
        wgmma_rs(o[n], a, desc_sw128(sK + (half * 4 + n) * kSlab + kk * 16 * 128, 1024, 1024));
    }
    wg_commit();
    wg_wait0();
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_bar(st));  // this warp is done reading the stage
  }

  // Output: rows ra, ra + 8; columns 256·half + 64n + 8i + 2·(lane % 4) + {0, 1}.
  const size_t off = split ? static_cast<size_t>(split_off[b] + s) : 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = ra + 8 * h;
    if (r >= rows_here) continue;
    const size_t R = static_cast<size_t>(R0 + r);
    const float l = l_run[h], inv = l > 0.f ? 1.f / l : 0.f;
    if (half == 0 && (lane & 3) == 0) {
      if (split)
        part_lse[off * QH + R] = l > 0.f ? m_run[h] + logf(l) : neg_inf();
      else
        lse[static_cast<size_t>(b) * QH + R] = m_run[h] + logf(l);
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = half * kCols + n * 64 + 8 * i + 2 * (lane & 3);
        const float x0 = o[n][4 * i + 2 * h] * inv, x1 = o[n][4 * i + 2 * h + 1] * inv;
        if (split)
          *reinterpret_cast<float2*>(part_o + (off * QH + R) * tv::kLatent + c) = make_float2(x0, x1);
        else
          *reinterpret_cast<uint32_t*>(out + (static_cast<size_t>(b) * QH + R) * tv::kLatent + c) = pack_bf16(x0, x1);
      }
  }
}

}  // namespace

// Arguments as the portable bf16 entry (kernels_cu/tree_verify_ops.py), except that the cache is passed as
// the device address of its TMA descriptor (a CUtensorMap over [pages][page_size][576] bf16, 128-byte
// swizzle, box {64, min(page_size, 64), 1}) written by the host before the launch. The partial outputs of
// split requests are merged by the portable module's combine kernel.
extern "C" __global__ void __launch_bounds__(tv::kSm90aThreads, 1) tree_verify_sm90a_kernel(
    const uint16_t* __restrict__ q, const void* kv_map, const int* __restrict__ block_table,
    const int* __restrict__ prefix_lens, const uint32_t* __restrict__ visibility, float softmax_scale, int Q, int H,
    int page_size, int max_pages, const long long* __restrict__ split_chunk, const long long* __restrict__ split_off,
    uint16_t* __restrict__ out, float* __restrict__ lse, float* __restrict__ part_o, float* __restrict__ part_lse) {
  tree_verify_sm90a_cta(q, kv_map, block_table, prefix_lens, visibility, softmax_scale, Q, H, page_size, max_pages,
                        split_chunk, split_off, out, lse, part_o, part_lse);
}

// The geometry functions evaluated on the device (see tree_verify.cu's query kernel).
extern "C" __global__ void tree_verify_geometry_kernel(const long long* __restrict__ args, int n,
                                                       long long* __restrict__ values) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  tv::geometry_fields(args[4 * i], args[4 * i + 1], static_cast<int>(args[4 * i + 2]), args[4 * i + 3],
                      values + static_cast<size_t>(tv::kGeometryStride) * i);
}
