// The op contract's limits and the error every validation raises.
// The numbers are the Python contract's (reference/validate.py); meta/test_engine_limits.py checks that
// they stay equal, so they are written here once for the C++ side.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kdtree {

constexpr int64_t kMaxBatch = 1024;
constexpr int64_t kMaxBudget = 1024;
constexpr int64_t kMaxDepth = 32;
constexpr int64_t kMaxTopK = 1024;
constexpr int64_t kLatent = 512;
constexpr int64_t kRope = 64;
constexpr int64_t kHeadDim = kLatent + kRope;

// The engine refuses to build a FULL_MASK layout larger than this (the Python reference would try and
// fail with MemoryError); a fuzzing build lowers it so that tiny inputs cannot ask for gigabytes.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr int64_t kMaxFullMaskBytes = int64_t(1) << 24;
#else
constexpr int64_t kMaxFullMaskBytes = int64_t(1) << 32;
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
