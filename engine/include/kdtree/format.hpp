// Small text helpers for error messages that read like the Python contract's (tuples as "(1, 2)").
#pragma once
#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace kdtree {

// "(a, b, c)"; a single element reads "(a,)" like a Python 1-tuple.
inline std::string tuple_str(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() == 1) s += ",";
  return s + ")";
}
inline std::string tuple_str(std::initializer_list<int64_t> v) { return tuple_str(std::vector<int64_t>(v)); }

// The multi-index of flat position `flat` in an array of shape `shape` (C order).
inline std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = shape[k] ? flat % shape[k] : 0;
    flat = shape[k] ? flat / shape[k] : 0;
  }
  return idx;
}

// A double as Python's repr writes it: shortest round-trip digits, "0.0" rather than "0", "nan", "inf".
inline std::string float_repr(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

}  // namespace kdtree
