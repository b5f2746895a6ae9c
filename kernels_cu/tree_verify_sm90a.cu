// tree_verify, variant "sm90a": the maths of the portable variant (kernels_cu/tree_verify.cu: problem, grid,
// split-KV, masking by selection, numerics) on Hopper's asynchronous machinery. Built for sm_90a only.
//
// CTA = 64 (query, head) rows of one request x one split, two warpgroups of 128 threads (tree_verify.cuh).
// Warpgroup 0 owns output columns 0..255, warpgroup 1 columns 256..511; both keep their half of O (64 x 256
// fp32, 128 registers a thread) for the whole split. The split's 64-key blocks are taken in pairs: the even
// block j0 lives in KV buffer 0 and its S = q·kᵀ is computed by warpgroup 0, the odd block j1 in buffer 1 and
// its S by warpgroup 1, so S is computed once per block and one warpgroup's softmax runs while the other's
// matrix products keep the tensor cores busy. One pair (m = running max, c0/c1 = rescale factors; every
// hand-over is an mbarrier of the handing warpgroup's 128 threads):
//
//   warpgroup 0                                       warpgroup 1
//   row maxima and softmax of S(j0) against m:        row maxima of S(j1)
//     m0, c0, P0; P0 -> over j0's slab 8 (bf16),
//     m0, c0 -> shared                       --R0-->  wait; O1 *= c0; O1 += P0·V(j0)[256..511] (P0 from shared)
//   O0 *= c0; O0 += P0·V(j0)[0..255] (P0 in regs)     softmax of S(j1) against m0: m1, c1, P1;
//   refill buffer 0's slabs 0-3 with block j0+2         P1 -> over j1's slab 8, m1, c1 -> shared  --R1-->
//   wait; O0 *= c1; O0 += P1·V(j1)[0..255]    <--R1   (P0·V done) refill buffer 0's slabs 4-8   --P0 free-->
//   S(j0+2), slabs 0-3                                O1 *= c1; O1 += P1·V(j1)[256..511] (P1 in regs)
//   (P1·V done) refill buffer 1's slabs 0-3 and 8     (P1·V done) refill buffer 1's slabs 4-7
//   S(j0+2), slabs 4-8                 --S0 issued--> S(j1+2), slabs 0-3, 8, 4-7
//
// Both halves of O use the same bf16 P of each block; l (the softmax denominator) is summed by the warpgroup
// that computed the block's P, from its fp32 values, and the two partial sums are added at the end. A slab of
// a buffer is refilled by the warpgroup that reads it last, right after its last read completes; every slab has
// its own mbarrier, so S starts on the slabs that have landed while the others are still in flight. The softmax
// runs in base 2 (the scale times log2 e folded into one FFMA before ex2); lse is converted back to natural log.
//
// q: the whole 64 x 576 tile in shared memory, written by the threads before the first block.
//
// Keys and rows. A split covers keys [kbeg, kend) (kend cut at the tile's last query's own tree row, as in
// portable); blocks start at kbeg rounded down to 64, so with a page size dividing 64 (or a multiple of 64)
// every block is whole pages (or one piece of a page), which is what a TMA box can fetch. Keys before kbeg
// in the first block are the request's own (finite) rows, masked out by selection. Only pages holding keys
// below kend are fetched (a block-table entry past the request's need is never read); in the last block,
// the rows at or past kend (stale rows of an earlier block, or rows of the last page past prefix_len + Q,
// which may hold NaN) are zeroed by the warpgroup that computed its S before any P·V reads them, so P·V never
// multiplies a non-finite value (0 x NaN = NaN; TV.3.1). Prefix-only blocks (every key below prefix_len and
// inside the split) skip the mask altogether.
//
// Layout of a 64-row tile (q, or a KV buffer): 9 slabs of 64 columns; slab c holds row r's columns
// 64c .. 64c+63 at 8192c + 128r, its 16-byte chunk k stored at chunk k ^ (r % 8) (the 128-byte swizzle TMA
// writes and wgmma reads). A block's P (64 rows x 64 keys, bf16) uses the same layout over the block's slab 8.
#include "common.cuh"
#include "tree_verify.cuh"

