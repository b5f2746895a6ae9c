// KDTR v1 reader and canonical writer, C++17, header-only, standard library and POSIX only.
// Normative text: kdtr/FORMAT.md. The checks run in exactly the order of FORMAT.md section 3 and
// return the same codes and the same messages as the Python reader (kdtr/format.py); the differential
// tests compare them. Rules kept here: integers are read byte by byte (no pointer casts), every size sum
// or product is checked u64 arithmetic, nothing is allocated or read before its size has been checked
// against a limit and the file size, and no input is ever checked with assert.
//
// Reading a file: `FileSource` opens regular files only, without blocking (a FIFO never hangs), and
// `open_source` reads the 64-byte header, then the index (at most Options::max_index_size), then only
// the pad bytes, and streams data CRCs through a fixed buffer. So checking a file costs at most the index
// copy, the names and values it holds, and kChunk bytes, whatever the file's size (`check_file`).
// `open_file` checks the structure that way first and only then reads the whole file into memory.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>  // no longer used here; kept so code that got it through this header still builds
#include <map>      // likewise
#include <stdexcept>
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

// The enumerator's name, as the Python Code enum spells it ("FILE_SIZE_MISMATCH").
inline const char* code_name(Code c) {
  switch (c) {
    case Code::OK: return "OK";
    case Code::TRUNCATED: return "TRUNCATED";
    case Code::BAD_MAGIC: return "BAD_MAGIC";
    case Code::BAD_ENDIAN: return "BAD_ENDIAN";
    case Code::HEADER_CRC: return "HEADER_CRC";
    case Code::UNSUPPORTED_VERSION: return "UNSUPPORTED_VERSION";
    case Code::UNSUPPORTED_FEATURE: return "UNSUPPORTED_FEATURE";
    case Code::RESERVED_NONZERO: return "RESERVED_NONZERO";
    case Code::BAD_ALIGNMENT: return "BAD_ALIGNMENT";
    case Code::NOT_FINALIZED: return "NOT_FINALIZED";
    case Code::INDEX_BOUNDS: return "INDEX_BOUNDS";
    case Code::FILE_SIZE_MISMATCH: return "FILE_SIZE_MISMATCH";
    case Code::INDEX_CRC: return "INDEX_CRC";
    case Code::INDEX_MAGIC: return "INDEX_MAGIC";
    case Code::LIMIT_EXCEEDED: return "LIMIT_EXCEEDED";
    case Code::INDEX_LAYOUT: return "INDEX_LAYOUT";
    case Code::BAD_NAME: return "BAD_NAME";
    case Code::DUPLICATE_NAME: return "DUPLICATE_NAME";
    case Code::UNSORTED: return "UNSORTED";
    case Code::BAD_DTYPE: return "BAD_DTYPE";
    case Code::BAD_RANK: return "BAD_RANK";
    case Code::BAD_SHAPE: return "BAD_SHAPE";
    case Code::SIZE_OVERFLOW: return "SIZE_OVERFLOW";
    case Code::SIZE_MISMATCH: return "SIZE_MISMATCH";
    case Code::BAD_OFFSET: return "BAD_OFFSET";
    case Code::OUT_OF_BOUNDS: return "OUT_OF_BOUNDS";
    case Code::BAD_META_KEY: return "BAD_META_KEY";
    case Code::DUPLICATE_META_KEY: return "DUPLICATE_META_KEY";
    case Code::BAD_UTF8: return "BAD_UTF8";
    case Code::OVERLAP: return "OVERLAP";
    case Code::GAP: return "GAP";
    case Code::NONZERO_PADDING: return "NONZERO_PADDING";
    case Code::HOST_LIMIT: return "HOST_LIMIT";
    case Code::DATA_CRC: return "DATA_CRC";
    case Code::BAD_BOOL: return "BAD_BOOL";
    case Code::IO: return "IO";
    case Code::ALLOC: return "ALLOC";
    case Code::NOT_FOUND: return "NOT_FOUND";
  }
  return "?";
}

struct Error {
  Code code = Code::OK;
  long entry = -1;       // tensor or metadata entry index, -1 for file-level checks
  std::string name;      // sanitized: printable ASCII, anything else (and '"', '\') as \xNN
  std::string message;
  explicit operator bool() const { return code != Code::OK; }
  // The same text as str(KdtrError) in Python: KDTR E16 BAD_NAME entry 0 "a\x20b": message
  std::string what() const {
    char tag[8];
    std::snprintf(tag, sizeof tag, "E%02d", int(code));
    std::string s = std::string("KDTR ") + tag + " " + code_name(code);
    if (entry >= 0) s += " entry " + std::to_string(entry);
    if (!name.empty()) s += " \"" + name + "\"";
    return s + ": " + message;
  }
};

