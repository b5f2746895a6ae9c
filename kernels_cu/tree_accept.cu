// tree_accept: greedy walk of the verified tree, accepted path, bonus token, and the latent-KV commit
// (spec/tree_accept.md). One CTA per request.
//
// The walk itself is at most L <= 32 dependent steps, but finding "the first child of u whose token equals
// target[u]" by chasing next_sibling pointers costs one dependent load per sibling. Instead, every node
// learns its parent in O(log D) parallel pointer-jumping rounds over the sibling lists, every matching child
// c (token[c] == target[parent[c]]) offers itself to its parent with atomicMin, and the smallest offer is
// the first match in list order (siblings are in ascending index: validated on the host). The walk then
// follows that table from the root.
//
// Commit: row prefix_len + j <- row prefix_len + path[j], j = 1..n, which must equal the sequential copy in
// increasing j. Rows can overlap (path [0, 2, 3] copies row 3 into row 2 after row 2 was read for j = 1),
// so each thread owns a 16-byte column of the rows and loads all n sources before storing any.
//
// Launch: grid = bs, block = KERNEL_BLOCK, dynamic shared memory tree_accept_smem_bytes(D) (tree_accept.cuh).
// Inputs are validated first (contract/tree_accept.py): links point forward, no node has two parents, the root
// has no sibling, no node is deeper than max_depth, pages are in range, and the commit's rows of different
// requests never alias (so the blocks cannot race). On the host (flag == nullptr), or on the device by
// tree_accept_check_kernel (the deferred path, TA.4.4), which sets *flag: the walk and the commit then do nothing.
#include "tree_accept.cuh"

// Host-side geometry: out[0] = dynamic shared memory bytes for tree width D.
extern "C" __global__ void tree_accept_geometry(int D, long long* out) { out[0] = tree_accept_smem_bytes(D); }

