// The engine's CUDA backend: the kernels of kernels_cu/ compiled by nvcc with their build specs (see
// cuda_registry.hpp), launched with the geometry of their <op>.cuh headers. Without nvcc at configure time
// the engine is built without it and these functions say so (UsageError). Plain C++ (no CUDA headers).
#pragma once
#include <memory>
#include <stdexcept>
#include <string>

#include "kdtree/model.hpp"
#include "kdtree/ops.hpp"

namespace kdtree {
namespace cuda {

// No usable GPU (no driver, no device, a variant not built for this GPU's arch). main() exits 4 on it.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether this engine was built with the CUDA backend.
bool built();

// The ops on the GPU. `variant` names a kernel variant (kernels_cu/specs.py) for the op that has it; the
// other ops, and every op when it is "", use their first variant usable on this GPU. With `op` set, the
// variant must be one of that op's. UsageError for an unknown variant, DeviceError when there is no usable GPU.
std::unique_ptr<OpBackend> make_ops(const std::string& variant, const std::string& op = "");

// The model's arithmetic on the GPU (the decode subcommand): the dense layers by the engine's own
// row-independent kernels, the three ops by the kernels' variants (as make_ops picks them).
std::unique_ptr<Compute> make_compute(const std::string& variant);

// "tree_build: heap_smem, heap_global; ..." (the compiled variants), or why there are none.
std::string describe_variants();

// One line per compiled variant, in the specs' order: "SLUG<TAB>VARIANT<TAB>ARCHS<TAB>SOURCE\n" ("" without
// the CUDA backend). The `variants` subcommand prints it.
std::string variant_lines();

}  // namespace cuda
}  // namespace kdtree
