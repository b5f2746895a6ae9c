// tree_verify, variant "portable": MLA absorb attention with a tree mask over a paged latent cache, split-KV
// (spec/tree_verify.md). bf16 operands on tensor cores through mma.sync m16n8k16 with fp32 accumulation
// (sm_80 and later, so it builds for sm_90 and sm_120 alike), and an fp32 path on CUDA cores.
//
// Problem. Request b has P = prefix_lens[b] prefix keys and Q tree keys (positions P .. P+Q-1), one shared
// latent KV head: a cache row is 576 values (c_kv 512 ‖ k_pe 64), K is the whole row and V its first 512
// columns. Query i sees every prefix key and tree key j when bit j of visibility[b, i] is set. All H heads of
// all Q queries read the same keys, so the (query, head) pairs are the M dimension of one matrix product: the
// request's q[b] is a [Q·H, 576] matrix, out[b] a [Q·H, 512] one, and every KV tile loaded into shared memory
// serves m_tile of those rows at once. That reuse is what makes the op compute bound once Q·H ≳ 120.
//
// Grid (tree_verify.cuh): x = row tile (m_tile consecutive rows of the request's Q·H), y = split,
// z = request; 256 threads. The tile comes from the build's shared-memory budget (tree_verify.cuh's Tile:
// 64 rows x 32 keys in bf16, 32 x 32 in fp32 where 227 KB fit, as on the H200; 32 x 32 and 16 x 16 in 99 KB, as
// on sm_120). A CTA walks its split's keys in blocks of block_n:
//   1. S = q·kᵀ for its m_tile rows x block_n keys (bf16: 8 warps = 2 row halves x 4 slices of the 576 dims,
//      the four partial sums added in a fixed order; fp32: one dot product per thread and key),
//   2. softmax step (4, 8 or 16 threads per row): scale, mask, online max/sum, P and the rescale factor alpha,
//   3. O = O·alpha + P·V (bf16: warp w owns output columns 64w .. 64w+63 of every row, 128 or 64 fp32
//      registers; fp32: each thread 16 or 8 rows x 4 columns).
// The next KV block is copied during this one: into the second shared-memory stage by cp.async (bf16, 227 KB),
// into registers and then the single stage after P·V (99 KB tiles), or (fp32, 227 KB) by cp.async after P·V.
// Keys after the tile's last query are skipped: query i sees no tree key beyond its own (TV.1.3).
//
// Invisible rows change no bit (TV.3.1). Masking is by selection: an invisible logit is replaced by -inf
// (never added to, so a NaN or an infinity from a row the query cannot see is discarded), and its P is then
// exactly 0. P·V still multiplies every loaded V row by each query's P, and 0 x NaN = NaN, so rows that no
// query of the request sees are never loaded: positions at or past the split's end (and so past P + Q) are
// zero-filled by cp.async without a read, and pages are found only through the request's own block-table
// row. Tree rows that another query of the request sees are loaded; they must be finite (0 x finite = 0).
//
// Split-KV. Split s of request b covers keys [s·chunk_b, (s+1)·chunk_b); chunk_b (per request, from its own
// length: see the geometry header) and the partial-output slots are planned on the host. A request with one
// split writes out and lse directly; otherwise each split writes its normalized partial output and partial
// lse (fp32), and tree_verify_combine_* merges them in split order (no atomics anywhere), so a request's bits
// depend on nothing but its own inputs and chunk (TV.3.2, TV.3.3).
//
// Numerics: logits in fp32, times softmax_scale once; online softmax with a running max (q x 100 cannot
// overflow); lse = m + ln(l), natural log. bf16: P = exp(s - m_running) is rounded to bf16 before P·V (the
// reference rounds the normalized P; the tolerance of TV.2.2 covers the difference), l sums the unrounded
// fp32 values, out = O / l rounded to bf16 once.
#include "arch_limits.cuh"
#include "common.cuh"
#include "tree_verify.cuh"

namespace {

// The shared memory this build plans for (arch_limits.cuh): the spec's KERNEL_SMEM_BUDGET or the target arch's
// per-block limit; it picks each dtype path's tile (tree_verify.cuh). nvcc's host pass compiles no device
// code from it (0 there: the small tiles, never launched).
#if defined(__CUDA_ARCH__)
constexpr long long kBudget = kernel_smem_budget(KERNEL_SPEC_SMEM_BUDGET, __CUDA_ARCH__ / 10);
static_assert(kBudget > 0, "kernels_cu/arch_limits.cuh has no shared-memory limit for this arch");
#else
constexpr long long kBudget = 0;
#endif
constexpr tv::Tile kTileBf16 = tv::tile(tv::kBf16, kBudget);
constexpr tv::Tile kTileF32 = tv::tile(tv::kF32, kBudget);
#if defined(__CUDA_ARCH__)
static_assert(tv::tile_smem_bytes(tv::kBf16, kTileBf16) <= kBudget, "the bf16 tile fits the budget");
static_assert(tv::tile_smem_bytes(tv::kF32, kTileF32) <= kBudget, "the fp32 tile fits the budget");
#endif
static_assert(kTileBf16.bn == 32, "the bf16 warp layout (MathBf16) takes 32-key blocks");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes = 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// D = A·B + D, A 16x16 row-major bf16, B 16x8 column-major bf16, D 16x8 fp32.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats -> bf16x2 (round to nearest even); lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Bit `col` of visibility row `row` of one request ([Q, W] words): does query `row` see tree row `col`?
__device__ __forceinline__ bool tree_bit(const uint32_t* __restrict__ vis_b, int W, int row, int col) {
  return (__ldg(vis_b + static_cast<size_t>(row) * W + (col >> 5)) >> (col & 31)) & 1u;
}

// ------------------------------------------------------------------------------------------------ bf16 math
// M rows of the tile (64: the tuned tile, 32: the small one); keys in blocks of 32.
template <int M_>
struct MathBf16 {
  static constexpr int V = tv::kBf16;
  static constexpr int M = M_;
  static constexpr int BN = 32;
  static constexpr int PITCH = tv::row_pitch(V);  // elements per q / KV row in shared memory
  static constexpr int SP = tv::s_pitch(V, BN);
  static constexpr int PP = tv::p_pitch(V, BN);
  static constexpr int SMT = M / 32;  // m-tiles of S per warp: a row half is M / 2 rows
  static constexpr int OMT = M / 16;  // m-tiles of O per warp: every row
  static_assert((M == 64 || M == 32) && tv::kThreads == 256, "the warp layout below assumes these");
  static_assert(tv::s_parts(V) == 4 && tv::kHeadDim == 4 * 9 * 16, "4 slices of 9 k-steps");