namespace {

constexpr int kRows = 64;                   // rows per CTA = wgmma M
constexpr int kBN = tv::kSm90aBlockN;       // keys per block = wgmma N of S, K of P·V
constexpr int kSlab = tv::kSm90aSlabBytes;  // bytes per 64-column slab of a 64-row tile
constexpr int kTile = tv::kSm90aTileBytes;  // bytes per KV buffer
constexpr int kSlabs = tv::kHeadDim / 64;   // 9
constexpr int kCols = tv::kLatent / 2;      // output columns per warpgroup (256)
constexpr float kLn2 = 0.6931471805599453f;
enum Stat { kM0, kC0, kM1, kC1, kL0, kL1 };  // lse = ln 2 · (m2 + log2 l): the softmax runs in base 2
static_assert(tv::m_tile(tv::kSm90a) == kRows && tv::threads(tv::kSm90a) == 256 && kBN == 64, "the layout below");
static_assert(tv::kSm90aStages == 2, "even blocks in buffer 0, odd blocks in buffer 1");

// The warpgroups hand over through mbarriers of 128 arrivals (one per thread of the handing warpgroup, each
// arriving after its own shared-memory writes; racecheck models this ordering, and not a named barrier's
// arrive/sync pair: lab/sanitizer/warpgroup_exchange_race.cu), after the 2 x 9 slab barriers:
// kExR0: warpgroup 0's P, max and rescale factor of the even block are in shared memory (once per pair);
// kExR1: the same from warpgroup 1 for the odd block (once per pair that has one);
// kExP0Free: warpgroup 1's read of P0 has completed, so the next pair's P0 may be written;
// kExZero0 (+1 for warpgroup 1): a warpgroup's own threads have zeroed the last block's tail rows (once per CTA;
// a named barrier of 128 threads there made racecheck lose the order of the epilogue's block barrier);
// kExS0: warpgroup 0 has issued the whole S of its next block (once per pair that has a next even block): warpgroup
// 1 issues the S of its own next block only then. The tensor pipe takes the warpgroups' wgmma in issue order, and the
// next even S is on the critical path (warpgroup 0's softmax of it opens the next pair, while the odd S is needed only
// after warpgroup 1's R0 wait): issued first, it completes first and the odd S runs during that softmax. No arithmetic
// changes (the same products in the same order, the same bits); 2-5 % faster on compute-bound shapes, the same
// elsewhere (an H100 race against the old order, reports/h100/2026-12-07 call 7).
constexpr int kExR0 = 18, kExR1 = 19, kExP0Free = 20, kExZero0 = 21, kExS0 = 23;
#ifdef TV90_EARLY_MAX
// kExM0 (design TV90_EARLY_MAX): warpgroup 0's running max and rescale factor of the even block are in shared memory,
// published before its exponentials (once per pair). Warpgroup 1's softmax of the odd block needs only these, so it
// runs beside warpgroup 0's exponentials where the default waits for R0 (warpgroup 0's whole softmax and P): the two
// softmaxes of a pair overlap instead of running one after the other (FlashMLA's seesaw shares the max so). Warpgroup
// 1 then waits for R0 only before P0·V; every product and rescale of O and l happens in the same order on the same
// values, so the bits are meant to stay.
constexpr bool kEarlyMax = true;
#else
constexpr bool kEarlyMax = false;
#endif
#ifdef TV90_SLAB_GROUPS
// Design TV90_SLAB_GROUPS (no spec builds it): one wgmma commit group per slab of S, as FlashMLA commits them
// (splitkv_mla.cuh, qkt_gemm_one_tile_*), and warpgroup 0's wait between the two halves of its next S is wait_group 4
// (its P1·V done, S slabs 0-3 still in flight). By default ptxas closes a hardware wgmma group (gsb0) at every slab
// anyway (the slab's mbarrier wait loop ends the batch) and turns the single commit of slabs 0-3 into one more, empty
// group (a dummy HGMMA.64x8x16), so the default wait_group 1 compiles to DEPBAR.LE gsb0, 1: it waits for slabs 0-3 to
// complete as well as for P1·V, and buffer 1's refill, S slabs 4-8 and kExS0 all queue behind them. The commits that
// were unconditional (to count alike on every path) go, and with them the dummy groups of every pair. Same wgmma in
// the same order on the same operands; only the waits change, so the bits are meant to stay.
constexpr bool kSlabGroups = true;
#else
constexpr bool kSlabGroups = false;
#endif
#ifdef TV90_OFF_PATH
// Design TV90_OFF_PATH (no spec builds it): work that nothing before a hand-over needs moves after its arrive. The
// row sums' shuffles (2 dependent SHFL + FADD per row, needed only by l) run after R0 / R1 instead of before the P
// store, and warpgroup 0's thread 0 prefetches the block-table entries after R0 instead of before its row maxima (with
// run-time divisions there, about 50 dependent instructions that held warp 0, and so R0, back). The same operations
// in the same order on the same values: the bits are meant to stay. (NVRTC 13.0 sm_90a: warpgroup 0's shuffles and
// prefetch land after the R0 arrive; ptxas hoists warpgroup 1's shuffles back among its P stores, before R1.)
constexpr bool kOffPath = true;
#else
constexpr bool kOffPath = false;
#endif
#ifdef TV90_PV_FIRST
// Design TV90_PV_FIRST (no spec builds it): warpgroup 1 issues P1·V before the copies that refill buffer 0's slabs
// 4-8 (and its P0-free arrive) instead of after them. Those copies are thread 0's (page lookups, divisions by the page
// size without TV90_SHIFT_PAGES: a few hundred cycles), and the other three warps waited for it at the P1·V issue;
// now the copies are issued while P1·V runs. The refill still follows P0·V's completion (the wait above); it starts
// later only by the four HGMMA issues. FlashMLA's warpgroup 1 likewise issues its products before its copies
// (splitkv_mla.cuh, wg1_subroutine). No arithmetic changes: the bits are meant to stay.
constexpr bool kPvFirst = true;
#else
constexpr bool kPvFirst = false;
#endif
#ifdef TV90_C1_CHAIN
// Design TV90_C1_CHAIN (no spec builds it): warpgroup 1 waits for P0·V to complete before it rescales O by c1 and
// issues P1·V, so it never has two products in flight (FlashMLA issues both back to back by scaling P0 instead, which
// gives other bits). Once a row's max has settled, c1 = 1 exactly and the rescale changes nothing: when no row of
// the tile has c1 != 1 (read by every thread from shared memory after the warpgroup's own R1, so that the choice is
// warpgroup-uniform, as a wgmma must be), it issues P1·V onto P0·V's accumulators at once and waits only for P0·V's
// group before the refill of buffer 0 (TV90_PV_FIRST's order, which this path has anyway). The same products on the
// same values in the same order: the bits are meant to stay.
constexpr bool kC1Chain = true;
#else
constexpr bool kC1Chain = false;
#endif
constexpr int kExM0 = 24, kExLast = kEarlyMax ? kExM0 : kExS0;
static_assert(kExLast - kExR0 + 1 == tv::kSm90aHandOvers, "tree_verify.cuh reserves one mbarrier per hand-over");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Shared-memory floats by their 32-bit shared address (a generic pointer made from the aligned base would
// compile to generic loads, slower than ld.shared).
__device__ __forceinline__ void sts(uint32_t a, float v) { asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(a), "f"(v) : "memory"); }
__device__ __forceinline__ float lds(uint32_t a) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(a) : "memory");
  return v;
}

// ------------------------------------------------------------------------------------------------ mbarrier
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
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

// 16 bytes from global to shared memory without a register: src_bytes of them read, the rest zero-filled.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// Generic-proxy writes to shared memory (q, P, zeroed rows) made visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ------------------------------------------------------------------------------------------------ TMA
// Box {64 columns, box_rows rows, 1 page} of the cache viewed as [pages][page_size][576] (innermost first in
// the coordinates), into shared memory at dst, completing its bytes on the mbarrier.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tmap, int col, int row, int page, uint32_t bar) {
  // The cache's lines are marked first to leave L2 (each is read once; FlashMLA's hint): an H100 race of the design
  // beside the default (reports/h100/2026-12-07 call 6) gave 4-11 % on mixed-length batches and memory-bound bs 1,
  // within 2 % elsewhere.
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
      "%3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(tmap), "r"(col), "r"(row), "r"(page), "r"(bar), "l"(policy)
      : "memory");
}

// ------------------------------------------------------------------------------------------------ wgmma
// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte offsets (>> 4).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr >> 4) & 0x3FFF) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
// Descriptors are formed once per CTA and stepped by constants: a step of `bytes` within a tile adds bytes >> 4 to the
// start-address field (bits 0-13), which never carries out of it (shared memory < 256 KB). Formed at each use, the
// shifts and masks were about 10 uniform-datapath instructions per wgmma, on the path to its issue (an H100 profile:
// 61 of 147 million instructions of H128 Q4 8k bs32; reports/h100/2026-12-07 call 4).
__device__ __forceinline__ uint64_t desc_step(uint64_t d, uint32_t bytes) {  // the low word alone: no carry
  return (d & 0xFFFFFFFF00000000ull) | static_cast<uint32_t>(static_cast<uint32_t>(d) + (bytes >> 4));
}
// K-major 64-row operand (q, a KV buffer read as Kᵀ, sP) at `base`: k-step ks of slab c starts 32·ks bytes into the
// swizzled rows; 8-row groups are 1024 bytes apart.
__device__ __forceinline__ uint64_t desc_k_base(uint32_t base) { return desc_sw128(base, 16, 1024); }
__device__ __forceinline__ uint64_t desc_k(uint64_t d_base, int c, int ks) {
  return desc_step(d_base, c * kSlab + ks * 32);
}
// V read MN-major over 256 columns, slabs c0 .. c0 + 3: the 64-column swizzle atoms follow each other a slab apart
// (leading byte offset kSlab), 8-key row groups 1024 bytes apart (stride byte offset); k-step kk is 16 keys down.
__device__ __forceinline__ uint64_t desc_v_base(uint32_t buf) { return desc_sw128(buf, kSlab, 1024); }
__device__ __forceinline__ uint64_t desc_v256(uint64_t d_buf, int c0, int kk) {
  return desc_step(d_buf, c0 * kSlab + kk * 16 * 128);
}

