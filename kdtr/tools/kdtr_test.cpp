// kdtr-test: unit checks of kdtr.hpp that no file can drive through kdtr-inspect: the host size limit
// (no test machine holds a 256 TiB file, so a Source that only claims that size), I/O errors of
// FileSource, the writer's limit checks, views into memory, CRC and UTF-8 edge cases.
// `kdtr-test` runs them all (exit 1 on the first failure); `kdtr-test --codes` prints "E01 TRUNCATED"
// lines so the tests can compare the C++ code names with the Python enum. conformance/test_kdtr_cpp.py
// runs both.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kdtr.hpp"

static int checks = 0;

static void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) { std::fprintf(stderr, "FAIL: %s\n", what.c_str()); std::exit(1); }
}

static void expect_code(const kdtr::Error& e, kdtr::Code want, const std::string& what) {
  expect(e.code == want, what + ": got " + kdtr::code_name(e.code) + " (" + e.what() + "), want " + kdtr::code_name(want));
}

// A source that claims `size` bytes of zeros without holding them.
class ZeroSource final : public kdtr::Source {
 public:
  explicit ZeroSource(uint64_t size) : size_(size) {}
  uint64_t size() const override { return size_; }
  kdtr::Error read(uint64_t, uint8_t* dst, uint64_t n) const override {
    std::memset(dst, 0, n);
    return {};
  }

 private:
  uint64_t size_;
};

// A file's bytes that fail the k-th read (1-based) with E90 and give no memory view, so the reader takes
// the streaming paths: every read site of open_source and read_source is driven to its error exit.
class FailingSource final : public kdtr::Source {
 public:
  FailingSource(const std::vector<uint8_t>& bytes, int fail_at) : bytes_(bytes), fail_at_(fail_at) {}
  uint64_t size() const override { return bytes_.size(); }
  kdtr::Error read(uint64_t off, uint8_t* dst, uint64_t n) const override {
    if (++reads_ == fail_at_) return kdtr::fail(kdtr::Code::IO, "injected read failure");
    std::memcpy(dst, bytes_.data() + off, n);
    return {};
  }
  int reads() const { return reads_; }

 private:
  const std::vector<uint8_t>& bytes_;
  int fail_at_;
  mutable int reads_ = 0;
};

static kdtr::Tensor tensor(const std::string& name, uint16_t dtype, std::vector<uint64_t> dims, const uint8_t* data) {
  kdtr::Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.rank = uint8_t(dims.size());
  uint64_t n = kdtr::itemsize(dtype);
  for (size_t d = 0; d < dims.size(); ++d) { t.dims[d] = dims[d]; n *= dims[d]; }
  t.nbytes = n;
  t.data = data;
  return t;
}

static void host_limit() {
  kdtr::File f;
  kdtr::Error e = kdtr::open_source(ZeroSource(kdtr::kMaxBytes + 1), f);
  expect_code(e, kdtr::Code::HOST_LIMIT, "a source of 2^48 + 1 bytes");
  expect(e.message == "file is 281474976710657 bytes, more than 2^48", "E32 message: " + e.message);
  expect_code(kdtr::open_source(ZeroSource(kdtr::kMaxBytes), f), kdtr::Code::BAD_MAGIC, "a source of exactly 2^48 bytes");
}

static void file_source_errors(const std::string& dir) {
  uint8_t buf[256];
  kdtr::FileSource closed;
  expect_code(closed.read(0, buf, 1), kdtr::Code::IO, "reading a FileSource that was never opened");
  const std::string p = dir + "/shrinks.bin";
  std::FILE* fp = std::fopen(p.c_str(), "wb");
  expect(fp != nullptr, "create " + p);
  std::fwrite(buf, 1, sizeof buf, fp);
  std::fclose(fp);
  kdtr::FileSource s;
  expect(!s.open(p), "open " + p);
  expect(s.size() == sizeof buf && s.path() == p, "size and path of " + p);
  expect(truncate(p.c_str(), 100) == 0, "truncate " + p);
  kdtr::Error e = s.read(0, buf, sizeof buf);
  expect_code(e, kdtr::Code::IO, "a file that shrank after it was opened");
  expect(e.message == p + ": file ended early (changed while read)", "short read message: " + e.message);
  expect(!s.open(p) && s.size() == 100, "a FileSource can be opened again");
}

