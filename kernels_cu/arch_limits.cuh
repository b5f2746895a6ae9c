// What one thread block and one SM of each architecture hold: the one table of per-arch limits, for the kernels'
// compile-time geometry (the shared-memory budget below), the engine's and the Python wrappers' host code (the
// same budget), and the compile-only resource clause (spec/build.md KB.1.7: registers, shared memory and threads
// of every compiled kernel against its arch's row).
//
// Source: the CUDA C++ Programming Guide, appendix "Compute Capabilities", table "Technical Specifications per
// Compute Capability" (https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/compute-capabilities.html),
// rows "Maximum amount of shared memory per SM", "Maximum amount of shared memory per thread block" (the opt-in
// limit; the 1 KB difference is reserved for system use per block), "Maximum number of 32-bit registers per
// thread block / per thread", "Number of 32-bit registers per SM", "Maximum number of threads per block" and
// "Maximum number of resident threads per SM"; the same values as CCCL's cuda::arch_traits
// (libcudacxx include/cuda/__device/arch_traits.h), which also gives the 1 KB reserved per block from sm_80 on.
// The register allocation unit (256 registers per warp) is the CUDA Occupancy Calculator's. A GPU test checks the
// row of the GPU it runs on against the device's own attributes (conformance/test_kernels_build.py).
//
// It includes nothing and uses no CUDA types: NVRTC, nvcc and any host C++17 compiler take it.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KERNEL_ARCH_HD __host__ __device__
#else
#define KERNEL_ARCH_HD
#endif

struct ArchLimits {
  int cc;                            // compute capability as major * 10 + minor (sm_120: 120); 0: not in the table
  long long smem_per_block_optin;    // shared memory one block may use, static + dynamic (opted in), bytes
  long long smem_per_sm;             // shared memory of one SM, bytes
  long long smem_reserved_per_block; // of the SM's, reserved by the system for each resident block, bytes
  long long smem_static_max;         // static shared memory of one block (beyond it, dynamic and opted in), bytes
  int regs_per_sm;                   // 32-bit registers of one SM
  int regs_per_block;                // 32-bit registers of one block
  int regs_per_thread;               // 32-bit registers of one thread
  int reg_alloc_unit;                // registers are allocated to a warp in units of this many
  int threads_per_block;
  int threads_per_sm;
};

// The fields in order, by name (kernels_cu/geometry.py reads them through its host library).
#define KERNEL_ARCH_LIMIT_FIELDS                                                                                \
  "cc smem_per_block_optin smem_per_sm smem_reserved_per_block smem_static_max regs_per_sm regs_per_block " \
  "regs_per_thread reg_alloc_unit threads_per_block threads_per_sm"
constexpr int kArchLimitFields = 11;

// One row per compute capability (an arch-specific sm_90a or sm_120a target has its base arch's row).
KERNEL_ARCH_HD constexpr ArchLimits arch_limits(int cc) {
  constexpr long long KB = 1024;
  // sm_80 and sm_87 (A100, Orin): 164 KB per SM; sm_86, sm_89 (GA10x, Ada), sm_120, sm_121 (RTX Blackwell, GB10):
  // 100 KB per SM; sm_90, sm_100, sm_103 (Hopper, datacenter Blackwell): 228 KB per SM; each less 1 KB per block.
  const long long sm_kb = (cc == 80 || cc == 87) ? 164 : (cc == 86 || cc == 89 || cc == 120 || cc == 121) ? 100
                          : (cc == 90 || cc == 100 || cc == 103)                                      ? 228
                                                                                                      : 0;
  const int threads_sm = (cc == 80 || cc == 90 || cc == 100 || cc == 103) ? 2048 : 1536;
  if (sm_kb == 0) return ArchLimits{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  return ArchLimits{cc, (sm_kb - 1) * KB, sm_kb * KB, 1 * KB, 48 * KB, 65536, 65536, 255, 256, 1024, threads_sm};
}

// The shared memory a kernel's geometry may plan for on compute capability cc: the arch's per-block opt-in limit,
// or a spec's own smaller budget (its KERNEL_SMEM_BUDGET define, in bytes; 0 = none). A build spec that names a
// budget builds, on any arch, what an arch of that budget runs (the *_99k variants: sm_120's geometry on sm_90).
KERNEL_ARCH_HD constexpr long long kernel_smem_budget(long long spec_budget, int cc) {
  const long long arch = arch_limits(cc).smem_per_block_optin;
  return spec_budget > 0 && spec_budget < arch ? spec_budget : arch;
}

// The spec's budget as the kernels see it (0 = none), for kernel_smem_budget(KERNEL_SPEC_SMEM_BUDGET, __CUDA_ARCH__ / 10).
#ifdef KERNEL_SMEM_BUDGET
#define KERNEL_SPEC_SMEM_BUDGET (KERNEL_SMEM_BUDGET)
#else
#define KERNEL_SPEC_SMEM_BUDGET 0
#endif
