"""Deliberately broken CUDA kernels: each is a source patch on the op's kernel build specs (every variant of
that source), so the cache key hashes the patched source and nothing in kernels_cu knows about mutants.
An entry is (op, old, new) for the op's main source kernels_cu/<op>.cu, (op, old, new, source) for another
source of the op (the sm90a variant's kernels_cu/tree_verify_sm90a.cu), or (op, old, new, header) for a header
the op's sources include (tree_build's strategies, kernels_cu/tree_build_device/*.cuh): every spec of the op
whose source includes it gets the patch.

A pytest plugin: `pytest -p harness.kernel_mutants --kernel-mutant NAME ...` swaps the patched specs in
before collection. meta/test_kernel_mutants.py runs the op's conformance tests with --impl cuda against each
mutant and requires a failure.
"""

from __future__ import annotations

import dataclasses
import struct

from kernels_cu import specs

# tree_build's strategy headers (kernels_cu/tree_build_device/): a mutant of one names it as its file
H_NODES = "tree_build_device/nodes.cuh"
H_LANE = "tree_build_device/lane_pop.cuh"
H_SELECT = "tree_build_device/select.cuh"
H_LEVEL = "tree_build_device/level_select.cuh"
H_WARP = "tree_build_device/warp_select.cuh"
H_RACE = "tree_build_device/race.cuh"

