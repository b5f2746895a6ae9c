// The op contract's limits and the error every validation raises.
// The numbers come from kernels_cu/contract_limits.cuh, generated from the Python contract
// (contract/limits.py), the header the kernels include too: the limits are written once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "contract_limits.cuh"

namespace kdtree {

constexpr int64_t kMaxBatch = CONTRACT_MAX_BATCH;
constexpr int64_t kMaxBudget = CONTRACT_MAX_BUDGET;
constexpr int64_t kMaxDepth = CONTRACT_MAX_DEPTH;
constexpr int64_t kMaxTopK = CONTRACT_MAX_TOPK;
constexpr int64_t kMaxVocab = CONTRACT_MAX_VOCAB;
constexpr int64_t kMaxTree = CONTRACT_MAX_TREE;
constexpr int64_t kMaxContext = CONTRACT_MAX_CONTEXT;
constexpr int64_t kMaxHeads = CONTRACT_MAX_HEADS;
constexpr int64_t kMaxPageSize = CONTRACT_MAX_PAGE_SIZE;
constexpr int64_t kMaxCacheRows = CONTRACT_MAX_CACHE_ROWS;
constexpr int64_t kLatent = CONTRACT_LATENT;
constexpr int64_t kRope = CONTRACT_ROPE;
constexpr int64_t kHeadDim = kLatent + kRope;
static_assert(kHeadDim == CONTRACT_HEAD_DIM, "the latent row is c_kv ‖ k_pe");
static_assert(kMaxTree == 1 + kMaxBudget, "the tree width D = 1 + B counts the root");

// The largest FULL_MASK layout (bytes) tree_build makes: the contract's MAX_FULL_MASK_BYTES, so that its
// flat offsets fit int32. Only a fuzzing build lowers it (16 MiB), so that a tiny mutated op file cannot
// ask for gigabytes; its message then names the lower limit.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr int64_t kMaxFullMaskBytes = int64_t(1) << 24;
#else
constexpr int64_t kMaxFullMaskBytes = CONTRACT_MAX_FULL_MASK_BYTES;
#endif

// Bad input to an op or a subcommand. what() is "ARGUMENT: problem", like the Python InputError.
class InputError : public std::runtime_error {
 public:
  InputError(const std::string& arg, const std::string& problem) : std::runtime_error(arg + ": " + problem) {}
};

// A non-negative size or index as size_t (sizes are checked non-negative before they get here).
inline size_t sz(int64_t n) { return static_cast<size_t>(n); }

[[noreturn]] inline void fail(const std::string& arg, const std::string& problem) { throw InputError(arg, problem); }

}  // namespace kdtree
