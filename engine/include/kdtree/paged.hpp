// The paged latent cache's checks, shared by tree_build (the context), tree_verify and tree_accept
// (contract/paged.py, with its wording). Request b's logical position p lives at page
// block_table[b, p / page_size], row p % page_size: physical row page * page_size + p % page_size.
#pragma once
#include <cstdint>

namespace kdtree {

// num_pages * page_size physical rows fit the contract's MAX_CACHE_ROWS (row indices fit int32):
// "kv_cache: N pages of S rows exceed 2147483647 rows".
void check_cache_shape(int64_t num_pages, int64_t page_size);

// prefix_len + rows (the tree's own rows) fits the context limit for every request: "prefix_lens:
// request b: prefix P + N tree rows = T exceeds the context limit 262144" (prefix_lens checked >= 0).
void check_context(const int32_t* prefix_lens, int64_t bs, int64_t rows);

// Every page that positions 0 .. prefix_len + rows - 1 of each request need is in its block-table row
// (max_pages wide) and is a page index 0..num_pages-1; entries past a request's need are never read.
void check_pages(int64_t num_pages, int64_t page_size, const int32_t* block_table, int64_t max_pages,
                 const int32_t* prefix_lens, int64_t bs, int64_t rows);

// The rows prefix_len .. prefix_len + rows - 1 of every request are distinct physical rows, within a
// request and across requests (the commit reads and writes exactly these). The first aliasing pair is
// the contract's: the smallest physical row met twice, at its first two (request, position) in flat
// order. Sort-based: O(n log n) for n = bs * rows, 16 bytes per row of scratch. Call after check_pages.
void check_distinct_rows(const int32_t* block_table, int64_t max_pages, int64_t page_size,
                         const int32_t* prefix_lens, int64_t bs, int64_t rows);

}  // namespace kdtree