constexpr uint64_t kHeaderSize = 64, kIndexHeader = 32, kEntrySize = 128, kMetaEntry = 8;
constexpr uint64_t kMaxRank = 8, kMaxName = 256, kMaxTensors = 262144, kMaxMeta = 65536;
constexpr uint64_t kMaxValue = 16ull << 20, kMaxIndex = 64ull << 20, kMaxBytes = 1ull << 48;
// The largest file this host can address: 2^48, or less where size_t is narrower (a 32-bit host).
constexpr uint64_t kHostMaxBytes = uint64_t(SIZE_MAX) < kMaxBytes ? uint64_t(SIZE_MAX) : kMaxBytes;
constexpr uint64_t kChunk = 1ull << 20;  // the fixed buffer that data CRC and BOOL checks stream through
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

// CRC-32 (zlib), slicing by 8: a weights file of a few GB is verified at memory speed, not a byte a step.
inline uint32_t crc32(const uint8_t* p, uint64_t n, uint32_t crc = 0) {
  static const auto t = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    return t;
  }();
  crc = ~crc;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint32_t lo = crc ^ (uint32_t(p[i]) | uint32_t(p[i + 1]) << 8 | uint32_t(p[i + 2]) << 16 |
                               uint32_t(p[i + 3]) << 24);
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][p[i + 4]] ^ t[2][p[i + 5]] ^ t[1][p[i + 6]] ^ t[0][p[i + 7]];
  }
  for (; i < n; ++i) crc = t[0][(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
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
// A name for messages: bytes 0x21..0x7E except '"' and '\' as they are, anything else as \xNN
// (the same rule as kdtr.errors.sanitize, so both readers print the same text).
inline std::string sanitize(const uint8_t* p, uint64_t n) {
  std::string s;
  for (uint64_t i = 0; i < n && i < kMaxName; ++i) {
    if (p[i] >= 0x21 && p[i] <= 0x7E && p[i] != '"' && p[i] != '\\') { s += char(p[i]); continue; }
    char b[5];
    std::snprintf(b, sizeof b, "\\x%02x", p[i]);
    s += b;
  }
  return s;
}
inline std::string sanitize(const std::string& s) { return sanitize(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
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

// FORMAT.md check 21: itemsize times the product of the nonzero dims, if it stays <= 2^48; the tensor's
// byte size is that, or 0 when a dim is 0. Bounding the zero-dim case too is what keeps every accepted
// shape representable as an array (numpy refuses [2^40, 2^40, 0] of float32).
inline bool shape_size(uint64_t isz, const uint64_t* dims, size_t rank, uint64_t& nbytes) {
  uint64_t p = isz;
  bool empty = false;
  for (size_t d = 0; d < rank; ++d) {
    if (dims[d] == 0) { empty = true; continue; }
    if (!mul_ok(p, dims[d], p) || p > kMaxBytes) return false;
  }
  nbytes = empty ? 0 : p;
  return true;
}

struct Tensor {
  std::string name;
  uint16_t dtype = 0;
  uint8_t rank = 0;
  std::array<uint64_t, 8> dims{};
  uint64_t offset = 0, nbytes = 0;
  uint32_t crc = 0;
  const uint8_t* data = nullptr;  // view into the caller's buffer (valid while it lives); null from check_file
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
  bool check_crc = true;          // header and index CRCs; kept for old callers, no kdtr tool turns it off
  uint64_t max_index_size = kMaxIndex;
};

inline Error fail(Code c, std::string msg, long entry = -1, std::string name = {}) {
  Error e; e.code = c; e.message = std::move(msg); e.entry = entry; e.name = std::move(name);
  return e;
}

// Message helpers (detail: not part of the API, and kept out of the way of includers' names).
namespace detail {
// printf into a std::string, for messages that carry numbers like the Python reader's f-strings.
inline std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string fmt(const char* f, ...) {
  char b[256];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(b, sizeof b, f, ap);
  va_end(ap);
  return b;
}
inline unsigned long long ull(uint64_t x) { return static_cast<unsigned long long>(x); }
inline std::string hex(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += detail::fmt("%02x", p[i]);
  return s;
}
}  // namespace detail

// ------------------------------------------------------------------------------------------- sources
// Random-access bytes the reader checks: a buffer in memory or a regular file.
class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  // Copy [off, off + n) to dst; the reader only asks for ranges it has checked against size().
  virtual Error read(uint64_t off, uint8_t* dst, uint64_t n) const = 0;
  // The bytes themselves when they are in memory (tensor views then point into them), else null.
  virtual const uint8_t* memory() const { return nullptr; }
};

class MemorySource final : public Source {
 public:
  MemorySource(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  uint64_t size() const override { return size_; }
  Error read(uint64_t off, uint8_t* dst, uint64_t n) const override {
    std::memcpy(dst, data_ + off, n);
    return {};
  }
  const uint8_t* memory() const override { return data_; }

 private:
  const uint8_t* data_;
  uint64_t size_;
};

// A regular file read with pread. open() refuses anything else with E90 and never blocks: the path is
// opened with O_NONBLOCK (a FIFO with no writer would otherwise hang open) and checked with fstat.
class FileSource final : public Source {
 public:
  FileSource() = default;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  ~FileSource() override { if (fd_ >= 0) ::close(fd_); }

  Error open(const std::string& path) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    path_ = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno_error();
    struct stat st;
    if (::fstat(fd, &st) != 0) { Error e = errno_error(); ::close(fd); return e; }  // coverage-exempt: fstat of a descriptor just opened
    if (!S_ISREG(st.st_mode)) { ::close(fd); return fail(Code::IO, path + ": not a regular file"); }
    fd_ = fd;
    size_ = uint64_t(st.st_size);
    return {};
  }
  uint64_t size() const override { return size_; }
  Error read(uint64_t off, uint8_t* dst, uint64_t n) const override {
    while (n > 0) {  // pread may return less than asked (Linux caps one call near 2 GiB): loop
      const ssize_t r = ::pread(fd_, dst, size_t(n), off_t(off));
      if (r <= 0) return r == 0 ? fail(Code::IO, path_ + ": file ended early (changed while read)") : errno_error();
      dst += r; off += uint64_t(r); n -= uint64_t(r);
    }
    return {};
  }
  const std::string& path() const { return path_; }

 private:
  Error errno_error() const {
    const int e = errno;
    return fail(Code::IO, detail::fmt("%s: %s (errno %d)", path_.c_str(), std::strerror(e), e));
  }
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

// Calls fn(chunk, length) over [off, off + n), through `buf` (kChunk bytes) unless the bytes are in memory.
template <class Fn>
inline Error for_each_chunk(const Source& src, uint64_t off, uint64_t n, std::vector<uint8_t>& buf, Fn fn) {
  if (const uint8_t* m = src.memory()) { fn(m + off, n); return {}; }
  if (buf.size() < kChunk) {
    try { buf.resize(kChunk); } catch (...) { return fail(Code::ALLOC, "cannot allocate the read buffer"); }
  }
  while (n > 0) {
    const uint64_t k = n < kChunk ? n : kChunk;
    if (Error e = src.read(off, buf.data(), k)) return e;
    fn(buf.data(), k);
    off += k; n -= k;
  }
  return {};
}

// CRC-32 of [off, off + n) of src, streamed through a fixed buffer.
inline Error crc32_range(const Source& src, uint64_t off, uint64_t n, uint32_t& crc) {
  std::vector<uint8_t> buf;
  crc = 0;
  return for_each_chunk(src, off, n, buf, [&](const uint8_t* p, uint64_t k) { crc = crc32(p, k, crc); });
}

// ------------------------------------------------------------------------------------------- reader
struct NameKind { const char* what; Code bad; Code dup; };
constexpr NameKind kTensorName{"name", Code::BAD_NAME, Code::DUPLICATE_NAME};  // checks 16-18
constexpr NameKind kMetaKey{"key", Code::BAD_META_KEY, Code::DUPLICATE_META_KEY};  // check 25

// The next name or key from the string heap, in check order: length (E14), inside the heap (E15), bytes
// 0x21..0x7E, strictly after the previous one. Advances pos and prev on success.
inline Error take_name(const uint8_t* heap, uint64_t& pos, uint64_t S, uint64_t len, const uint8_t*& prev,
                       uint64_t& prevlen, long entry, const NameKind& kind, std::string& out) {
  const std::string what = kind.what;
  if (len < 1 || len > kMaxName) return fail(Code::LIMIT_EXCEEDED, what + detail::fmt("_len %llu outside 1..256", detail::ull(len)), entry);
  if (len > S - pos) return fail(Code::INDEX_LAYOUT, what + " runs past the string heap", entry);
  const uint8_t* nb = heap + pos;
  out = sanitize(nb, len);
  if (!valid_name(nb, len)) return fail(kind.bad, what + " has bytes outside 0x21..0x7E", entry, out);
  if (prev) {
    const int c = std::memcmp(nb, prev, len < prevlen ? len : prevlen);
    const int order = c ? c : (len < prevlen ? -1 : (len > prevlen ? 1 : 0));
    if (order == 0) return fail(kind.dup, what + " repeats the previous entry", entry, out);
    if (order < 0) return fail(Code::UNSORTED, what + "s are not in ascending byte order", entry, out);
  }
  out.assign(reinterpret_cast<const char*>(nb), len);  // a valid name is its own display form
  pos += len;
  prev = nb;
  prevlen = len;
  return {};
}

// Validate the KDTR file in `src` (FORMAT.md section 3, in order) and fill `out`. Reads the header, then
// the index, then pad bytes; data is only read (through a kChunk buffer) for the CRC and BOOL checks.
// Tensor views point into src.memory() when the source is in memory and are null otherwise.
inline Error open_source(const Source& src, File& out, const Options& opt = {}) {
  out = File{};
  const uint64_t size = src.size();
  // 1
  if (size < kHeaderSize + kIndexHeader) return fail(Code::TRUNCATED, detail::fmt("file is %llu bytes, shorter than 96", detail::ull(size)));
  if (size > kHostMaxBytes) return fail(Code::HOST_LIMIT, detail::fmt("file is %llu bytes, more than 2^48", detail::ull(size)));
  uint8_t h[kHeaderSize];
  if (Error e = src.read(0, h, kHeaderSize)) return e;
  // 2-4
  if (std::memcmp(h, kMagic, 8) != 0) return fail(Code::BAD_MAGIC, "magic is " + detail::hex(h, 8) + ", expected 894b4454520d0a1a");
  const uint32_t tag = rd32(h + 12);
  if (tag != kEndianTag)
    return fail(Code::BAD_ENDIAN, tag == kEndianSwapped ? "written by a big-endian writer" : detail::fmt("endian tag 0x%08x", tag));
  const uint32_t hcrc = crc32(h, 60);
  if (opt.check_crc && hcrc != rd32(h + 60))
    return fail(Code::HEADER_CRC, detail::fmt("header CRC 0x%08x != computed 0x%08x", rd32(h + 60), hcrc));
  // 5-8
  if (rd16(h + 8) != 1) return fail(Code::UNSUPPORTED_VERSION, detail::fmt("major version %u, this reader knows 1", rd16(h + 8)));
  if (rd32(h + 16) != 0) return fail(Code::UNSUPPORTED_FEATURE, detail::fmt("incompat_flags 0x%08x", rd32(h + 16)));
  if (!all_zero(h + 25, 7) || !all_zero(h + 52, 8)) return fail(Code::RESERVED_NONZERO, "reserved header bytes are not zero");
  const uint8_t al = h[24];
  if (al < 6 || al > 12) return fail(Code::BAD_ALIGNMENT, detail::fmt("align_log2 %u outside 6..12", al));
  const uint64_t A = 1ull << al;
  out.align_log2 = al;
  // 9-11
  const uint64_t ioff = rd64(h + 32), isize = rd64(h + 40);
  if (ioff == 0) return fail(Code::NOT_FINALIZED, "index_offset is 0 (file was never finalized)");
  if (ioff < A || ioff % A != 0)
    return fail(Code::INDEX_BOUNDS, detail::fmt("index_offset %llu is not a positive multiple of A=%llu", detail::ull(ioff), detail::ull(A)));
  if (isize < kIndexHeader || isize > opt.max_index_size)
    return fail(Code::INDEX_BOUNDS, detail::fmt("index_size %llu outside 32..%llu", detail::ull(isize), detail::ull(opt.max_index_size)));
  uint64_t iend;
  if (!add_ok(ioff, isize, iend)) return fail(Code::FILE_SIZE_MISMATCH, "index_offset + index_size overflows 64 bits");
  if (iend != size) return fail(Code::FILE_SIZE_MISMATCH, detail::fmt("index ends at %llu, file is %llu bytes", detail::ull(iend), detail::ull(size)));
  // 12: private copy of the index (its size is now bounded by the limit and by the file)
  std::vector<uint8_t> idx;
  try { idx.resize(isize); } catch (...) { return fail(Code::ALLOC, "cannot copy the index"); }
  if (Error e = src.read(ioff, idx.data(), isize)) return e;
  const uint32_t icrc = crc32(idx.data(), isize);
  if (opt.check_crc && icrc != rd32(h + 48))
    return fail(Code::INDEX_CRC, detail::fmt("index CRC 0x%08x != computed 0x%08x", rd32(h + 48), icrc));
  const uint8_t* x = idx.data();
  // 13-15
  if (std::memcmp(x, "KDIX", 4) != 0) return fail(Code::INDEX_MAGIC, "index magic is " + detail::hex(x, 4) + ", expected 4b444958");
  if (!all_zero(x + 12, 4) || !all_zero(x + 24, 8)) return fail(Code::RESERVED_NONZERO, "reserved index header bytes are not zero");
  const uint64_t T = rd32(x + 4), M = rd32(x + 8), S = rd64(x + 16);
  if (T > kMaxTensors || M > kMaxMeta)
    return fail(Code::LIMIT_EXCEEDED, detail::fmt("tensor_count %llu / meta_count %llu over the limits 262144 / 65536", detail::ull(T), detail::ull(M)));
  uint64_t total = kIndexHeader + kEntrySize * T + kMetaEntry * M;  // cannot overflow: T, M bounded
  const uint64_t heap0 = total;
  if (!add_ok(total, S, total) || total != isize)
    return fail(Code::INDEX_LAYOUT, detail::fmt("32+128*%llu+8*%llu+%llu != index_size %llu", detail::ull(T), detail::ull(M), detail::ull(S), detail::ull(isize)));
  const uint8_t* heap = x + heap0;
  uint64_t pos = 0;
  try { out.tensors.reserve(T); } catch (...) { return fail(Code::ALLOC, "cannot allocate entries"); }
  const uint8_t* prev = nullptr; uint64_t prevlen = 0;
  // 16-24
  for (uint64_t i = 0; i < T; ++i) {
    const uint8_t* e = x + kIndexHeader + kEntrySize * i;
    const long ei = long(i);
    std::string raw;
    if (Error err = take_name(heap, pos, S, rd16(e), prev, prevlen, ei, kTensorName, raw)) return err;
    const std::string nm = sanitize(raw);
    Tensor t;
    t.name = raw;
    t.dtype = rd16(e + 2);
    const uint64_t isz = itemsize(t.dtype);
    if (isz == 0) return fail(Code::BAD_DTYPE, detail::fmt("unknown dtype code %u", t.dtype), ei, nm);
    t.rank = e[4];
    if (t.rank > kMaxRank) return fail(Code::BAD_RANK, detail::fmt("rank %u > 8", t.rank), ei, nm);
    for (size_t d = 0; d < 8; ++d) t.dims[d] = rd64(e + 32 + 8 * d);
    for (size_t d = t.rank; d < 8; ++d) if (t.dims[d]) return fail(Code::BAD_SHAPE, "dims beyond the rank are not zero", ei, nm);
    if (!all_zero(e + 5, 3) || !all_zero(e + 12, 4) || !all_zero(e + 96, 32))
      return fail(Code::RESERVED_NONZERO, "reserved entry bytes are not zero", ei, nm);
    uint64_t sz = 0;
    if (!shape_size(isz, t.dims.data(), t.rank, sz))
      return fail(Code::SIZE_OVERFLOW, "itemsize x product of the nonzero dims exceeds 2^48", ei, nm);
    t.nbytes = rd64(e + 24);
    t.offset = rd64(e + 16);
    if (sz != t.nbytes) return fail(Code::SIZE_MISMATCH, detail::fmt("nbytes %llu != dims x itemsize %llu", detail::ull(t.nbytes), detail::ull(sz)), ei, nm);
    if ((t.nbytes == 0 && t.offset != 0) || (t.nbytes != 0 && (t.offset % A != 0 || t.offset < A)))
      return fail(Code::BAD_OFFSET, detail::fmt("offset %llu (nbytes %llu, A=%llu)", detail::ull(t.offset), detail::ull(t.nbytes), detail::ull(A)), ei, nm);
    uint64_t end;
    if (!add_ok(t.offset, t.nbytes, end) || end > ioff)
      return fail(Code::OUT_OF_BOUNDS, detail::fmt("data at %llu of %llu bytes runs past the index at %llu", detail::ull(t.offset), detail::ull(t.nbytes), detail::ull(ioff)), ei, nm);
    t.crc = rd32(e + 8);
    const uint8_t* mem = src.memory();
    t.data = mem && t.nbytes ? mem + t.offset : nullptr;
    out.tensors.push_back(std::move(t));
  }
  // 25-26
  prev = nullptr; prevlen = 0;
  const uint8_t* m0 = x + kIndexHeader + kEntrySize * T;
  for (uint64_t j = 0; j < M; ++j) {
    const long ej = long(j);
    const uint64_t klen = rd32(m0 + 8 * j), vlen = rd32(m0 + 8 * j + 4);
    std::string raw;
    if (Error err = take_name(heap, pos, S, klen, prev, prevlen, ej, kMetaKey, raw)) return err;
    const std::string key = sanitize(raw);
    if (vlen > kMaxValue) return fail(Code::LIMIT_EXCEEDED, detail::fmt("value_len %llu > 16 MiB", detail::ull(vlen)), ej, key);
    if (vlen > S - pos) return fail(Code::INDEX_LAYOUT, "value runs past the string heap", ej, key);
    const uint8_t* vb = heap + pos;
    pos += vlen;
    if (!strict_utf8(vb, vlen)) return fail(Code::BAD_UTF8, "value is not strict UTF-8 without NUL", ej, key);
    out.meta.emplace_back(raw, std::string(reinterpret_cast<const char*>(vb), vlen));
  }
  // 27
  if (pos != S) return fail(Code::INDEX_LAYOUT, detail::fmt("string heap has %llu unreferenced bytes", detail::ull(S - pos)));
  // 28: coverage, tensors sorted by offset (stable, so ties keep name order as in Python's sorted)
  std::vector<const Tensor*> ord;
  for (const auto& t : out.tensors) if (t.nbytes) ord.push_back(&t);
  for (size_t a = 1; a < ord.size(); ++a)  // insertion sort, stable; linear on canonical (sorted) files
    for (size_t b = a; b > 0 && ord[b - 1]->offset > ord[b]->offset; --b) std::swap(ord[b - 1], ord[b]);
  uint64_t cur = A;
  for (const Tensor* t : ord) {
    if (t->offset < cur) return fail(Code::OVERLAP, detail::fmt("data at %llu overlaps bytes before %llu", detail::ull(t->offset), detail::ull(cur)), -1, sanitize(t->name));
    if (t->offset > cur) return fail(Code::GAP, detail::fmt("gap of %llu bytes before the data", detail::ull(t->offset - cur)), -1, sanitize(t->name));
    cur = (t->offset + t->nbytes + A - 1) / A * A;
  }
  if (cur != ioff) return fail(Code::GAP, detail::fmt("gap of %llu bytes before the index", detail::ull(ioff - cur)));
  // 29: pads are at most A - 1 <= 4095 bytes each, read into a fixed buffer
  uint8_t pad[4096];
  if (Error e = src.read(kHeaderSize, pad, A - kHeaderSize)) return e;
  if (!all_zero(pad, A - kHeaderSize)) return fail(Code::NONZERO_PADDING, "bytes between the header and the first alignment are not zero");
  for (const Tensor* t : ord) {
    const uint64_t end = t->offset + t->nbytes, pend = (end + A - 1) / A * A;
    if (Error e = src.read(end, pad, pend - end)) return e;
    if (!all_zero(pad, pend - end)) return fail(Code::NONZERO_PADDING, "pad after the data is not zero", -1, sanitize(t->name));
  }
  // 30-31: streamed through one kChunk buffer
  std::vector<uint8_t> buf;
  if (opt.verify_data)
    for (const auto& t : out.tensors) {
      uint32_t c = 0;
      if (Error e = for_each_chunk(src, t.offset, t.nbytes, buf, [&](const uint8_t* p, uint64_t k) { c = crc32(p, k, c); }))
        return e;
      if (c != t.crc) return fail(Code::DATA_CRC, detail::fmt("data CRC 0x%08x != computed 0x%08x", t.crc, c), -1, sanitize(t.name));
    }
  if (opt.check_bool)
    for (const auto& t : out.tensors) {
      if (t.dtype != 1) continue;
      bool ok = true;
      if (Error e = for_each_chunk(src, t.offset, t.nbytes, buf, [&](const uint8_t* p, uint64_t k) {
            for (uint64_t q = 0; q < k; ++q) ok = ok && p[q] <= 1;
          }))
        return e;
      if (!ok) return fail(Code::BAD_BOOL, "BOOL byte other than 0 or 1", -1, sanitize(t.name));
    }
  return {};
}

// Validate [data, data+size) and fill `out` with views into it.
inline Error open_memory(const uint8_t* data, uint64_t size, File& out, const Options& opt = {}) {
  return open_source(MemorySource(data, size), out, opt);
}

// Validate the file at `path` without holding its data: memory stays within the index copy, the names
// and values it holds, and one kChunk buffer, whatever the file's size. Tensor data pointers are null.
inline Error check_file(const std::string& path, File& out, const Options& opt = {}) {
  out = File{};
  FileSource src;
  if (Error e = src.open(path)) return e;
  return open_source(src, out, opt);
}

// Copy tensor `t` of a file validated from `src` (open_source, check_file) into dst[0, t.nbytes), and check
// the copy as open_source checks the file (data CRC, BOOL bytes, as `opt` asks): the bytes handed out are
// the bytes checked even if the file changed since it was validated. Memory: dst alone, so a caller that
// reads only the tensors it needs holds the index and those tensors, whatever the file's size.
inline Error read_tensor(const Source& src, const Tensor& t, uint8_t* dst, const Options& opt = {}) {
  if (t.nbytes == 0) return {};
  if (Error e = src.read(t.offset, dst, t.nbytes)) return e;
  if (opt.verify_data) {
    const uint32_t c = crc32(dst, t.nbytes);
    if (c != t.crc) return fail(Code::DATA_CRC, detail::fmt("data CRC 0x%08x != computed 0x%08x", t.crc, c), -1, sanitize(t.name));
  }
  if (opt.check_bool && t.dtype == 1 && !std::all_of(dst, dst + t.nbytes, [](uint8_t b) { return b <= 1; }))
    return fail(Code::BAD_BOOL, "BOOL byte other than 0 or 1", -1, sanitize(t.name));
  return {};
}

// Read the KDTR file in `src` into `buf` and fill `out` with views into it. The header, index and pads
// are checked from the source first (open_source without the data checks), so nothing is allocated for
// a file that fails them; then the whole file is read into `buf` and validated again there, data
// included, so the views are exactly the bytes that were checked even if the file changes meanwhile.
inline Error read_source(const Source& src, std::vector<uint8_t>& buf, File& out, const Options& opt = {}) {
  Options structure = opt;
  structure.verify_data = structure.check_bool = false;
  if (Error e = open_source(src, out, structure)) return e;
  try { buf.resize(size_t(src.size())); } catch (...) { return fail(Code::ALLOC, "cannot allocate the file buffer"); }
  if (Error e = src.read(0, buf.data(), src.size())) return e;
  return open_memory(buf.data(), buf.size(), out, opt);
}

// Open the file at `path` into `buf` and fill `out` with views into it (read_source over a FileSource).
inline Error open_file(const std::string& path, std::vector<uint8_t>& buf, File& out, const Options& opt = {}) {
  out = File{};
  FileSource src;
  if (Error e = src.open(path)) return e;
  return read_source(src, buf, out, opt);
}

// ------------------------------------------------------------------------------------------- writer
// Every limit a reader enforces, checked on what the writer is asked to write (FORMAT.md section 2), so
// the writer only makes files that readers open. Codes are the ones a reader would give the result.
inline Error check_writable(const File& f) {
  if (f.align_log2 < 6 || f.align_log2 > 12) return fail(Code::BAD_ALIGNMENT, detail::fmt("align_log2 %u outside 6..12", f.align_log2));
  const uint64_t A = 1ull << f.align_log2;
  const uint64_t T = f.tensors.size(), M = f.meta.size();
  if (T > kMaxTensors || M > kMaxMeta)
    return fail(Code::LIMIT_EXCEEDED, detail::fmt("tensor_count %llu / meta_count %llu over the limits 262144 / 65536", detail::ull(T), detail::ull(M)));
  uint64_t S = 0, data_end = A;
  for (uint64_t i = 0; i < T; ++i) {
    const Tensor& t = f.tensors[i];
    const long ei = long(i);
    const auto* nb = reinterpret_cast<const uint8_t*>(t.name.data());
    const std::string nm = sanitize(nb, t.name.size());
    if (t.name.empty() || t.name.size() > kMaxName)
      return fail(Code::LIMIT_EXCEEDED, detail::fmt("name_len %llu outside 1..256", detail::ull(t.name.size())), ei, nm);
    if (!valid_name(nb, t.name.size())) return fail(Code::BAD_NAME, "name has bytes outside 0x21..0x7E", ei, nm);
    if (i > 0 && t.name == f.tensors[i - 1].name) return fail(Code::DUPLICATE_NAME, "name repeats the previous entry", ei, nm);
    if (i > 0 && t.name < f.tensors[i - 1].name) return fail(Code::UNSORTED, "names are not in ascending byte order", ei, nm);
    const uint64_t isz = itemsize(t.dtype);
    if (isz == 0) return fail(Code::BAD_DTYPE, detail::fmt("unknown dtype code %u", t.dtype), ei, nm);
    if (t.rank > kMaxRank) return fail(Code::BAD_RANK, detail::fmt("rank %u > 8", t.rank), ei, nm);
    for (size_t d = t.rank; d < 8; ++d) if (t.dims[d]) return fail(Code::BAD_SHAPE, "dims beyond the rank are not zero", ei, nm);
    uint64_t sz = 0;
    if (!shape_size(isz, t.dims.data(), t.rank, sz))
      return fail(Code::SIZE_OVERFLOW, "itemsize x product of the nonzero dims exceeds 2^48", ei, nm);
    if (sz != t.nbytes) return fail(Code::SIZE_MISMATCH, detail::fmt("nbytes %llu != dims x itemsize %llu", detail::ull(t.nbytes), detail::ull(sz)), ei, nm);
    if (t.nbytes && !t.data) return fail(Code::IO, "tensor has no data in memory", ei, nm);
    S += t.name.size();
    data_end += (t.nbytes + A - 1) / A * A;  // each term <= 2^48 + A and T <= 2^18: no overflow
  }
  for (uint64_t j = 0; j < M; ++j) {
    const auto& kv = f.meta[j];
    const long ej = long(j);
    const auto* kb = reinterpret_cast<const uint8_t*>(kv.first.data());
    const std::string key = sanitize(kb, kv.first.size());
    if (kv.first.empty() || kv.first.size() > kMaxName)
      return fail(Code::LIMIT_EXCEEDED, detail::fmt("key_len %llu outside 1..256", detail::ull(kv.first.size())), ej, key);
    if (!valid_name(kb, kv.first.size())) return fail(Code::BAD_META_KEY, "key has bytes outside 0x21..0x7E", ej, key);
    if (j > 0 && kv.first == f.meta[j - 1].first) return fail(Code::DUPLICATE_META_KEY, "key repeats the previous entry", ej, key);
    if (j > 0 && kv.first < f.meta[j - 1].first) return fail(Code::UNSORTED, "keys are not in ascending byte order", ej, key);
    if (kv.second.size() > kMaxValue) return fail(Code::LIMIT_EXCEEDED, detail::fmt("value_len %llu > 16 MiB", detail::ull(kv.second.size())), ej, key);
    if (!strict_utf8(reinterpret_cast<const uint8_t*>(kv.second.data()), kv.second.size()))
      return fail(Code::BAD_UTF8, "value is not strict UTF-8 without NUL", ej, key);
    S += kv.first.size() + kv.second.size();
  }
  const uint64_t isize = kIndexHeader + kEntrySize * T + kMetaEntry * M + S;  // bounded by the counts above
  if (isize > kMaxIndex) return fail(Code::INDEX_BOUNDS, detail::fmt("index_size %llu outside 32..%llu", detail::ull(isize), detail::ull(kMaxIndex)));
  if (data_end + isize > kMaxBytes)
    return fail(Code::HOST_LIMIT, detail::fmt("file is %llu bytes, more than 2^48", detail::ull(data_end + isize)));
  return {};
}

// Canonical writer without checks: the same layout rules as kdtr.format.dumps (data in name order, zero
// pads). `f` must pass check_writable.
inline std::vector<uint8_t> write_canonical_unchecked(const File& f) {
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
  const uint64_t ioff = out.size();
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

// Canonical writer: checks every reader limit first (check_writable), then fills `out`.
inline Error write_canonical(const File& f, std::vector<uint8_t>& out) {
  if (Error e = check_writable(f)) return e;
  try { out = write_canonical_unchecked(f); } catch (...) { return fail(Code::ALLOC, "cannot allocate the file"); }
  return {};
}

// The original interface: throws std::invalid_argument (with Error::what()) for what readers would
// reject, rather than returning a file no reader opens.
inline std::vector<uint8_t> write_canonical(const File& f) {
  if (Error e = check_writable(f)) throw std::invalid_argument(e.what());
  return write_canonical_unchecked(f);
}

}  // namespace kdtr