MUTANTS: dict[str, tuple[str, ...]] = {
    # tree_build: every build's tie order (tree_build_device/nodes.cuh), the lane-cached replay's successors and its
    # -inf successors (lane_pop.cuh: every variant but the heap pops replays by it), the layouts (tree_build.cu)
    "k_tb_ties_reversed": ("tree_build", "if (wa != wb) return wa < wb;", "if (wa != wb) return wa > wb;", H_NODES),
    "k_tb_reassociated_sibling": (
        "tree_build",
        "__dadd_rn(__dsub_rn(e.score, double(row[e.rank])), double(row[e.rank + 1]))",
        "__dadd_rn(e.score, __dsub_rn(double(row[e.rank + 1]), double(row[e.rank])))",
        H_LANE,
    ),
    "k_tb_mask_without_self": (
        "tree_build",
        "      acc |= 1u << (j & 31);\n",
        "      if (j != i || j == 0) acc |= 1u << (j & 31);\n",
    ),
    "k_tb_inf_popped": ("tree_build", "if (s2 != -CUDART_INF) {", "if (true) {", H_LANE),
    "k_tb_full_mask_offset": (
        "tree_build",
        "(long long)D * D * b + (long long)D * s_prefix_sum",
        "(long long)D * D * b + s_prefix_sum",
    ),
    # tree_build:lane_cached (tb::kLanePop, lane_pop.cuh): the cached lane bests and their successors, the key order,
    # the rescan, the ties, the sibling links
    "k_tb_lane_child_not_compared": (  # a lane keeps its stale best when it receives a better first child
        "tree_build",
        "      n += 1;\n      changed = true;\n",
        "      n += 1;\n",
        H_LANE,
    ),
    "k_tb_lane_stale_successors": (  # a new best keeps the successor scores of the lane's previous best
        "tree_build",
        "if (bj >= 0) lane_successors(bs, bm, lp, ls, L, K, &s2, &s3);",
        "if (bj < 0) lane_successors(bs, bm, lp, ls, L, K, &s2, &s3);",
        H_LANE,
    ),
    "k_tb_lane_sibling_link_to_parent": (  # the next-sibling link written on the parent, not the previous sibling
        "tree_build",
        "else o.next[gen] = node;",
        "else o.next[e.parent] = node;",
        H_LANE,
    ),
    "k_tb_lane_signed_zero_key": (  # -0.0 keyed below +0.0: equal scores ordered by sign, not by rank tuple
        "tree_build",
        "__double_as_longlong(s == 0.0 ? 0.0 : s)",
        "__double_as_longlong(s)",
        H_NODES,
    ),
    "k_tb_lane_rescan_skips_last": (
        "tree_build",
        "for (int j = 0; j < n; ++j) {",
        "for (int j = 0; j < n - 1; ++j) {",
        H_LANE,
    ),
    "k_tb_lane_tie_first_lane": (  # equal scores in several lanes: the lowest lane wins, whatever its tuple
        "tree_build",
        "if (tied & (tied - 1)) {  // equal scores",
        "if (false) {  // equal scores",
        H_LANE,
    ),
    # tree_build:select_verify (tb::kLevelSelect): the replay where the selection is not the heap's (select.cuh,
    # every select build), and the stability check of the sibling-chain shortcut (level_select.cuh)
    "k_tb_select_no_fallback": ("tree_build", "#define TB_FALLBACK 1", "#define TB_FALLBACK 0", H_SELECT),
    "k_tb_select_chain_unchecked": (
        "tree_build",
        "if (__dsub_rn(sc, l) != c.t0) sh_fail = 1;",
        "if (false) sh_fail = 1;",
        H_LEVEL,
    ),
    # tree_build:select_warp (tb::kWarpSelect, warp_select.cuh): the warp's own chain check, raise of tau, compaction
    "k_tb_warp_chain_unchecked": ("tree_build", "unstable = __dsub_rn(sc, l) != t0;", "unstable = false;", H_WARP),
    "k_tb_warp_tau_overshoots": (  # tau raised where only B/2 nodes reach it: the selection misses nodes of S
        "tree_build",
        "if (__reduce_add_sync(0xffffffffu, c[w]) >= B && nlo == lo) {",
        "if (__reduce_add_sync(0xffffffffu, c[w]) >= B / 2 && nlo == lo) {",
        H_WARP,
    ),
    "k_tb_warp_compaction_keeps_old_parent": (
        "tree_build",
        "      u.meta[j] = (m & ~kMetaDropped) | np;\n      u.aux[j] = dw;\n",  # warp_compact's (unique)
        "      u.meta[j] = m;\n      u.aux[j] = dw;\n",
        H_WARP,
    ),
    # tree_build:select_race (tb::kRace): the winner's nodes (tree_build.cu's layouts), and only a checked selection
    # may win (race.cuh) (the loser's count, not its nodes: a loser's half-written parent chain can loop the
    # layouts' ancestor walk)
    "k_tb_race_loser_count": (
        "tree_build",
        "const int n = selection_won ? race_word >> kRaceCountShift : s_count;",
        "const int n = selection_won ? s_count : race_word >> kRaceCountShift;",
    ),
    "k_tb_race_unchecked_win": (
        "tree_build",
        "      if (g.tid == 0 && st == kSelected)\n",
        "      if (g.tid == 0 && st != kOverflow)\n",
        H_RACE,
    ),
    "k_ta_last_match": ("tree_accept", "atomicMin(&s_match[parent], c)", "atomicMax(&s_match[parent], c)"),
    "k_ta_commit_source_off_by_one": (
        "tree_accept",
        "const int p = P + s_path[j + 1];",
        "const int p = P + s_path[j];",
    ),
    "k_ta_bonus_from_root": ("tree_accept", "bonus[b] = s_tgt[u];", "bonus[b] = s_tgt[0];"),
    # tree_accept's deferred path (TA.4.4): a refused call must not commit; the device check must see aliases
    "k_ta_deferred_commits_despite_flag": (
        "tree_accept",
        "  if (flag != nullptr && *flag) return;",
        "  if (false) return;",
    ),
    "k_ta_check_misses_alias": (
        "tree_accept",
        "bad |= (atomicOr(&rows_seen[row >> 5], bit) & bit) != 0;",
        "atomicOr(&rows_seen[row >> 5], bit);",
    ),
    "k_ta_check_depth_of_first_child_links_only": (  # a sibling link counted as a level: depths over-estimated
        "tree_accept",
        "if (atomicAdd(&s_in[to], 1) == 0) { s_up[to] = i; s_acc[to] = k == 0; }",
        "if (atomicAdd(&s_in[to], 1) == 0) { s_up[to] = i; s_acc[to] = 1; }",
    ),
    # the step's advance (TA.4.5, spec/step.md): the prefix moves by the accepted drafts alone, not the root's row too
    # tree_build's deferred build (ST.2.4): a build on values its check (or an earlier op of the step) refused
    "k_tb_builds_on_refused_values": (
        "tree_build",
        "  if (refused != nullptr && *refused != 0u) return;",
        "  if (false) return;",
    ),
    "k_ta_advance_off_by_one": ("tree_accept", "advance_lens[b] = P + 1 + n;", "advance_lens[b] = P + n;"),
    # draft_topk: the tie order, the log-sum-exp, -inf, the radix passes, the row stride, the zeros
    "k_dt_ties_higher_id": ("draft_topk", "#define DT_ID_BITS(id) (~(id))", "#define DT_ID_BITS(id) (id)"),
    "k_dt_lse_row_truncated": (  # a split's sum (load_split: one-block rows and splits) leaves out each thread's
        "draft_topk",  # last logit, the row's tokens from 3,840 of each 4,096
        "  for (int j = 0; j < DT_ITEMS; ++j) s += exp_term(order_logit(ord[j]), m);",
        "  for (int j = 0; j < DT_ITEMS - 1; ++j) s += exp_term(order_logit(ord[j]), m);",
    ),
    "k_dt_lse_without_last_split": (  # the merge joins every split's sum but the last (lane l sums splits l, l + 32)
        "draft_topk",
        "      for (int i = threadIdx.x; i < splits; i += 32) {",
        "      for (int i = threadIdx.x; i < splits - 1; i += 32) {",
    ),
    # (No "-inf counted" mutant: dropping exp_term's -inf guard changes nothing the op returns, since an all -inf
    # row's log-probs are -inf by the output's own guard and a split's NaN sum is skipped by the merge; judged
    # equivalent on an H100, 2026-12-05.)
    "k_dt_block_max_first_warp": (  # the block's largest logit taken from warp 0 alone: exp(x - m) overflows
        "draft_topk",
        "for (int w = 1; w < DT_THREADS / 32; ++w) v = fmaxf(v, sh.red[w]);",
        "for (int w = 1; w < 1; ++w) v = fmaxf(v, sh.red[w]);",
    ),
    "k_dt_last_bucket_dropped": (  # the radix histogram never counts digit 0
        "draft_topk",
        "const int digit = in ? int((key >> shift) & 0xff) : 256;",
        "const int digit = in && ((key >> shift) & 0xff) ? int((key >> shift) & 0xff) : 256;",
    ),
    "k_dt_row_stride_off_by_one": (
        "draft_topk",
        "const T* x = logits + row * V;",
        "const T* x = logits + row * (V - 1);",
    ),
    "k_dt_split_stride_off_by_one": (
        "draft_topk",
        "const T* x = logits + row * V + start;",
        "const T* x = logits + row * (V - 1) + start;",
    ),
    "k_dt_signed_zero": ("draft_topk", "  if (x == 0.0f) x = 0.0f;", "  if (false) x = 0.0f;"),
    "k_dt_nan_let_through": (  # the device check (DT.4.5) refuses +inf only: a NaN logit goes unreported
        "draft_topk",
        "return !(v <= 3.402823466e38f) && v != -CUDART_INF_F; }",
        "return v == CUDART_INF_F; }",
    ),
    "k_dt_kth_tie_by_arrival": (  # the radix threshold at the K-th logit alone, the first K keys to arrive kept
        "draft_topk",
        "    const u64 t = radix_threshold(sh, K, for_each_key);\n"
        "    if (threadIdx.x == 0) sh.count = 0;\n"
        "    __syncthreads();\n"
        "    for_each_key([&](u64 key) { gather(sh, keys, key, t); });",
        "    const u64 t = radix_threshold(sh, K, for_each_key) & 0xffffffff00000000ull;\n"
        "    if (threadIdx.x == 0) sh.count = 0;\n"
        "    __syncthreads();\n"
        "    for_each_key([&](u64 key) {\n"
        "      if (key != DT_NO_KEY && key >= t) {\n"
        "        const int at = atomicAdd(&sh.count, 1);\n"
        "        if (at < K) keys[at] = key;\n"
        "      }\n"
        "    });",
    ),
    # draft_topk:prefilter: the bound, the ranks, the fall back to the radix passes
    "k_dt_prefilter_bound_of_warp0": (  # the bound from warp 0 alone: fewer than K keys may lie above it
        "draft_topk",
        "for (int w = 1; w < kWarps; ++w) b = sh.bound[w] < b ? sh.bound[w] : b;",
        "for (int w = 1; w < 1; ++w) b = sh.bound[w] < b ? sh.bound[w] : b;",
    ),
    "k_dt_prefilter_rank_counts_self": (
        "draft_topk",
        "for (int k = 0; k < n; ++k) rank += sh.cand[k] > c;",
        "for (int k = 0; k < n; ++k) rank += sh.cand[k] >= c;",
    ),
    "k_dt_prefilter_ties_by_arrival": (  # equal logits ranked by the order they were gathered in, not by id
        "draft_topk",
        "for (int k = 0; k < n; ++k) rank += sh.cand[k] > c;",
        "for (int k = 0; k < n; ++k)\n"
        "      rank += (sh.cand[k] >> 32) > (c >> 32) || ((sh.cand[k] >> 32) == (c >> 32) && k < i);",
    ),
    "k_dt_looks_skip_at_bound": (  # the register look skips a warp whose best logit equals the bound's: the bound's
        "draft_topk",  # own key (and its ties) never gathered, fewer than K candidates ranked
        "for (int j = 0; j < DT_ITEMS; ++j) any |= r.ord[j] >= hi;",
        "for (int j = 0; j < DT_ITEMS; ++j) any |= r.ord[j] > hi;",
    ),
    "k_dt_prefilter_no_fallback": (  # past DT_CAND_CAP candidates, the first DT_CAND_CAP gathered are ranked
        "draft_topk",
        "  const int n = sh.ncand;\n  if (n > DT_CAND_CAP) return false;",
        "  const int n = min(sh.ncand, DT_CAND_CAP);",
    ),
    # tree_verify's deferred plan (TV.3.7): the chunk, the pages, the closure
    "k_tv_plan_chunk_from_max_context": (  # every request planned as if it were max_context long: other splits
        "tree_verify",
        "tv::default_split_chunk(P_ok + Q, rows, variant, budget)",
        "tv::default_split_chunk(max_keys, rows, variant, budget)",
    ),
    # the planned schedule on the device (sm90a_planned's plan, made by this kernel: JUDGED_ON below)
    "k_tv_plan_kept_from_last_launch": (  # the chunk of an earlier launch reused after the lengths changed
        "tree_verify",
        "                     : planned        ? plan.chunk\n",
        "                     : planned        ? (split_chunk[b] > 0 ? split_chunk[b] : plan.chunk)\n",
    ),
    "k_tv_plan_waves_of_first_request": (  # the batch's splits counted for request 0 only: more CTAs than a wave
        "tree_verify",
        "for (int r = lane; r < bs; r += 32) n += tv::plan_splits(lens.blocks(r), static_cast<int>(T));",
        "for (int r = lane; r < 1; r += 32) n += tv::plan_splits(lens.blocks(r), static_cast<int>(T));",
    ),
    "k_tv_plan_units_tile_zero": (  # every unit of a split given row tile 0: the others never scheduled
        "tree_verify",
        "    u[0] = i % t, u[1] = i / t, u[2] = b;",
        "    u[0] = 0, u[1] = i / t, u[2] = b;",
    ),
    # tree_verify: the mask, the paging, the online softmax, the lse and the split-KV combine
    "k_tv_mask_transposed": ("tree_verify", "tree_bit(vis_b, W, qi, p - P)", "tree_bit(vis_b, W, p - P, qi)"),
    "k_tv_tree_rows_shifted": (  # tree row j read at position prefix_len + j + 1 (the prefix/tree boundary)
        "tree_verify",
        "(p < P || tree_bit(vis_b, W, qi, p - P))",
        "(p < P || (p > P && tree_bit(vis_b, W, qi, p - P - 1)))",
    ),
    "k_tv_tile_key_cap_off_by_one": (  # the tile's last query loses its own tree row
        "tree_verify",
        "if (ke > static_cast<long long>(P) + i_max + 1) ke = static_cast<long long>(P) + i_max + 1;",
        "if (ke > static_cast<long long>(P) + i_max) ke = static_cast<long long>(P) + i_max;",
    ),
    "k_tv_block_table_of_request0": (
        "tree_verify",
        "const int* bt = block_table + static_cast<size_t>(b) * max_pages;",
        "const int* bt = block_table;",
    ),
    "k_tv_kv_row_offset_32bit": (  # the cache row's element offset in int: wraps past 2^31 elements (4 GiB of bf16)
        "tree_verify",
        "src = kv + (static_cast<size_t>(bt[p / page_size]) * page_size + p % page_size) * tv::kHeadDim;",
        "src = kv + (bt[p / page_size] * page_size + p % page_size) * tv::kHeadDim;",
    ),
    "k_tv_mask_added_not_selected": (  # -inf added to the logit: a NaN row the query cannot see leaks in
        "tree_verify",
        "x[e] = seen ? dot * scale : neg_inf();",
        "x[e] = dot * scale + (seen ? 0.f : neg_inf());",
    ),
    "k_tv_bf16_running_max_not_rescaled": (
        "tree_verify",
        "const float a_lo = sAlpha[mt * 16 + (lane >> 2)];\n"
        "      const float a_hi = sAlpha[mt * 16 + (lane >> 2) + 8];",
        "const float a_lo = 1.f;\n      const float a_hi = 1.f;",
    ),
    "k_tv_f32_running_max_not_rescaled": ("tree_verify", "const float a = sAlpha[r0 + r];", "const float a = 1.f;"),
    "k_tv_lse_without_scale": (
        "tree_verify",
        "lse[static_cast<size_t>(b) * QH + R] = m_run + logf(l_run);",
        "lse[static_cast<size_t>(b) * QH + R] = m_run / scale + logf(l_run);",
    ),
    "k_tv_split_lse_without_scale": (
        "tree_verify",
        "part_lse[off * QH + R] = l_run > 0.f ? m_run + logf(l_run) : neg_inf();",
        "part_lse[off * QH + R] = l_run > 0.f ? m_run / scale + logf(l_run) : neg_inf();",
    ),
    "k_tv_split_starts_one_key_late": (
        "tree_verify",
        "const int kbeg = static_cast<int>(static_cast<long long>(s) * chunk);",
        "const int kbeg = static_cast<int>(static_cast<long long>(s) * chunk) + (s > 0);",
    ),
    "k_tv_combine_equal_weights": (
        "tree_verify",
        "const auto weight = [&](float ls) { return ls == neg_inf() ? 0.f : expf(ls - mx); };",
        "const auto weight = [&](float ls) { return ls == neg_inf() ? 0.f : 1.f; };",
    ),
    "k_tv_combine_weights_of_next_split": (
        "tree_verify",
        "x[g] = *reinterpret_cast<const float4*>(rows + s * split_stride);",
        "x[g] = *reinterpret_cast<const float4*>(rows + ((s + 1) % n) * split_stride);",
    ),
    # tree_verify's small tiles (portable_99k on sm_90; portable itself on sm_120): the prefetch of the next KV
    # block into registers, the 32-row warp layout, the 16 x 16 fp32 tile
    "k_tv_prefetch_same_block": (  # every block after the first is the first block again
        "tree_verify",
        "if (j + 1 < nblk) prefetch_kv(j + 1);",
        "if (j + 1 < nblk) prefetch_kv(j);",
    ),
    "k_tv_prefetch_tail_of_page": (  # rows past the split's end in its last page are loaded (0 x NaN)
        "tree_verify",
        "      if (p < kend) {\n        const T* row",
        "      if (p < kend || p / page_size == (kend - 1) / page_size) {\n        const T* row",
    ),
    "k_tv_bf16_row_half_of_tuned_tile": (  # the second row half at row 32, as in the 64-row tile
        "tree_verify",
        "smem_u32(sQ + (rh * (M / 2) + (lane & 15)) * PITCH",
        "smem_u32(sQ + (rh * 32 + (lane & 15)) * PITCH",
    ),
    "k_tv_bf16_p_halves_swapped": (  # the 32-row tile's P store: keys 4s+2, 4s+3 written first
        "tree_verify",
        "make_uint2(pack_bf16(p[0], p[1]), pack_bf16(p[2], p[3]))",
        "make_uint2(pack_bf16(p[2], p[3]), pack_bf16(p[0], p[1]))",
    ),
    "k_tv_f32_small_softmax_key0": (  # the 16-key fp32 softmax: every thread of a row reads the row's first key
        "tree_verify",
        "const float d = sS[part * M * SP + srow * SP + ssub * KPT + e];",
        "const float d = sS[part * M * SP + srow * SP + e];",
    ),
}

