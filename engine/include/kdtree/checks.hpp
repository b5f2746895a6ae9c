// The contract's checks in C++ (contract/checks.py and the symbols of contract/op.py): each throws
// InputError "ARGUMENT: problem" with the Python contract's wording, so the engine's first error on an op
// file is the one the contract reports.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kdtree/contract.hpp"

namespace kdtree {

// A shape symbol: a named dimension with its range, inclusive (contract/op.py Symbol).
struct Symbol {
  const char* name;
  int64_t lo, hi;
  const char* doc;
};

// The ops' symbols, as their contracts declare them (contract/tree_build.py, tree_verify.py,
// tree_accept.py, draft_topk.py, and paged.py for the cache's).
namespace sym {
constexpr Symbol kBs{"bs", 1, kMaxBatch, "batch size"};
constexpr Symbol kL{"L", 0, kMaxDepth, "depth"};
constexpr Symbol kKIn{"K_in", 0, kMaxTopK, "top-k"};
constexpr Symbol kV{"V", 1, kMaxVocab, "vocabulary"};
constexpr Symbol kQ{"Q", 1, kMaxTree, "queries (tree width)"};
constexpr Symbol kH{"H", 1, kMaxHeads, "heads"};
constexpr Symbol kW{"W", 1, (kMaxTree + 31) / 32, "visibility words"};
constexpr Symbol kD{"D", 1, kMaxTree, "tree width"};
constexpr Symbol kNumPages{"num_pages", 1, kMaxCacheRows, "pages"};
constexpr Symbol kPageSize{"page_size", 1, kMaxPageSize, "page size"};
constexpr Symbol kMaxPages{"max_pages", 1, kMaxContext, "block-table width"};
}  // namespace sym

// "ARG: DOC NAME=n is outside lo..hi" unless lo <= n <= hi (the structural pass's range check).
void check_symbol(const std::string& arg, const Symbol& s, int64_t n);

// contract/checks.py positive_float32: a finite value whose float32 value is finite and > 0 (the kernels
// use the float32 value). Messages: "nan is not finite", "1e+39 overflows float32 (...)", "1e-50 rounds
// to 0 in float32 (...)", "-0.1 must be > 0", with the value as Python's repr writes it.
void check_positive_float32(const std::string& arg, double v);

// contract/checks.py non_negative: "ARG: negative WHAT at (i, j, ...)" at the first negative element of
// a C-order array of `shape`.
void check_non_negative(const std::string& arg, const int32_t* a, const std::vector<int64_t>& shape,
                        const std::string& what);

}  // namespace kdtree
