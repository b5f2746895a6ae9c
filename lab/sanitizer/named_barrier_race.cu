// Does compute-sanitizer's racecheck order shared-memory writes made after a named barrier (bar.sync 1, N with
// N < the block) before a later __syncthreads() against reads after that __syncthreads()? select_race's finish
// has exactly this shape: warps 0 and 2-7 sync on barrier 1 while warp 1 replays, write the selection's nodes,
// and every thread reads them after the block barrier. The program runs the shape with and without the named
// barriers in front of the writes; the writes, the block barrier and the reads are identical, so a hazard that
// racecheck reports only with them is the tool's, not the pattern's.
//   nvcc -arch=sm_90 -lineinfo -o named_barrier_race lab/sanitizer/named_barrier_race.cu
//   compute-sanitizer --tool racecheck ./named_barrier_race 0   (no named barrier: the control)
//   compute-sanitizer --tool racecheck ./named_barrier_race 3   (three named barriers before the writes)
//   compute-sanitizer --tool racecheck ./named_barrier_race 3 2 (the same, the block barrier as bar.sync 2, 256)
#include <cstdio>
#include <cstdlib>

__global__ void __launch_bounds__(256) pattern(int* out, int named_barriers, int block_barrier_id) {
  __shared__ int x[224];
  __shared__ int y[32];
  const int tid = threadIdx.x;
  if ((tid >> 5) != 1) {  // the group: every warp but warp 1
    const int g = tid < 32 ? tid : tid - 32;
    for (int k = 0; k < named_barriers; ++k) asm volatile("bar.sync 1, 224;" ::: "memory");
    x[g] = 3 * g + 1;
  } else {
    y[tid - 32] = tid;  // warp 1 works on its own data meanwhile
  }
  if (block_barrier_id == 0) __syncthreads();
  else asm volatile("bar.sync 2, 256;" ::: "memory");
  out[blockIdx.x * 256 + tid] = x[(tid * 7) % 224] + (tid < 32 ? y[tid] : 0);
}

int main(int argc, char** argv) {
  const int named = argc > 1 ? std::atoi(argv[1]) : 0;
  const int block_barrier = argc > 2 ? std::atoi(argv[2]) : 0;  // 0: __syncthreads(), else bar.sync 2, 256
  const int blocks = 4;
  int* out = nullptr;
  if (cudaMalloc(&out, blocks * 256 * sizeof(int)) != cudaSuccess) return 2;
  pattern<<<blocks, 256>>>(out, named, block_barrier);
  int host[blocks * 256];
  if (cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost) != cudaSuccess) return 2;
  int bad = 0;
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < 256; ++t) bad += host[b * 256 + t] != 3 * ((t * 7) % 224) + 1 + (t < 32 ? t + 32 : 0);
  std::printf("named barriers %d, block barrier %s: %d wrong values\n", named,
              block_barrier ? "bar.sync 2, 256" : "__syncthreads()", bad);
  cudaFree(out);
  return bad ? 1 : 0;
}