SM90A = "tree_verify_sm90a.cu"
# tree_verify, variant sm90a: the same bugs in its own source, and the ones its machinery makes possible (the
# two warpgroups' exchange of P, running max and rescale factors, the per-slab barriers, the buffer refills)
MUTANTS |= {
    "k_tv90_mask_transposed": (
        "tree_verify",
        "tree_bit(x.vis_b, x.W, qi[h], p - x.P)",
        "tree_bit(x.vis_b, x.W, p - x.P, qi[h])",
        SM90A,
    ),
    "k_tv90_tree_rows_shifted": (
        "tree_verify",
        "(p < x.P || tree_bit(x.vis_b, x.W, qi[h], p - x.P))",
        "(p < x.P || (p > x.P && tree_bit(x.vis_b, x.W, qi[h], p - x.P - 1)))",
        SM90A,
    ),
    "k_tv90_tile_key_cap_off_by_one": (
        "tree_verify",
        "if (ke > static_cast<long long>(x.P) + i_max + 1) ke = static_cast<long long>(x.P) + i_max + 1;",
        "if (ke > static_cast<long long>(x.P) + i_max) ke = static_cast<long long>(x.P) + i_max;",
        SM90A,
    ),
    "k_tv90_block_table_of_request0": (
        "tree_verify",
        "x.bt = block_table + static_cast<size_t>(b) * max_pages;",
        "x.bt = block_table;",
        SM90A,
    ),
    "k_tv90_running_max_not_rescaled": (
        "tree_verify",
        "for (int e = 0; e < 32; ++e) o[n][e] *= c[(e >> 1) & 1];",
        "for (int e = 0; e < 32; ++e) o[n][e] *= 1.f;",
        SM90A,
    ),
    "k_tv90_lse_without_scale": (
        "tree_verify",
        "lse[static_cast<size_t>(b) * QH + R] = (m_run[h] + log2f(l)) * kLn2;",
        "lse[static_cast<size_t>(b) * QH + R] = (m_run[h] / x.scale_log2 + log2f(l)) * kLn2;",
        SM90A,
    ),
    "k_tv90_split_lse_without_scale": (
        "tree_verify",
        "part_lse[off * QH + R] = l > 0.f ? (m_run[h] + log2f(l)) * kLn2 : neg_inf();",
        "part_lse[off * QH + R] = l > 0.f ? (m_run[h] / x.scale_log2 + log2f(l)) * kLn2 : neg_inf();",
        SM90A,
    ),
    "k_tv90_tail_rows_not_zeroed": (  # rows past prefix_len + Q in the last page reach P·V (0 x NaN)
        "tree_verify",
        "if (j != nblk - 1 || nv >= kBN) return;",
        "if (true) return;",
        SM90A,
    ),
    "k_tv90_unmasked_boundary_block": (  # the prefix fast path taken by a block holding tree rows
        "tree_verify",
        "k0 + kBN <= x.kend && k0 + kBN <= x.P;",
        "k0 + kBN <= x.kend && k0 <= x.P;",
        SM90A,
    ),
    "k_tv90_keys_before_split_seen": (  # the first block's keys before the split start counted twice
        "tree_verify",
        "p >= x.kbeg && p < x.kend && (p < x.P",
        "p < x.kend && (p < x.P",
        SM90A,
    ),
    "k_tv90_q_tile_unswizzled": (
        "tree_verify",
        "cp_async16(x.sQ + (c >> 3) * kSlab + r * 128 + (((c & 7) ^ (r & 7)) << 4),",
        "cp_async16(x.sQ + (c >> 3) * kSlab + r * 128 + ((c & 7) << 4),",
        SM90A,
    ),
    "k_tv90_v_columns_of_first_half": (  # warpgroup 1's P·V with its own P reads warpgroup 0's V columns
        "tree_verify",
        "wgmma_rs_mn256(o, pb[kk], desc_v256(vbuf, wg * 4, kk));",
        "wgmma_rs_mn256(o, pb[kk], desc_v256(vbuf, 0, kk));",
        SM90A,
    ),
    "k_tv90_halves_rescaled_differently": (  # warpgroup 1 misses the even block's rescale factor
        "tree_verify",
        "        scale_o(o, c0);\n        pv_smem(o, x.pdesc(j0), x.vdesc(j0), 1);\n      }\n      float c1[2];",
        "        pv_smem(o, x.pdesc(j0), x.vdesc(j0), 1);\n      }\n      float c1[2];",
        SM90A,
    ),
    "k_tv90_rescale_of_previous_pair": (  # warpgroup 0 takes the odd block's factor before it is exchanged
        "tree_verify",
        "          c1[h] = lds(x.stat(kC1, ra + 8 * h));",
        "          c1[h] = 1.f;",
        SM90A,
    ),
    # (S reading a slab before its barrier completes is a race whose outcome depends on whether the copy has
    # landed: the suite cannot be expected to kill it every run, so the deterministic mistake stands for it)
    "k_tv90_slab_of_the_other_buffer": (  # S reads slab 5 of the other block's buffer
        "tree_verify",
        "wgmma_ss_kk(s, desc_k(dq, C, ks), desc_k(kdesc(j), C, ks),",
        "wgmma_ss_kk(s, desc_k(dq, C, ks), desc_k(kdesc(C == 5 ? j + 1 : j), C, ks),",
        SM90A,
    ),
    "k_tv90_refill_with_later_block": (  # warpgroup 1 refills buffer 0's V columns with the block after next
        "tree_verify",
        "        if (wt == 0) x.load(j0 + 2, 4, kSlabs);",
        "        if (wt == 0) x.load(j0 + 2 < x.nblk - 2 ? j0 + 4 : j0 + 2, 4, kSlabs);",
        SM90A,
    ),
    "k_tv90_unit_read_twice": (  # a planned schedule's even units run twice, its odd ones never
        "tree_verify",
        "    const int u = blockIdx.x;\n",
        "    const int u = blockIdx.x & ~1;\n",
        SM90A,
    ),
    "k_tv90_l_of_even_blocks_only": (  # the odd blocks' softmax denominators dropped at the end
        "tree_verify",
        "const float l = lds(x.stat(kL0, r)) + lds(x.stat(kL1, r)), inv",
        "const float l = lds(x.stat(kL0, r)) + 0.f * lds(x.stat(kL1, r)), inv",
        SM90A,
    ),
}


