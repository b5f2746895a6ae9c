// The kernels' launch geometry headers (<op>.cuh) as one C-ABI host library, so that the Python wrappers
// call the headers' own constexpr functions instead of restating them (kernels_cu/geometry.py builds and
// loads this file with the host C++ compiler). The engine's host code includes the same headers directly.
#include "arch_limits.cuh"
#include "draft_topk.cuh"
#include "tree_accept.cuh"
#include "tree_build.cuh"
#include "tree_verify.cuh"

#include <algorithm>
#include <vector>

extern "C" {
// The per-arch limits of arch_limits.cuh: the row of compute capability cc (all zero when the table has none), the
// fields named by KERNEL_ARCH_LIMIT_FIELDS.
const char* geom_arch_limit_names() { return KERNEL_ARCH_LIMIT_FIELDS; }
int geom_arch_limit_count() { return kArchLimitFields; }
void geom_arch_limits_row(int cc, long long* out) {
  const ArchLimits a = arch_limits(cc);
  const long long v[] = {a.cc, a.smem_per_block_optin, a.smem_per_sm, a.smem_reserved_per_block, a.smem_static_max,
                         a.regs_per_sm, a.regs_per_block, a.regs_per_thread, a.reg_alloc_unit, a.threads_per_block,
                         a.threads_per_sm};
  static_assert(sizeof v / sizeof *v == kArchLimitFields, "one value per named field");
  for (int i = 0; i < kArchLimitFields; ++i) out[i] = v[i];
}
long long geom_smem_budget_for(long long spec_budget, int cc) { return kernel_smem_budget(spec_budget, cc); }

// tree_build: the variant types (by tb::VariantId), their names and each one's policy row: strategy, stage_lp,
// select_cap, race_min_b, hand_off (tree_build_variants.cuh).
int geom_tree_build_variant_count() { return tb::kVariants; }
const char* geom_tree_build_variant_name(int variant) { return tb::variant_name(variant); }
void geom_tree_build_policy(int variant, int* out) {
  const tb::Policy p = tb::policy(variant);
  out[0] = p.strategy, out[1] = p.stage_lp, out[2] = p.select_cap, out[3] = p.race_min_b, out[4] = p.hand_off;
}

// tree_build's launch rule (tree_build_launch, tree_build.cuh) for variant `variant` with policy row `policy` (the
// table's, or a design build's): out = the variant whose build runs, lp_in_smem, select_cap, dynamic shared memory
// bytes, whether it selects.
void geom_tree_build_launch(const int* policy, int variant, int bs, int B, int L, int K_in, long long smem_limit,
                            int sm_count, int race_min_b, int select_min_b, long long* out) {
  const tb::Policy p{policy[0], policy[1], policy[2], policy[3], policy[4]};
  const TreeBuildLaunch l = tree_build_launch(p, variant, bs, B, L, K_in, smem_limit, sm_count, race_min_b,
                                              select_min_b);
  out[0] = l.variant, out[1] = l.geometry.stage_lp ? 1 : 0, out[2] = l.geometry.select_cap, out[3] = l.geometry.smem;
  out[4] = l.selects ? 1 : 0;
}

// tree_build: dynamic shared memory, whether the log-probs are staged and the select-then-verify capacity, for the
// layout policies (stage_lp, select_cap, whether it races) and the device's per-block limit.
void geom_tree_build_geometry(int B, int L, int K_in, long long smem_limit, int stage_policy, int select_policy,
                              int race, long long* out) {
  const TreeBuildGeometry g =
      tree_build_geometry_of(tb::Policy{race ? int(tb::kRace) : int(tb::kHeapPop), stage_policy, select_policy, 0, -1},
                             B, L, K_in, smem_limit);
  out[0] = g.smem;
  out[1] = g.stage_lp ? 1 : 0;
  out[2] = g.select_cap;
}

// tree_build: the most dynamic shared memory the variant's launch asks for anywhere in the contract's limits
// (every budget B, depth L and top-k K = min(B, K_in)) under the per-block limit smem_limit; out = bytes, B, L, K of
// the first shape that asks for it.
void geom_tree_build_smem_max(long long smem_limit, int stage_policy, int select_policy, int race, long long* out) {
  out[0] = out[1] = out[2] = out[3] = -1;
  for (int B = 0; B <= CONTRACT_MAX_BUDGET; ++B)
    for (int L = 0; L <= CONTRACT_MAX_DEPTH; ++L)
      for (int K = 0; K <= (B < CONTRACT_MAX_TOPK ? B : CONTRACT_MAX_TOPK); ++K) {
        const bool stage = tree_build_stages_lp(B, L, K, smem_limit, stage_policy);
        const int cap = tree_build_select_cap(B, L, K, smem_limit, select_policy, stage, race != 0);
        const long long bytes = tree_build_smem(B, L, K, stage, cap, race != 0).total;
        if (bytes > out[0]) out[0] = bytes, out[1] = B, out[2] = L, out[3] = K;
      }
}

// tree_accept: dynamic shared memory for tree width D.
long long geom_tree_accept_smem(int D) { return tree_accept_smem_bytes(D); }

// tree_verify: the named fields of tv::geometry_fields, per request.
const char* tv_geometry_field_names() { return TV_GEOMETRY_FIELDS; }
int tv_geometry_field_count() { return tv::kGeometryFields; }
int tv_sm90a_serves(int bf16, long long page_size) { return tv::sm90a_serves(bf16 != 0, page_size) ? 1 : 0; }
// budget: the build's shared-memory budget (kernel_smem_budget), which picks the portable kernel's tile.
void tv_geometry_fields(long long n_keys, long long rows, int variant, long long chunk, long long budget,
                        long long* out) {
  tv::geometry_fields(n_keys, rows, variant, chunk, out, budget);
}
long long tv_unbounded_budget() { return tv::kUnbounded; }
// tree_verify's planned schedule (tree_verify.cuh) for a batch of bs requests of n_keys[b] keys (prefix + Q), Q·H =
// rows, on `ctas` CTAs a wave: chunk[b] (keys), off[b] (the request's first partial slot; 0 for one split), the unit
// table (int32 [1 + 3 x planned_max_units]); out = {target T in key blocks, units, partial slots, most splits}.
void tv_planned_schedule(const long long* n_keys, int bs, long long rows, int variant, long long ctas,
                         long long* chunk, long long* off, int* units, long long* out) {
  const long long bn = tv::block_n(variant), tiles = tv::row_tiles(rows, variant);
  auto blocks = [&](int b) { return int(tv::ceil_div(n_keys[b], bn)); };
  long long longest = 1;
  for (int b = 0; b < bs; ++b) longest = blocks(b) > longest ? blocks(b) : longest;
  const int T = int(tv::planned_target(longest, bs, tiles, ctas, variant, [&](long long t) {
    long long n = 0;
    for (int b = 0; b < bs; ++b) n += tv::plan_splits(blocks(b), int(t));
    return n;
  }));
  long long slots = 0, unit = 0, most = 0;
  // per request at T: its chunk in key blocks and its splits (once each), and the unit table's request order
  // (plan_goes_before, on the chunks as the plan kernel compares them); the partial slots stay in request order
  std::vector<int> order(bs), chunk_blocks(bs), splits(bs);
  for (int b = 0; b < bs; ++b) {
    const int s = tv::plan_splits(blocks(b), T);
    chunk_blocks[b] = tv::plan_chunk_blocks(blocks(b), T), splits[b] = s, order[b] = b;
    chunk[b] = chunk_blocks[b] * bn;
    off[b] = s > 1 ? slots : 0;
    slots += s > 1 ? s : 0;
    most = s > most ? s : most;
  }
  std::sort(order.begin(), order.end(), [&](int r, int b) {
    return tv::plan_goes_before(chunk_blocks[r], r, chunk_blocks[b], b);
  });
  for (const int b : order)
    for (int sp = 0; sp < splits[b]; ++sp)
      for (long long t = 0; t < tiles; ++t, ++unit) {
        int* u = units + 1 + tv::kPlanUnitFields * unit;
        u[0] = int(t), u[1] = sp, u[2] = b;
      }
  units[0] = int(unit);
  out[0] = T, out[1] = unit, out[2] = slots, out[3] = most;
}
// Its bounds for any batch of bs requests: out = {grid (units) of the launch, partial slots}.
void tv_planned_bounds(long long bs, long long rows, int variant, long long ctas, long long* out) {
  out[0] = tv::planned_max_units(bs, rows, ctas, variant);
  out[1] = tv::planned_max_slots(rows, ctas, variant);
}

// draft_topk: the fields of draft_topk_geometry_fields (draft_topk.cuh).
void geom_draft_topk_geometry(int V, int K, long long rows, long long* out) {
  draft_topk_geometry_fields(V, K, rows, out);
}
}