static void writer_limits() {
  static const uint8_t bytes[64] = {1, 0, 1};
  using C = kdtr::Code;
  struct Case { const char* what; C code; kdtr::File f; };
  std::vector<Case> cases;
  auto add = [&](const char* what, C code, auto edit) {
    kdtr::File f;
    f.tensors.push_back(tensor("a", 12, {2, 3}, bytes));
    f.meta.emplace_back("k", "v");
    edit(f);
    cases.push_back({what, code, std::move(f)});
  };
  add("align_log2 5", C::BAD_ALIGNMENT, [](kdtr::File& f) { f.align_log2 = 5; });
  add("align_log2 13", C::BAD_ALIGNMENT, [](kdtr::File& f) { f.align_log2 = 13; });
  add("empty name", C::LIMIT_EXCEEDED, [](kdtr::File& f) { f.tensors[0].name = ""; });
  add("257-byte name", C::LIMIT_EXCEEDED, [](kdtr::File& f) { f.tensors[0].name = std::string(257, 'n'); });
  add("name with a space", C::BAD_NAME, [](kdtr::File& f) { f.tensors[0].name = "a b"; });
  add("duplicate name", C::DUPLICATE_NAME, [](kdtr::File& f) { f.tensors.push_back(f.tensors[0]); });
  add("unsorted names", C::UNSORTED, [](kdtr::File& f) { f.tensors.insert(f.tensors.begin(), tensor("b", 1, {}, bytes)); });
  add("dtype 0", C::BAD_DTYPE, [](kdtr::File& f) { f.tensors[0].dtype = 0; });
  add("dtype 18", C::BAD_DTYPE, [](kdtr::File& f) { f.tensors[0].dtype = 18; });
  add("rank 9", C::BAD_RANK, [](kdtr::File& f) { f.tensors[0].rank = 9; });
  add("dim beyond the rank", C::BAD_SHAPE, [](kdtr::File& f) { f.tensors[0].dims[7] = 1; });
  add("[2^40, 2^40, 0] F32", C::SIZE_OVERFLOW, [](kdtr::File& f) { f.tensors[0] = tensor("a", 12, {1ull << 40, 1ull << 40, 0}, bytes); });
  add("nbytes off by one", C::SIZE_MISMATCH, [](kdtr::File& f) { f.tensors[0].nbytes += 1; });
  add("no data", C::IO, [](kdtr::File& f) { f.tensors[0].data = nullptr; });
  add("empty key", C::LIMIT_EXCEEDED, [](kdtr::File& f) { f.meta[0].first = ""; });
  add("257-byte key", C::LIMIT_EXCEEDED, [](kdtr::File& f) { f.meta[0].first = std::string(257, 'k'); });
  add("key with a tab", C::BAD_META_KEY, [](kdtr::File& f) { f.meta[0].first = "k\t"; });
  add("duplicate key", C::DUPLICATE_META_KEY, [](kdtr::File& f) { f.meta.push_back(f.meta[0]); });
  add("unsorted keys", C::UNSORTED, [](kdtr::File& f) { f.meta.emplace_back("j", "v"); });
  add("value over 16 MiB", C::LIMIT_EXCEEDED, [](kdtr::File& f) { f.meta[0].second.assign(kdtr::kMaxValue + 1, 'v'); });
  add("value with NUL", C::BAD_UTF8, [](kdtr::File& f) { f.meta[0].second = std::string("a\0b", 3); });
  add("five 16 MiB values: index over 64 MiB", C::INDEX_BOUNDS, [](kdtr::File& f) {
    f.meta.clear();
    for (char k = 'a'; k < 'f'; ++k) f.meta.emplace_back(std::string(1, k), std::string(kdtr::kMaxValue, 'v'));
  });
  add("262145 tensors", C::LIMIT_EXCEEDED, [](kdtr::File& f) { f.tensors.resize(kdtr::kMaxTensors + 1); });
  add("65537 metadata entries", C::LIMIT_EXCEEDED, [](kdtr::File& f) { f.meta.resize(kdtr::kMaxMeta + 1); });
  add("a 2^48-byte tensor: file over 2^48", C::HOST_LIMIT, [](kdtr::File& f) { f.tensors[0] = tensor("a", 2, {1ull << 48}, bytes); });
  for (const auto& c : cases) {
    std::vector<uint8_t> out{1, 2, 3};
    kdtr::Error e = kdtr::write_canonical(c.f, out);
    expect_code(e, c.code, std::string("writer, ") + c.what);
    expect(out.size() == 3, std::string("writer leaves the output alone on error, ") + c.what);
    bool threw = false;
    try { (void)kdtr::write_canonical(c.f); } catch (const std::invalid_argument& x) { threw = e.what() == x.what(); }
    expect(threw, std::string("the vector-returning writer throws Error::what(), ") + c.what);
  }
  // Just inside the limits: written, and the reader opens the result with views into it.
  kdtr::File f;
  f.align_log2 = 12;
  f.tensors.push_back(tensor("a", 12, {2, 3}, bytes));
  f.tensors.push_back(tensor("e", 2, {1ull << 23, 1ull << 25, 0}, bytes));  // 2^48 as if the 0 were 1
  f.tensors.push_back(tensor(std::string(256, 'z'), 1, {3}, bytes));
  f.meta.emplace_back(std::string(256, 'k'), std::string(kdtr::kMaxValue, 'v'));
  std::vector<uint8_t> out;
  expect(!kdtr::write_canonical(f, out), "a file at the limits is written");
  kdtr::File g;
  kdtr::Error e = kdtr::open_memory(out.data(), out.size(), g);
  expect(!e, "the reader opens what the writer wrote: " + e.what());
  expect(g.tensors.size() == 3 && g.tensors[0].data == out.data() + 4096 && g.tensors[1].data == nullptr,
         "tensor views point into the buffer");
  expect(g.meta == f.meta && kdtr::write_canonical(g) == out, "canonical round trip");
  expect(g.find("a") == &g.tensors[0] && g.find("zz") == nullptr, "File::find");
}