# Every thread of every block spins ~20000 SM cycles (about 10 µs at the H200's 1.98 GHz) before its work.
SPIN = "{ const long long t0 = clock64(); while (clock64() - t0 < 20000) { } }  // planted slowdown\n"
# Correct kernels that are slower: the perf regression gate must catch them (tools/gpu_suite.sh's `gate`).
SLOWDOWNS = {
    "slow_tb_spin_10us": (
        "tree_build",
        "  const int tid = threadIdx.x;\n",
        "  const int tid = threadIdx.x;\n  " + SPIN,
    ),
    # Every selection of every select variant fails its check (select_finish, which the three select builds share,
    # returns kUnverified), so every request replays the heap: still exact, slower where the selection was the
    # faster path, and at B = 16-64 not slower at all, so a time threshold cannot be trusted to see it; the fallback
    # rate does (harness/bench/gate.py: any rise fails). tools/gpu_suite.sh's `gate_fallback` plants it. (A
    # TB_SELECT_MIN_B above every budget would not do: the build would then never select, and its reporting
    # build would count no fallback.)
    "slow_tb_always_fallback": (
        "tree_build",
        "  const int status = sh_fail ? kUnverified : kSelected;\n",
        "  const int status = kUnverified;  // planted: every selection fails its check\n",
        H_SELECT,
    ),
}