  struct Acc {
    float o[OMT][8][4];  // M / 16 m-tiles (every row) x 8 n-tiles (this warp's 64 output columns)
  };

  static __device__ __forceinline__ void zero(Acc& a) {
#pragma unroll
    for (int mt = 0; mt < OMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) a.o[mt][nt][e] = 0.f;
  }

  // Partial S of warp (rh = warp / 4: rows (M/2)·rh .. +M/2; dq = warp % 4: dims 144·dq .. +144) into
  // sS[dq][row][key], fp32, unscaled.
  static __device__ __forceinline__ void scores(const uint16_t* sQ, const uint16_t* sK, float* sS, int warp,
                                                int lane) {
    const int rh = warp >> 2, dq = warp & 3;
    // ldmatrix x4 row addresses. A (q rows): lanes 0-15 rows 0-15 at k 0, lanes 16-31 the same rows at k 8.
    // B (key rows as the columns of Kᵀ): lanes 0-7 keys 0-7 at k 0, 8-15 keys 0-7 at k 8, 16-23 keys 8-15 at
    // k 0, 24-31 keys 8-15 at k 8, giving {b0, b1} of two 8-key n-tiles.
    const uint32_t a_addr = smem_u32(sQ + (rh * (M / 2) + (lane & 15)) * PITCH + dq * 144 + (lane >> 4) * 8);
    const uint32_t b_addr =
        smem_u32(sK + ((lane & 7) + ((lane >> 4) << 3)) * PITCH + dq * 144 + ((lane >> 3) & 1) * 8);
    float acc[SMT][4][4];
#pragma unroll
    for (int mt = 0; mt < SMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < 9; ++ks) {
      uint32_t a[SMT][4], bq[2][4];
#pragma unroll
      for (int mt = 0; mt < SMT; ++mt) ldsm_x4(a[mt], a_addr + mt * 16 * PITCH * 2 + ks * 32);
      ldsm_x4(bq[0], b_addr + ks * 32);
      ldsm_x4(bq[1], b_addr + 16 * PITCH * 2 + ks * 32);
#pragma unroll
      for (int mt = 0; mt < SMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
          mma_bf16(acc[mt][nt], a[mt], bq[nt >> 1][(nt & 1) * 2], bq[nt >> 1][(nt & 1) * 2 + 1]);
    }
    float* part = sS + dq * M * SP;
#pragma unroll
    for (int mt = 0; mt < SMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int r = rh * (M / 2) + mt * 16 + (lane >> 2), c = nt * 8 + (lane & 3) * 2;
        *reinterpret_cast<float2*>(part + r * SP + c) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
        *reinterpret_cast<float2*>(part + (r + 8) * SP + c) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
      }
  }

  template <int KPT>
  static __device__ __forceinline__ void store_p(uint16_t* dst, const float (&p)[KPT]) {
    static_assert(KPT == 8 || KPT == 4, "one 16-byte (64 rows) or 8-byte (32 rows) store per thread");
    if constexpr (KPT == 8) {
      uint4 w;
      w.x = pack_bf16(p[0], p[1]);
      w.y = pack_bf16(p[2], p[3]);
      w.z = pack_bf16(p[4], p[5]);
      w.w = pack_bf16(p[6], p[7]);
      *reinterpret_cast<uint4*>(dst) = w;
    } else {
      *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16(p[0], p[1]), pack_bf16(p[2], p[3]));
    }
  }

  // O = O·alpha + P·V for this warp's 64 columns. Fragment rows: lane/4 and lane/4 + 8 of each m-tile.
  static __device__ __forceinline__ void pv(Acc& acc, const float* sAlpha, const uint16_t* sP, const uint16_t* sV,
                                            int warp, int lane) {
#pragma unroll
    for (int mt = 0; mt < OMT; ++mt) {
      const float a_lo = sAlpha[mt * 16 + (lane >> 2)];
      const float a_hi = sAlpha[mt * 16 + (lane >> 2) + 8];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        acc.o[mt][nt][0] *= a_lo;
        acc.o[mt][nt][1] *= a_lo;
        acc.o[mt][nt][2] *= a_hi;
        acc.o[mt][nt][3] *= a_hi;
      }
    }
    // V (rows = keys = k, columns = n) is row-major, so B comes through ldmatrix.trans: lanes 0-7 keys 0-7,
    // 8-15 keys 8-15 (column block 0: b0, b1 of n-tile 0), 16-31 the same keys at column block 8.
    const uint32_t p_addr = smem_u32(sP + (lane & 15) * PP + (lane >> 4) * 8);
    const uint32_t v_addr = smem_u32(sV + ((lane & 7) + ((lane >> 3) & 1) * 8) * PITCH + warp * 64 + (lane >> 4) * 8);
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      uint32_t a[OMT][4];
#pragma unroll
      for (int mt = 0; mt < OMT; ++mt) ldsm_x4(a[mt], p_addr + (mt * 16 * PP + ks * 16) * 2);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bv[4];
        ldsm_x4_t(bv, v_addr + (ks * 16 * PITCH + np * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < OMT; ++mt) {
          mma_bf16(acc.o[mt][2 * np], a[mt], bv[0], bv[1]);
          mma_bf16(acc.o[mt][2 * np + 1], a[mt], bv[2], bv[3]);
        }
      }
    }
  }

  // out rows (or partial rows) of this CTA; l = 0 only for rows that saw no key in this split.
  static __device__ __forceinline__ void store(const Acc& acc, const float* sL, long long rows_here, bool split,
                                               uint16_t* out_rows, float* part_rows, int warp, int lane) {
#pragma unroll
    for (int mt = 0; mt < OMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = mt * 16 + (lane >> 2) + half * 8;
        if (r >= rows_here) continue;
        const float l = sL[r], inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int c = warp * 64 + nt * 8 + (lane & 3) * 2;
          const float x0 = acc.o[mt][nt][half * 2] * inv;
          const float x1 = acc.o[mt][nt][half * 2 + 1] * inv;
          if (split)
            *reinterpret_cast<float2*>(part_rows + static_cast<size_t>(r) * tv::kLatent + c) = make_float2(x0, x1);
          else
            *reinterpret_cast<uint32_t*>(out_rows + static_cast<size_t>(r) * tv::kLatent + c) = pack_bf16(x0, x1);
        }
      }
  }
};

