// The CUDA backend's entry points in an engine configured without nvcc: every use says so.
#include "kdtree/cli.hpp"
#include "kdtree/cuda.hpp"

namespace kdtree {
namespace cuda {
namespace {

[[noreturn]] void not_built() {
  throw UsageError(
      "--device: cuda is not built into this engine (it was configured without nvcc; tools/setup.sh builds the "
      "CUDA backend where it finds nvcc or can install it)");
}

}  // namespace

bool built() { return false; }
std::unique_ptr<OpBackend> make_ops(const std::string&, const std::string&) { not_built(); }
std::unique_ptr<Compute> make_compute(const std::string&) { not_built(); }
std::string describe_variants() { return "(none: this engine was built without nvcc)"; }
std::string variant_lines() { return ""; }

}  // namespace cuda
}  // namespace kdtree
