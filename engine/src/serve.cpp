// The batch/serve loop (protocol in serve.hpp).
#include "kdtree/serve.hpp"

#include <chrono>
#include <exception>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "kdtree/contract.hpp"
#include "kdtree/ops.hpp"

namespace kdtree {
namespace {

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> f;
  if (line.find('\t') != std::string::npos) {
    std::string cur;
    for (char c : line) {
      if (c == '\t') {
        f.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    f.push_back(cur);
  } else {
    std::istringstream s(line);
    for (std::string w; s >> w;) f.push_back(w);
  }
  return f;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return s;
}

}  // namespace

int serve_stream(std::istream& in, std::ostream& out, const OpBackend& backend) {
  int errors = 0;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const auto f = fields(line);
    std::string answer;
    try {
      if (f.size() != 3) throw InputError("request", "expected 'OP<TAB>IN<TAB>OUT', got " + std::to_string(f.size()) + " fields");
      const auto t0 = std::chrono::steady_clock::now();
      run_op_file(f[0], f[1], f[2], backend);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      answer = "ok\t" + std::to_string(dt);
    } catch (const InputError& e) {
      answer = std::string("error\t") + one_line(e.what());
    } catch (const std::bad_alloc&) {
      answer = "error\tout of memory running " + one_line(line);
    } catch (const std::exception& e) {
      answer = std::string("error\tinternal error: ") + one_line(e.what());
    }
    if (answer.rfind("error", 0) == 0) ++errors;
    out << answer << '\n' << std::flush;
  }
  return errors;
}

}  // namespace kdtree
