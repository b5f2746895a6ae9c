// The ops over KDTR op files (the contract: input tensors named like the op's arguments, output
// tensors like the result fields, Python scalars as rank-0 tensors, optional metadata `op` = the slug).
#pragma once
#include <string>
#include <vector>

#include "kdtr.hpp"
#include "kdtree/draft_topk.hpp"
#include "kdtree/tensors.hpp"
#include "kdtree/tree_accept.hpp"
#include "kdtree/tree_build.hpp"
#include "kdtree/tree_verify.hpp"

namespace kdtree {

// Where the ops run once an op file has been validated: the CPU backend (below) or the CUDA backend
// (kdtree/cuda.hpp). Arguments and outputs are host arrays, exactly as the CPU functions take them; a
// tree_accept commit updates args.kv_cache in place.
class OpBackend {
 public:
  virtual ~OpBackend() = default;
  virtual void tree_build(const TreeBuildArgs& a, const TreeBuildOut& o) const = 0;
  virtual void tree_verify(const TreeVerifyArgs& a, const TreeVerifyOut& o) const = 0;
  virtual void tree_accept(const TreeAcceptArgs& a, const TreeAcceptOut& o) const = 0;
  // An op without a kernel on a backend says so (every backend here has all four).
  virtual void draft_topk(const DraftTopkArgs& a, const DraftTopkOut& o) const;
};

// The CPU backend with up to `threads` threads (0 = one per core).
class CpuOps : public OpBackend {
 public:
  explicit CpuOps(int threads) : threads_(threads) {}
  void tree_build(const TreeBuildArgs& a, const TreeBuildOut& o) const override;
  void tree_verify(const TreeVerifyArgs& a, const TreeVerifyOut& o) const override;
  void tree_accept(const TreeAcceptArgs& a, const TreeAcceptOut& o) const override;
  void draft_topk(const DraftTopkArgs& a, const DraftTopkOut& o) const override;

 private:
  int threads_;
};

// The op slugs, in the contract's order.
const std::vector<std::string>& op_slugs();

// Validates the op file's tensors completely (dtypes, shapes, ranges, values, tree structure,
// addressing; unknown tensors; a metadata `op` other than `op`) and runs the op on `backend`.
// Throws InputError naming the tensor (or `op`) on bad input, before the backend sees anything. The
// tensors' bytes are in memory, or with `src` (the source `in` was checked from) read from it as needed,
// after the checks that need no values: a tensor of the wrong dtype or shape is never read.
TensorList run_op(const std::string& op, const kdtr::File& in, const OpBackend& backend,
                  const kdtr::Source* src = nullptr);
// The same on the CPU with up to `threads` threads.
TensorList run_op(const std::string& op, const kdtr::File& in, int threads);

// run_op from IN to OUT; errors name the file or the tensor. IN is read as kdtr-inspect reads files (open_kdtr)
// and only the tensors the op takes are read into memory: peak memory is IN's index, its tensors, and the
// results, whatever else IN holds (a tensor the op does not take is refused unread).
void run_op_file(const std::string& op, const std::string& in_path, const std::string& out_path,
                 const OpBackend& backend);

}  // namespace kdtree