// Pin accumulator (or fragment) registers at this point of the program: ptxas may not move their
// definitions past a wgmma issue or their uses above a wgmma wait (it would serialize the wgmma pipeline).
__device__ __forceinline__ void pin(float (&r)[32]) {
#pragma unroll
  for (int e = 0; e < 32; ++e) asm volatile("" : "+f"(r[e])::"memory");
}
__device__ __forceinline__ void pin(float (&o)[4][32]) {
#pragma unroll
  for (int n = 0; n < 4; ++n) pin(o[n]);
}
__device__ __forceinline__ void pin(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[k][e])::"memory");
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

#define TV_D32(d)                                                                                              \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define TV_R32                                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"

// m64n256 accumulators: the whole 64 x 256 half of O a warpgroup holds, o[4][32] in its order. The D fragment of
// m64nNk16 puts value i of a thread at row 8·((i >> 1) & 1) + its row and column 8·(i / 4) + 2·(lane % 4) + (i & 1),
// so o[n][e] (value 32n + e) is column 64n + 8·(e / 4) + 2·(lane % 4) + (e & 1): the columns four m64n64 tiles give
// o[n], and the epilogue's indexing holds for both shapes.
#define TV_D128(o) \
  "+f"(o[0][0]), "+f"(o[0][1]), "+f"(o[0][2]), "+f"(o[0][3]), "+f"(o[0][4]), "+f"(o[0][5]), \
  "+f"(o[0][6]), "+f"(o[0][7]), "+f"(o[0][8]), "+f"(o[0][9]), "+f"(o[0][10]), "+f"(o[0][11]), \
  "+f"(o[0][12]), "+f"(o[0][13]), "+f"(o[0][14]), "+f"(o[0][15]), "+f"(o[0][16]), "+f"(o[0][17]), \
  "+f"(o[0][18]), "+f"(o[0][19]), "+f"(o[0][20]), "+f"(o[0][21]), "+f"(o[0][22]), "+f"(o[0][23]), \
  "+f"(o[0][24]), "+f"(o[0][25]), "+f"(o[0][26]), "+f"(o[0][27]), "+f"(o[0][28]), "+f"(o[0][29]), \
  "+f"(o[0][30]), "+f"(o[0][31]), "+f"(o[1][0]), "+f"(o[1][1]), "+f"(o[1][2]), "+f"(o[1][3]), \
  "+f"(o[1][4]), "+f"(o[1][5]), "+f"(o[1][6]), "+f"(o[1][7]), "+f"(o[1][8]), "+f"(o[1][9]), \
  "+f"(o[1][10]), "+f"(o[1][11]), "+f"(o[1][12]), "+f"(o[1][13]), "+f"(o[1][14]), "+f"(o[1][15]), \
  "+f"(o[1][16]), "+f"(o[1][17]), "+f"(o[1][18]), "+f"(o[1][19]), "+f"(o[1][20]), "+f"(o[1][21]), \
  "+f"(o[1][22]), "+f"(o[1][23]), "+f"(o[1][24]), "+f"(o[1][25]), "+f"(o[1][26]), "+f"(o[1][27]), \
  "+f"(o[1][28]), "+f"(o[1][29]), "+f"(o[1][30]), "+f"(o[1][31]), "+f"(o[2][0]), "+f"(o[2][1]), \
  "+f"(o[2][2]), "+f"(o[2][3]), "+f"(o[2][4]), "+f"(o[2][5]), "+f"(o[2][6]), "+f"(o[2][7]), \
  "+f"(o[2][8]), "+f"(o[2][9]), "+f"(o[2][10]), "+f"(o[2][11]), "+f"(o[2][12]), "+f"(o[2][13]), \
  "+f"(o[2][14]), "+f"(o[2][15]), "+f"(o[2][16]), "+f"(o[2][17]), "+f"(o[2][18]), "+f"(o[2][19]), \
  "+f"(o[2][20]), "+f"(o[2][21]), "+f"(o[2][22]), "+f"(o[2][23]), "+f"(o[2][24]), "+f"(o[2][25]), \
  "+f"(o[2][26]), "+f"(o[2][27]), "+f"(o[2][28]), "+f"(o[2][29]), "+f"(o[2][30]), "+f"(o[2][31]), \
  "+f"(o[3][0]), "+f"(o[3][1]), "+f"(o[3][2]), "+f"(o[3][3]), "+f"(o[3][4]), "+f"(o[3][5]), \
  "+f"(o[3][6]), "+f"(o[3][7]), "+f"(o[3][8]), "+f"(o[3][9]), "+f"(o[3][10]), "+f"(o[3][11]), \
  "+f"(o[3][12]), "+f"(o[3][13]), "+f"(o[3][14]), "+f"(o[3][15]), "+f"(o[3][16]), "+f"(o[3][17]), \
  "+f"(o[3][18]), "+f"(o[3][19]), "+f"(o[3][20]), "+f"(o[3][21]), "+f"(o[3][22]), "+f"(o[3][23]), \
  "+f"(o[3][24]), "+f"(o[3][25]), "+f"(o[3][26]), "+f"(o[3][27]), "+f"(o[3][28]), "+f"(o[3][29]), \
  "+f"(o[3][30]), "+f"(o[3][31])
#define TV_R128 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, " \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, " \
  "%62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, " \
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, " \
  "%101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, " \
  "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// D[64x64] (+)= A[64x16] · B[16x64], A and B K-major in shared memory (S = q·kᵀ).
__device__ __forceinline__ void wgmma_ss_kk(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TV_R32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : TV_D32(d)
      : "l"(a), "l"(b), "r"(accumulate));
}

// O[64x256] += A[64x16] · B[16x256], A in registers (P), B MN-major in shared memory (V: 4 slabs of 64 columns,
// desc_v256). One instruction per k-step where four m64n64 re-issued A per 64 columns (3-7 % slower on an H200:
// lab/PERF_NOTES.md).
__device__ __forceinline__ void wgmma_rs_mn256(float (&o)[4][32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " TV_R128 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : TV_D128(o)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// O[64x256] += A[64x16] · B[16x256], A K-major in shared memory (the other warpgroup's P), B as above: A is read once
// per k-step instead of once per 64 columns (the shared-memory traffic of P·V from shared memory falls from 4 KB per
// 32 tensor cycles to 10 KB per 128).
__device__ __forceinline__ void wgmma_ss_kmn256(float (&o)[4][32], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " TV_R128 ", %128, %129, p, 1, 1, 0, 1;\n}\n"
      : TV_D128(o)
      : "l"(a), "l"(b), "r"(1));
}