def mutated_specs(name: str) -> list[specs.KernelSpec]:
    """The op's specs with the mutant's (or slowdown's) patch added (ValueError if the patch no longer
    matches the source: checked when the spec is compiled)."""
    if name not in MUTANTS and name not in SLOWDOWNS:
        raise ValueError(f"--kernel-mutant {name!r} names no kernel mutant or slowdown")
    slug, old, new, *rest = MUTANTS.get(name) or SLOWDOWNS[name]
    where = rest[0] if rest else f"{slug}.cu"
    if where.endswith(".cu"):
        return [
            dataclasses.replace(s, patches=(*s.patches, (old, new))) for s in specs.for_op(slug) if s.source == where
        ]
    from kernels_cu import runtime

    return [
        dataclasses.replace(s, patches=(*s.patches, (old, new, where)))
        for s in specs.for_op(slug)
        if where in runtime.source_with_headers(s)[1]
    ]


# What the GPU suite's conformance stage runs (tools/gpu_suite.sh stage_conformance; meta/test_kernel_mutants.py
# checks that the two agree). A kernel mutant is judged by the same tests that certify the kernels.
CONFORMANCE_PATHS = ("conformance", "meta")
CONFORMANCE_DESELECT = ("meta/test_mutants.py", "meta/test_kernel_mutants.py")


