// Shared definitions of the kernels. NVRTC compiles each kernels_cu/<op>.cu at run time for the GPU's arch;
// nvcc compiles the same files for the engine. The limits come from the contract (contract_limits.cuh is
// generated from contract/limits.py); a kernel's build spec (kernels_cu/specs.py) passes KERNEL_BLOCK.
#pragma once
#ifdef __CUDACC_RTC__
#include <cuda/std/cstdint>
using cuda::std::int16_t;
using cuda::std::int32_t;
using cuda::std::uint8_t;
using cuda::std::uint16_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
#define CUDART_INF __longlong_as_double(0x7ff0000000000000ULL)
#else
#include <cstdint>
#include <cstddef>
#if defined(__CUDACC__)
#include <math_constants.h>
#endif  // host-only C++ (the engine's CPU build) includes the geometry headers, not the kernels
#endif

#include "contract_limits.cuh"

// Launch geometry is written once, as host+device constexpr functions in <op>.cuh: the kernels use them to
// lay out shared memory, the engine's host code (nvcc) calls them directly, and the Python wrappers read
// them through each op's geometry query kernel (never a mirrored formula).
#if defined(__CUDACC__)
#define KERNEL_HD __host__ __device__
#else
#define KERNEL_HD
#endif

#ifndef KERNEL_BLOCK
#define KERNEL_BLOCK 128
#endif