// Bit `col` of visibility row `row` of one request ([Q, W] words): does query `row` see tree row `col`?
__device__ __forceinline__ bool tree_bit(const uint32_t* __restrict__ vis_b, int W, int row, int col) {
  return (__ldg(vis_b + static_cast<size_t>(row) * W + (col >> 5)) >> (col & 31)) & 1u;
}

// ------------------------------------------------------------------------------------------------ pieces
// What one CTA computes, and where its shared memory is.
struct Cta {
  uint32_t sQ;   // shared-memory base (1024-aligned); the other regions at tree_verify.cuh's offsets
  uint64_t dq, dk0, dv0;  // descriptors of the q tile and of KV buffer 0 read as Kᵀ and as V (buffer 1: + kTile)
  int P, W, kbeg, kend, kb0, nblk, page_size;
  const int* bt;
  const uint32_t* vis_b;
  const void* kv_map;
  float scale_log2;  // softmax_scale · log2(e): the softmax runs in base 2 (ex2 is one instruction)

  __device__ uint32_t buf(int j) const { return sQ + tv::sm90a_kv_offset() + (j & 1) * kTile; }
  // the P tile of block j, handed to the other warpgroup: over the block's slab 8 (S is done with it)
  __device__ uint32_t sp(int j) const { return buf(j) + 8 * kSlab; }
  __device__ uint64_t kdesc(int j) const { return desc_step(dk0, (j & 1) * kTile); }  // block j's buffer as Kᵀ
  __device__ uint64_t vdesc(int j) const { return desc_step(dv0, (j & 1) * kTile); }  // ... and as V
  __device__ uint64_t pdesc(int j) const { return desc_step(kdesc(j), 8 * kSlab); }   // block j's P, over slab 8
  __device__ uint32_t full(int j, int c) const { return sQ + tv::sm90a_bar_offset() + 8 * ((j & 1) * kSlabs + c); }
  // Row statistics, [6][64] floats: kM0, kC0 (warpgroup 0's max and rescale factor), kM1, kC1 (warpgroup 1's),
  // kL0, kL1 (each warpgroup's partial sum l, at the end).
  __device__ uint32_t stat(int k, int r) const { return sQ + tv::sm90a_stats_offset() + 4 * (64 * k + r); }
  __device__ uint32_t ex(int k) const { return sQ + tv::sm90a_bar_offset() + 8 * k; }  // kExR0 ...
  __device__ uint32_t parity(int j) const { return (j >> 1) & 1; }  // the buffer's fill count, mod 2

  // TMA boxes of a block: whole pages, or 64-row pieces of a page (box_rows rows each); boxes(k0, ...) per slab of
  // the block starting at key k0: only those holding keys below kend are fetched.
  __device__ int box_rows() const { return page_size < kBN ? page_size : kBN; }
  __device__ int boxes(int k0, int rows) const {
    const int hi = kend - k0 < kBN ? kend - k0 : kBN;  // keys of this block that are needed
#ifdef TV90_SHIFT_PAGES
    return (hi + rows - 1) >> (__ffs(rows) - 1);  // rows: 8, 16, 32 or 64 (tv::sm90a_serves)
#else
    return (hi + rows - 1) / rows;
#endif
  }
#ifdef TV90_SHIFT_PAGES
  // Design for the next race (not built by any spec): the copies' page and row by shifts where the page size is a
  // power of two (64 in serving), integer division otherwise. One thread of the warpgroup computes these between two
  // warpgroup-collective wgmma while the other three warps wait at the next one, and each division by a run-time int
  // is about 25 dependent instructions (two a call: the boxes' count and the page; 5 calls a pair of blocks).
  __device__ int page_of(int p) const {
    return (page_size & (page_size - 1)) == 0 ? p >> (__ffs(page_size) - 1) : p / page_size;
  }
  __device__ int row_of(int p) const {
    return (page_size & (page_size - 1)) == 0 ? p & (page_size - 1) : p % page_size;
  }
#else
  __device__ int page_of(int p) const { return p / page_size; }
  __device__ int row_of(int p) const { return p % page_size; }
#endif

  // TMA copies of slabs [c_lo, c_hi) of block j into its buffer (one thread).
  __device__ void load(int j, int c_lo, int c_hi) const {
    const int k0 = kb0 + j * kBN;
    const int box_rows = this->box_rows(), pieces = boxes(k0, box_rows);
    for (int c = c_lo; c < c_hi; ++c) mbar_expect_tx(full(j, c), static_cast<uint32_t>(pieces * box_rows * 128));
    for (int pc = 0; pc < pieces; ++pc) {
      const int p = k0 + pc * box_rows;
      const int page = __ldg(bt + page_of(p));
      const uint32_t dst = buf(j) + pc * box_rows * 128;
      for (int c = c_lo; c < c_hi; ++c)
        tma_load_3d(dst + c * kSlab, kv_map, c * 64, row_of(p), page, full(j, c));
    }
  }

  // The block-table entries of block j into L1 ahead of its copies (one thread), so that issuing them later
  // does not wait for global memory while the warpgroup's next collective instruction waits for that thread.
  __device__ void prefetch_pages(int j) const {
    if (j < nblk) asm volatile("prefetch.global.L1 [%0];\n" ::"l"(bt + page_of(kb0 + j * kBN)));
  }

  // S of block j, slab C (4 k-steps of 16 dims), once the slab has landed.
  template <int C>
  __device__ __forceinline__ void s_slab(float (&s)[32], int j, bool first) const {
    mbar_wait(full(j, C), parity(j));
    wg_fence();  // after the wait's branch (else ptxas injects it, and serializes the wgmma around it)
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_ss_kk(s, desc_k(dq, C, ks), desc_k(kdesc(j), C, ks), !(first && ks == 0));
    if constexpr (kSlabGroups) wg_commit();  // one group per slab (TV90_SLAB_GROUPS)
  }
  // S of block j over slabs [LO, HI) of the order 0, 1, 2, 3, 8, 4, 5, 6, 7 (ODD) or 0 .. 8 (even blocks):
  // the slabs whose copies were issued first go first.
  template <bool ODD, int LO, int HI>
  __device__ __forceinline__ void s_block(float (&s)[32], int j) const {
    if constexpr (LO <= 0 && 0 < HI) s_slab<0>(s, j, LO == 0);
    if constexpr (LO <= 1 && 1 < HI) s_slab<1>(s, j, false);
    if constexpr (LO <= 2 && 2 < HI) s_slab<2>(s, j, false);
    if constexpr (LO <= 3 && 3 < HI) s_slab<3>(s, j, false);
    if constexpr (ODD && LO <= 4 && 4 < HI) s_slab<8>(s, j, false);
    if constexpr (LO <= 4 + ODD && 4 + ODD < HI) s_slab<4>(s, j, false);
    if constexpr (LO <= 5 + ODD && 5 + ODD < HI) s_slab<5>(s, j, false);
    if constexpr (LO <= 6 + ODD && 6 + ODD < HI) s_slab<6>(s, j, false);
    if constexpr (LO <= 7 + ODD && 7 + ODD < HI) s_slab<7>(s, j, false);
    if constexpr (!ODD && LO <= 8 && 8 < HI) s_slab<8>(s, j, false);
  }

