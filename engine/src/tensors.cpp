// KDTR tensor access with contract-style messages, and the owned writer side.
#include "kdtree/tensors.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "kdtree/error_text.hpp"

namespace kdtree {

const char* numpy_name(uint16_t code) {
  static const char* names[18] = {"?",      "bool",    "uint8",   "int8",      "uint16",     "int16",
                                  "uint32", "int32",   "uint64",  "int64",     "float16",    "bfloat16",
                                  "float32", "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"};
  return code < 18 ? names[code] : "?";
}

int64_t View::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // bounded: the reader checked dims x itemsize <= 2^48
  return n;
}

View Reader::array(const std::string& name, std::initializer_list<uint16_t> codes, int rank) {
  const kdtr::Tensor* t = f_.find(name);
  if (!t) fail(name, "missing from the op file");
  taken_.insert(name);
  if (std::find(codes.begin(), codes.end(), t->dtype) == codes.end()) {
    std::string want;
    for (uint16_t c : codes) want += (want.empty() ? "" : " or ") + std::string(numpy_name(c));
    fail(name, std::string("dtype ") + numpy_name(t->dtype) + ", expected " + want);
  }
  View v;
  v.t = t;
  for (size_t d = 0; d < t->rank; ++d) v.shape.push_back(int64_t(t->dims[d]));
  if (rank >= 0 && int(t->rank) != rank)
    fail(name, "shape " + tuple_str(v.shape) + " has " + std::to_string(int(t->rank)) + " dims, expected " +
                   std::to_string(rank));
  return v;
}

