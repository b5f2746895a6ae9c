// Launch geometry of tree_accept, for the kernel, the engine's host code and the Python wrapper (through
// the tree_accept_geometry query kernel).
#pragma once
#include "common.cuh"

// Six int arrays of D entries (tokens, targets, list heads, scratch, first-child owners, matches), then the
// accepted path, at most 1 + CONTRACT_MAX_DEPTH nodes.
KERNEL_HD constexpr long long tree_accept_smem_bytes(int D) { return (6LL * D + CONTRACT_MAX_DEPTH + 1) * 4; }
