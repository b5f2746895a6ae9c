// Command-line option parsing for the engine's subcommands: --name VALUE pairs and --flags, strict
// (unknown options, missing values and malformed numbers are errors naming the option).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace kdtree {

// A command-line problem; the message names the option. main() exits 2 on it.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Options {
 public:
  // Parses argv[first..argc) against the allowed options (value-taking) and flags (no value).
  Options(int argc, char** argv, int first, const std::set<std::string>& with_value, const std::set<std::string>& flags);
  bool has(const std::string& name) const { return values_.count(name) > 0 || flags_.count(name) > 0; }
  std::string str(const std::string& name) const;  // required
  std::string str(const std::string& name, const std::string& fallback) const;
  int64_t integer(const std::string& name, int64_t lo, int64_t hi) const;  // required
  int64_t integer(const std::string& name, int64_t lo, int64_t hi, int64_t fallback) const;
  double real(const std::string& name, double lo, double hi, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

// The --device option ("cpu", the default, or "cuda") and --variant (a kernel variant of kernels_cu/specs.py,
// with cuda only). Anything else is a UsageError naming the option.
struct DeviceChoice {
  bool cuda = false;
  std::string variant;  // "" = each op's first variant usable on the GPU
};
DeviceChoice device_choice(const Options& o);

}  // namespace kdtree
