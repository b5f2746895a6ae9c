// The registry of compiled kernel variants (cuda_registry.hpp).
#include "kdtree/cuda_registry.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace kdtree {
namespace cuda {
namespace {

std::vector<const Variant*>& all() {
  static std::vector<const Variant*> v;  // filled during static initialization, read-only afterwards
  return v;
}

}  // namespace

const void* Variant::entry(const std::string& name) const {
  for (int i = 0; i < n_entries; ++i)
    if (name == entries[i].name) return entries[i].fn;
  throw std::logic_error(this->name() + " has no entry function " + name);
}

std::string Variant::define(const std::string& name) const {
  for (int i = 0; i < n_defines; ++i)
    if (name == defines[i].name) return defines[i].value;
  throw std::logic_error(this->name() + " does not define " + name);
}

std::string Variant::define_or(const std::string& name, const std::string& fallback) const {
  for (int i = 0; i < n_defines; ++i)
    if (name == defines[i].name) return defines[i].value;
  return fallback;
}

bool Variant::takes(const std::string& dtype) const {
  if (!*dtypes) return true;
  const std::string list = std::string(" ") + dtypes + " ";
  return list.find(" " + dtype + " ") != std::string::npos;
}

bool register_variant(const Variant* v) {
  all().push_back(v);
  return true;
}

std::vector<const Variant*> variants(const std::string& slug) {
  std::vector<const Variant*> out;
  for (const Variant* v : all())
    if (slug.empty() || slug == v->slug) out.push_back(v);
  std::sort(out.begin(), out.end(), [](const Variant* a, const Variant* b) { return a->order < b->order; });
  return out;
}

}  // namespace cuda
}  // namespace kdtree
