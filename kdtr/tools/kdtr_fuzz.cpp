// libFuzzer target over the C++ KDTR reader.
// On every accepted input it touches the first and last byte of every tensor view (so ASan sees any
// out-of-bounds view), recomputes the data CRCs, and checks the canonical writer: re-serializing
// gives a file the reader accepts with the same content, and re-serializing that again gives the same
// bytes. An accepted input that is already canonical must re-serialize to itself.
// Built with -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION the header and index CRC checks are skipped so
// mutations reach the structural checks (the OSS-Fuzz convention).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kdtr.hpp"

static void check(bool ok) { if (!ok) std::abort(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kdtr::Options opt;
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  opt.check_crc = false;
  opt.verify_data = false;
#endif
  kdtr::File f;
  if (kdtr::open_memory(data, size, f, opt)) return 0;
  volatile uint8_t sink = 0;
  for (const auto& t : f.tensors)
    if (t.nbytes) { sink ^= t.data[0]; sink ^= t.data[t.nbytes - 1]; (void)kdtr::crc32(t.data, t.nbytes); }
  (void)sink;
  std::vector<uint8_t> w1 = kdtr::write_canonical(f);
  kdtr::File g;
  check(!kdtr::open_memory(w1.data(), w1.size(), g));  // canonical output always passes every check
  check(g.tensors.size() == f.tensors.size() && g.meta == f.meta);
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    check(g.tensors[i].name == f.tensors[i].name && g.tensors[i].nbytes == f.tensors[i].nbytes);
    check(f.tensors[i].nbytes == 0 || std::memcmp(g.tensors[i].data, f.tensors[i].data, f.tensors[i].nbytes) == 0);
  }
  std::vector<uint8_t> w2 = kdtr::write_canonical(g);
  check(w1 == w2);
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  // Every layout choice of a valid file is fixed except data order, so a valid file whose data is in
  // name order is canonical and must round-trip byte for byte.
  bool name_order = true;
  uint64_t last = 0;
  for (const auto& t : f.tensors) if (t.nbytes) { name_order = name_order && t.offset > last; last = t.offset; }
  if (name_order) check(w1.size() == size && std::memcmp(w1.data(), data, size) == 0);
#endif
  return 0;
}
