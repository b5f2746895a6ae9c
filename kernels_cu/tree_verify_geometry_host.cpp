// The tree_verify launch geometry (tree_verify_geometry.cuh) as a C-ABI host library, so that the Python
// wrapper calls the header's own functions instead of restating them (kernels_cu/geometry.py builds and
// loads this file).
#include "tree_verify_geometry.cuh"

extern "C" {
const char* tv_geometry_field_names() { return TV_GEOMETRY_FIELDS; }
int tv_geometry_field_count() { return tv::kGeometryFields; }
void tv_geometry_fields(long long n_keys, long long rows, int variant, long long chunk, long long* out) {
  tv::geometry_fields(n_keys, rows, variant, chunk, out);
}
}
