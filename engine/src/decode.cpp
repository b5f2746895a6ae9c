#include "kdtree/decode.hpp"
#include "kdtree/contract.hpp"
namespace kdtree {
int decode_main(int, char**, int) { fail("decode", "not yet"); }
}  // namespace kdtree