// ------------------------------------------------------------------------------------------------ fp32 math
// M rows x BN keys: 32 x 32 (the tuned tile) or 16 x 16 (the small one).
template <int M_, int BN_>
struct MathF32 {
  static constexpr int V = tv::kF32;
  static constexpr int M = M_;
  static constexpr int BN = BN_;
  static constexpr int PITCH = tv::row_pitch(V);
  static constexpr int SP = tv::s_pitch(V, BN);
  static constexpr int PP = tv::p_pitch(V, BN);
  static constexpr int TSH = M == 32 ? 3 : 4;  // log2 of the scoring threads per row (8 or 16)
  static constexpr int KS = BN >> TSH;         // keys per scoring thread (4 or 1)
  static constexpr int RPT = M / 2;            // P·V rows per thread (16 or 8)
  static_assert(((M == 32 && BN == 32) || (M == 16 && BN == 16)) && tv::kThreads == 256, "the thread layout below");

  struct Acc {
    float o[RPT][4];  // rows RPT·(tid / 128) .. +RPT, columns 4·(tid % 128) .. +4
  };

  static __device__ __forceinline__ void zero(Acc& a) {
#pragma unroll
    for (int r = 0; r < RPT; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) a.o[r][c] = 0.f;
  }

  // Thread t: row t / 8, keys t % 8 + 8e (e = 0..3) (small tile: row t / 16, key t % 16): 576-term dot
  // products in fp32. Each is summed in 8 interleaved partial sums (dims ≡ c mod 8, 72 FMAs each) added
  // pairwise at the end: a single running sum of 576 terms carries about 3x the rounding error, which q x 8
  // inputs push close to TV.2.1's atol.
  static __device__ __forceinline__ void scores(const float* sQ, const float* sK, float* sS, int warp, int lane) {
    const int tid = warp * 32 + lane, row = tid >> TSH, kq = tid & ((1 << TSH) - 1);
    const float* qr = sQ + row * PITCH;
    float acc[KS][8];
#pragma unroll
    for (int e = 0; e < KS; ++e)
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[e][c] = 0.f;
#pragma unroll 2
    for (int d = 0; d < tv::kHeadDim; d += 8) {
      const float4 a0 = *reinterpret_cast<const float4*>(qr + d);
      const float4 a1 = *reinterpret_cast<const float4*>(qr + d + 4);
#pragma unroll
      for (int e = 0; e < KS; ++e) {
        const float4 k0 = *reinterpret_cast<const float4*>(sK + (kq + (e << TSH)) * PITCH + d);
        const float4 k1 = *reinterpret_cast<const float4*>(sK + (kq + (e << TSH)) * PITCH + d + 4);
        acc[e][0] = __fmaf_rn(a0.x, k0.x, acc[e][0]);
        acc[e][1] = __fmaf_rn(a0.y, k0.y, acc[e][1]);
        acc[e][2] = __fmaf_rn(a0.z, k0.z, acc[e][2]);
        acc[e][3] = __fmaf_rn(a0.w, k0.w, acc[e][3]);
        acc[e][4] = __fmaf_rn(a1.x, k1.x, acc[e][4]);
        acc[e][5] = __fmaf_rn(a1.y, k1.y, acc[e][5]);
        acc[e][6] = __fmaf_rn(a1.z, k1.z, acc[e][6]);
        acc[e][7] = __fmaf_rn(a1.w, k1.w, acc[e][7]);
      }
    }
#pragma unroll
    for (int e = 0; e < KS; ++e)
      sS[row * SP + kq + (e << TSH)] = ((acc[e][0] + acc[e][1]) + (acc[e][2] + acc[e][3])) +
                                       ((acc[e][4] + acc[e][5]) + (acc[e][6] + acc[e][7]));
  }

  template <int KPT>
  static __device__ __forceinline__ void store_p(float* dst, const float (&p)[KPT]) {
    static_assert(KPT == 4 || KPT == 1, "one 16-byte (32 x 32 tile) or 4-byte (16 x 16) store per thread");
    if constexpr (KPT == 4)
      *reinterpret_cast<float4*>(dst) = make_float4(p[0], p[1], p[2], p[3]);
    else
      *dst = p[0];
  }

  static __device__ __forceinline__ void pv(Acc& acc, const float* sAlpha, const float* sP, const float* sV, int warp,
                                            int lane) {
    const int tid = warp * 32 + lane, r0 = (tid >> 7) * RPT, c0 = (tid & 127) * 4;
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const float a = sAlpha[r0 + r];
#pragma unroll
      for (int c = 0; c < 4; ++c) acc.o[r][c] *= a;
    }
#pragma unroll 2
    for (int k4 = 0; k4 < BN; k4 += 4) {
      float4 v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = *reinterpret_cast<const float4*>(sV + (k4 + e) * PITCH + c0);
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        const float4 p = *reinterpret_cast<const float4*>(sP + (r0 + r) * PP + k4);
        const float pe[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc.o[r][0] = __fmaf_rn(pe[e], v[e].x, acc.o[r][0]);
          acc.o[r][1] = __fmaf_rn(pe[e], v[e].y, acc.o[r][1]);
          acc.o[r][2] = __fmaf_rn(pe[e], v[e].z, acc.o[r][2]);
          acc.o[r][3] = __fmaf_rn(pe[e], v[e].w, acc.o[r][3]);
        }
      }
    }
  }

  static __device__ __forceinline__ void store(const Acc& acc, const float* sL, long long rows_here, bool split,
                                               float* out_rows, float* part_rows, int warp, int lane) {
    const int tid = warp * 32 + lane, r0 = (tid >> 7) * RPT, c0 = (tid & 127) * 4;
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      if (r0 + r >= rows_here) continue;
      const float l = sL[r0 + r], inv = l > 0.f ? 1.f / l : 0.f;
      const float4 x = make_float4(acc.o[r][0] * inv, acc.o[r][1] * inv, acc.o[r][2] * inv, acc.o[r][3] * inv);
      float* dst = (split ? part_rows : out_rows) + static_cast<size_t>(r0 + r) * tv::kLatent + c0;
      *reinterpret_cast<float4*>(dst) = x;
    }
  }
};