  // The first S of a warpgroup, before its loop: the whole block, waited for.
  template <bool ODD>
  __device__ __forceinline__ void first_s(float (&s)[32], int j) const {
    if (j >= nblk) return;
    pin(s);
    s_block<ODD, 0, 9>(s, j);
    if constexpr (!kSlabGroups) wg_commit();
    wg_wait<0>();
    pin(s);
  }

  // Zero the rows at or past kend of block j's slabs 0..7 (what P·V reads) if it is the last block and
  // partial, and wait until the whole warpgroup has (kExZero0 + wg) before its own P·V reads them.
  __device__ void zero_tail(int j, int wt, int wg) const {
    const int nv = kend - (kb0 + j * kBN);
    if (j != nblk - 1 || nv >= kBN) return;
    for (int i = wt; i < (kBN - nv) * 64; i += 128) {
      const int r = nv + (i >> 6), c = i & 63;  // 64 16-byte chunks per row over slabs 0..7
      const uint32_t a = buf(j) + (c >> 3) * kSlab + r * 128 + ((c & 7) << 4);
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(a), "r"(0u) : "memory");
    }
    fence_async_smem();
    mbar_arrive(ex(kExZero0 + wg));
    mbar_wait(ex(kExZero0 + wg), 0);
  }
};

__device__ __forceinline__ float ex2(float x) {  // 2^x, one MUFU instruction (2^-inf = 0)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Softmax step of one block for this thread's rows ra and ra + 8 (h = 0, 1), in base 2: a logit l = q·k is
// softmax_scale·l·log2(e) here, so exp(scale·l - m) = 2^(l·scale_log2 - m2); lse converts back at the end.
// acc[4i + e]: the raw logit of row ra + 8·(e >> 1), key k0 + 8i + 2·(lane % 4) + (e & 1). It comes in two
// halves, so that warpgroup 1 can take its block's row maxima before the even block's max arrives:
//   rows_max: the mask as bits (seen bit i: key i of the accumulator layout is visible; all bits for a
//     prefix-only block, which then takes the path without per-key selects) and the largest seen logit per row;
//   softmax_rest: against the running max m_prev, the new max m_new, the rescale factor c = 2^(m_prev - m_new)
//     of what came before, P as bf16 A fragments of the P·V product (k-step kk covers keys 16kk .. 16kk + 15)
//     and the row sums of P (fp32, before rounding).
// Masking is by selection: an unseen key's logit never enters the max and its P is exactly 0. acc is only read:
// ptxas serializes the whole wgmma pipeline if other instructions write wgmma accumulators.
struct BlockMax {
  uint32_t seen;
  bool all;
  float mx[2];
};

__device__ __forceinline__ BlockMax rows_max(const float (&acc)[32], const Cta& x, int k0, const int (&qi)[2],
                                             int lane) {
  BlockMax r;
  r.all = k0 >= x.kbeg && k0 + kBN <= x.kend && k0 + kBN <= x.P;  // prefix keys, all in the split
  r.seen = 0xffffffffu;
  r.mx[0] = r.mx[1] = neg_inf();
  if (r.all) {
#pragma unroll
    for (int i = 0; i < 32; ++i) r.mx[(i >> 1) & 1] = fmaxf(r.mx[(i >> 1) & 1], acc[i]);
  } else {
    r.seen = 0u;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int h = (i >> 1) & 1, p = k0 + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
      const bool v = p >= x.kbeg && p < x.kend && (p < x.P || tree_bit(x.vis_b, x.W, qi[h], p - x.P));
      r.seen |= static_cast<uint32_t>(v) << i;
      r.mx[h] = fmaxf(r.mx[h], v ? acc[i] : neg_inf());  // masked by selection: never added to
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    r.mx[h] = fmaxf(r.mx[h], __shfl_xor_sync(0xffffffffu, r.mx[h], 1));
    r.mx[h] = fmaxf(r.mx[h], __shfl_xor_sync(0xffffffffu, r.mx[h], 2));
  }
  return r;
}

// Row h's new running max m_new and the rescale factor c of what came before; returns the max the exponentials
// subtract.
__device__ __forceinline__ float new_max(const BlockMax& bm, float scale_log2, const float (&m_prev)[2], int h,
                                         float& m_new, float& c) {
  // the scale is > 0, so the largest scaled logit is the largest logit scaled (the same rounding)
  m_new = fmaxf(m_prev[h], bm.mx[h] * scale_log2);
  const float m_use = m_new == neg_inf() ? 0.f : m_new;  // a row with nothing seen yet keeps P = 0
  c = ex2(m_prev[h] - m_use);                            // 0 while m_prev = -inf, exactly 1 while m is unchanged
  return m_use;
}

// The row sums of a block from the four threads of each row (l only needs them).
__device__ __forceinline__ void row_sums(float (&sum)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 1);
    sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 2);
  }
}

template <bool ALL_SEEN>
__device__ __forceinline__ void softmax_core(const float (&acc)[32], const BlockMax& bm, uint32_t (&pb)[4][4],
                                             float scale_log2, const float (&m_prev)[2], float (&m_new)[2],
                                             float (&c)[2], float (&sum)[2]) {
  float m_use[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    m_use[h] = new_max(bm, scale_log2, m_prev, h, m_new[h], c[h]);
    sum[h] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const int h = (i >> 1) & 1;
    const float p0 = ALL_SEEN || ((bm.seen >> i) & 1u) ? ex2(fmaf(acc[i], scale_log2, -m_use[h])) : 0.f;
    const float p1 = ALL_SEEN || ((bm.seen >> (i + 1)) & 1u) ? ex2(fmaf(acc[i + 1], scale_log2, -m_use[h])) : 0.f;
    sum[h] += p0;
    sum[h] += p1;
    // accumulator pair (i, i+1) = (row h, keys 8(i/4) + 2t, +1): fragment register (i / 8, (i / 2) % 4)
    pb[i >> 3][(i >> 1) & 3] = pack_bf16(p0, p1);
  }
  if constexpr (!kOffPath) row_sums(sum);  // TV90_OFF_PATH: the caller sums after its hand-over
}

