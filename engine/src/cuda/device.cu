// The GPU, device buffers, variant selection and launches (device.hpp).
#include "device.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "kdtree/cli.hpp"

namespace kdtree {
namespace cuda {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  const std::string msg = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaErrorNoKernelImageForDevice ||
      e == cudaErrorInvalidDevice || e == cudaErrorInitializationError)
    throw DeviceError(msg);
  throw std::runtime_error("CUDA error: " + msg);
}

const Gpu& gpu() {
  static Gpu g;
  static std::once_flag once;
  std::call_once(once, [] {
    int n = 0;
    check(cudaGetDeviceCount(&n), "no usable GPU");
    if (n < 1) throw DeviceError("no CUDA device is visible");
    check(cudaSetDevice(0), "cudaSetDevice");
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
    int optin = 0;
    check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), "shared memory limit");
    g.cc = p.major * 10 + p.minor;
    g.arch = "sm_" + std::to_string(g.cc);
    g.name = p.name;
    g.smem_optin = optin - 64;
    g.sm_count = p.multiProcessorCount;
  });
  if (g.arch.empty()) throw DeviceError("the GPU failed to initialize earlier in this process");
  return g;
}

namespace {

// The process's counters (atomic: the CPU threads of an op may stage arrays concurrently).
struct Counters {
  std::atomic<int64_t> h2d_bytes{0}, d2h_bytes{0}, h2d_copies{0}, d2h_copies{0}, syncs{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

void count_copy(bool to_device, size_t bytes) {
  Counters& c = counters();
  (to_device ? c.h2d_bytes : c.d2h_bytes) += int64_t(bytes);
  ++(to_device ? c.h2d_copies : c.d2h_copies);
  ++c.syncs;
}

// cudaFree waits for the device (it synchronises it implicitly): a sync.
void free_counted(void* p) {
  cudaFree(p);
  ++counters().syncs;
}

}  // namespace

DeviceTraffic traffic() {
  const Counters& c = counters();
  return {c.h2d_bytes.load(), c.d2h_bytes.load(), c.h2d_copies.load(), c.d2h_copies.load(), c.syncs.load()};
}

void copy_to_device(void* dst, const void* src, size_t bytes, const char* what) {
  if (!bytes) return;
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), what);
  count_copy(true, bytes);
}

void copy_to_host(void* dst, const void* src, size_t bytes, const char* what) {
  if (!bytes) return;
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), what);
  count_copy(false, bytes);
}

void copy_rows_to_device(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                         const char* what) {
  if (!width || !rows) return;
  check(cudaMemcpy2D(dst, dpitch, src, spitch, width, rows, cudaMemcpyHostToDevice), what);
  count_copy(true, width * rows);
}

void copy_rows_to_host(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                       const char* what) {
  if (!width || !rows) return;
  check(cudaMemcpy2D(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToHost), what);
  count_copy(false, width * rows);
}

void synchronize(const char* what) {
  check(cudaDeviceSynchronize(), what);
  ++counters().syncs;
}

DevBuf::DevBuf(size_t bytes) : n_(bytes) { check(cudaMalloc(&p_, bytes < 16 ? 16 : bytes), "cudaMalloc"); }

DevBuf::DevBuf(const void* host, size_t bytes) : DevBuf(bytes) { upload(host, bytes); }

DevBuf::~DevBuf() {
  if (p_) free_counted(p_);
}

DevBuf::DevBuf(DevBuf&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}

DevBuf& DevBuf::operator=(DevBuf&& o) noexcept {
  if (this != &o) {
    if (p_) free_counted(p_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

void DevBuf::upload(const void* host, size_t bytes) { copy_to_device(p_, host, bytes, "upload"); }

void DevBuf::download(void* host, size_t bytes) const { copy_to_host(host, p_, bytes, "download"); }

bool usable(const Variant& v) {
  const std::string mine = gpu().arch;
  const std::string list = std::string(" ") + v.archs + " ";
  return list.find(" " + mine + " ") != std::string::npos || list.find(" " + mine + "a ") != std::string::npos;
}

const Variant& pick(const std::string& slug, const std::string& requested, const std::string& dtype) {
  const auto mine = variants(slug);
  if (!requested.empty())
    for (const Variant* v : mine)
      if (requested == v->variant) {
        if (!usable(*v))
          throw DeviceError("kernel variant " + v->name() + " is built for " + v->archs + ", this GPU is " +
                            gpu().arch);
        return *v;
      }
  for (const Variant* v : mine)
    if (usable(*v) && (dtype.empty() || v->takes(dtype))) return *v;
  std::string have;
  for (const Variant* v : mine) have += (have.empty() ? "" : ", ") + std::string(v->variant) + " (" + v->archs + ")";
  throw DeviceError("no kernel variant of " + slug + (dtype.empty() ? "" : " for " + dtype) + " is built for " +
                    gpu().arch + " (have: " + (have.empty() ? "none" : have) + ")");
}

void launch(const Variant& v, const std::string& entry, dim3 grid, dim3 block, size_t smem, void** args) {
  const void* fn = v.entry(entry);
  static std::mutex m;
  static std::map<const void*, size_t> raised;  // the dynamic shared memory each kernel was opened up to
  if (smem > 48 * 1024) {
    std::lock_guard<std::mutex> lock(m);
    if (raised[fn] < smem) {
      check(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
            (v.name() + " " + entry + ": dynamic shared memory").c_str());
      raised[fn] = smem;
    }
  }
  check(cudaLaunchKernel(fn, grid, block, args, smem, nullptr), (v.name() + " " + entry + ": launch").c_str());
}

std::string describe_variants() {
  std::string out;
  std::string slug;
  for (const Variant* v : variants()) {
    if (slug != v->slug) {
      out += (slug.empty() ? "" : "; ") + std::string(v->slug) + ": ";
      slug = v->slug;
    } else {
      out += ", ";
    }
    out += std::string(v->variant) + " (" + v->archs + ")";
  }
  return out.empty() ? "(none)" : out;
}

std::string variant_lines() {
  std::string out;
  for (const Variant* v : variants())
    out += std::string(v->slug) + "\t" + v->variant + "\t" + v->archs + "\t" + v->source + "\n";
  return out;
}

bool built() { return true; }

}  // namespace cuda
}  // namespace kdtree
