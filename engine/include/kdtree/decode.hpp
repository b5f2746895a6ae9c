// The decode subcommand: greedy generation, autoregressive or DDTree, through the three ops.
#pragma once

namespace kdtree {

// kdtree-engine decode ... (argv[first..] are its options); returns the exit status.
int decode_main(int argc, char** argv, int first);

}  // namespace kdtree