def twin_variants(name: str) -> list[str]:
    """The sm_120 twins (`_99k`, kernels_cu/specs.py) built from the source mutant `name` patches."""
    twins = {s.variant for s in specs.sm120_twins()}
    return [s.variant for s in mutated_specs(name) if s.variant in twins]


def code_sections(cubin: bytes) -> dict[str, bytes]:
    """The machine code of a cubin: its ELF64 `.text.*` sections by name (line tables and other metadata
    left out, so a patch that only moves source lines compares equal)."""
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_off = headers[shstrndx][4]
    out = {}
    for name_at, _type, _flags, _addr, off, size in headers:
        name = cubin[names_off + name_at : cubin.index(b"\0", names_off + name_at)].decode()
        if name.startswith(".text"):
            out[name] = cubin[off : off + size]
    return out


def twins_changed(name: str) -> list[str]:
    """The twins whose machine code mutant `name` changes (compiled here, no GPU): a patch of a path a twin
    does not build (another variant's selection, say) cannot be killed on that twin and is not judged there."""
    from kernels_cu import runtime

    base = {s.variant: s for s in specs.sm120_twins()}
    changed = []
    for s in mutated_specs(name):
        if s.variant in base:
            arch = s.archs[0]
            before = code_sections(runtime.compile_kernel(base[s.variant], arch).cubin)
            if code_sections(runtime.compile_kernel(s, arch).cubin) != before:
                changed.append(s.variant)
    return changed