// TA.1.1-TA.1.3 on the device (the deferred path, spec TA.4.4): any input the contract refuses sets *flag, and the
// host names the error from its own copy when the results are read. One CTA per request; dynamic shared memory
// tree_accept_smem_bytes(D) (four of its int arrays are used). Every read is guarded by the checks before it, so
// the kernel stays in bounds on any values. With a commit (kv_rows > 0), `rows_seen` is a bitmap of the cache's
// kv_rows rows, zeroed before the launch: each request's commit rows prefix_len .. prefix_len + D - 1 set their
// bits, and a bit already set is an alias (TA.1.3).
extern "C" __global__ void __launch_bounds__(KERNEL_BLOCK) tree_accept_check_kernel(
    const int* __restrict__ tokens, const int* __restrict__ first_child, const int* __restrict__ next_sibling,
    const int* __restrict__ target, int D, int L, long long kv_rows, int page_size, const int* __restrict__ block_table,
    int max_pages, const int* __restrict__ prefix_lens, unsigned* __restrict__ rows_seen, unsigned* __restrict__ flag) {
  extern __shared__ int sm[];
  int* s_in = sm;         // [D] incoming links
  int* s_up = s_in + D;   // [D] pointer jumping: the node reached so far up the incoming links (itself at a top)
  int* s_acc = s_up + D;  // [D] depth below s_up (a first-child link is one level, a sibling link none)
  int* s_tmp = s_acc + D;
  const int b = blockIdx.x, tid = threadIdx.x;
  const size_t base = size_t(b) * D;
  bool bad = false;
  for (int i = tid; i < D; i += blockDim.x) {
    s_in[i] = 0;
    s_up[i] = i;
    s_acc[i] = 0;
    bad |= tokens[base + i] < 0 || target[base + i] < 0;
  }
  if (tid == 0) bad |= next_sibling[base] != -1;  // the root has no sibling
  __syncthreads();
  for (int i = tid; i < D; i += blockDim.x) {
    const int links[2] = {first_child[base + i], next_sibling[base + i]};
    for (int k = 0; k < 2; ++k) {
      const int to = links[k];
      if (to == -1) continue;
      if (to <= i || to >= D) { bad = true; continue; }  // forward, inside the tree
      if (atomicAdd(&s_in[to], 1) == 0) { s_up[to] = i; s_acc[to] = k == 0; }  // the first incoming link
    }
  }
  __syncthreads();
  for (int i = tid; i < D; i += blockDim.x) bad |= s_in[i] > 1;  // one parent at most
  // ceil(log2 D) rounds: every node's s_up becomes the top of its chain of incoming links, s_acc its depth below
  // it (a node whose chain ends at the root is in the tree; the others are pads, never walked)
  for (int span = 1; span < D; span <<= 1) {
    for (int i = tid; i < D; i += blockDim.x) s_tmp[i] = s_acc[i] + s_acc[s_up[i]];
    __syncthreads();
    for (int i = tid; i < D; i += blockDim.x) s_acc[i] = s_tmp[i];
    __syncthreads();
    for (int i = tid; i < D; i += blockDim.x) s_tmp[i] = s_up[s_up[i]];
    __syncthreads();
    for (int i = tid; i < D; i += blockDim.x) s_up[i] = s_tmp[i];
    __syncthreads();
  }
  for (int i = tid; i < D; i += blockDim.x) bad |= s_up[i] == 0 && s_acc[i] > L;
  if (kv_rows > 0) {  // the commit's addressing: what the kernel reads and writes
    const long long P = prefix_lens[b];
    const long long need = (P + D + page_size - 1) / page_size;
    const int* bt = block_table + size_t(b) * max_pages;
    if (P < 0 || P + D > CONTRACT_MAX_CONTEXT || need > max_pages) {
      bad = true;
    } else {
      bool pages_ok = true;
      const long long num_pages = kv_rows / page_size;
      for (long long j = tid; j < need; j += blockDim.x) pages_ok &= bt[j] >= 0 && bt[j] < num_pages;
      pages_ok = __syncthreads_and(pages_ok);
      bad |= !pages_ok;
      if (pages_ok) {
        for (int i = tid; i < D; i += blockDim.x) {
          const long long p = P + i, row = (long long)bt[p / page_size] * page_size + p % page_size;
          const unsigned bit = 1u << (row & 31);
          bad |= (atomicOr(&rows_seen[row >> 5], bit) & bit) != 0;
        }
      }
    }
  }
  if (__syncthreads_or(bad) && tid == 0) atomicOr(flag, 1u);
}

