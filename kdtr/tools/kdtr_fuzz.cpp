// libFuzzer target over the C++ KDTR reader with every check on: header, index and data CRCs, BOOL
// bytes. So that mutations still reach the checks behind the CRCs, the custom mutator below recomputes
// the CRCs of 15 of every 16 mutants (the rest exercise the CRC checks themselves); inputs and crash
// files therefore stay real KDTR files that kdtr-inspect and the Python reader open as they are.
// On every accepted input the target touches the first and last byte of every tensor view (so ASan sees
// any out-of-bounds view), then checks the canonical writer: the writer accepts what the reader accepted,
// its output passes every check with the same content, writing that again gives the same bytes, and an
// input whose data is in name order (with version_minor and compat_flags 0) is its own re-serialization.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kdtr.hpp"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

static void check(bool ok) { if (!ok) std::abort(); }

// Recompute data, index and header CRCs wherever the fields point inside the buffer (kdtr.testing.fix_crcs).
static void fix_crcs(uint8_t* d, size_t size) {
  if (size < kdtr::kHeaderSize) return;
  const uint64_t io = kdtr::rd64(d + 32), isz = kdtr::rd64(d + 40);
  uint64_t iend;
  if (io == 0 || !kdtr::add_ok(io, isz, iend) || iend > size || isz < kdtr::kIndexHeader) {
    const uint32_t c = kdtr::crc32(d, 60);
    for (int k = 0; k < 4; ++k) d[60 + k] = uint8_t(c >> (8 * k));
    return;
  }
  const uint64_t T = kdtr::rd32(d + io + 4);
  for (uint64_t i = 0; i < T && i < (isz - kdtr::kIndexHeader) / kdtr::kEntrySize; ++i) {
    uint8_t* e = d + io + kdtr::kIndexHeader + kdtr::kEntrySize * i;
    const uint64_t off = kdtr::rd64(e + 16), nb = kdtr::rd64(e + 24);
    uint64_t end;
    if (!kdtr::add_ok(off, nb, end) || end > size) continue;
    const uint32_t c = kdtr::crc32(d + off, nb);
    for (int k = 0; k < 4; ++k) e[8 + k] = uint8_t(c >> (8 * k));
  }
  const uint32_t ic = kdtr::crc32(d + io, isz);
  for (int k = 0; k < 4; ++k) d[48 + k] = uint8_t(ic >> (8 * k));
  const uint32_t hc = kdtr::crc32(d, 60);
  for (int k = 0; k < 4; ++k) d[60 + k] = uint8_t(hc >> (8 * k));
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (seed % 16 != 0) fix_crcs(data, size);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kdtr::File f;
  if (kdtr::open_memory(data, size, f)) return 0;
  volatile uint8_t sink = 0;
  for (const auto& t : f.tensors)
    if (t.nbytes) { sink ^= t.data[0]; sink ^= t.data[t.nbytes - 1]; }
  (void)sink;
  std::vector<uint8_t> w1, w2;
  check(!kdtr::write_canonical(f, w1));  // the writer takes whatever the reader accepted
  kdtr::File g;
  check(!kdtr::open_memory(w1.data(), w1.size(), g));  // and its output passes every check
  check(g.tensors.size() == f.tensors.size() && g.meta == f.meta && g.align_log2 == f.align_log2);
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto &a = f.tensors[i], &b = g.tensors[i];
    check(a.name == b.name && a.dtype == b.dtype && a.rank == b.rank && a.dims == b.dims && a.nbytes == b.nbytes);
    check(a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0);
  }
  check(!kdtr::write_canonical(g, w2) && w1 == w2);
  // Every layout choice of a valid file is fixed except data order and two informational header fields,
  // so a valid file whose data is in name order and whose version_minor and compat_flags are 0 is
  // canonical and must round-trip byte for byte.
  bool canonical = kdtr::rd16(data + 10) == 0 && kdtr::rd32(data + 20) == 0;
  uint64_t last = 0;
  for (const auto& t : f.tensors)
    if (t.nbytes) { canonical = canonical && t.offset > last; last = t.offset; }
  if (canonical) check(w1.size() == size && std::memcmp(w1.data(), data, size) == 0);
  return 0;
}