// ------------------------------------------------------------------------------------------------ the CTA
// Math: the tile's rows and keys (MathBf16 / MathF32); STAGES, PREFETCH: the tile's KV stages and prefetch
// (tree_verify.cuh's Tile).
template <class Math, typename T, int STAGES, int PREFETCH>
__device__ __forceinline__ void tree_verify_cta(
    const T* __restrict__ q, const T* __restrict__ kv, const int* __restrict__ block_table,
    const int* __restrict__ prefix_lens, const uint32_t* __restrict__ visibility, float scale, int Q, int H,
    int page_size, int max_pages, const long long* __restrict__ split_chunk, const long long* __restrict__ split_off,
    T* __restrict__ out, float* __restrict__ lse, float* __restrict__ part_o, float* __restrict__ part_lse) {
  constexpr int V = Math::V, M = Math::M, BN = Math::BN;
  constexpr tv::Tile TILE{M, BN, STAGES, PREFETCH};
  constexpr int PITCH = tv::row_pitch(V), SP = tv::s_pitch(V, BN), PP = tv::p_pitch(V, BN);
  constexpr int NPART = tv::s_parts(V);
  constexpr int EPC = 16 / sizeof(T);        // elements per 16-byte copy
  constexpr int CH = tv::kHeadDim / EPC;     // 16-byte copies per cache row
  constexpr int TPR = tv::kThreads / M;      // softmax threads per row
  constexpr int KPT = BN / TPR;              // keys per softmax thread
  constexpr int PF = PREFETCH ? BN * CH / tv::kThreads : 0;  // prefetched 16-byte pieces per thread
  static_assert(tv::kThreads % M == 0 && BN % TPR == 0, "softmax layout");
  static_assert(STAGES == 2 ? !PREFETCH : STAGES == 1, "two cp.async stages, or one (filled after P·V)");
  static_assert(!PREFETCH || BN * CH % tv::kThreads == 0, "a KV block is whole pieces per thread");

  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem + tv::smem_q_offset(V, TILE));
  T* sKV = reinterpret_cast<T*>(smem + tv::smem_kv_offset(V, TILE));
  float* sS = reinterpret_cast<float*>(smem + tv::smem_s_offset(V, TILE));
  T* sP = reinterpret_cast<T*>(smem + tv::smem_p_offset(V, TILE));
  float* sAlpha = reinterpret_cast<float*>(smem + tv::smem_stats_offset(V, TILE));
  float* sL = sAlpha + M;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int b = blockIdx.z, s = blockIdx.y;
  const int P = prefix_lens[b];
  const long long n_keys = static_cast<long long>(P) + Q;
  const long long chunk = split_chunk[b];
  const long long n_split = tv::n_splits(n_keys, chunk);
  if (s >= n_split) return;  // the grid is sized for the request with the most splits
  const bool split = n_split > 1;
  const long long QH = static_cast<long long>(Q) * H;
  const long long R0 = static_cast<long long>(blockIdx.x) * M;
  const long long rows_here = QH - R0 < M ? QH - R0 : M;
  const int i_max = static_cast<int>((R0 + rows_here - 1) / H);  // the tile's last query
  const int W = (Q + 31) >> 5;

  // This CTA's keys: its split, cut at the tile's last query's own tree row (nothing later is visible).
  long long ke = static_cast<long long>(s) * chunk + chunk;
  if (ke > n_keys) ke = n_keys;
  if (ke > static_cast<long long>(P) + i_max + 1) ke = static_cast<long long>(P) + i_max + 1;
  const int kbeg = static_cast<int>(static_cast<long long>(s) * chunk);
  const int kend = static_cast<int>(ke > kbeg ? ke : kbeg);
  const int nblk = (kend - kbeg + BN - 1) / BN;

  const int* bt = block_table + static_cast<size_t>(b) * max_pages;
  const uint32_t* vis_b = visibility + static_cast<size_t>(b) * Q * W;

  // q tile: rows past Q·H are zero-filled (their outputs are not written).
  {
    const T* q_rows = q + (static_cast<size_t>(b) * QH + R0) * tv::kHeadDim;
    for (int r = warp; r < M; r += tv::kThreads / 32) {
      const bool ok = r < rows_here;
      const T* src = ok ? q_rows + static_cast<size_t>(r) * tv::kHeadDim : q;
      for (int c = lane; c < CH; c += 32) cp_async16(smem_u32(sQ + r * PITCH + c * EPC), src + c * EPC, ok ? 16 : 0);
    }
  }
  // KV block j -> stage st. Each warp copies whole 1152/2304-byte cache rows (coalesced); a position at or
  // past kend is zero-filled without touching memory (and without reading its block-table entry).
  auto load_kv = [&](int j, int st) {
    T* dst = sKV + st * BN * PITCH;
    const int k0 = kbeg + j * BN;
    for (int r = warp; r < BN; r += tv::kThreads / 32) {
      const int p = k0 + r;
      const bool ok = p < kend;
      const T* src = kv;
      if (ok) src = kv + (static_cast<size_t>(bt[p / page_size]) * page_size + p % page_size) * tv::kHeadDim;
      for (int c = lane; c < CH; c += 32) cp_async16(smem_u32(dst + r * PITCH + c * EPC), src + c * EPC, ok ? 16 : 0);
    }
  };
  // With PREFETCH, KV block j goes through registers: piece i = tid + e·kThreads of the block is row i / CH,
  // 16 bytes i % CH of it (coalesced); positions at or past kend are zeros, never read (as in load_kv).
  uint4 pf[PF > 0 ? PF : 1];
  auto prefetch_kv = [&](int j) {
    const int k0 = kbeg + j * BN;
#pragma unroll
    for (int e = 0; e < PF; ++e) {
      const int i = tid + e * tv::kThreads, p = k0 + i / CH;
      pf[e] = make_uint4(0u, 0u, 0u, 0u);
      if (p < kend) {
        const T* row = kv + (static_cast<size_t>(bt[p / page_size]) * page_size + p % page_size) * tv::kHeadDim;
        pf[e] = __ldg(reinterpret_cast<const uint4*>(row) + i % CH);
      }
    }
  };
  auto store_kv = [&]() {  // the prefetched block into the single stage
#pragma unroll
    for (int e = 0; e < PF; ++e) {
      const int i = tid + e * tv::kThreads;
      *reinterpret_cast<uint4*>(sKV + (i / CH) * PITCH + (i % CH) * EPC) = pf[e];
    }
  };
  if (nblk > 0) load_kv(0, 0);
  cp_async_commit();

  // Softmax state of row `srow`, held (replicated) by its TPR threads across all blocks.
  const int srow = tid / TPR, ssub = tid % TPR;
  const bool row_ok = srow < rows_here;
  const int qi = row_ok ? static_cast<int>((R0 + srow) / H) : 0;
  float m_run = neg_inf(), l_run = 0.f;

  typename Math::Acc acc;
  Math::zero(acc);

  for (int j = 0; j < nblk; ++j) {
    const int st = STAGES == 2 ? (j & 1) : 0;
    const T* sK = sKV + st * BN * PITCH;
    cp_async_wait_all();
    __syncthreads();  // block j landed; every warp is done with block j - 1 (its stage, sS, sP, sAlpha)
    if (STAGES == 2 && j + 1 < nblk) load_kv(j + 1, (j + 1) & 1);
    cp_async_commit();
    if constexpr (PREFETCH != 0)
      if (j + 1 < nblk) prefetch_kv(j + 1);  // in flight during S, softmax and P·V of block j

    Math::scores(sQ, sK, sS, warp, lane);
    __syncthreads();

    {  // softmax step for keys kbeg + BN·j + KPT·ssub .. + KPT of row srow
      const int k0 = kbeg + j * BN + ssub * KPT;
      float x[KPT];
#pragma unroll
      for (int part = 0; part < NPART; ++part) {  // the partial sums in slice order 0, 1, 2, 3
        if constexpr (KPT % 4 == 0) {
#pragma unroll
          for (int e = 0; e < KPT; e += 4) {
            const float4 d = *reinterpret_cast<const float4*>(sS + part * M * SP + srow * SP + ssub * KPT + e);
            x[e] = part ? x[e] + d.x : d.x;
            x[e + 1] = part ? x[e + 1] + d.y : d.y;
            x[e + 2] = part ? x[e + 2] + d.z : d.z;
            x[e + 3] = part ? x[e + 3] + d.w : d.w;
          }
        } else {
#pragma unroll
          for (int e = 0; e < KPT; ++e) {
            const float d = sS[part * M * SP + srow * SP + ssub * KPT + e];
            x[e] = part ? x[e] + d : d;
          }
        }
      }
      float mx = neg_inf();
#pragma unroll
      for (int e = 0; e < KPT; ++e) {
        const float dot = x[e];
        const int p = k0 + e;
        const bool seen = row_ok && p < kend && (p < P || tree_bit(vis_b, W, qi, p - P));
        x[e] = seen ? dot * scale : neg_inf();  // replaced, never added to: NaN/inf of unseen rows vanish
        mx = fmaxf(mx, x[e]);
      }
#pragma unroll
      for (int o = 1; o < TPR; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m_run, mx);
      const float m_use = m_new == neg_inf() ? 0.f : m_new;  // a row with nothing seen yet keeps P = 0
      const float alpha = expf(m_run - m_use);              // 0 while m_run = -inf
      float sum = 0.f;
#pragma unroll
      for (int e = 0; e < KPT; ++e) {
        x[e] = expf(x[e] - m_use);  // exp(-inf) = 0 exactly for masked keys
        sum += x[e];
      }
#pragma unroll
      for (int o = 1; o < TPR; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);  // same bits in all TPR
      l_run = l_run * alpha + sum;
      m_run = m_new;
      Math::template store_p<KPT>(sP + srow * PP + ssub * KPT, x);
      if (ssub == 0) sAlpha[srow] = alpha;
    }
    __syncthreads();

    Math::pv(acc, sAlpha, sP, sK, warp, lane);
    if (STAGES == 1 && j + 1 < nblk) {
      __syncthreads();  // every warp is done reading the single stage
      if constexpr (PREFETCH != 0) {
        store_kv();  // visible to every warp after the barrier at the top of the loop
      } else {
        load_kv(j + 1, 0);
        cp_async_commit();
      }
    }
  }
  cp_async_wait_all();  // nothing may be in flight at exit (nblk = 0 still loaded q)

  if (ssub == 0) sL[srow] = l_run;
  __syncthreads();
  const size_t off = split ? static_cast<size_t>(split_off[b] + s) : 0;
  if (ssub == 0 && row_ok) {
    const size_t R = static_cast<size_t>(R0 + srow);
    if (split)
      part_lse[off * QH + R] = l_run > 0.f ? m_run + logf(l_run) : neg_inf();
    else
      lse[static_cast<size_t>(b) * QH + R] = m_run + logf(l_run);
  }
  Math::store(acc, sL, rows_here, split, out + (static_cast<size_t>(b) * QH + R0) * tv::kLatent,
              split ? part_o + (off * QH + R0) * tv::kLatent : nullptr, warp, lane);
}