static void read_failures_and_paths(const std::string& dir) {
  static const uint8_t bytes[64] = {1, 0, 1, 0, 1};
  kdtr::File f;
  f.tensors.push_back(tensor("a", 12, {2, 3}, bytes));
  f.tensors.push_back(tensor("b", 1, {4}, bytes));
  f.meta.emplace_back("k", "v");
  const std::vector<uint8_t> good = kdtr::write_canonical(f);
  kdtr::File g;
  std::vector<uint8_t> buf;
  int reads = 0;
  {
    FailingSource all(good, 0);
    expect(!kdtr::read_source(all, buf, g) && buf == good, "read_source of a good source");
    reads = all.reads();
  }
  expect(reads == 6, "header, index, 3 pads, whole file: " + std::to_string(reads) + " reads");
  for (int k = 1; k <= reads; ++k) {
    FailingSource s(good, k);
    kdtr::Error e = kdtr::read_source(s, buf, g);
    expect(e.code == kdtr::Code::IO && e.message == "injected read failure", "read_source read " + std::to_string(k));
  }
  {
    FailingSource all(good, 0);
    expect(!kdtr::open_source(all, g) && g.tensors[0].data == nullptr, "open_source streams a good source");
    reads = all.reads();
  }
  expect(reads == 8, "header, index, 3 pads, 2 CRC chunks, 1 BOOL chunk: " + std::to_string(reads) + " reads");
  for (int k = 1; k <= reads; ++k) {
    FailingSource s(good, k);
    kdtr::Error e = kdtr::open_source(s, g);
    expect(e.code == kdtr::Code::IO && e.message == "injected read failure", "open_source read " + std::to_string(k));
  }
  // check_crc off (kept for old callers): CRC mismatches pass, everything else is still checked
  std::vector<uint8_t> bad = good;
  bad[60] ^= 1;
  bad[48] ^= 1;
  kdtr::Options no_crc;
  no_crc.check_crc = false;
  expect(!kdtr::open_memory(bad.data(), bad.size(), g, no_crc), "check_crc=false skips the header and index CRCs");
  expect_code(kdtr::open_memory(bad.data(), bad.size(), g), kdtr::Code::HEADER_CRC, "and checks them by default");
  // paths
  const std::string p = dir + "/good.kdtr", q = dir + "/bad.kdtr";
  for (const auto& [path, data] : {std::pair{p, good}, std::pair{q, bad}}) {
    std::FILE* fp = std::fopen(path.c_str(), "wb");
    std::fwrite(data.data(), 1, data.size(), fp);
    std::fclose(fp);
  }
  expect(!kdtr::open_file(p, buf, g) && g.tensors[0].data == buf.data() + 64, "open_file views into buf");
  expect(!kdtr::check_file(p, g) && g.tensors[0].data == nullptr && g.meta == f.meta, "check_file holds no data");
  expect_code(kdtr::open_file(q, buf, g), kdtr::Code::HEADER_CRC, "open_file of a bad file");
  expect_code(kdtr::open_file(dir + "/missing", buf, g), kdtr::Code::IO, "open_file of a missing path");
  expect_code(kdtr::check_file(dir, g), kdtr::Code::IO, "check_file of a directory");
}

