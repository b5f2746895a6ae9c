// parallel_for over independent work items on a persistent pool.
// Items are handed out dynamically, but every item is computed whole by one thread, so results never
// depend on the thread count or on scheduling (the ops' determinism and batch invariance rely on this).
#pragma once
#include <cstdint>
#include <functional>

namespace kdtree {

// The most threads one parallel_for uses (more requested are clamped to it).
constexpr int kMaxThreads = 256;

// Number of threads to use when the caller says 0: the hardware's, at least 1.
int default_threads();

// Runs fn(i) for every i in [0, n) on up to `threads` threads (the calling thread is one of them) and
// returns when all are done (0 = default_threads(); at most kMaxThreads). The first exception thrown by
// fn is rethrown here.
void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& fn);

}  // namespace kdtree