extern "C" __global__ void __launch_bounds__(KERNEL_BLOCK) tree_accept_kernel(
    const int* __restrict__ tokens, const int* __restrict__ first_child, const int* __restrict__ next_sibling,
    const int* __restrict__ target, int D, int L,
    int* __restrict__ accept_len, int* __restrict__ accept_path, int* __restrict__ emitted, int* __restrict__ bonus,
    int* __restrict__ new_lens,
    // commit (kv == nullptr: walk only)
    uint4* __restrict__ kv, int row_vec,  // cache rows as 16-byte vectors: row_vec = 576 * itemsize / 16
    // prefix_lens is not __restrict__: the step's advance writes it through advance_lens
    int page_size, const int* __restrict__ block_table, int max_pages, const int* prefix_lens,
    // the step's advance (kernels_cu/step.py; nullptr: none): advance_lens (= prefix_lens) ← new_lens and
    // advance_roots ← bonus, in place, after the commit has read prefix_lens[b] (only this block reads it)
    int* advance_lens, int* __restrict__ advance_roots,
    const unsigned* __restrict__ flag) {  // the deferred path's error flag (nullptr: checked on the host)
  if (flag != nullptr && *flag) return;  // refused: nothing is walked, written or advanced
  extern __shared__ int sm[];
  int* s_tok = sm;           // [D]
  int* s_tgt = s_tok + D;    // [D]
  int* s_head = s_tgt + D;   // [D] pointer jumping: predecessor in the sibling list, then the list head
  int* s_tmp = s_head + D;   // [D]
  int* s_owner = s_tmp + D;  // [D] owner[first child of u] = u
  int* s_match = s_owner + D;  // [D] smallest matching child of u, or INT_MAX
  int* s_path = s_match + D;   // [CONTRACT_MAX_DEPTH + 1]
  __shared__ int s_n;
  const int b = blockIdx.x, tid = threadIdx.x;
  const size_t base = size_t(b) * D;

  for (int i = tid; i < D; i += blockDim.x) {
    s_tok[i] = tokens[base + i];
    s_tgt[i] = target[base + i];
    s_head[i] = i;  // a list head points to itself
    s_owner[i] = -1;
    s_match[i] = 0x7fffffff;
  }
  __syncthreads();
  for (int i = tid; i < D; i += blockDim.x) {
    const int ns = next_sibling[base + i];
    if (ns >= 0) s_head[ns] = i;
    const int fc = first_child[base + i];
    if (fc >= 0) s_owner[fc] = i;
  }
  __syncthreads();
  // pointer jumping: after ceil(log2 D) rounds every node points at the first node of its sibling list
  for (int span = 1; span < D; span <<= 1) {
    for (int i = tid; i < D; i += blockDim.x) s_tmp[i] = s_head[s_head[i]];
    __syncthreads();
    for (int i = tid; i < D; i += blockDim.x) s_head[i] = s_tmp[i];
    __syncthreads();
  }
  for (int c = tid; c < D; c += blockDim.x) {
    const int parent = s_owner[s_head[c]];  // -1 for the root and for unlinked (pad) nodes
    if (c > 0 && parent >= 0 && s_tok[c] == s_tgt[parent]) atomicMin(&s_match[parent], c);
  }
  __syncthreads();
  if (tid == 0) {
    int u = 0, n = 0;
    s_path[0] = 0;
    while (n < L && s_match[u] != 0x7fffffff) {
      u = s_match[u];
      s_path[++n] = u;
    }
    s_n = n;
    accept_len[b] = n;
    bonus[b] = s_tgt[u];
    new_lens[b] = (kv ? prefix_lens[b] : 0) + 1 + n;
  }
  __syncthreads();
  const int n = s_n;
  for (int j = tid; j <= L; j += blockDim.x) {
    accept_path[size_t(b) * (L + 1) + j] = j <= n ? s_path[j] : -1;
    emitted[size_t(b) * (L + 1) + j] = j < n ? s_tok[s_path[j + 1]] : (j == n ? s_tgt[s_path[n]] : -1);
  }
  const int P = kv ? prefix_lens[b] : 0;
  const int* bt = block_table + size_t(b) * max_pages;
  for (int col = tid; kv != nullptr && n > 0 && col < row_vec; col += blockDim.x) {
    // fully unrolled over the maximum depth so `v` stays in registers; all loads are in flight together
    uint4 v[CONTRACT_MAX_DEPTH];
#pragma unroll
    for (int j = 0; j < CONTRACT_MAX_DEPTH; ++j) {
      if (j < n) {
        const int p = P + s_path[j + 1];
        v[j] = kv[(size_t(bt[p / page_size]) * page_size + p % page_size) * row_vec + col];
      }
    }
#pragma unroll
    for (int j = 0; j < CONTRACT_MAX_DEPTH; ++j) {
      if (j < n) {
        const int p = P + j + 1;
        kv[(size_t(bt[p / page_size]) * page_size + p % page_size) * row_vec + col] = v[j];
      }
    }
  }
  if (advance_lens != nullptr) {
    __syncthreads();  // every thread has read prefix_lens[b] (P) before it is overwritten
    if (tid == 0) {
      advance_lens[b] = P + 1 + n;
      advance_roots[b] = s_tgt[s_path[n]];
    }
  }
}