// ------------------------------------------------------------------------------------------------ combine
// One warp per (query, head) row and column quarter of a split request: out = Σ_s w_s·O_s / Σ_s w_s,
// w_s = exp(lse_s - max lse), lse = max + ln Σ w_s; splits in order 0, 1, ... (fixed, no atomics). Each quarter's
// warp computes the row's weights itself, in the same order: every column's bits are those of one warp per row.
template <typename T>
__device__ __forceinline__ void store4(T* dst, float a, float b, float c, float d);
template <>
__device__ __forceinline__ void store4<float>(float* dst, float a, float b, float c, float d) {
  *reinterpret_cast<float4*>(dst) = make_float4(a, b, c, d);
}
template <>
__device__ __forceinline__ void store4<uint16_t>(uint16_t* dst, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16(a, b), pack_bf16(c, d));
}

template <typename T>
__device__ __forceinline__ void tree_verify_combine(const float* __restrict__ part_o,
                                                    const float* __restrict__ part_lse,
                                                    const long long* __restrict__ split_chunk,
                                                    const long long* __restrict__ split_off,
                                                    const int* __restrict__ prefix_lens, int Q, int H,
                                                    T* __restrict__ out, float* __restrict__ lse) {
#if __CUDA_ARCH__ >= 900
  // Launched as a programmatic dependent of the attention kernel (tree_verify_ops.py): it may start before that grid
  // has finished, and waits here for the grid's completion and its partial outputs (a no-op for a plain launch).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, b = blockIdx.y;
  const int part = warp % tv::kCombineParts;  // columns 128·part .. 128·part + 127
  const long long QH = static_cast<long long>(Q) * H;
  const long long R = static_cast<long long>(blockIdx.x) * tv::kCombineRows + warp / tv::kCombineParts;
  if (R >= QH) return;
  const long long n = tv::n_splits(static_cast<long long>(prefix_lens[b]) + Q, split_chunk[b]);
  if (n <= 1) return;  // written by the attention kernel itself
  const size_t base = static_cast<size_t>(split_off[b]);
  const int col = (tv::kLatent / tv::kCombineParts) * part + 4 * lane;
  // The loads are what a combine waits for (a bs-1 call's 65 splits took 11.2 µs on an H100): the first group's
  // partial outputs are in flight while the lse pass runs, each lane keeps the lse of its splits (lane, lane + 32,
  // ...) and turns them into weights once, and a group's weights come from those lanes by shuffle. Every weight is
  // the same expf of the same values, and they are added in split order as before: the same bits.
  constexpr int kGroup = 16;  // splits' partial outputs in flight at once (half a 32-split chunk)
  constexpr int kKept = 4;    // 32-split chunks whose lse a lane keeps in registers (later chunks are read again)
  const float* rows = part_o + (base * QH + R) * tv::kLatent + col;  // split s's columns at rows + s·QH·512
  const size_t split_stride = static_cast<size_t>(QH) * tv::kLatent;
  float4 x[kGroup];
  const auto load_group = [&](long long s0) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const long long s = s0 + g < n ? s0 + g : n - 1;  // past the last split: a load never added
      x[g] = *reinterpret_cast<const float4*>(rows + s * split_stride);
    }
  };
  load_group(0);
  const auto lse_of = [&](long long s) { return s < n ? part_lse[(base + s) * QH + R] : neg_inf(); };
  float kept[kKept];
  float mx = neg_inf();
