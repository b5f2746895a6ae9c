// Strict option parsing (see cli.hpp).
#include "kdtree/cli.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace kdtree {

Options::Options(int argc, char** argv, int first, const std::set<std::string>& with_value,
                 const std::set<std::string>& flags) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      positional_.push_back(a);
      continue;
    }
    if (flags.count(a)) {
      flags_.insert(a);
    } else if (with_value.count(a)) {
      if (i + 1 >= argc) throw UsageError(a + ": needs a value");
      if (values_.count(a)) throw UsageError(a + ": given twice");
      values_[a] = argv[++i];
    } else {
      throw UsageError("unknown option '" + a + "'");
    }
  }
}

std::string Options::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw UsageError(name + ": required");
  return it->second;
}

std::string Options::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Options::integer(const std::string& name, int64_t lo, int64_t hi) const {
  const std::string s = str(name);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE) throw UsageError(name + ": '" + s + "' is not an integer");
  if (v < lo || v > hi)
    throw UsageError(name + ": " + s + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

int64_t Options::integer(const std::string& name, int64_t lo, int64_t hi, int64_t fallback) const {
  return values_.count(name) ? integer(name, lo, hi) : fallback;
}

double Options::real(const std::string& name, double lo, double hi, double fallback) const {
  if (!values_.count(name)) return fallback;
  const std::string s = str(name);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    throw UsageError(name + ": '" + s + "' is not a finite number");
  if (v < lo || v > hi) throw UsageError(name + ": " + s + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

DeviceChoice device_choice(const Options& o) {
  const std::string d = o.str("--device", "cpu");
  if (d != "cpu" && d != "cuda") throw UsageError("--device: '" + d + "' is not cpu or cuda");
  DeviceChoice c;
  c.cuda = d == "cuda";
  c.variant = o.str("--variant", "");
  if (o.has("--variant") && !c.cuda) throw UsageError("--variant: kernel variants need --device cuda");
  if (o.has("--variant") && c.variant.empty()) throw UsageError("--variant: empty");
  return c;
}

}  // namespace kdtree