# Mutants of a source whose kernels other variants launch too, judged on those variants as well: tree_verify.cu's plan
# kernel makes the deferred split plan of the sm90a variants (the planned rule is sm90a_planned's alone).
JUDGED_ON = {
    "k_tv_plan_kept_from_last_launch": ("sm90a", "sm90a_planned"),
    "k_tv_plan_waves_of_first_request": ("sm90a_planned",),
    "k_tv_plan_units_tile_zero": ("sm90a_planned",),
}

# Mutants of the planned schedule (the plan kernel's plan_request_on_device and its chunk): only sm90a_planned's
# deferred call runs it (tree_verify_ops.prepare_deferred passes plan_ctas > 0 for the planned variant alone), so the
# portable twins build the patched code and never run it; their judging could only end "survived", after the whole
# suite. No sm_120 variant plans a schedule.
PLANNED_SCHEDULE_ONLY = frozenset(JUDGED_ON)

# The test written to kill each mutant that no judging has killed yet (harness/mutant_killers.json has the ones that
# did): a judging runs it first, after a recorded killer (harness.judging.first_args), so that the mutant does not wait
# minutes behind the op's other tests (three judgings ran past a 375 s bound so, an H100, 2026-12-08). Order only: the
# verdict is the whole selection's.
WRITTEN_TO_KILL = {
    "k_tv_kv_row_offset_32bit": (
        "conformance/test_extremes_verify.py::test_kv_pool_past_2_31_bytes[impl=cuda:portable-fp32]",
    ),
    "k_tv_plan_kept_from_last_launch": (
        "conformance/test_device_arrays.py::test_tree_verify_deferred_replans_when_lengths_change[impl=cuda:sm90a_planned]",
    ),
    "k_tv_plan_units_tile_zero": (
        "conformance/test_device_arrays.py::test_tree_verify_deferred_replans_when_lengths_change[impl=cuda:sm90a_planned]",
    ),
}


