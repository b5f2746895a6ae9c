// kdtr-inspect: check a KDTR file with the C++ reader and describe it as JSON (see --help).
// Checking never holds the file's data: the header and index are read first and checked against the
// file size and the limits, and data CRCs stream through a fixed buffer (kdtr::check_file), so memory
// stays within the index limit plus one buffer whatever the file's size.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "kdtr.hpp"

static const char kUsage[] = "usage: kdtr-inspect [--no-verify] [--rewrite OUT] FILE\n";
static const char kHelp[] =
    "Check FILE against the KDTR v1 format (kdtr/FORMAT.md) with the C++ reader and print a JSON\n"
    "description of it on stdout. The checks, their order, the error codes and the messages are the\n"
    "same as the Python reader's (kdtr.load).\n"
    "\n"
    "Options:\n"
    "  --no-verify    skip the per-tensor data CRC check (FORMAT.md check 30)\n"
    "  --rewrite OUT  also write the canonical re-serialization of a valid FILE to OUT (this reads the\n"
    "                 whole file into memory; checking alone never does)\n"
    "  -h, --help     print this help and exit\n"
    "\n"
    "Output, one line of JSON:\n"
    "  valid:   {\"ok\": true, \"align_log2\": A, \"tensors\": [{\"name\", \"dtype\", \"shape\", \"offset\",\n"
    "           \"nbytes\", \"crc32\", \"data_crc32\"}...], \"metadata\": {key: value...}}\n"
    "  invalid: {\"ok\": false, \"code\": \"E11\", \"entry\": null or N, \"name\": \"...\", \"message\": \"...\",\n"
    "           \"error\": \"KDTR E11 FILE_SIZE_MISMATCH: ...\"}; the error line also goes to stderr.\n"
    "\n"
    "Exit status: 0 valid, 1 invalid or unreadable (E90: missing, not a regular file, I/O error),\n"
    "2 usage error, 3 cannot write OUT.\n"
    "\n"
    "Error codes: E01 TRUNCATED, E02 BAD_MAGIC, E03 BAD_ENDIAN, E04 HEADER_CRC, E05 UNSUPPORTED_VERSION,\n"
    "E06 UNSUPPORTED_FEATURE, E07 RESERVED_NONZERO, E08 BAD_ALIGNMENT, E09 NOT_FINALIZED, E10 INDEX_BOUNDS,\n"
    "E11 FILE_SIZE_MISMATCH, E12 INDEX_CRC, E13 INDEX_MAGIC, E14 LIMIT_EXCEEDED, E15 INDEX_LAYOUT,\n"
    "E16 BAD_NAME, E17 DUPLICATE_NAME, E18 UNSORTED, E19 BAD_DTYPE, E20 BAD_RANK, E21 BAD_SHAPE,\n"
    "E22 SIZE_OVERFLOW, E23 SIZE_MISMATCH, E24 BAD_OFFSET, E25 OUT_OF_BOUNDS, E26 BAD_META_KEY,\n"
    "E27 DUPLICATE_META_KEY, E28 BAD_UTF8, E29 OVERLAP, E30 GAP, E31 NONZERO_PADDING, E32 HOST_LIMIT,\n"
    "E33 DATA_CRC, E34 BAD_BOOL, E90 IO, E91 ALLOC.\n";

// Writes s as a JSON string straight to stdout: a 16 MiB metadata value is not copied again.
static void json_str(const std::string& s) {
  std::putchar('"');
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') { std::putchar('\\'); std::putchar(c); }
    else if (c < 0x20) std::printf("\\u%04x", c);
    else std::putchar(c);
  }
  std::putchar('"');
}

static int usage_error(const char* why) {
  std::fprintf(stderr, "kdtr-inspect: %s\n%s(kdtr-inspect --help for more)\n", why, kUsage);
  return 2;
}

static int reject(const std::string& path, const kdtr::Error& e) {
  char code[8];
  std::snprintf(code, sizeof code, "E%02d", int(e.code));
  const std::string entry = e.entry >= 0 ? std::to_string(e.entry) : "null";
  std::printf("{\"ok\": false, \"code\": \"%s\", \"entry\": %s, \"name\": ", code, entry.c_str());
  json_str(e.name);
  std::printf(", \"message\": ");
  json_str(e.message);
  std::printf(", \"error\": ");
  json_str(e.what());
  std::printf("}\n");
  std::fprintf(stderr, "kdtr-inspect: %s: %s\n", path.c_str(), e.what().c_str());
  return 1;
}

int main(int argc, char** argv) {
  std::string path, rewrite;
  kdtr::Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") { std::fputs(kUsage, stdout); std::fputs("\n", stdout); std::fputs(kHelp, stdout); return 0; }
    if (a == "--no-verify") opt.verify_data = false;
    else if (a == "--rewrite") {
      if (i + 1 >= argc) return usage_error("--rewrite needs an output path");
      rewrite = argv[++i];
    } else if (a.rfind("-", 0) == 0 && a != "-") return usage_error(("unknown option " + a).c_str());
    else if (path.empty()) path = a;
    else return usage_error("more than one FILE");
  }
  if (path.empty()) return usage_error("no FILE given");

  kdtr::FileSource src;
  kdtr::File f;
  kdtr::Error e = src.open(path);
  if (!e) e = kdtr::open_source(src, f, opt);
  if (e) return reject(path, e);

  std::printf("{\"ok\": true, \"align_log2\": %d, \"tensors\": [", int(f.align_log2));
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto& t = f.tensors[i];
    uint32_t data_crc = t.crc;  // verified equal unless --no-verify
    if (!opt.verify_data) {
      if (kdtr::Error ce = kdtr::crc32_range(src, t.offset, t.nbytes, data_crc)) return reject(path, ce);
    }
    std::printf("%s{\"name\": ", i ? ", " : "");
    json_str(t.name);
    std::printf(", \"dtype\": \"%s\", \"shape\": [", kdtr::dtype_name(t.dtype));
    for (size_t d = 0; d < t.rank; ++d) std::printf("%s%llu", d ? ", " : "", (unsigned long long)t.dims[d]);
    std::printf("], \"offset\": %llu, \"nbytes\": %llu, \"crc32\": %u, \"data_crc32\": %u}", (unsigned long long)t.offset,
                (unsigned long long)t.nbytes, t.crc, data_crc);
  }
  std::printf("], \"metadata\": {");
  for (size_t i = 0; i < f.meta.size(); ++i) {
    std::printf("%s", i ? ", " : "");
    json_str(f.meta[i].first);
    std::printf(": ");
    json_str(f.meta[i].second);
  }
  std::printf("}}\n");
  if (!rewrite.empty()) {
    std::vector<uint8_t> buf, out;
    kdtr::File g;
    if (kdtr::Error re = kdtr::open_file(path, buf, g, opt)) return reject(path, re);
    if (kdtr::Error we = kdtr::write_canonical(g, out)) return reject(path, we);
    std::ofstream o(rewrite, std::ios::binary);
    o.write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size()));
    if (!o) { std::fprintf(stderr, "kdtr-inspect: cannot write %s\n", rewrite.c_str()); return 3; }
  }
  return 0;
}
