// Launch geometry of tree_verify (kernels_cu/tree_verify.cu): tile sizes, the shared-memory layout, the grid
// and the split-KV rule, as host+device constexpr functions. This header is the one place they are written:
// NVRTC includes it for the kernels, nvcc for the engine, and the Python wrapper calls the same functions
// compiled as a small host library (kernels_cu/geometry.py builds tree_verify_geometry_host.cpp), so no
// launch formula is copied into Python. It includes nothing and uses no CUDA types, so any C++17 compiler
// takes it.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TV_HD __host__ __device__
#else
#define TV_HD
#endif

namespace tv {

// Variants. kBf16: bf16 operands on tensor cores (mma.sync m16n8k16, fp32 accumulation); kF32: fp32 on CUDA
// cores (TV.2.1's tolerance is below what TF32 operands give); kSm90a: bf16 on Hopper's warpgroup MMA with
// TMA copies of the paged cache and warp specialisation (kernels_cu/tree_verify_sm90a.cu).
constexpr int kBf16 = 0;
constexpr int kF32 = 1;
constexpr int kSm90a = 2;

constexpr int kHeadDim = 576;  // c_kv 512 ‖ k_pe 64 (and q_nope·W_UK 512 ‖ q_pe 64)
constexpr int kLatent = 512;   // V = the first 512 columns of the same cache rows
constexpr int kThreads = 256;  // 8 warps per CTA, both portable variants
constexpr int kBlockN = 32;    // keys per KV block of the portable variants (one pass of S, softmax, P·V)

// sm90a: two warpgroups, each owning 256 of the 512 output columns of the same 64 rows, and no producer
// warpgroup (thread 0 of each issues the TMA copies of the KV slabs it is the last to read). 64-key blocks go
// to two KV buffers, even blocks to buffer 0 and odd blocks to buffer 1; warpgroup 0 computes S of the even
// blocks and warpgroup 1 of the odd ones, so S is computed once per block (kernels_cu/tree_verify_sm90a.cu).
// Tiles are stored as TMA's 128-byte swizzle writes them: 9 slabs of 64 columns (128 bytes per row), each
// slab 64 rows x 128 bytes, so a KV buffer is 9 x 8192 bytes and every slab starts 1024-byte aligned.
constexpr int kSm90aThreads = 256;
constexpr int kSm90aBlockN = 64;
constexpr int kSm90aStages = 2;  // KV buffers
constexpr int kSm90aSlabBytes = 64 * 128;
constexpr int kSm90aTileBytes = 9 * kSm90aSlabBytes;

// Split-KV rule (flash-decoding). A request is split into chunks of `split_chunk` keys; the default chunk
// depends on the request's own key count and on the call's Q·H only, never on the rest of the batch, so a
// request's bits are the same alone or in any batch (TV.3.3). It aims at kTargetCtas CTAs per request
// (about one wave on a 132-SM H200) and never makes chunks shorter than kMinChunk keys, because each split
// writes m_tile x 512 fp32 partial outputs that the combine kernel reads back.
constexpr long long kTargetCtas = 128;
constexpr long long kMinChunk = 512;

// Combine kernel: one warp per (query, head) row and quarter of its 512 columns (a lane's 4 columns), so a small
// batch's few rows still spread over many SMs (a warp per whole row gave a bs-1 call 16 CTAs, and 33 splits took
// 13.7 µs of it on an H200).
constexpr int kCombineThreads = 256;
constexpr int kCombineParts = 4;  // warps per row: 128 columns each
constexpr int kCombineRows = kCombineThreads / 32 / kCombineParts;

TV_HD constexpr int m_tile(int v) { return v == kF32 ? 32 : 64; }  // (query, head) rows per CTA
TV_HD constexpr int kv_stages(int v) { return v == kF32 ? 1 : (v == kSm90a ? kSm90aStages : 2); }
TV_HD constexpr int elem_bytes(int v) { return v == kF32 ? 4 : 2; }
TV_HD constexpr int threads(int v) { return v == kSm90a ? kSm90aThreads : kThreads; }
TV_HD constexpr int block_n(int v) { return v == kSm90a ? kSm90aBlockN : kBlockN; }  // default chunks: whole blocks
// Row pitch of the q and KV tiles in elements: 16 bytes of padding per 576-wide row puts consecutive rows 16
// bytes apart modulo 128, so the 8 row addresses of an ldmatrix phase (bf16) or 8 float4 loads (fp32) hit
// 8 different bank groups.
TV_HD constexpr int row_pitch(int v) { return kHeadDim + 16 / elem_bytes(v); }
// S is computed in n_parts slices of the 576 dims (bf16: 4 warps per row half, 144 dims each) and the
// partial sums are added in a fixed order by the softmax step.
TV_HD constexpr int s_parts(int v) { return v == kBf16 ? 4 : 1; }
TV_HD constexpr int s_pitch(int v, int bn) { return bn + (v == kBf16 ? 8 : 4); }  // floats; bank spread
TV_HD constexpr int p_pitch(int v, int bn) { return bn + 16 / elem_bytes(v); }    // elements of P

// The portable kernel's tile, chosen from the shared-memory budget of the build: the spec's KERNEL_SMEM_BUDGET or
// the target arch's per-block opt-in limit (arch_limits.cuh's kernel_smem_budget; the kernels evaluate it for
// __CUDA_ARCH__, the hosts for the GPU's arch). Where the tuned tile fits (the H200's 227 KB) it is the one;
// elsewhere (sm_120, sm_86, sm_89: 99 KB) the small tile, which fits 99 KB:
//   tuned bf16: 64 rows x 32 keys, 2 KV stages filled by cp.async a block ahead    (196096 bytes)
//   tuned fp32: 32 rows x 32 keys, 1 KV stage filled by cp.async after P·V         (157952 bytes)
//   small bf16: 32 rows x 32 keys, 1 KV stage, the next block prefetched into       (98048 bytes)
//               registers (nine 16-byte pieces per thread) during S, softmax and P·V, stored after P·V
//   small fp32: 16 rows x 16 keys, 1 KV stage, prefetched likewise                 (76928 bytes)
// The q tile is the largest part (64 x 584 bf16 = 73 KB), so the small tiles halve the rows and keep one KV
// stage, hiding the copy behind a block's compute from registers instead of from a second stage.
struct Tile {
  int m;         // (query, head) rows per CTA
  int bn;        // keys per KV block (one pass of S, softmax, P·V)
  int stages;    // KV stages in shared memory
  int prefetch;  // 1: the next KV block is loaded into registers while this one is used (stages == 1)
};
constexpr long long kUnbounded = 1LL << 40;  // a budget every tile fits: the tuned tile
TV_HD constexpr Tile tuned_tile(int v) { return Tile{m_tile(v), kBlockN, kv_stages(v), 0}; }
TV_HD constexpr Tile small_tile(int v) { return v == kF32 ? Tile{16, 16, 1, 1} : Tile{32, 32, 1, 1}; }

// Shared-memory layout of a tile in bytes (every offset is a multiple of 16: cp.async and ldmatrix need it).
TV_HD constexpr int smem_q_offset(int, Tile) { return 0; }
TV_HD constexpr int smem_kv_offset(int v, Tile t) { return t.m * row_pitch(v) * elem_bytes(v); }
TV_HD constexpr int smem_kv_stage_bytes(int v, Tile t) { return t.bn * row_pitch(v) * elem_bytes(v); }
TV_HD constexpr int smem_s_offset(int v, Tile t) {
  return smem_kv_offset(v, t) + t.stages * smem_kv_stage_bytes(v, t);
}
TV_HD constexpr int smem_p_offset(int v, Tile t) {
  return smem_s_offset(v, t) + s_parts(v) * t.m * s_pitch(v, t.bn) * 4;
}
TV_HD constexpr int smem_stats_offset(int v, Tile t) {
  return smem_p_offset(v, t) + t.m * p_pitch(v, t.bn) * elem_bytes(v);
}
// portable: alpha (the per-block rescale), then the final l of every row
TV_HD constexpr int tile_smem_bytes(int v, Tile t) { return smem_stats_offset(v, t) + 2 * t.m * 4; }
TV_HD constexpr Tile tile(int v, long long budget) {
  return tile_smem_bytes(v, tuned_tile(v)) <= budget ? tuned_tile(v) : small_tile(v);
}
static_assert(tile_smem_bytes(kBf16, small_tile(kBf16)) <= 99 * 1024, "the small bf16 tile fits a 99 KB block");
static_assert(tile_smem_bytes(kF32, small_tile(kF32)) <= 99 * 1024, "the small fp32 tile fits a 99 KB block");
// Rows per CTA and keys per block of a variant (sm90a's are its own, whatever the budget).
TV_HD constexpr int rows_per_cta(int v, long long budget) { return v == kSm90a ? m_tile(v) : tile(v, budget).m; }
TV_HD constexpr int keys_per_block(int v, long long budget) { return v == kSm90a ? block_n(v) : tile(v, budget).bn; }

// sm90a (offsets from the dynamic shared-memory base rounded up to 1024 bytes, the swizzle atom, hence the
// slack): the q tile, the two KV buffers, the row statistics the warpgroups exchange (running max and rescale
// factor of each warpgroup, and the two partial sums l: 6 x 64 floats), then the mbarriers: one per slab of
// each buffer (2 x 9), and the five of the warpgroups' hand-overs. The P tile a warpgroup hands to the other
// (64 x 64 bf16, one slab) is written over its block's slab 8 (the rope columns, needed only by S, which is
// done by then).
TV_HD constexpr int sm90a_kv_offset() { return kSm90aTileBytes; }
TV_HD constexpr int sm90a_stats_offset() { return sm90a_kv_offset() + kSm90aStages * kSm90aTileBytes; }
TV_HD constexpr int sm90a_bar_offset() { return sm90a_stats_offset() + 6 * 64 * 4; }
#ifdef TV90_EARLY_MAX
constexpr int kSm90aHandOvers = 7;  // the race's design (kernels_cu/tree_verify_sm90a.cu): one more hand-over
#else
constexpr int kSm90aHandOvers = 6;
#endif
TV_HD constexpr int sm90a_bar_bytes() { return ((kSm90aStages * 9 + kSm90aHandOvers) * 8 + 15) / 16 * 16; }  // 16-byte whole
TV_HD constexpr int sm90a_smem_bytes() { return sm90a_bar_offset() + sm90a_bar_bytes() + 1024; }
TV_HD constexpr int smem_bytes(int v, long long budget = kUnbounded) {
  return v == kSm90a ? sm90a_smem_bytes() : tile_smem_bytes(v, tile(v, budget));
}

// Which calls the sm90a kernel serves (an sm90a launcher hands the others to portable): bf16, and a page size
// whose pages (or 64-row pieces of them) tile its 64-key blocks with TMA boxes of a multiple of 8 rows (the
// 128-byte swizzle atom).
TV_HD constexpr bool sm90a_serves(bool bf16, long long page_size) {
  return bf16 && (page_size % 64 == 0 || page_size == 8 || page_size == 16 || page_size == 32);
}

TV_HD constexpr long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// Grid: x = row tile of the request's Q·H (query, head) rows (fastest, so the tiles that share a KV split
// run together and share it through L2), y = split, z = request.
TV_HD constexpr long long row_tiles(long long rows, int v, long long budget = kUnbounded) {
  return ceil_div(rows, rows_per_cta(v, budget));
}

// The splits the default rule aims at for a request (never fewer as the request grows).
TV_HD constexpr long long default_splits(long long n_keys, long long rows, int v, long long budget = kUnbounded) {
  const long long want = ceil_div(kTargetCtas, row_tiles(rows, v, budget));  // splits wanted for this request
  const long long most = n_keys / kMinChunk;                                   // splits of at least kMinChunk keys
  return want < most ? want : (most > 1 ? most : 1);
}

TV_HD constexpr long long default_split_chunk(long long n_keys, long long rows, int v, long long budget = kUnbounded) {
  const long long n = default_splits(n_keys, rows, v, budget);
  const long long bn = keys_per_block(v, budget);
  return ceil_div(ceil_div(n_keys, n), bn) * bn;  // whole key blocks
}

// Split s of a request covers keys [s·chunk, min((s+1)·chunk, n_keys)).
TV_HD constexpr long long n_splits(long long n_keys, long long chunk) { return ceil_div(n_keys, chunk); }

TV_HD constexpr long long combine_blocks(long long rows) { return ceil_div(rows, kCombineRows); }

// Planned split rule (variant sm90a_planned: kernels_cu/specs.py). The batch-invariant rule above cuts every request
// alike whatever else is in the batch: 15-16 splits a request at prefix 8k even where the batch already fills the
// GPU, each split's partial output written and read back by the combine kernel. The planned rule sees the whole
// batch and balances its key blocks over the CTAs of a few waves: for a target of T key blocks a CTA, request b
// (blocks_b key blocks) gets s_b = ceil(blocks_b / c_b) splits of c_b = ceil(blocks_b / ceil(blocks_b / T)) blocks
// (so a long request gets proportionally more splits, all of about T blocks); for W = 1 .. kPlanWaves waves of
// `ctas` CTAs (one per SM: the sm90a kernel's occupancy) T_W is the smallest T (not under kPlanMinChunk keys) whose
// row_tiles x sum_b s_b CTAs fit W waves, priced by a model of the launch's time:
//   waves(T) x (T + kPlanCtaOverhead) [+ kPlanCombine where a request splits],
// kPlanCtaOverhead = a CTA's fixed cost (q tile, the first S, its epilogue) in key blocks (about 4 on an H200:
// reports/h200/2026-12-07). The cheapest T wins (fewer waves on a tie); where one split per request is already
// more than kPlanWaves waves, one split per request (no partial outputs, no combine). The launch is one CTA per
// unit (request, split, row tile) in that order (the tiles of a split side by side, sharing its keys through L2),
// the requests taken longest chunk first (plan_goes_before): the GPU starts CTAs in grid order as SMs free up, so
// the longest units start first and the short ones fill the tail (longest processing time first: in a model of the
// launch, lab/tree_verify_plan_model.py, a seeded log-normal batch of 128 requests ends 12 % sooner than in request
// order; a uniform batch is unchanged). A 1-D grid of at most max(kPlanWaves x ctas, row_tiles x bs) CTAs, the
// plan's units first, the rest idle. The order moves no bit (a unit computes the same wherever it runs; the partial
// slots stay in request order). A request's bits depend on the batch (the variant declares batch_invariant = False);
// for the same batch they are the same run to run. The plan is made once per batch: on the host for the checked call
// (kernels_cu/tree_verify_ops.py), by tree_verify_plan_kernel on the device for the deferred one, with these
// functions (both sum the same integers).
constexpr long long kPlanMinChunk = 128;
constexpr long long kPlanWaves = 4;
constexpr long long kPlanCtaOverhead = 4;
constexpr long long kPlanCombine = 2;

TV_HD constexpr long long plan_min_blocks(int v) { return ceil_div(kPlanMinChunk, block_n(v)); }
// A request of `blocks` key blocks at target T: its chunk in blocks, and its splits. (int: a request has at most
// MAX_CONTEXT / 64 blocks, and 32-bit divisions are inline instructions where 64-bit ones are calls.)
TV_HD constexpr int plan_ceil(int a, int b) { return (a + b - 1) / b; }
TV_HD constexpr int plan_chunk_blocks(int blocks, int T) { return plan_ceil(blocks, plan_ceil(blocks, T > 0 ? T : 1)); }
TV_HD constexpr int plan_splits(int blocks, int T) { return plan_ceil(blocks, plan_chunk_blocks(blocks, T)); }
// Whether request r's units come before request b's in the unit table: the longer chunk first (in key blocks, at
// the batch's target), then the lower index.
TV_HD constexpr bool plan_goes_before(int chunk_r, int r, int chunk_b, int b) {
  return chunk_r > chunk_b || (chunk_r == chunk_b && r < b);
}
// The model's time of target T, in key blocks, given the batch's splits at T and its request count.
TV_HD constexpr long long plan_cost(long long T, long long splits, long long bs, long long tiles, long long ctas) {
  return ceil_div(tiles * splits, ctas) * (T + kPlanCtaOverhead) + (splits > bs ? kPlanCombine : 0);
}
// The smallest target in [lo, hi] whose CTAs fit `budget` (splits(T) never grows with T), or hi + 1 if none does.
template <class Splits>
TV_HD inline long long plan_fit(long long lo, long long hi, long long tiles, long long budget, Splits splits) {
  if (tiles * splits(hi) > budget) return hi + 1;
  while (lo < hi) {
    const long long mid = (lo + hi) / 2;
    if (tiles * splits(mid) <= budget) hi = mid; else lo = mid + 1;
  }
  return lo;
}
// The batch's target T (key blocks a CTA), serially (the host's plan): splits(T) = the batch's sum of plan_splits.
template <class Splits>
TV_HD inline long long planned_target(long long longest, long long bs, long long tiles, long long ctas, int v,
                                      Splits splits) {
  const long long lo = plan_min_blocks(v) < longest ? plan_min_blocks(v) : longest;
  long long best = longest, best_cost = -1;
  for (long long W = 1; W <= kPlanWaves; ++W) {
    const long long T = plan_fit(lo, longest, tiles, W * ctas, splits);
    if (T > longest) continue;
    const long long cost = plan_cost(T, splits(T), bs, tiles, ctas);
    if (best_cost < 0 || cost < best_cost) best = T, best_cost = cost;
  }
  return best;
}
// The planned launch's grid (units: CTAs) for bs requests of Q·H = rows: every plan fits it.
TV_HD constexpr long long planned_max_units(long long bs, long long rows, long long ctas, int v) {
  const long long one_each = row_tiles(rows, v) * bs, waves = kPlanWaves * ctas;
  return one_each > waves ? one_each : waves;
}
// The most partial slots (splits of the requests that split) of any plan: a split plan fits kPlanWaves waves.
TV_HD constexpr long long planned_max_slots(long long rows, long long ctas, int v) {
  return kPlanWaves * ctas / row_tiles(rows, v);
}
// The unit table: int32 [1 + 3 x units]: the unit count, then (row tile, split, request) per unit.
constexpr int kPlanUnitFields = 3;

// The most splits of any request with at most `max_keys` keys (a deferred call's grid and partial slots, planned
// before the lengths are known: kernels_cu/tree_verify_ops.py prepare_deferred). With an explicit chunk, the longest
// request's; by the default rule, the splits aimed at for the longest, which rounding chunks up to whole key blocks
// only lowers, and which never fall as a request grows.
TV_HD constexpr long long max_splits(long long max_keys, long long rows, int v, long long chunk,
                                     long long budget = kUnbounded) {
  return chunk > 0 ? n_splits(max_keys, chunk) : default_splits(max_keys, rows, v, budget);
}

// Everything a launcher needs for one request, in one call: the values below, in this order, with these
// names (kernels_cu/geometry.py reads the names from here too). chunk <= 0 means the default rule; budget is
// the build's shared-memory budget (kernel_smem_budget), which picks the portable tile.
#define TV_GEOMETRY_FIELDS                                                                                   \
  "variant_bf16 variant_f32 threads block_n combine_threads combine_rows m_tile kv_stages smem_bytes "       \
  "row_tiles split_chunk n_splits combine_blocks variant_sm90a prefetch max_splits"
constexpr int kGeometryFields = 16;
constexpr int kGeometryStride = 16;  // values per argument set in the device query kernel's output

TV_HD inline void geometry_fields(long long n_keys, long long rows, int v, long long chunk, long long* out,
                                  long long budget = kUnbounded) {
  const long long c = chunk > 0 ? chunk : default_split_chunk(n_keys, rows, v, budget);
  const Tile t = tile(v, budget);
  out[0] = kBf16;
  out[1] = kF32;
  out[2] = threads(v);
  out[3] = keys_per_block(v, budget);
  out[4] = kCombineThreads;
  out[5] = kCombineRows;
  out[6] = rows_per_cta(v, budget);
  out[7] = v == kSm90a ? kv_stages(v) : t.stages;
  out[8] = smem_bytes(v, budget);
  out[9] = row_tiles(rows, v, budget);
  out[10] = c;
  out[11] = n_splits(n_keys, c);
  out[12] = combine_blocks(rows);
  out[13] = kSm90a;
  out[14] = v == kSm90a ? 0 : t.prefetch;
  out[15] = max_splits(n_keys, rows, v, chunk, budget);
}


}  // namespace tv