// read_tensor: a tensor of a checked file copied out alone, the copy checked again (the file may have
// changed since it was checked: a flipped data byte is E33, a BOOL byte 2 is E34, unless opt says not to).
static void read_tensor_checks() {
  static const uint8_t bytes[8] = {1, 0, 1, 1, 5, 6, 7, 8};
  kdtr::File f;
  f.tensors.push_back(tensor("a", 2, {8}, bytes));
  f.tensors.push_back(tensor("b", 1, {4}, bytes));
  f.tensors.push_back(tensor("c", 12, {0, 3}, nullptr));
  std::vector<uint8_t> good = kdtr::write_canonical(f);
  kdtr::File g;
  FailingSource src(good, 0);
  expect(!kdtr::open_source(src, g) && g.tensors[0].data == nullptr, "a streamed file for read_tensor");
  uint8_t out[8] = {};
  expect(!kdtr::read_tensor(src, g.tensors[0], out) && std::memcmp(out, bytes, 8) == 0, "read_tensor copies a tensor");
  expect(!kdtr::read_tensor(src, g.tensors[1], out) && std::memcmp(out, bytes, 4) == 0, "read_tensor of a BOOL tensor");
  expect(!kdtr::read_tensor(src, g.tensors[2], nullptr), "read_tensor of an empty tensor reads nothing");
  good[64] ^= 0x40;  // a's first byte changed after the check: 0x41
  good[128] = 2;     // b's first byte: not a BOOL byte
  expect_code(kdtr::read_tensor(src, g.tensors[0], out), kdtr::Code::DATA_CRC, "read_tensor checks the copy's CRC");
  kdtr::Options lax;
  lax.verify_data = false;
  expect(!kdtr::read_tensor(src, g.tensors[0], out, lax) && out[0] == 0x41, "read_tensor without verify_data");
  expect_code(kdtr::read_tensor(src, g.tensors[1], out, lax), kdtr::Code::BAD_BOOL, "read_tensor checks BOOL bytes");
  lax.check_bool = false;
  expect(!kdtr::read_tensor(src, g.tensors[1], out, lax) && out[0] == 2, "read_tensor without check_bool");
  FailingSource broken(good, 1);
  expect_code(kdtr::read_tensor(broken, g.tensors[0], out), kdtr::Code::IO, "read_tensor passes a read failure on");
}

