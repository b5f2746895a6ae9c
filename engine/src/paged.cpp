// Paged-cache checks (contract/paged.py).
#include "kdtree/paged.hpp"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "kdtree/contract.hpp"

namespace kdtree {

void check_cache_shape(int64_t num_pages, int64_t page_size) {
  if (num_pages * page_size > kMaxCacheRows)  // both are range-checked (<= 2^31 - 1 and <= 1024) first
    fail("kv_cache", std::to_string(num_pages) + " pages of " + std::to_string(page_size) + " rows exceed " +
                         std::to_string(kMaxCacheRows) + " rows");
}

void check_context(const int32_t* prefix_lens, int64_t bs, int64_t rows) {
  for (int64_t b = 0; b < bs; ++b) {
    const int64_t total = int64_t(prefix_lens[b]) + rows;
    if (total > kMaxContext)
      fail("prefix_lens", "request " + std::to_string(b) + ": prefix " + std::to_string(prefix_lens[b]) + " + " +
                              std::to_string(rows) + " tree rows = " + std::to_string(total) +
                              " exceeds the context limit " + std::to_string(kMaxContext));
  }
}

void check_pages(int64_t num_pages, int64_t page_size, const int32_t* block_table, int64_t max_pages,
                 const int32_t* prefix_lens, int64_t bs, int64_t rows) {
  auto need = [&](int64_t b) { return (int64_t(prefix_lens[b]) + rows + page_size - 1) / page_size; };
  for (int64_t b = 0; b < bs; ++b)
    if (need(b) > max_pages)
      fail("block_table", "request " + std::to_string(b) + " needs " + std::to_string(need(b)) + " pages for prefix " +
                              std::to_string(prefix_lens[b]) + " + " + std::to_string(rows) + " rows, the table has " +
                              std::to_string(max_pages));
  for (int64_t b = 0; b < bs; ++b)
    for (int64_t j = 0; j < need(b); ++j) {
      const int32_t p = block_table[b * max_pages + j];
      if (p < 0 || p >= num_pages)
        fail("block_table", "[" + std::to_string(b) + ", " + std::to_string(j) + "] = " + std::to_string(p) +
                                " is not a page index in 0.." + std::to_string(num_pages - 1));
    }
}

void check_distinct_rows(const int32_t* block_table, int64_t max_pages, int64_t page_size,
                         const int32_t* prefix_lens, int64_t bs, int64_t rows) {
  if (rows == 0) return;
  // (physical row, flat index b * rows + j): sorting the pairs is numpy's stable argsort of the rows
  std::vector<std::pair<int64_t, int64_t>> phys(sz(bs * rows));
  for (int64_t b = 0; b < bs; ++b)
    for (int64_t j = 0; j < rows; ++j) {
      const int64_t pos = int64_t(prefix_lens[b]) + j;
      const int64_t row = int64_t(block_table[b * max_pages + pos / page_size]) * page_size + pos % page_size;
      phys[sz(b * rows + j)] = {row, b * rows + j};
    }
  std::sort(phys.begin(), phys.end());
  const auto dup = std::adjacent_find(phys.begin(), phys.end(),
                                      [](const auto& x, const auto& y) { return x.first == y.first; });
  if (dup == phys.end()) return;
  const int64_t first = dup->second, second = std::next(dup)->second, row = dup->first;
  const int64_t b1 = first / rows, b2 = second / rows;
  fail("block_table", "request " + std::to_string(b1) + " position " +
                          std::to_string(int64_t(prefix_lens[b1]) + first % rows) + " and request " +
                          std::to_string(b2) + " position " + std::to_string(int64_t(prefix_lens[b2]) + second % rows) +
                          " map to the same cache row " + std::to_string(row) + " (the commit's rows must not alias)");
}

}  // namespace kdtree