#pragma unroll
  for (int c = 0; c < kKept; ++c) kept[c] = lse_of(32 * c + lane);
#pragma unroll
  for (int c = 0; c < kKept; ++c) mx = fmaxf(mx, kept[c]);
  for (long long s = 32 * kKept + lane; s < n; s += 32) mx = fmaxf(mx, part_lse[(base + s) * QH + R]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));  // exact in any order
  const auto weight = [&](float ls) { return ls == neg_inf() ? 0.f : expf(ls - mx); };
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  float wsum = 0.f;
  float w_lane = 0.f;  // the weight of split 32·(s0 / 32) + lane, for the current chunk
  for (long long s0 = 0; s0 < n; s0 += kGroup) {
    if (s0 > 0) load_group(s0);
    if ((s0 & 31) == 0) {  // a new chunk of 32 splits: this lane's weight in it
      const long long c = s0 >> 5;
      float ls = kept[kKept - 1];
#pragma unroll
      for (int k = kKept - 2; k >= 0; --k) ls = c == k ? kept[k] : ls;
      if (c >= kKept) ls = lse_of(s0 + lane);
      w_lane = weight(ls);
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float w = __shfl_sync(0xffffffffu, w_lane, static_cast<int>((s0 & 31) + g));
      if (s0 + g >= n) break;
      wsum += w;
      acc[0] = __fmaf_rn(w, x[g].x, acc[0]);
      acc[1] = __fmaf_rn(w, x[g].y, acc[1]);
      acc[2] = __fmaf_rn(w, x[g].z, acc[2]);
      acc[3] = __fmaf_rn(w, x[g].w, acc[3]);
    }
  }
  const bool any = wsum > 0.f;
  const float inv = any ? 1.f / wsum : 0.f;
  store4<T>(out + (static_cast<size_t>(b) * QH + R) * tv::kLatent + col, acc[0] * inv, acc[1] * inv, acc[2] * inv,
            acc[3] * inv);
  if (part == 0 && lane == 0) lse[static_cast<size_t>(b) * QH + R] = any ? mx + logf(wsum) : neg_inf();
}

}  // namespace

// ------------------------------------------------------------------------------------------------ entries
// Arguments (kernels_cu/tree_verify_ops.py): q [bs, Q, H, 576] and kv [pages, page_size, 576] in the
// variant's dtype (bf16 as raw 16-bit words), block_table [bs, max_pages], prefix_lens [bs], visibility
// [bs, Q, ceil(Q/32)], split_chunk [bs] and split_off [bs] (int64: the request's chunk and its first partial
// slot), out [bs, Q, H, 512], lse [bs, Q, H], part_o [slots, Q·H, 512] and part_lse [slots, Q·H] (fp32).
#define TV_ATTENTION_ARGS(T)                                                                                     \
  const T *__restrict__ q, const T *__restrict__ kv, const int *__restrict__ block_table,                         \
      const int *__restrict__ prefix_lens, const uint32_t *__restrict__ visibility, float softmax_scale, int Q,  \
      int H, int page_size, int max_pages, const long long *__restrict__ split_chunk,                            \
      const long long *__restrict__ split_off, T *__restrict__ out, float *__restrict__ lse,                     \
      float *__restrict__ part_o, float *__restrict__ part_lse
