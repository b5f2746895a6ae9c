// The CUDA runtime side of the engine's CUDA backend: the GPU, device buffers, variant selection and
// launches (private to engine/src/cuda/).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kdtree/cuda.hpp"
#include "kdtree/cuda_registry.hpp"
#include "kdtree/model.hpp"

namespace kdtree {
namespace cuda {

// Throws DeviceError for the errors that mean "no usable GPU", std::runtime_error for the others.
void check(cudaError_t e, const char* what);

struct Gpu {
  int device = 0;
  std::string arch;          // "sm_90"
  int cc = 0;                // compute capability, major * 10 + minor (arch_limits.cuh's rows)
  std::string name;          // "NVIDIA H200"
  long long smem_optin = 0;  // per-block shared memory limit (opt-in), less 64 bytes (tree_build_ops.STATIC_ALLOWANCE)
  int sm_count = 0;          // SMs (a race build of tree_build launches by it)
};

// The GPU (device 0), initialized once; DeviceError when there is none.
const Gpu& gpu();

// Host<->device traffic and host waits, counted at the calls below that make them (this process, every
// thread). Every copy, free and synchronisation of the CUDA backend goes through them, so the counts are
// measured where the work is done. Launches, cudaMalloc and cudaMemset of device memory are not counted: CUDA
// does not document them as waiting for the device.
DeviceTraffic traffic();
// cudaMemcpy (host to device / device to host): each one is also a wait for the device (CUDA's "API
// synchronization behavior": a synchronous copy from pageable memory synchronises the stream first, and one to
// pageable memory returns when the copy is done), so it counts as a copy and a sync.
void copy_to_device(void* dst, const void* src, size_t bytes, const char* what);
void copy_to_host(void* dst, const void* src, size_t bytes, const char* what);
// cudaMemcpy2D of `rows` rows of `width` bytes (pitches in bytes), counted as above.
void copy_rows_to_device(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                         const char* what);
void copy_rows_to_host(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                       const char* what);
// cudaDeviceSynchronize, counted as a sync.
void synchronize(const char* what);

// A device allocation (at least 16 bytes, so that empty arrays still get a valid pointer).
class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t bytes);
  DevBuf(const void* host, size_t bytes);  // allocated and uploaded
  ~DevBuf();  // cudaFree, which synchronises the device: counted as a sync
  DevBuf(DevBuf&& o) noexcept;
  DevBuf& operator=(DevBuf&& o) noexcept;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return n_; }
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// Whether the variant has code for this GPU (its archs include this one, or its "a" form).
bool usable(const Variant& v);

// The variant of `slug` to run: `requested` when it is one of slug's (UsageError if it names no variant at
// all; DeviceError if it is not built for this GPU), else the first variant of slug usable here that takes
// `dtype` ("" = any).
const Variant& pick(const std::string& slug, const std::string& requested, const std::string& dtype = "");

// Launches entry `entry` of `v` (raising its dynamic shared-memory limit when smem needs it) on the default
// stream and checks the launch.
void launch(const Variant& v, const std::string& entry, dim3 grid, dim3 block, size_t smem, void** args);

}  // namespace cuda
}  // namespace kdtree
