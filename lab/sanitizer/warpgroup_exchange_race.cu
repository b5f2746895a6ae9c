// Which producer/consumer hand-over between two warpgroups does compute-sanitizer's racecheck model? The sm90a
// tree_verify kernel hands a block's P, running max and rescale factor from one warpgroup to the other through
// shared memory every pair of blocks, and the slot is rewritten in the next pair. Each mode runs that shape
// (warpgroup 0 writes, warpgroup 1 reads, ITERS times, both orders enforced) with one synchronisation pattern:
//   0: bar.arrive by the writer, bar.sync by the reader (the kernel's named barriers), and back
//   1: mbarrier arrive (release) by each writer thread, try_wait.parity (acquire) by the reader, and back
//   2: bar.sync by both warpgroups (all 256 threads wait at each hand-over)
//   3: no synchronisation at all (the positive control: racecheck must report hazards, values may be wrong)
//   nvcc -gencode=arch=compute_90a,code=sm_90a -lineinfo -o warpgroup_exchange_race lab/sanitizer/warpgroup_exchange_race.cu
//   compute-sanitizer --tool racecheck ./warpgroup_exchange_race MODE
#include <cstdio>
#include <cstdlib>

constexpr int kIters = 8;

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

__global__ void __launch_bounds__(256) exchange(int* out, int mode) {
  __shared__ int slot[128];
  __shared__ __align__(8) unsigned long long bars[2];  // full (writer -> reader), empty (reader -> writer)
  const int tid = threadIdx.x, wg = tid >> 7, t = tid & 127;
  const unsigned full = smem_u32(&bars[0]), empty = smem_u32(&bars[1]);
  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;\n" ::"r"(full));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;\n" ::"r"(empty));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  int acc = 0;
  for (int i = 0; i < kIters; ++i) {
    if (wg == 0) {  // writer
      if (i > 0) {  // the reader is done with the previous value
        if (mode == 0) asm volatile("bar.sync 2, 256;\n" ::: "memory");
        if (mode == 1) mbar_wait(empty, (i - 1) & 1);
        if (mode == 2) asm volatile("bar.sync 2, 256;\n" ::: "memory");
      }
      slot[(t * 5) % 128] = 1000 * i + t;
      if (mode == 0) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
      if (mode == 1) asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(full) : "memory");
      if (mode == 2) asm volatile("bar.sync 1, 256;\n" ::: "memory");
    } else {  // reader
      if (mode == 0 || mode == 2) asm volatile("bar.sync 1, 256;\n" ::: "memory");
      if (mode == 1) mbar_wait(full, i & 1);
      acc += slot[(t * 5) % 128] - 1000 * i;  // = t when the hand-over is ordered
      if (i + 1 < kIters) {
        if (mode == 0) asm volatile("bar.arrive 2, 256;\n" ::: "memory");
        if (mode == 1) asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(empty) : "memory");
        if (mode == 2) asm volatile("bar.sync 2, 256;\n" ::: "memory");
      }
    }
  }
  if (wg == 1) out[blockIdx.x * 128 + t] = acc;
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? std::atoi(argv[1]) : 0;
  const int blocks = 4;
  int* out = nullptr;
  if (cudaMalloc(&out, blocks * 128 * sizeof(int)) != cudaSuccess) return 2;
  exchange<<<blocks, 256>>>(out, mode);
  int host[blocks * 128];
  if (cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost) != cudaSuccess) return 2;
  int bad = 0;
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < 128; ++t) bad += host[b * 128 + t] != kIters * t;
  const char* names[] = {"bar.arrive / bar.sync", "mbarrier arrive / try_wait", "bar.sync both", "none"};
  std::printf("mode %d (%s): %d wrong values\n", mode, names[mode & 3], bad);
  cudaFree(out);
  return 0;
}
