// Shared definitions of the kernels. NVRTC compiles each kernels_cu/<op>.cu at run time for the GPU's arch;
// nvcc compiles the same files for the engine. Limits mirror reference/validate.py.
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
#include <math_constants.h>
#endif

#define KDTR_MAX_BATCH 1024
#define KDTR_MAX_BUDGET 1024
#define KDTR_MAX_DEPTH 32
#define KDTR_MAX_TOPK 1024
#define KDTR_HEAD_DIM 576
