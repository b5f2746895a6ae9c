// Typed, validated access to the tensors of a KDTR file, and an owned tensor list to write one.
// Every check failure is an InputError naming the tensor, with numpy's dtype names so the messages read
// like the Python contract's ("top_logp: dtype float64, expected float32").
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kdtr.hpp"
#include "kdtree/checks.hpp"
#include "kdtree/contract.hpp"

namespace kdtree {

// KDTR dtype codes (kdtr/FORMAT.md) the engine reads or writes.
enum Code : uint16_t { kBool = 1, kU32 = 6, kI32 = 7, kI64 = 9, kF16 = 10, kBF16 = 11, kF32 = 12, kF64 = 13 };

const char* numpy_name(uint16_t code);

// A tensor view of a validated kdtr::File, with the shape as signed sizes.
struct View {
  const kdtr::Tensor* t = nullptr;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// Reads tensors by name, remembering which names were taken so unknown extras can be rejected. Without a
// source the tensors' bytes are in memory (kdtr::open_memory); with one (open_kdtr) nothing but the index is
// held until a tensor's values are asked for, and then that tensor alone is read from the file and its copy
// checked against its CRC again (kdtr::read_tensor): a file's memory cost is the index and the tensors used.
class Reader {
 public:
  explicit Reader(const kdtr::File& f, const kdtr::Source* src = nullptr) : f_(f), src_(src) {}
  bool has(const std::string& name) const { return f_.find(name) != nullptr; }
  // The tensor `name` with one of `codes` and rank `rank` (-1 = any); InputError otherwise.
  View array(const std::string& name, std::initializer_list<uint16_t> codes, int rank);
  // Integer scalar: rank 0, int32 or int64, within lo..hi.
  int64_t integer(const std::string& name, int64_t lo, int64_t hi);
  // Float scalar: rank 0, float64 or float32 (returned as double).
  double real(const std::string& name);
  // Bool scalar: rank 0, bool.
  bool flag(const std::string& name);
  // InputError for the first tensor that nobody asked for (`what` names the file's role).
  void reject_unknown(const std::string& what) const;
  // The view's bytes (v.t->nbytes of them) into dst; InputError naming the tensor when the file cannot be
  // read or no longer matches what was checked.
  void read(const View& v, void* dst) const { read(*v.t, dst); }
  // A copy of a view's elements (copying keeps every later access aligned and independent of the file).
  template <class T>
  std::vector<T> copy(const View& v) const {
    std::vector<T> out(size_t(v.numel()));
    read(v, out.data());
    return out;
  }

 private:
  void read(const kdtr::Tensor& t, void* dst) const;
  // A rank-0 tensor's bytes, after its dtype and rank were checked.
  template <class T>
  T scalar(const kdtr::Tensor& t) const {
    T x;
    read(t, &x);
    return x;
  }
  const kdtr::File& f_;
  const kdtr::Source* src_;
  std::set<std::string> taken_;
};

// Shape check: InputError "NAME: shape (..), expected (..)" (model and prompt files; the ops use Shapes).
void expect_shape(const std::string& name, const View& v, const std::vector<int64_t>& want);

// One dimension of an argument's declared shape: a symbol's name ("bs") or a fixed size (576). The
// constructors are implicit so that a shape reads like the contract's: {"bs", "Q", "H", kHeadDim}.
struct Dim {
  Dim(const char* symbol) : sym(symbol) {}
  Dim(int64_t n) : size(n) {}
  const char* sym = nullptr;
  int64_t size = 0;
};

// The contract's structural pass over an op's array arguments (contract/op.py OpContract._check_array),
// in argument order: the first array that names a symbol binds it, range-checked and naming that array
// ("top_logp: depth L=33 is outside 0..32"); later arrays must agree ("top_ids: shape (2, 2, 4),
// expected (2, 3, 4)").
class Shapes {
 public:
  explicit Shapes(std::vector<Symbol> symbols) : symbols_(std::move(symbols)) {}
  // r.array(name, codes, rank of dims), then the shape against dims.
  View array(Reader& r, const std::string& name, std::initializer_list<uint16_t> codes, const std::vector<Dim>& dims);
  // The shape of v against dims (its rank already checked).
  void check(const std::string& name, const View& v, const std::vector<Dim>& dims);
  // Binds a derived symbol (W from Q) without a range check, as the contract's `derived` does.
  void bind(const std::string& symbol, int64_t n) { dims_[symbol] = n; }
  bool bound(const std::string& symbol) const { return dims_.count(symbol) != 0; }
  // A bound symbol's value (std::out_of_range when unbound: a bug, not bad input).
  int64_t operator[](const std::string& symbol) const { return dims_.at(symbol); }

 private:
  const Symbol& symbol(const std::string& name) const;
  std::vector<Symbol> symbols_;
  std::map<std::string, int64_t> dims_;
};

// Tensors to write, owned. Names must be unique; add() keeps them in name order for the writer.
class TensorList {
 public:
  template <class T>
  void add(const std::string& name, uint16_t code, const std::vector<int64_t>& shape, const std::vector<T>& data) {
    add_bytes(name, code, shape, data.data(), data.size() * sizeof(T));
  }
  void add_bytes(const std::string& name, uint16_t code, const std::vector<int64_t>& shape, const void* data,
                 size_t nbytes);
  // Canonical KDTR bytes with the given metadata (keys sorted by the writer's rules).
  std::vector<uint8_t> serialize(std::vector<std::pair<std::string, std::string>> meta) const;

 private:
  struct Owned {
    std::string name;
    uint16_t code;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Owned> items_;
};

// Writes bytes to `path` through a temporary file in the same folder and a rename, so a reader never
// sees a torn file. InputError naming the path when it cannot.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);

// Opens and validates the KDTR file at `path` (its structure and every data CRC, streamed through a fixed
// buffer as kdtr-inspect checks files: memory stays within the index whatever the file's size) and keeps it
// open in `src`, for a Reader over (f, &src) to read the tensors it needs. InputError naming the path on any
// problem.
void open_kdtr(const std::string& path, kdtr::FileSource& src, kdtr::File& f);

}  // namespace kdtree