__device__ __forceinline__ void softmax_rest(const float (&acc)[32], const BlockMax& bm, uint32_t (&pb)[4][4],
                                             const Cta& x, const float (&m_prev)[2], float (&m_new)[2],
                                             float (&c)[2], float (&sum)[2]) {
  if (bm.all)
    softmax_core<true>(acc, bm, pb, x.scale_log2, m_prev, m_new, c, sum);
  else
    softmax_core<false>(acc, bm, pb, x.scale_log2, m_prev, m_new, c, sum);
}

// The same fragments into a 64 x 64 bf16 tile in shared memory (K-major, 128-byte swizzle) for the other
// warpgroup: row r's keys 8j + 2t, +1 (t = lane % 4) are 4 bytes at r·128 + ((j ^ r % 8) << 4) + 4t.
__device__ __forceinline__ void store_p(uint32_t sP, const uint32_t (&pb)[4][4], int ra, int lane) {
#ifdef TV90_STSM_P
  // Design for the next race (not built by any spec): the same bytes by stmatrix (FlashMLA writes P so), 4 per
  // thread where there are 16 st.shared. pb[kk] holds the 8 x 8 matrices (rows ra - ra % 8 + 8h, keys 16kk + 8m ..)
  // for (h, m) = (0, 0), (1, 0), (0, 1), (1, 1) in the mma fragment layout stmatrix takes; lane L gives the
  // address of row L % 8 of matrix L / 8.
  const int m = lane >> 3, r = (ra & ~15) + (lane & 7) + 8 * (m & 1), g = lane & 7;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t a = sP + r * 128 + (((2 * kk + (m >> 1)) ^ g) << 4);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(pb[kk][0]),
                 "r"(pb[kk][1]), "r"(pb[kk][2]), "r"(pb[kk][3])
                 : "memory");
  }
#else
  const int t = lane & 3, g = ra & 7;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t a = sP + (ra + 8 * h) * 128 + ((j ^ g) << 4) + 4 * t;
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(pb[j >> 1][(j & 1) * 2 + h]) : "memory");
    }
#endif
}

// O *= c per row. Skipped by a warp whose rows all keep their max (c = 1 exactly: the product would change no
// bit), which is most blocks once the running max has settled.
__device__ __forceinline__ void scale_o(float (&o)[4][32], const float (&c)[2]) {
  if (!__any_sync(0xffffffffu, c[0] != 1.f || c[1] != 1.f)) return;
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int e = 0; e < 32; ++e) o[n][e] *= c[(e >> 1) & 1];
}

// O += P·V over one block for this warpgroup's 4 slabs of V (slabs 4·wg .. 4·wg + 3), P in registers or in
// shared memory.
template <bool PIN_O = true>  // false: chained onto a product still in flight on o (TV90_C1_CHAIN), o untouched
__device__ __forceinline__ void pv_regs(float (&o)[4][32], uint32_t (&pb)[4][4], uint64_t vbuf, int wg) {
  if constexpr (PIN_O) pin(o);
  pin(pb);
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_rs_mn256(o, pb[kk], desc_v256(vbuf, wg * 4, kk));
  wg_commit();
}
__device__ __forceinline__ void pv_smem(float (&o)[4][32], uint64_t sP, uint64_t vbuf, int wg) {
  pin(o);
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_ss_kmn256(o, desc_k(sP, 0, kk), desc_v256(vbuf, wg * 4, kk));
  wg_commit();
}