#define TV_ATTENTION_PASS                                                                                       \
  q, kv, block_table, prefix_lens, visibility, softmax_scale, Q, H, page_size, max_pages, split_chunk, split_off, \
      out, lse, part_o, part_lse

extern "C" __global__ void __launch_bounds__(tv::kThreads, 1) tree_verify_bf16_kernel(TV_ATTENTION_ARGS(uint16_t)) {
  tree_verify_cta<MathBf16<kTileBf16.m>, uint16_t, kTileBf16.stages, kTileBf16.prefetch>(TV_ATTENTION_PASS);
}

extern "C" __global__ void __launch_bounds__(tv::kThreads, 1) tree_verify_f32_kernel(TV_ATTENTION_ARGS(float)) {
  tree_verify_cta<MathF32<kTileF32.m, kTileF32.bn>, float, kTileF32.stages, kTileF32.prefetch>(TV_ATTENTION_PASS);
}

#define TV_COMBINE_ARGS(T)                                                                                  \
  const float *__restrict__ part_o, const float *__restrict__ part_lse,                                     \
      const long long *__restrict__ split_chunk, const long long *__restrict__ split_off,                   \
      const int *__restrict__ prefix_lens, int Q, int H, T *__restrict__ out, float *__restrict__ lse

extern "C" __global__ void __launch_bounds__(tv::kCombineThreads) tree_verify_combine_bf16_kernel(
    TV_COMBINE_ARGS(uint16_t)) {
  tree_verify_combine<uint16_t>(part_o, part_lse, split_chunk, split_off, prefix_lens, Q, H, out, lse);
}

extern "C" __global__ void __launch_bounds__(tv::kCombineThreads) tree_verify_combine_f32_kernel(
    TV_COMBINE_ARGS(float)) {
  tree_verify_combine<float>(part_o, part_lse, split_chunk, split_off, prefix_lens, Q, H, out, lse);
}

// The planned schedule (tv::planned_target, tree_verify.cuh) on the device, by each block of the plan kernel for its
// own request: warp w prices W = w + 1 waves (its lanes sum the requests' splits), thread 0 takes the cheapest in the
// host's order, so every block, and the host plan of the checked call, get the same target; then the request's
// chunk, its first partial slot and its units (row tile, split, request) at its place in the unit table (after the
// units of every request that tv::plan_goes_before it: each block counts them over the whole batch). A request's
// length is clamped into [0, max_keys - Q] here: a refused one is planned in bounds (its results are never returned).
namespace {  // (each variant's build is one translation unit of the engine: nothing here may clash)
struct PlannedRequest {
  long long chunk, first;
};
struct PlanLengths {  // the requests' lengths as the plan reads them: in key blocks, clamped into [0, max_keys - Q]
  const int* __restrict__ prefix_lens;
  int Q, max_prefix, bn;  // max_prefix = max_keys - Q (within the contract's context limit: int)
  __device__ int blocks(int r) const {
    int P = __ldg(prefix_lens + r);
    P = P < 0 ? 0 : (P > max_prefix ? max_prefix : P);
    return tv::plan_ceil(P + Q, bn);
  }
};
struct WarpSplits {  // the batch's splits at target T, summed by one warp (every lane gets the sum)
  PlanLengths lens;
  int bs, lane;
  __device__ long long operator()(long long T) const {
    long long n = 0;
    for (int r = lane; r < bs; r += 32) n += tv::plan_splits(lens.blocks(r), static_cast<int>(T));
    for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(0xffffffffu, n, o);
    return n;
  }
};
__device__ PlannedRequest plan_request_on_device(const PlanLengths lens, int bs, int b, long long tiles,
                                                 long long ctas, int v, int* __restrict__ units) {
  __shared__ long long s_cost[tv::kPlanWaves], s_target[tv::kPlanWaves];
  __shared__ unsigned long long s_longest, s_before, s_slots_before, s_total;
  __shared__ long long s_T;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) s_longest = 1, s_before = 0, s_slots_before = 0, s_total = 0;
  __syncthreads();
  unsigned long long longest = 1;
  for (int r = tid; r < bs; r += blockDim.x) longest = max(longest, static_cast<unsigned long long>(lens.blocks(r)));
  atomicMax(&s_longest, longest);
  __syncthreads();
  const long long lg = static_cast<long long>(s_longest);
  if (warp < tv::kPlanWaves) {  // warp-uniform
    const WarpSplits splits{lens, bs, lane};
    const long long lo = tv::plan_min_blocks(v) < lg ? tv::plan_min_blocks(v) : lg;
    const long long T = tv::plan_fit(lo, lg, tiles, (warp + 1) * ctas, splits);
    const long long cost = T > lg ? -1 : tv::plan_cost(T, splits(T), bs, tiles, ctas);
    if (lane == 0) s_cost[warp] = cost, s_target[warp] = T;
  }
  __syncthreads();
  if (tid == 0) {
    long long T = lg, best = -1;
    for (int w = 0; w < tv::kPlanWaves; ++w)
      if (s_cost[w] >= 0 && (best < 0 || s_cost[w] < best)) T = s_target[w], best = s_cost[w];
    s_T = T;
  }
  __syncthreads();
  const int T = static_cast<int>(s_T);
  // the requests whose units come before this one's (tv::plan_goes_before: their splits give this request's first
  // unit) and the splits of the requests before it that split (its first partial slot: slots in request order)
  const int mine_blocks = lens.blocks(b), mine_chunk = tv::plan_chunk_blocks(mine_blocks, T);
  unsigned long long before = 0, slots_before = 0, total = 0;
  for (int r = tid; r < bs; r += blockDim.x) {
    const int blocks = lens.blocks(r);
    const long long n = tv::plan_splits(blocks, T);
    if (tv::plan_goes_before(tv::plan_chunk_blocks(blocks, T), r, mine_chunk, b)) before += n;
    if (r < b) slots_before += n > 1 ? n : 0;
    total += n;
  }
  atomicAdd(&s_before, before);
  atomicAdd(&s_slots_before, slots_before);
  atomicAdd(&s_total, total);
  __syncthreads();
  const int mine = tv::plan_splits(mine_blocks, T), t = static_cast<int>(tiles);
  const int first_unit = t * static_cast<int>(s_before);  // units < planned_max_units: int
  for (int i = tid; i < mine * t; i += blockDim.x) {
    int* u = units + 1 + tv::kPlanUnitFields * (first_unit + i);
    u[0] = i % t, u[1] = i / t, u[2] = b;
  }
  if (b == 0 && tid == 0) units[0] = t * static_cast<int>(s_total);  // the count (every block has it)
  return PlannedRequest{static_cast<long long>(mine_chunk) * lens.bn,
                        mine > 1 ? static_cast<long long>(s_slots_before) : 0};
}
}  // namespace

