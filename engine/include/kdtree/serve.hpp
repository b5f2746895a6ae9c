// Batch mode: many op files in one process. One request per line, one answer per line.
//
//   request:  OP <TAB> IN.kdtr <TAB> OUT.kdtr      (without a TAB in the line: split on spaces)
//   answer:   ok <TAB> SECONDS                      the op ran and OUT was written
//             error <TAB> MESSAGE                   nothing was written; MESSAGE names the file or tensor
//
// Blank lines and lines starting with '#' are skipped without an answer. A bad request never ends the
// loop: the process keeps serving until end of input.
#pragma once
#include <istream>
#include <ostream>

#include "kdtree/ops.hpp"

namespace kdtree {

// Answers every request of `in` on `out` (flushed per answer) and returns the number of errors.
int serve_stream(std::istream& in, std::ostream& out, const OpBackend& backend);

}  // namespace kdtree
