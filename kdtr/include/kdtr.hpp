// KDTR v1 reader and canonical writer, C++17, header-only, standard library only.
// Normative text: kdtr/FORMAT.md. The checks run in exactly the order of FORMAT.md section 3 and
// return the same codes as the Python reader (kdtr/format.py); tests/differential compare them.
// Rules kept here: integers are read byte by byte (no pointer casts), every size sum or product is
// checked u64 arithmetic, nothing is allocated before its size is checked against a limit and the
// file size, and no input is ever checked with assert.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kdtr {

enum class Code : int {
  OK = 0, TRUNCATED = 1, BAD_MAGIC = 2, BAD_ENDIAN = 3, HEADER_CRC = 4, UNSUPPORTED_VERSION = 5,
  UNSUPPORTED_FEATURE = 6, RESERVED_NONZERO = 7, BAD_ALIGNMENT = 8, NOT_FINALIZED = 9, INDEX_BOUNDS = 10,
  FILE_SIZE_MISMATCH = 11, INDEX_CRC = 12, INDEX_MAGIC = 13, LIMIT_EXCEEDED = 14, INDEX_LAYOUT = 15,
  BAD_NAME = 16, DUPLICATE_NAME = 17, UNSORTED = 18, BAD_DTYPE = 19, BAD_RANK = 20, BAD_SHAPE = 21,
  SIZE_OVERFLOW = 22, SIZE_MISMATCH = 23, BAD_OFFSET = 24, OUT_OF_BOUNDS = 25, BAD_META_KEY = 26,
  DUPLICATE_META_KEY = 27, BAD_UTF8 = 28, OVERLAP = 29, GAP = 30, NONZERO_PADDING = 31, HOST_LIMIT = 32,
  DATA_CRC = 33, BAD_BOOL = 34, IO = 90, ALLOC = 91, NOT_FOUND = 92,
};

struct Error {
  Code code = Code::OK;
  long entry = -1;       // tensor or metadata entry index, -1 for file-level checks
  std::string name;      // sanitized (printable ASCII only)
  std::string message;
  explicit operator bool() const { return code != Code::OK; }
};

constexpr uint64_t kHeaderSize = 64, kIndexHeader = 32, kEntrySize = 128, kMetaEntry = 8;
constexpr uint64_t kMaxRank = 8, kMaxName = 256, kMaxTensors = 262144, kMaxMeta = 65536;
constexpr uint64_t kMaxValue = 16ull << 20, kMaxIndex = 64ull << 20, kMaxBytes = 1ull << 48;
constexpr uint32_t kEndianTag = 0x01020304u, kEndianSwapped = 0x04030201u;
static const unsigned char kMagic[8] = {0x89, 'K', 'D', 'T', 'R', '\r', '\n', 0x1a};

// dtype code -> itemsize (0 = unknown); names for the JSON description.
inline uint64_t itemsize(uint16_t c) {
  static const uint8_t sz[18] = {0, 1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8, 8, 16, 1, 1};
  return c < 18 ? sz[c] : 0;
}
inline const char* dtype_name(uint16_t c) {
  static const char* n[18] = {"?", "BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64",
                              "F16", "BF16", "F32", "F64", "C64", "C128", "F8_E4M3FN", "F8_E5M2"};
  return c < 18 ? n[c] : "?";
}