// The deferred path (spec TV.3.7, kernels_cu/tree_verify_ops.py prepare_deferred): TV.1.2 and TV.1.3 checked on the
// device and the split plan made from the device lengths, so that a call needs no host work at launch (capturable).
// One CTA of tv::kThreads per request. A request the checks refuse sets *flag (the host names the error from
// its own copies when the results are read; they are never returned) and is planned as if its prefix were empty: its
// length 0 and its pages 0 in the copies the attention kernels read instead of the caller's (`lens`, `table`: its
// rows, then `pad` zeros past the last row for a refused request whose Q rows outgrow max_pages), so the launch stays
// in bounds on any values. A request that passes gets its own length, pages and the host plan's chunk (the header's
// rule on its own length), so its bits are the checked call's. Its partial slots start at b * most (most:
// tv::max_splits of the stated maximum, which no request past the check exceeds). With plan_ctas > 0 (the planned
// variant, no forced chunk) the batch's planned schedule instead: each request's chunk and first slot, and the unit
// table `units` the attention kernel's 1-D grid reads (tv::planned_max_units CTAs, tv::planned_max_slots slots).
extern "C" __global__ void __launch_bounds__(tv::kThreads) tree_verify_plan_kernel(
    const int* __restrict__ prefix_lens, const int* __restrict__ block_table, const uint32_t* __restrict__ visibility,
    int Q, int H, int page_size, int max_pages, long long num_pages, long long max_keys, int variant,
    long long forced_chunk, long long budget, long long most, int pad, long long plan_ctas, int* __restrict__ lens,
    int* __restrict__ table, long long* __restrict__ split_chunk, long long* __restrict__ split_off,
    int* __restrict__ units, unsigned* __restrict__ flag) {
  const int b = blockIdx.x, tid = threadIdx.x, W = (Q + 31) >> 5;
  const long long rows = static_cast<long long>(Q) * H;
  const bool planned = forced_chunk <= 0 && plan_ctas > 0;
  const PlannedRequest plan =
      planned ? plan_request_on_device(PlanLengths{prefix_lens, Q, static_cast<int>(max_keys) - Q, tv::block_n(variant)},
                                       gridDim.x, b,
                                       tv::row_tiles(rows, variant, budget), plan_ctas, variant, units)
              : PlannedRequest{0, 0};
  const long long P = prefix_lens[b], n_keys = P + Q;
  const long long need = (n_keys + page_size - 1) / page_size;
  const int* bt = block_table + static_cast<size_t>(b) * max_pages;
  bool bad = P < 0 || n_keys > max_keys || need > max_pages;  // TV.1.2 (max_keys <= the contract's context limit)
  if (!bad)
    for (long long j = tid; j < need; j += blockDim.x) bad |= bt[j] < 0 || bt[j] >= num_pages;
  // TV.1.3: row i is its parent's row plus bit i, the parent its highest other bit; it sees the root and nothing later
  const uint32_t* vis = visibility + static_cast<size_t>(b) * Q * W;
  for (int i = tid; i < Q; i += blockDim.x) {
    const uint32_t* row = vis + static_cast<size_t>(i) * W;
    int parent = -1;
    for (int w = 0; w < W; ++w) {
      const uint32_t own = (w == (i >> 5)) ? 1u << (i & 31) : 0u;
      const uint32_t later = w < (i >> 5) ? 0u : (w == (i >> 5) ? ~((own << 1) - 1u) : ~0u);
      bad |= (row[w] & later) != 0 || (own && !(row[w] & own));
      const uint32_t others = row[w] & ~own;
      if (others) parent = 32 * w + 31 - __clz(others);
    }
    bad |= !(row[0] & 1u);
    for (int w = 0; w < W && !bad; ++w) {
      const uint32_t own = (w == (i >> 5)) ? 1u << (i & 31) : 0u;
      const uint32_t want = (parent < 0 ? 0u : vis[static_cast<size_t>(parent) * W + w]) | own;
      bad |= row[w] != want;
    }
  }
  bad = __syncthreads_or(bad);
  if (bad && tid == 0) atomicOr(flag, 1u);
  const long long P_ok = bad ? 0 : P;
  for (int j = tid; j < max_pages; j += blockDim.x) table[static_cast<size_t>(b) * max_pages + j] = bad ? 0 : bt[j];
  if (b == gridDim.x - 1)
    for (int j = tid; j < pad; j += blockDim.x) table[static_cast<size_t>(gridDim.x) * max_pages + j] = 0;
  if (tid == 0) {
    lens[b] = static_cast<int>(P_ok);
    split_chunk[b] = forced_chunk > 0 ? forced_chunk
                     : planned        ? plan.chunk
                                      : tv::default_split_chunk(P_ok + Q, rows, variant, budget);
    split_off[b] = planned ? plan.first : static_cast<long long>(b) * most;
  }
}

// The geometry functions evaluated on the device, for the test that the host library (kernels_cu/geometry.py)
// and NVRTC read the header alike: per argument set (n_keys, rows, variant, chunk), tv::kGeometryFields values
// at a stride of tv::kGeometryStride, for this build's budget.
extern "C" __global__ void tree_verify_geometry_kernel(const long long* __restrict__ args, int n,
                                                       long long* __restrict__ values) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  tv::geometry_fields(args[4 * i], args[4 * i + 1], static_cast<int>(args[4 * i + 2]), args[4 * i + 3],
                      values + static_cast<size_t>(tv::kGeometryStride) * i, kBudget);
}
