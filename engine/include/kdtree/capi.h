/* C ABI of libkdtree_cpu.so: the CPU tree builder (and the test drafter's noise) for in-process callers.
 * Arrays are C-contiguous, caller-owned, with the shapes of spec/tree_build.md (D = 1 + budget,
 * W = ceil(D / 32)). Nothing is allocated for the caller and no file is touched. */
#ifndef KDTREE_CAPI_H
#define KDTREE_CAPI_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version string of the library ("kdtree-cpu 1"). */
const char* kdtree_cpu_version(void);

/* Number of bools of the FULL_MASK layout for these prefix lengths: D * (sum(prefix_lens) + bs * D). */
int64_t kdtree_cpu_full_mask_size(const int32_t* prefix_lens, int64_t bs, int64_t budget);

/* Builds bs DDTree trees, bit-exact with reference/tree_build.py, requests spread over `threads`
 * threads (0 = one per core). With validate != 0 the inputs get the contract's checks first (TB.1);
 * with 0 the caller vouches for them. full_mask may be NULL unless with_full_mask, and then must hold
 * full_mask_len >= kdtree_cpu_full_mask_size(...) bytes.
 * Returns 0 on success, 1 on bad input (err receives "ARGUMENT: problem"), 2 on an internal error. */
int kdtree_cpu_tree_build(const float* top_logp, const int32_t* top_ids, const int32_t* root_tokens,
                          const int32_t* prefix_lens, int64_t bs, int64_t L, int64_t K_in, int64_t budget,
                          int with_full_mask, int validate, int threads, int32_t* n_nodes, int32_t* parents,
                          int32_t* depths, int32_t* tokens, int32_t* ranks, double* scores, uint32_t* visibility,
                          int32_t* positions, int32_t* first_child, int32_t* next_sibling, uint8_t* full_mask,
                          int64_t full_mask_len, char* err, size_t err_len);

/* The test drafter's noise n(seed, P, d, v) for v = 0..vocab-1 into out (reference/drafter.py::noise). */
void kdtree_cpu_draft_noise(uint64_t seed, int64_t P, int64_t d, int64_t vocab, double* out);

#ifdef __cplusplus
}
#endif
#endif