int64_t Reader::integer(const std::string& name, int64_t lo, int64_t hi) {
  const kdtr::Tensor* t = f_.find(name);
  if (!t) fail(name, "missing from the op file");
  taken_.insert(name);
  if (t->dtype != kI32 && t->dtype != kI64) fail(name, std::string("expected an integer, got ") + numpy_name(t->dtype));
  if (t->rank != 0) fail(name, "expected a scalar (a rank-0 tensor), got rank " + std::to_string(int(t->rank)));
  const int64_t v = t->dtype == kI32 ? scalar<int32_t>(*t) : scalar<int64_t>(*t);
  if (v < lo || v > hi) fail(name, std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

double Reader::real(const std::string& name) {
  const kdtr::Tensor* t = f_.find(name);
  if (!t) fail(name, "missing from the op file");
  taken_.insert(name);
  if (t->dtype != kF64 && t->dtype != kF32)
    fail(name, std::string("dtype ") + numpy_name(t->dtype) + ", expected float64 (a rank-0 tensor)");
  if (t->rank != 0) fail(name, "expected a scalar (a rank-0 tensor), got rank " + std::to_string(int(t->rank)));
  return t->dtype == kF32 ? double(scalar<float>(*t)) : scalar<double>(*t);
}

bool Reader::flag(const std::string& name) {
  const kdtr::Tensor* t = f_.find(name);
  if (!t) fail(name, "missing from the op file");
  taken_.insert(name);
  if (t->dtype != kBool) fail(name, std::string("dtype ") + numpy_name(t->dtype) + ", expected bool (a rank-0 tensor)");
  if (t->rank != 0) fail(name, "expected a scalar (a rank-0 tensor), got rank " + std::to_string(int(t->rank)));
  const uint8_t b = scalar<uint8_t>(*t);
  if (b > 1) fail(name, "a bool byte other than 0 or 1");
  return b == 1;
}

void Reader::read(const kdtr::Tensor& t, void* dst) const {
  if (!src_) {
    if (t.nbytes) std::memcpy(dst, t.data, size_t(t.nbytes));
    return;
  }
  if (const kdtr::Error e = kdtr::read_tensor(*src_, t, static_cast<uint8_t*>(dst)))
    fail(t.name, "cannot be read from the file (" + e.what() + ")");
}

void Reader::reject_unknown(const std::string& what) const {
  for (const auto& t : f_.tensors)
    if (!taken_.count(t.name)) fail(t.name, "is not " + what);
}

void expect_shape(const std::string& name, const View& v, const std::vector<int64_t>& want) {
  if (v.shape != want) fail(name, "shape " + tuple_str(v.shape) + ", expected " + tuple_str(want));
}

View Shapes::array(Reader& r, const std::string& name, std::initializer_list<uint16_t> codes,
                   const std::vector<Dim>& dims) {
  const View v = r.array(name, codes, int(dims.size()));
  check(name, v, dims);
  return v;
}

void Shapes::check(const std::string& name, const View& v, const std::vector<Dim>& dims) {
  std::map<std::string, int64_t> fresh;  // symbols this array is the first to name: bound before comparing
  for (size_t k = 0; k < dims.size(); ++k) {
    const char* s = dims[k].sym;
    if (s && !dims_.count(s) && !fresh.count(s)) {
      check_symbol(name, symbol(s), v.shape[k]);
      fresh[s] = v.shape[k];
    }
  }
  std::vector<int64_t> want;
  for (const Dim& d : dims) want.push_back(!d.sym ? d.size : dims_.count(d.sym) ? dims_.at(d.sym) : fresh.at(d.sym));
  if (want != v.shape) {
    std::string w;  // the contract writes the expected shape as "(a, b)", a 1-tuple as "(a)"
    for (size_t k = 0; k < want.size(); ++k) w += (k ? ", " : "") + std::to_string(want[k]);
    fail(name, "shape " + tuple_str(v.shape) + ", expected (" + w + ")");
  }
  dims_.insert(fresh.begin(), fresh.end());
}

const Symbol& Shapes::symbol(const std::string& name) const {
  for (const Symbol& s : symbols_)
    if (name == s.name) return s;
  throw std::logic_error("no shape symbol " + name);
}

void TensorList::add_bytes(const std::string& name, uint16_t code, const std::vector<int64_t>& shape, const void* data,
                           size_t nbytes) {
  Owned o{name, code, shape, std::vector<uint8_t>(nbytes)};
  if (nbytes) std::memcpy(o.bytes.data(), data, nbytes);
  auto pos = std::lower_bound(items_.begin(), items_.end(), name,
                              [](const Owned& a, const std::string& n) { return a.name < n; });
  items_.insert(pos, std::move(o));
}

std::vector<uint8_t> TensorList::serialize(std::vector<std::pair<std::string, std::string>> meta) const {
  kdtr::File f;
  for (const auto& o : items_) {
    kdtr::Tensor t;
    t.name = o.name;
    t.dtype = o.code;
    t.rank = uint8_t(o.shape.size());
    for (size_t d = 0; d < o.shape.size(); ++d) t.dims[d] = uint64_t(o.shape[d]);
    t.nbytes = o.bytes.size();
    t.data = o.bytes.empty() ? nullptr : o.bytes.data();
    f.tensors.push_back(t);
  }
  std::sort(meta.begin(), meta.end());
  f.meta = std::move(meta);
  return kdtr::write_canonical(f);
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::string tmp = path + ".tmp-kdtree";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o) fail(path, "cannot create the output file (" + tmp + ")");
    o.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    o.close();
    if (!o) {
      std::remove(tmp.c_str());
      fail(path, "cannot write the output file");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(path, "cannot publish the output file (rename failed)");
  }
}

void open_kdtr(const std::string& path, kdtr::FileSource& src, kdtr::File& f) {
  f = kdtr::File{};
  kdtr::Error e = src.open(path);
  if (!e) e = kdtr::open_source(src, f);
  if (e) {
    char code[8];
    std::snprintf(code, sizeof code, "E%02d", int(e.code));
    std::string where = e.name.empty() ? "" : " (tensor or key '" + e.name + "')";
    fail(path, std::string("not a valid KDTR file: ") + code + " " + e.message + where);
  }
}

}  // namespace kdtree