static void helpers() {
  const uint8_t n[300] = {'a'};
  uint64_t r = 7;
  expect(kdtr::mul_ok(0, UINT64_MAX, r) && r == 0 && !kdtr::mul_ok(2, UINT64_MAX, r), "mul_ok");
  expect(!kdtr::valid_name(n, 0) && !kdtr::valid_name(n, 257) && kdtr::valid_name(n, 1), "valid_name lengths");
  expect(std::string(kdtr::dtype_name(17)) == "F8_E5M2" && std::string(kdtr::dtype_name(18)) == "?", "dtype_name");
  expect(kdtr::itemsize(15) == 16 && kdtr::itemsize(18) == 0, "itemsize");
}

static void crc_and_utf8() {
  const std::string s = "123456789";
  expect(kdtr::crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size()) == 0xCBF43926u, "CRC-32 check value");
  std::vector<uint8_t> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i * 7);
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(15), size_t(16), size_t(17), size_t(999)}) {
    uint32_t bytewise = ~0u;
    for (size_t i = 0; i < n; ++i) {
      bytewise ^= v[i];
      for (int k = 0; k < 8; ++k) bytewise = (bytewise & 1) ? 0xEDB88320u ^ (bytewise >> 1) : bytewise >> 1;
    }
    expect(kdtr::crc32(v.data(), n) == ~bytewise, "sliced CRC equals bytewise CRC, n=" + std::to_string(n));
    expect(kdtr::crc32(v.data() + n, 1000 - n, kdtr::crc32(v.data(), n)) == kdtr::crc32(v.data(), 1000), "CRC chains");
  }
  struct U { const char* bytes; size_t n; bool ok; };
  const U cases[] = {
      {"", 0, true}, {"abc", 3, true}, {"a\0b", 3, false}, {"\xc3\xa4", 2, true}, {"\xe2\x82\xac", 3, true},
      {"\xf0\x9f\x98\x80", 4, true}, {"\xf4\x8f\xbf\xbf", 4, true}, {"\xf4\x90\x80\x80", 4, false},
      {"\xc0\x80", 2, false}, {"\xe0\x80\x80", 3, false}, {"\xf0\x80\x80\x80", 4, false},
      {"\xed\xa0\x80", 3, false}, {"\xed\xbf\xbf", 3, false}, {"\xee\x80\x80", 3, true}, {"\xed\x9f\xbf", 3, true},
      {"\xc3", 1, false}, {"\xc3\x28", 2, false}, {"\x80", 1, false}, {"\xf8\x88\x80\x80\x80", 5, false},
      {"\xff", 1, false},
  };
  for (const U& u : cases)
    expect(kdtr::strict_utf8(reinterpret_cast<const uint8_t*>(u.bytes), u.n) == u.ok,
           "strict_utf8 of " + kdtr::detail::hex(reinterpret_cast<const uint8_t*>(u.bytes), u.n));
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--codes") {
    for (int c = 0; c < 100; ++c) {
      const char* n = kdtr::code_name(kdtr::Code(c));
      if (std::string(n) != "?" && c) std::printf("E%02d %s\n", c, n);
    }
    return 0;
  }
  if (argc != 2) { std::fprintf(stderr, "usage: kdtr-test SCRATCH_DIR | --codes\n"); return 2; }
  host_limit();
  file_source_errors(argv[1]);
  writer_limits();
  read_failures_and_paths(argv[1]);
  read_tensor_checks();
  helpers();
  crc_and_utf8();
  std::printf("kdtr-test: %d checks passed\n", checks);
  return 0;
}
