// libFuzzer target over the engine's op input path: KDTR bytes -> reader -> run_op (validation and the
// op itself) -> writer -> reader. Any crash, sanitizer report or abort is a finding; an InputError is
// the expected answer to bad input. The op is the file's metadata `op`, or all three when it has none.
// Built with -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION: the KDTR CRC checks are skipped so mutations
// reach the op checks (the OSS-Fuzz convention), and the FULL_MASK size limit is lowered.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kdtr.hpp"
#include "kdtree/contract.hpp"
#include "kdtree/ops.hpp"

static void check(bool ok) {
  if (!ok) std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kdtr::Options opt;
  opt.check_crc = false;
  opt.verify_data = false;
  kdtr::File f;
  if (kdtr::open_memory(data, size, f, opt)) return 0;
  std::vector<std::string> ops = kdtree::op_slugs();
  for (const auto& kv : f.meta)
    if (kv.first == "op") ops = {kv.second};
  for (const auto& op : ops) {
    try {
      const kdtree::TensorList out = kdtree::run_op(op, f, 1);
      const std::vector<uint8_t> bytes = out.serialize({{"op", op}});
      kdtr::File g;
      check(!kdtr::open_memory(bytes.data(), bytes.size(), g));  // every result is a valid KDTR file
    } catch (const kdtree::InputError&) {
    }
  }
  return 0;
}
