// Small text helpers for error messages that read like the Python contract's (tuples as "(1, 2)").
#pragma once
#include <charconv>
#include <cmath>
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

// A double as Python's repr writes it: the shortest digits that round-trip, in fixed notation with at
// least one digit after the point ("0.0001", "100.0") when the decimal exponent e of d.ddd x 10^e is in
// -4..15, otherwise in exponent notation with a signed exponent of at least two digits ("1e-05",
// "1e+39", "1.5e+300"); "nan", "inf", "-inf".
inline std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);  // shortest digits
  const std::string s(buf, r.ptr);  // [-]d[.ddd]e(+|-)XX
  const size_t e = s.find('e');
  const bool neg = s[0] == '-';
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  const int exp = std::stoi(s.substr(e + 1));
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const std::string mag = std::to_string(exp < 0 ? -exp : exp);
    return out + (exp < 0 ? "e-" : "e+") + (mag.size() < 2 ? "0" : "") + mag;
  }
  if (exp < 0) return out + "0." + std::string(size_t(-exp - 1), '0') + digits;
  const size_t point = size_t(exp) + 1;
  if (digits.size() <= point) return out + digits + std::string(point - digits.size(), '0') + ".0";
  return out + digits.substr(0, point) + "." + digits.substr(point);
}

}  // namespace kdtree