// ------------------------------------------------------------------------------------------------ the CTA
__device__ __forceinline__ void tree_verify_sm90a_cta(
    const uint16_t* __restrict__ q, const void* kv_map, const int* __restrict__ block_table,
    const int* __restrict__ prefix_lens, const uint32_t* __restrict__ visibility, float scale, int Q, int H,
    int page_size, int max_pages, const long long* __restrict__ split_chunk, const long long* __restrict__ split_off,
    uint16_t* __restrict__ out, float* __restrict__ lse, float* __restrict__ part_o, float* __restrict__ part_lse,
    const int* __restrict__ plan_units) {
  // The CTA's (row tile, split, request): the grid's own coordinates, or with a planned schedule (sm90a_planned,
  // tv::planned_target) unit blockIdx.x of its table, whose count comes first (the grid's CTAs past it have none).
  int tile = blockIdx.x, s = blockIdx.y, b = blockIdx.z;
  if (plan_units != nullptr) {
    const int u = blockIdx.x;
    if (u >= __ldg(plan_units)) return;
    const int* unit = plan_units + 1 + tv::kPlanUnitFields * u;
    tile = __ldg(unit), s = __ldg(unit + 1), b = __ldg(unit + 2);
  }
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  Cta x;
  x.sQ = smem_u32(smem);
  x.dq = desc_k_base(x.sQ);
  x.dk0 = desc_k_base(x.buf(0));
  x.dv0 = desc_v_base(x.buf(0));

  const int tid = threadIdx.x, wt = tid & 127;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform as far as the compiler can tell
  const int w = wt >> 5, lane = tid & 31;
  x.P = prefix_lens[b];
  const long long n_keys = static_cast<long long>(x.P) + Q;
  const long long chunk = split_chunk[b];
  if (s >= tv::n_splits(n_keys, chunk)) return;  // the grid is sized for the request with the most splits
  const int QH = Q * H, R0 = tile * kRows;  // Q·H <= 1025 x 128
  const int rows_here = QH - R0 < kRows ? QH - R0 : kRows;
  const int i_max = (R0 + rows_here - 1) / H;  // the tile's last query
  x.W = (Q + 31) >> 5;

  long long ke = static_cast<long long>(s) * chunk + chunk;
  if (ke > n_keys) ke = n_keys;
  if (ke > static_cast<long long>(x.P) + i_max + 1) ke = static_cast<long long>(x.P) + i_max + 1;
  x.kbeg = static_cast<int>(static_cast<long long>(s) * chunk);
  x.kend = static_cast<int>(ke > x.kbeg ? ke : x.kbeg);
  x.kb0 = x.kbeg / kBN * kBN;  // blocks start 64-aligned
  x.nblk = x.kend > x.kbeg ? (x.kend - x.kb0 + kBN - 1) / kBN : 0;
  x.page_size = page_size;
  x.bt = block_table + static_cast<size_t>(b) * max_pages;
  x.vis_b = visibility + static_cast<size_t>(b) * Q * x.W;
  x.kv_map = kv_map;
  x.scale_log2 = scale * 1.4426950408889634f;

  if (wt == 0) {  // thread 0 of each warpgroup issues TMA copies: acquire the host-written descriptor
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(kv_map) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(kv_map) : "memory");
  }
  if (tid == 0) {
    for (int i = 0; i < 2 * kSlabs; ++i) mbar_init(x.sQ + tv::sm90a_bar_offset() + 8 * i, 1);
    for (int k = kExR0; k <= kExLast; ++k) mbar_init(x.ex(k), 128);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    // the first two blocks' copies now, so that their latency overlaps the q tile's loads below (the buffers are
    // apart from q's region; the other threads wait for the copies on the slab barriers after the block barrier)
    if (x.nblk > 0) x.load(0, 0, kSlabs);
    if (x.nblk > 1) x.load(1, 0, kSlabs);
  }
  // q tile (all threads): 64 rows x 72 chunks of 16 bytes into the swizzled layout; rows past Q·H are zero (a copy
  // of 0 source bytes). Asynchronous copies put a thread's 18 chunks in flight at once, where loads through
  // registers waited for memory every 4 chunks (about 5 latencies of a bs-1 CTA's fixed cost).
  {
    const uint16_t* q_tile = q + (static_cast<size_t>(b) * QH + R0) * tv::kHeadDim;
    for (int i = tid; i < kRows * 72; i += tv::kSm90aThreads) {
      const int r = i / 72, c = i % 72;
      const bool in = r < rows_here;  // row 0 always is: the source address stays in bounds
      cp_async16(x.sQ + (c >> 3) * kSlab + r * 128 + (((c & 7) ^ (r & 7)) << 4),
                 q_tile + static_cast<size_t>(in ? r : 0) * tv::kHeadDim + 8 * c, in ? 16u : 0u);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    fence_async_smem();
  }
  __syncthreads();  // barriers initialised, q in place

  // This thread's rows (the wgmma accumulator layout): ra = 16·warp + lane / 4 and ra + 8, in both warpgroups.
  const int ra = 16 * w + (lane >> 2);
  int qi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int R = R0 + ra + 8 * h;
    qi[h] = R < QH ? R / H : Q - 1;
  }

  float o[4][32];
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int e = 0; e < 32; ++e) o[n][e] = 0.f;
  float sacc[32];   // S of this warpgroup's current block (wgmma accumulators, never written by other code)
  uint32_t pb[4][4];  // its P, bf16, as the A fragments of P·V
  float m_run[2] = {neg_inf(), neg_inf()}, l_run[2] = {0.f, 0.f};
  const int npairs = (x.nblk + 1) / 2;

  if (wg == 0) {  // ------------------------------------------------ warpgroup 0: even blocks, columns 0..255
    x.first_s<false>(sacc, 0);
    for (int i = 0; i < npairs; ++i) {
      const int j0 = 2 * i, j1 = j0 + 1;
      const bool has1 = j1 < x.nblk, next0 = j0 + 2 < x.nblk, next1 = j1 + 2 < x.nblk;
      if (!kOffPath && wt == 0) x.prefetch_pages(j0 + 2), x.prefetch_pages(j1 + 2);  // copied by this thread below
      float m0[2], c0[2], sum[2];
      const BlockMax bm0 = rows_max(sacc, x, x.kb0 + j0 * kBN, qi, lane);
      if constexpr (kEarlyMax) {  // m0 and c0 for warpgroup 1 now (softmax_rest computes the same values again)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float m, c;
          new_max(bm0, x.scale_log2, m_run, h, m, c);
          if ((lane & 3) == 0) sts(x.stat(kM0, ra + 8 * h), m), sts(x.stat(kC0, ra + 8 * h), c);
        }
        mbar_arrive(x.ex(kExM0));
      }
      softmax_rest(sacc, bm0, pb, x, m_run, m0, c0, sum);
      x.zero_tail(j0, wt, 0);
      if (i > 0) mbar_wait(x.ex(kExP0Free), (i - 1) & 1);  // warpgroup 1 has read the previous P0
      store_p(x.sp(j0), pb, ra, lane);
      if (!kEarlyMax && (lane & 3) == 0) {
        sts(x.stat(kM0, ra), m0[0]), sts(x.stat(kM0, ra + 8), m0[1]);
        sts(x.stat(kC0, ra), c0[0]), sts(x.stat(kC0, ra + 8), c0[1]);
      }
      fence_async_smem();
      mbar_arrive(x.ex(kExR0));
      if constexpr (kOffPath) {
        if (wt == 0) x.prefetch_pages(j0 + 2), x.prefetch_pages(j1 + 2);  // copied by this thread below
        row_sums(sum);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * c0[h] + sum[h], m_run[h] = m0[h];

      scale_o(o, c0);
      pv_regs(o, pb, x.vdesc(j0), 0);
      wg_wait<0>();
      pin(o);
      if (next0 && wt == 0) x.load(j0 + 2, 0, 4);  // buffer 0's slabs 0-3: read last by this warpgroup
      if (has1) {
        mbar_wait(x.ex(kExR1), i & 1);  // P1, m1, c1 of block j1 from warpgroup 1
        float c1[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          m_run[h] = lds(x.stat(kM1, ra + 8 * h));
          c1[h] = lds(x.stat(kC1, ra + 8 * h));
          l_run[h] *= c1[h];
        }
        scale_o(o, c1);
        pv_smem(o, x.pdesc(j1), x.vdesc(j1), 0);
      }
      // S of the next even block: slabs 0-3 (refilled above) now, 4-8 (refilled by warpgroup 1) after P1·V.
      // Both commit groups exist on every path (empty without a next block), so the waits count alike.
      if (next0) {
        pin(sacc);
        x.s_block<false, 0, 4>(sacc, j0 + 2);
      }
      if constexpr (kSlabGroups) {
        wg_wait<4>();  // P1·V done, the 4 slab groups of S may stay in flight (without a next block: no wait here)
      } else {
        wg_commit();
        wg_wait<1>();  // P1·V done (no pin of o here: ptxas would count it as redefining o inside the S stage)
      }
      if (has1 && next1 && wt == 0) {  // buffer 1's slabs 0-3 and 8 (P1): read last by this warpgroup
        x.load(j1 + 2, 0, 4);
        x.load(j1 + 2, 8, kSlabs);
      }
      if (next0) {
        x.s_block<false, 4, 9>(sacc, j0 + 2);
        mbar_arrive(x.ex(kExS0));
      }
      if constexpr (!kSlabGroups) wg_commit();
      wg_wait<0>();
      pin(o);
      pin(sacc);
    }
  } else {  // -------------------------------------------------------- warpgroup 1: odd blocks, columns 256..511
    x.first_s<true>(sacc, 1);
    for (int i = 0; i < npairs; ++i) {
      const int j0 = 2 * i, j1 = j0 + 1;
      const bool has1 = j1 < x.nblk, next0 = j0 + 2 < x.nblk, next1 = j1 + 2 < x.nblk;
      if (wt == 0) x.prefetch_pages(j0 + 2), x.prefetch_pages(j1 + 2);  // copied by this thread below
      // after P0·V: buffer 0's slabs 4-8 refilled for block j0 + 2 (read last here), P0's slab handed back
      const auto release_buffer0 = [&] {
        if (!next0) return;
        if (wt == 0) x.load(j0 + 2, 4, kSlabs);
        mbar_arrive(x.ex(kExP0Free));
      };
      BlockMax bm1;  // this warpgroup's block's row maxima while warpgroup 0 still works on its softmax
      if (has1) bm1 = rows_max(sacc, x, x.kb0 + j1 * kBN, qi, lane);
      mbar_wait(x.ex(kEarlyMax ? kExM0 : kExR0), i & 1);  // m0, c0 (and by default P0) of block j0 from warpgroup 0
      float m0[2], c0[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        m0[h] = lds(x.stat(kM0, ra + 8 * h));
        c0[h] = lds(x.stat(kC0, ra + 8 * h));
        l_run[h] *= c0[h];
        m_run[h] = m0[h];
      }
      if constexpr (!kEarlyMax) {
        scale_o(o, c0);
        pv_smem(o, x.pdesc(j0), x.vdesc(j0), 1);
      }
      float c1[2];
      if (has1) {
        float m1[2], sum[2];
        softmax_rest(sacc, bm1, pb, x, m0, m1, c1, sum);
        x.zero_tail(j1, wt, 1);
        store_p(x.sp(j1), pb, ra, lane);
        if ((lane & 3) == 0) {
          sts(x.stat(kM1, ra), m1[0]), sts(x.stat(kM1, ra + 8), m1[1]);
          sts(x.stat(kC1, ra), c1[0]), sts(x.stat(kC1, ra + 8), c1[1]);
        }
        fence_async_smem();
        mbar_arrive(x.ex(kExR1));
        if constexpr (kOffPath) row_sums(sum);
#pragma unroll
        for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * c1[h] + sum[h], m_run[h] = m1[h];
      }
      if constexpr (kEarlyMax) {
        mbar_wait(x.ex(kExR0), i & 1);  // P0 of block j0 from warpgroup 0
        scale_o(o, c0);
        pv_smem(o, x.pdesc(j0), x.vdesc(j0), 1);
      }
      if constexpr (kC1Chain) {  // TV90_C1_CHAIN: P1·V chained onto P0·V where no row of this warpgroup rescales
        bool rescale = true;
        if (has1) {  // warpgroup-uniform (a wgmma is the warpgroup's): every thread reads the 64 rows' c1
          mbar_wait(x.ex(kExR1), i & 1);  // this warpgroup's own hand-over: all its c1 are in shared memory
          rescale = __any_sync(0xffffffffu, lds(x.stat(kC1, lane)) != 1.f || lds(x.stat(kC1, lane + 32)) != 1.f);
        }
        if (rescale) {
          wg_wait<0>();  // P0·V done: P0 (buffer 0's slab 8) and buffer 0's slabs 4-7 are free
          pin(o);
          if (has1) {
            scale_o(o, c1);
            pv_regs(o, pb, x.vdesc(j1), 1);
          }
        } else {
          pv_regs<false>(o, pb, x.vdesc(j1), 1);
          wg_wait<1>();  // P0·V done (P1·V runs on)
        }
        release_buffer0();
      } else {
        wg_wait<0>();  // P0·V done: P0 (buffer 0's slab 8) and buffer 0's slabs 4-7 are free
        pin(o);
        if constexpr (!kPvFirst) release_buffer0();
        if (has1) {
          scale_o(o, c1);
          pv_regs(o, pb, x.vdesc(j1), 1);
        }
        if constexpr (kPvFirst) release_buffer0();  // TV90_PV_FIRST: the refill while P1·V runs
      }
      wg_wait<0>();
      pin(o);
      if (next1) {
        if (wt == 0) x.load(j1 + 2, 4, 8);  // buffer 1's slabs 4-7: read last by this warpgroup
        mbar_wait(x.ex(kExS0), i & 1);  // warpgroup 0's next S is issued (next1 implies next0: it arrives)
        pin(sacc);
        x.s_block<true, 0, 9>(sacc, j1 + 2);
      }
      if constexpr (!kSlabGroups) wg_commit();
      wg_wait<0>();
      pin(o);
      pin(sacc);
    }
  }

  // The combine (a programmatic dependent launch) may be scheduled once every CTA got here: its launch overlaps the
  // epilogues, and it still waits for this grid's completion before it reads a partial output.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  // Epilogue: l = warpgroup 0's sum (even blocks) + warpgroup 1's (odd blocks), both against the final max,
  // which both warpgroups hold (warpgroup 0 read it from warpgroup 1's statistics).
  if ((lane & 3) == 0) {
    sts(x.stat(kL0 + wg, ra), l_run[0]);
    sts(x.stat(kL0 + wg, ra + 8), l_run[1]);
  }
  __syncthreads();
  const bool split = tv::n_splits(n_keys, chunk) > 1;
  const size_t off = split ? static_cast<size_t>(split_off[b] + s) : 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = ra + 8 * h;
    if (r >= rows_here) continue;
    const size_t R = static_cast<size_t>(R0 + r);
    const float l = lds(x.stat(kL0, r)) + lds(x.stat(kL1, r)), inv = l > 0.f ? 1.f / l : 0.f;
    if (wg == 0 && (lane & 3) == 0) {
      if (split)
        part_lse[off * QH + R] = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : neg_inf();
      else
        lse[static_cast<size_t>(b) * QH + R] = (m_run[h] + log2f(l)) * kLn2;
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = wg * kCols + n * 64 + 8 * i + 2 * (lane & 3);
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
// swizzle, box {64, min(page_size, 64), 1}) written by the host before the launch, and plan_units, the unit table of
// a planned schedule (its 1-D grid; nullptr: the grid is (row tiles, splits, requests)). The partial outputs of
// split requests are merged by the portable module's combine kernel.
extern "C" __global__ void __launch_bounds__(tv::kSm90aThreads, 1) tree_verify_sm90a_kernel(
    const uint16_t* __restrict__ q, const void* kv_map, const int* __restrict__ block_table,
    const int* __restrict__ prefix_lens, const uint32_t* __restrict__ visibility, float softmax_scale, int Q, int H,
    int page_size, int max_pages, const long long* __restrict__ split_chunk, const long long* __restrict__ split_off,
    uint16_t* __restrict__ out, float* __restrict__ lse, float* __restrict__ part_o, float* __restrict__ part_lse,
    const int* __restrict__ plan_units) {
  tree_verify_sm90a_cta(q, kv_map, block_table, prefix_lens, visibility, softmax_scale, Q, H, page_size, max_pages,
                        split_chunk, split_off, out, lse, part_o, part_lse, plan_units);
}

// The geometry functions evaluated on the device (see tree_verify.cu's query kernel).
extern "C" __global__ void tree_verify_geometry_kernel(const long long* __restrict__ args, int n,
                                                       long long* __restrict__ values) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  tv::geometry_fields(args[4 * i], args[4 * i + 1], static_cast<int>(args[4 * i + 2]), args[4 * i + 3],
                      values + static_cast<size_t>(tv::kGeometryStride) * i);
}
