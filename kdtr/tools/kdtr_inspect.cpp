// kdtr-inspect FILE [--no-verify] [--rewrite OUT]
// Prints a JSON description of a valid KDTR file (exit 0), or the error code as JSON (exit 1).
// --rewrite writes the canonical re-serialization of the file to OUT (used by the differential tests).
#include <cstdio>
#include <fstream>
#include <string>

#include "kdtr.hpp"

static std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') { o += '\\'; o += char(c); }
    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); o += b; }
    else o += char(c);
  }
  return o + "\"";
}

int main(int argc, char** argv) {
  std::string path, rewrite;
  kdtr::Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-verify") opt.verify_data = false;
    else if (a == "--rewrite" && i + 1 < argc) rewrite = argv[++i];
    else if (path.empty() && a.rfind("--", 0) != 0) path = a;
    else { std::fprintf(stderr, "usage: kdtr-inspect FILE [--no-verify] [--rewrite OUT]\n"); return 2; }
  }
  if (path.empty()) { std::fprintf(stderr, "usage: kdtr-inspect FILE [--no-verify] [--rewrite OUT]\n"); return 2; }
  std::vector<uint8_t> buf;
  kdtr::File f;
  kdtr::Error e = kdtr::open_file(path, buf, f, opt);
  if (e) {
    char code[8];
    std::snprintf(code, sizeof code, "E%02d", int(e.code));
    std::printf("{\"ok\": false, \"code\": \"%s\", \"entry\": %ld, \"name\": %s, \"message\": %s}\n", code, e.entry,
                json_str(e.name).c_str(), json_str(e.message).c_str());
    return 1;
  }
  std::printf("{\"ok\": true, \"align_log2\": %d, \"tensors\": [", int(f.align_log2));
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto& t = f.tensors[i];
    std::printf("%s{\"name\": %s, \"dtype\": \"%s\", \"shape\": [", i ? ", " : "", json_str(t.name).c_str(), kdtr::dtype_name(t.dtype));
    for (size_t d = 0; d < t.rank; ++d) std::printf("%s%llu", d ? ", " : "", (unsigned long long)t.dims[d]);
    std::printf("], \"offset\": %llu, \"nbytes\": %llu, \"crc32\": %u, \"data_crc32\": %u}", (unsigned long long)t.offset,
                (unsigned long long)t.nbytes, t.crc, t.nbytes ? kdtr::crc32(t.data, t.nbytes) : 0u);
  }
  std::printf("], \"metadata\": {");
  for (size_t i = 0; i < f.meta.size(); ++i)
    std::printf("%s%s: %s", i ? ", " : "", json_str(f.meta[i].first).c_str(), json_str(f.meta[i].second).c_str());
  std::printf("}}\n");
  if (!rewrite.empty()) {
    auto out = kdtr::write_canonical(f);
    std::ofstream o(rewrite, std::ios::binary);
    o.write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size()));
    if (!o) { std::fprintf(stderr, "cannot write %s\n", rewrite.c_str()); return 3; }
  }
  return 0;
}