def judging_command(name: str, report_dir, variants=None) -> list[str]:
    """The pytest command that judges kernel mutant `name`: the conformance stage's tests that can run its
    kernels (those of a `cuda` implementation, and the GPU-marked ones: a CPU-only test cannot see a broken
    kernel, so it must not be taken for its killer), with the mutated variants as the implementations, its
    own op's tests and the fixtures first (pytest_collection_modifyitems below: most mutants die there in
    seconds), stopping at the first failure.
    `variants` narrows the implementations (the twins alone: a kill on the sm_90 build says nothing of the
    build an sm_120 GPU runs, whose tiles and capacities differ)."""
    chosen = [s.variant for s in mutated_specs(name) if variants is None or s.variant in variants]
    chosen += [v for v in JUDGED_ON.get(name, ()) if variants is None and v not in chosen]
    impls = [a for v in chosen for a in ("--impl", f"cuda:{v}")]
    deselect = [a for d in CONFORMANCE_DESELECT for a in ("--deselect", d)]
    return [
        *CONFORMANCE_PATHS,
        *deselect,
        "-k",
        "cuda or gpu",
        *impls,
        "--require-gpu",
        "-x",
        "-q",
        "-p",
        "harness.kernel_mutants",
        "--kernel-mutant",
        name,
        "-p",
        "no:xdist",
        "-p",
        "no:cacheprovider",
        "--report-dir",
        str(report_dir),
    ]


def pytest_addoption(parser):
    parser.addoption("--kernel-mutant", help="compile the kernels of this mutant's (or slowdown's) op with its patch")


def pytest_configure(config):
    name = config.getoption("--kernel-mutant")
    if name:
        for spec in mutated_specs(name):
            specs.replace_spec(spec)


def judged_first(slug: str) -> tuple[str, ...]:
    """The conformance files a mutant of op `slug` is judged on first (most mutants die there in seconds; the
    device-array tests hold every op's deferred path and the step's advance)."""
    return (f"test_{slug}.py", "test_fixtures.py", "test_device_arrays.py")


def pytest_collection_modifyitems(config, items):
    """Under --kernel-mutant, the op's own tests and the fixtures run first. Naming them first on the command
    line is not enough: pytest merges arguments that overlap ("conformance" holds them) and collects the
    directory in its own order, which put the 577 boundary cases before them."""
    name = config.getoption("--kernel-mutant")
    if not name:
        return
    first = judged_first((MUTANTS.get(name) or SLOWDOWNS[name])[0])

    def rank(item) -> int:
        path = item.path
        return first.index(path.name) if path.parent.name == "conformance" and path.name in first else len(first)

    items.sort(key=rank)  # stable: the rest keep pytest's order
