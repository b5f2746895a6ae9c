// The three ops over KDTR op files (the contract: input tensors named like the op's arguments, output
// tensors like the result fields, Python scalars as rank-0 tensors, optional metadata `op` = the slug).
#pragma once
#include <string>
#include <vector>

#include "kdtr.hpp"
#include "kdtree/tensors.hpp"

namespace kdtree {

// The op slugs, in the contract's order.
const std::vector<std::string>& op_slugs();

// Validates the op file's tensors completely (dtypes, shapes, ranges, values, tree structure,
// addressing; unknown tensors; a metadata `op` other than `op`) and runs the op on the CPU with up to
// `threads` threads. Throws InputError naming the tensor (or `op`) on bad input.
TensorList run_op(const std::string& op, const kdtr::File& in, int threads);

// run_op from IN to OUT; errors name the file or the tensor.
void run_op_file(const std::string& op, const std::string& in_path, const std::string& out_path, int threads);

}  // namespace kdtree
