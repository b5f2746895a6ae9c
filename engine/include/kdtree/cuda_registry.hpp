// The kernel variants compiled into the engine's CUDA backend. engine/CMakeLists.txt writes one small
// translation unit per build spec of kernels_cu/specs.py (through the generated engine/cuda/kernel_specs.cmake):
// it includes the spec's kernels_cu/<op>.cu with the spec's defines and nvcc options, and registers the
// variant here at start-up with its entry functions and defines. Plain C++ (no CUDA headers).
#pragma once
#include <string>
#include <vector>

namespace kdtree {
namespace cuda {

struct KernelEntry {
  const char* name;  // the entry's name in kernels_cu/<op>.cu
  const void* fn;    // its host stub (renamed per variant at compile time so variants of one source link)
};

struct KernelDefine {
  const char* name;
  const char* value;
};

struct Variant {
  const char* slug;     // op slug
  const char* variant;  // variant name
  const char* source;   // kernels_cu/ file
  const char* dtypes;   // input dtypes it takes ("" = every dtype of the contract; else "bf16 fp32"-style)
  const char* archs;    // archs it is built for ("sm_90 sm_120")
  int order;            // position in kernels_cu/specs.py SPECS
  int block;            // threads per block (KERNEL_BLOCK)
  const KernelEntry* entries;
  int n_entries;
  const KernelDefine* defines;
  int n_defines;

  std::string name() const { return std::string(slug) + ":" + variant; }
  // The entry function `entry` (std::logic_error when the variant has none: a launcher bug).
  const void* entry(const std::string& entry) const;
  // The value of define `name` (std::logic_error when the spec does not define it).
  std::string define(const std::string& name) const;
  // The value of define `name`, or `fallback` when the spec does not define it.
  std::string define_or(const std::string& name, const std::string& fallback) const;
  bool takes(const std::string& dtype) const;
};

// Called by the generated translation units during static initialization.
bool register_variant(const Variant* v);

// Every compiled variant, in the specs' order; of one op when `slug` is given.
std::vector<const Variant*> variants(const std::string& slug = "");

}  // namespace cuda
}  // namespace kdtree