inline uint32_t crc32(const uint8_t* p, uint64_t n, uint32_t crc = 0) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (uint64_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

inline uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t rd32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
inline uint64_t rd64(const uint8_t* p) { return uint64_t(rd32(p)) | (uint64_t(rd32(p + 4)) << 32); }
inline void wr16(std::vector<uint8_t>& v, uint16_t x) { for (int i = 0; i < 2; ++i) v.push_back(uint8_t(x >> (8 * i))); }
inline void wr32(std::vector<uint8_t>& v, uint32_t x) { for (int i = 0; i < 4; ++i) v.push_back(uint8_t(x >> (8 * i))); }
inline void wr64(std::vector<uint8_t>& v, uint64_t x) { for (int i = 0; i < 8; ++i) v.push_back(uint8_t(x >> (8 * i))); }

inline bool add_ok(uint64_t a, uint64_t b, uint64_t& r) { r = a + b; return r >= a; }
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t& r) {
  if (a != 0 && b > UINT64_MAX / a) return false;
  r = a * b;
  return true;
}
inline bool all_zero(const uint8_t* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) if (p[i]) return false;
  return true;
}
inline bool valid_name(const uint8_t* p, uint64_t n) {
  if (n < 1 || n > kMaxName) return false;
  for (uint64_t i = 0; i < n; ++i) if (p[i] < 0x21 || p[i] > 0x7E) return false;
  return true;
}
inline std::string sanitize(const uint8_t* p, uint64_t n) {
  std::string s;
  for (uint64_t i = 0; i < n && i < kMaxName; ++i) s += (p[i] >= 0x20 && p[i] < 0x7F) ? char(p[i]) : '?';
  return s;
}
// Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF) and no NUL.
inline bool strict_utf8(const uint8_t* p, uint64_t n) {
  uint64_t i = 0;
  while (i < n) {
    uint8_t c = p[i];
    if (c == 0) return false;
    if (c < 0x80) { ++i; continue; }
    uint64_t len; uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return false;
    if (n - i < len) return false;
    for (uint64_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

struct Tensor {
  std::string name;
  uint16_t dtype = 0;
  uint8_t rank = 0;
  std::array<uint64_t, 8> dims{};
  uint64_t offset = 0, nbytes = 0;
  uint32_t crc = 0;
  const uint8_t* data = nullptr;  // view into the caller's buffer (valid while it lives)
};

struct File {
  uint8_t align_log2 = 6;
  std::vector<Tensor> tensors;                              // name order
  std::vector<std::pair<std::string, std::string>> meta;    // key order
  const Tensor* find(const std::string& n) const {
    for (const auto& t : tensors) if (t.name == n) return &t;
    return nullptr;
  }
};

struct Options {
  bool verify_data = true;
  bool check_bool = true;
  bool check_crc = true;          // header and index CRCs; only a fuzzing build turns this off
  uint64_t max_index_size = kMaxIndex;
};

inline Error fail(Code c, std::string msg, long entry = -1, std::string name = {}) {
  Error e; e.code = c; e.message = std::move(msg); e.entry = entry; e.name = std::move(name);
  return e;
}

struct NameKind { const char* what; Code bad; Code dup; };
constexpr NameKind kTensorName{"name", Code::BAD_NAME, Code::DUPLICATE_NAME};  // checks 16-18
constexpr NameKind kMetaKey{"key", Code::BAD_META_KEY, Code::DUPLICATE_META_KEY};  // check 25

// The next name or key from the string heap, in check order: length (E14), inside the heap (E15), bytes
// 0x21..0x7E, strictly after the previous one. Advances pos and prev on success.
inline Error take_name(const uint8_t* heap, uint64_t& pos, uint64_t S, uint64_t len, const uint8_t*& prev,
                       uint64_t& prevlen, long entry, const NameKind& kind, std::string& out) {
  const std::string what = kind.what;
  if (len < 1 || len > kMaxName) return fail(Code::LIMIT_EXCEEDED, what + "_len outside 1..256", entry);
  if (pos + len > S) return fail(Code::INDEX_LAYOUT, what + " runs past the string heap", entry);
  const uint8_t* nb = heap + pos;
  out = sanitize(nb, len);
  if (!valid_name(nb, len)) return fail(kind.bad, what + " has bytes outside 0x21..0x7E", entry, out);
  if (prev) {
    const int c = std::memcmp(nb, prev, len < prevlen ? len : prevlen);
    const int order = c ? c : (len < prevlen ? -1 : (len > prevlen ? 1 : 0));
    if (order == 0) return fail(kind.dup, what + " repeats the previous entry", entry, out);
    if (order < 0) return fail(Code::UNSORTED, what + "s are not in ascending byte order", entry, out);
  }
  pos += len;
  prev = nb;
  prevlen = len;
  return {};
}

// Validate [data, data+size) and fill `out` with views into it.
inline Error open_memory(const uint8_t* data, uint64_t size, File& out, const Options& opt = {}) {
  out = File{};
  // 1
  if (size < kHeaderSize + kIndexHeader) return fail(Code::TRUNCATED, "file shorter than 96 bytes");
  if (size > kMaxBytes || size > uint64_t(SIZE_MAX)) return fail(Code::HOST_LIMIT, "file larger than 2^48 bytes");
  const uint8_t* h = data;
  // 2-4
  if (std::memcmp(h, kMagic, 8) != 0) return fail(Code::BAD_MAGIC, "bad magic");
  uint32_t tag = rd32(h + 12);
  if (tag != kEndianTag) return fail(Code::BAD_ENDIAN, tag == kEndianSwapped ? "written by a big-endian writer" : "bad endian tag");
  if (opt.check_crc && crc32(h, 60) != rd32(h + 60)) return fail(Code::HEADER_CRC, "header CRC mismatch");
  // 5-8
  if (rd16(h + 8) != 1) return fail(Code::UNSUPPORTED_VERSION, "major version is not 1");
  if (rd32(h + 16) != 0) return fail(Code::UNSUPPORTED_FEATURE, "unknown incompat_flags");
  if (!all_zero(h + 25, 7) || !all_zero(h + 52, 8)) return fail(Code::RESERVED_NONZERO, "reserved header bytes are not zero");
  uint8_t al = h[24];
  if (al < 6 || al > 12) return fail(Code::BAD_ALIGNMENT, "align_log2 outside 6..12");
  const uint64_t A = 1ull << al;
  out.align_log2 = al;
  // 9-11
  uint64_t ioff = rd64(h + 32), isize = rd64(h + 40);
  if (ioff == 0) return fail(Code::NOT_FINALIZED, "index_offset is 0");
  if (ioff < A || ioff % A != 0 || isize < kIndexHeader || isize > opt.max_index_size)
    return fail(Code::INDEX_BOUNDS, "index offset or size out of bounds");
  uint64_t iend;
  if (!add_ok(ioff, isize, iend) || iend != size) return fail(Code::FILE_SIZE_MISMATCH, "index end != file size");
  // 12: private copy of the index (size bounded by max_index_size and the file size above)
  std::vector<uint8_t> idx;
  try { idx.assign(data + ioff, data + ioff + isize); } catch (...) { return fail(Code::ALLOC, "cannot copy the index"); }
  if (opt.check_crc && crc32(idx.data(), isize) != rd32(h + 48)) return fail(Code::INDEX_CRC, "index CRC mismatch");
  const uint8_t* x = idx.data();
  // 13-15
  if (std::memcmp(x, "KDIX", 4) != 0) return fail(Code::INDEX_MAGIC, "bad index magic");
  if (!all_zero(x + 12, 4) || !all_zero(x + 24, 8)) return fail(Code::RESERVED_NONZERO, "reserved index bytes are not zero");
  uint64_t T = rd32(x + 4), M = rd32(x + 8), S = rd64(x + 16);
  if (T > kMaxTensors || M > kMaxMeta) return fail(Code::LIMIT_EXCEEDED, "too many tensors or metadata entries");
  uint64_t total = kIndexHeader + kEntrySize * T + kMetaEntry * M;  // cannot overflow: T, M bounded
  uint64_t heap0 = total;
  if (!add_ok(total, S, total) || total != isize) return fail(Code::INDEX_LAYOUT, "index size != 32+128T+8M+S");
  const uint8_t* heap = x + heap0;
  uint64_t pos = 0;
  try { out.tensors.reserve(T); } catch (...) { return fail(Code::ALLOC, "cannot allocate entries"); }
  const uint8_t* prev = nullptr; uint64_t prevlen = 0;
  // 16-24
  for (uint64_t i = 0; i < T; ++i) {
    const uint8_t* e = x + kIndexHeader + kEntrySize * i;
    long ei = long(i);
    std::string nm;
    if (Error err = take_name(heap, pos, S, rd16(e), prev, prevlen, ei, kTensorName, nm)) return err;
    Tensor t;
    t.name = nm;
    t.dtype = rd16(e + 2);
    uint64_t isz = itemsize(t.dtype);
    if (isz == 0) return fail(Code::BAD_DTYPE, "unknown dtype code", ei, nm);
    t.rank = e[4];
    if (t.rank > kMaxRank) return fail(Code::BAD_RANK, "rank > 8", ei, nm);
    for (size_t d = 0; d < 8; ++d) t.dims[d] = rd64(e + 32 + 8 * d);
    for (size_t d = t.rank; d < 8; ++d) if (t.dims[d]) return fail(Code::BAD_SHAPE, "dims beyond the rank are not zero", ei, nm);
    if (!all_zero(e + 5, 3) || !all_zero(e + 12, 4) || !all_zero(e + 96, 32))
      return fail(Code::RESERVED_NONZERO, "reserved entry bytes are not zero", ei, nm);
    bool zero = false;
    for (size_t d = 0; d < t.rank; ++d) zero = zero || t.dims[d] == 0;
    uint64_t sz = zero ? 0 : isz;
    for (size_t d = 0; d < t.rank; ++d) {
      if (t.dims[d] > kMaxBytes) return fail(Code::SIZE_OVERFLOW, "dim > 2^48", ei, nm);
      if (sz && (!mul_ok(sz, t.dims[d], sz) || sz > kMaxBytes)) return fail(Code::SIZE_OVERFLOW, "size product exceeds 2^48", ei, nm);
    }
    t.nbytes = rd64(e + 24);
    t.offset = rd64(e + 16);
    if (sz != t.nbytes) return fail(Code::SIZE_MISMATCH, "nbytes != dims x itemsize", ei, nm);
    if ((t.nbytes == 0 && t.offset != 0) || (t.nbytes != 0 && (t.offset % A != 0 || t.offset < A)))
      return fail(Code::BAD_OFFSET, "bad data offset", ei, nm);
    uint64_t end;
    if (!add_ok(t.offset, t.nbytes, end) || end > ioff) return fail(Code::OUT_OF_BOUNDS, "data runs into the index", ei, nm);
    t.crc = rd32(e + 8);
    t.data = t.nbytes ? data + t.offset : nullptr;
    out.tensors.push_back(std::move(t));
  }
  // 25-26
  prev = nullptr; prevlen = 0;
  const uint8_t* m0 = x + kIndexHeader + kEntrySize * T;
  for (uint64_t j = 0; j < M; ++j) {
    long ej = long(j);
    uint64_t klen = rd32(m0 + 8 * j), vlen = rd32(m0 + 8 * j + 4);
    std::string key;
    if (Error err = take_name(heap, pos, S, klen, prev, prevlen, ej, kMetaKey, key)) return err;
    if (vlen > kMaxValue) return fail(Code::LIMIT_EXCEEDED, "value_len > 16 MiB", ej, key);
    if (pos + vlen > S) return fail(Code::INDEX_LAYOUT, "value runs past the string heap", ej, key);
    const uint8_t* vb = heap + pos;
    pos += vlen;
    if (!strict_utf8(vb, vlen)) return fail(Code::BAD_UTF8, "value is not strict UTF-8 without NUL", ej, key);
    out.meta.emplace_back(key, std::string(reinterpret_cast<const char*>(vb), vlen));
  }
  // 27
  if (pos != S) return fail(Code::INDEX_LAYOUT, "string heap has unreferenced bytes");
  // 28: coverage, tensors sorted by offset (stable, so ties keep name order as in Python's sorted)
  std::vector<const Tensor*> ord;
  for (const auto& t : out.tensors) if (t.nbytes) ord.push_back(&t);
  for (size_t a = 1; a < ord.size(); ++a)  // insertion sort, stable; T is bounded
    for (size_t b = a; b > 0 && ord[b - 1]->offset > ord[b]->offset; --b) std::swap(ord[b - 1], ord[b]);
  uint64_t cur = A;
  for (const Tensor* t : ord) {
    if (t->offset < cur) return fail(Code::OVERLAP, "data overlaps earlier data", -1, t->name);
    if (t->offset > cur) return fail(Code::GAP, "gap before the data", -1, t->name);
    cur = (t->offset + t->nbytes + A - 1) / A * A;
  }
  if (cur != ioff) return fail(Code::GAP, "gap before the index");
  // 29
  if (!all_zero(data + kHeaderSize, A - kHeaderSize)) return fail(Code::NONZERO_PADDING, "pad after the header is not zero");
  for (const Tensor* t : ord) {
    uint64_t end = t->offset + t->nbytes, pend = (end + A - 1) / A * A;
    if (!all_zero(data + end, pend - end)) return fail(Code::NONZERO_PADDING, "pad after the data is not zero", -1, t->name);
  }
  // 30-31
  if (opt.verify_data)
    for (const auto& t : out.tensors)
      if ((t.nbytes ? crc32(t.data, t.nbytes) : 0u) != t.crc) return fail(Code::DATA_CRC, "data CRC mismatch", -1, t.name);
  if (opt.check_bool)
    for (const auto& t : out.tensors)
      if (t.dtype == 1)
        for (uint64_t k = 0; k < t.nbytes; ++k)
          if (t.data[k] > 1) return fail(Code::BAD_BOOL, "BOOL byte other than 0 or 1", -1, t.name);
  return {};
}

// Canonical writer: the same layout rules as kdtr.format.dumps (data in name order, zero pads).
// Tensors must be in strictly ascending name order and metadata in strictly ascending key order.
inline std::vector<uint8_t> write_canonical(const File& f) {
  const uint64_t A = 1ull << f.align_log2;
  std::vector<uint8_t> out(A, 0);
  std::vector<uint64_t> offs;
  std::vector<uint32_t> crcs;
  for (const auto& t : f.tensors) {
    if (t.nbytes == 0) { offs.push_back(0); crcs.push_back(0); continue; }
    offs.push_back(out.size());
    out.insert(out.end(), t.data, t.data + t.nbytes);
    crcs.push_back(crc32(t.data, t.nbytes));
    out.resize((out.size() + A - 1) / A * A, 0);
  }
  uint64_t ioff = out.size();
  std::vector<uint8_t> heap, idx;
  for (const auto& t : f.tensors) heap.insert(heap.end(), t.name.begin(), t.name.end());
  for (const auto& kv : f.meta) {
    heap.insert(heap.end(), kv.first.begin(), kv.first.end());
    heap.insert(heap.end(), kv.second.begin(), kv.second.end());
  }
  idx.insert(idx.end(), {'K', 'D', 'I', 'X'});
  wr32(idx, uint32_t(f.tensors.size())); wr32(idx, uint32_t(f.meta.size())); wr32(idx, 0);
  wr64(idx, heap.size()); wr64(idx, 0);
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto& t = f.tensors[i];
    wr16(idx, uint16_t(t.name.size())); wr16(idx, t.dtype); idx.push_back(t.rank);
    idx.insert(idx.end(), 3, 0); wr32(idx, crcs[i]); wr32(idx, 0);
    wr64(idx, offs[i]); wr64(idx, t.nbytes);
    for (size_t d = 0; d < 8; ++d) wr64(idx, t.dims[d]);
    idx.insert(idx.end(), 32, 0);
  }
  for (const auto& kv : f.meta) { wr32(idx, uint32_t(kv.first.size())); wr32(idx, uint32_t(kv.second.size())); }
  idx.insert(idx.end(), heap.begin(), heap.end());
  std::vector<uint8_t> h;
  h.insert(h.end(), kMagic, kMagic + 8);
  wr16(h, 1); wr16(h, 0); wr32(h, kEndianTag); wr32(h, 0); wr32(h, 0);
  h.push_back(f.align_log2); h.insert(h.end(), 7, 0);
  wr64(h, ioff); wr64(h, idx.size()); wr32(h, crc32(idx.data(), idx.size())); h.insert(h.end(), 8, 0);
  wr32(h, crc32(h.data(), 60));
  std::copy(h.begin(), h.end(), out.begin());
  out.insert(out.end(), idx.begin(), idx.end());
  return out;
}

// Read a whole file into `buf` (size checked against the 2^48 limit before allocating) and open it.
inline Error open_file(const std::string& path, std::vector<uint8_t>& buf, File& out, const Options& opt = {}) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return fail(Code::IO, "cannot open " + path);
  std::streamoff n = in.tellg();
  if (n < 0) return fail(Code::IO, "cannot size " + path);
  if (uint64_t(n) > kMaxBytes) return fail(Code::HOST_LIMIT, "file larger than 2^48 bytes");
  try { buf.resize(size_t(n)); } catch (...) { return fail(Code::ALLOC, "cannot allocate the file buffer"); }
  in.seekg(0);
  if (n && !in.read(reinterpret_cast<char*>(buf.data()), n)) return fail(Code::IO, "short read of " + path);
  return open_memory(buf.data(), buf.size(), out, opt);
}

}  // namespace kdtr
