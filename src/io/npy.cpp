// tessera io: NumPy .npy reader/writer (see npy.h). Layout: "\x93NUMPY", major, minor, header
// length (u16 for 1.0, u32 for 2.0/3.0), a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and '\n', data.
#include "io/npy.h"

#include <cstdio>
#include <cstring>
#include <map>

#include "core/dtype.h"
#include "core/error.h"
#include "io/mapped_file.h"

namespace tessera {
namespace {

// A tiny parser for the header's dict literal: strings, True/False and tuples of integers.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  void Parse(std::string* descr, bool* fortran, std::vector<int64_t>* shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    Expect('{');
    for (;;) {
      SkipSpace();
      if (Peek() == '}') { ++i_; break; }
      std::string key = String();
      Expect(':');
      if (key == "descr") { *descr = String(); have_descr = true; }
      else if (key == "fortran_order") { *fortran = Bool(); have_fortran = true; }
      else if (key == "shape") { *shape = Tuple(); have_shape = true; }
      else Bad("unexpected key '" + key + "'");
      SkipSpace();
      if (Peek() == ',') { ++i_; continue; }
      Expect('}');
      break;
    }
    SkipSpace();
    if (i_ != s_.size()) Bad("trailing characters after the dict");
    if (!have_descr || !have_fortran || !have_shape) Bad("needs 'descr', 'fortran_order' and 'shape'");
  }

 private:
  [[noreturn]] void Bad(const std::string& what) {
    Fail(ErrorKind::kCorrupt, "{}: malformed .npy header at character {}: {}", path_, i_, what);
  }
  void SkipSpace() { while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_; }
  char Peek() { return i_ < s_.size() ? s_[i_] : '\0'; }
  void Expect(char c) {
    SkipSpace();
    if (Peek() != c) Bad(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string String() {
    SkipSpace();
    char q = Peek();
    if (q != '\'' && q != '"') Bad("expected a string");
    size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) Bad("unterminated string");
    std::string out = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return out;
  }
  bool Bool() {
    SkipSpace();
    if (s_.compare(i_, 4, "True") == 0) { i_ += 4; return true; }
    if (s_.compare(i_, 5, "False") == 0) { i_ += 5; return false; }
    Bad("expected True or False");
  }
  std::vector<int64_t> Tuple() {
    Expect('(');
    std::vector<int64_t> dims;
    for (;;) {
      SkipSpace();
      if (Peek() == ')') { ++i_; break; }
      if (Peek() < '0' || Peek() > '9') Bad("expected a non-negative integer dimension");
      int64_t v = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, Peek() - '0', &v)) Bad("dimension overflows");
        ++i_;
      }
      dims.push_back(v);
      SkipSpace();
      if (Peek() == ',') { ++i_; continue; }
      Expect(')');
      break;
    }
    return dims;
  }

  const std::string& s_;
  const std::string& path_;
  size_t i_ = 0;
};

constexpr char kMagic[] = "\x93NUMPY";

}  // namespace

NpyArray ReadNpy(const std::string& path) {
  MappedFile f(path);
  const uint8_t* p = f.data();
  const size_t size = f.size();
  if (size < 10 || std::memcmp(p, kMagic, 6) != 0) Fail(ErrorKind::kCorrupt, "{}: not a .npy file (bad magic)", path);
  const int major = p[6], minor = p[7];
  if (major < 1 || major > 3 || minor != 0)
    Fail(ErrorKind::kUnsupported, "{}: .npy format version {}.{} is not supported (1.0-3.0)", path, major, minor);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = p[8] | (static_cast<size_t>(p[9]) << 8);
    header_start = 10;
  } else {
    if (size < 12) Fail(ErrorKind::kCorrupt, "{}: truncated .npy preamble", path);
    header_len = p[8] | (static_cast<size_t>(p[9]) << 8) | (static_cast<size_t>(p[10]) << 16) |
                 (static_cast<size_t>(p[11]) << 24);
    header_start = 12;
  }
  if (header_len > size - header_start)
    Fail(ErrorKind::kCorrupt, "{}: .npy header length {} exceeds the file ({} bytes)", path, header_len, size);
  std::string header(reinterpret_cast<const char*>(p + header_start), header_len);
  if (header.empty() || header.back() != '\n') Fail(ErrorKind::kCorrupt, "{}: .npy header does not end with a newline", path);
  std::string descr;
  bool fortran = false;
  NpyArray out;
  HeaderParser(header, path).Parse(&descr, &fortran, &out.shape);
  if (fortran) Fail(ErrorKind::kUnsupported, "{}: fortran_order arrays are not supported (C order only)", path);
  DType dt;
  if (descr == "<f4") dt = DType::kF32;
  else if (descr == "<f8") dt = DType::kF64;
  else if (descr == "<f2") dt = DType::kF16;
  else Fail(ErrorKind::kUnsupported, "{}: .npy dtype '{}' is not supported ('<f4', '<f8', '<f2')", path, descr);
  uint64_t numel = 1;
  for (int64_t d : out.shape)
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel))
      Fail(ErrorKind::kCorrupt, "{}: .npy shape overflows", path);
  const size_t data_start = header_start + header_len;
  const uint64_t have = size - data_start, esize = DTypeSize(dt);
  if (numel > have / esize || numel * esize != have)
    Fail(ErrorKind::kCorrupt, "{}: .npy shape needs {} elements of {} bytes but the file holds {} data bytes",
         path, numel, esize, have);
  out.data.resize(numel);
  if (dt == DType::kF64) {  // ConvertToF32 may not know f64; convert here
    for (uint64_t i = 0; i < numel; ++i) {
      double v;
      std::memcpy(&v, p + data_start + i * 8, 8);
      out.data[i] = static_cast<float>(v);
    }
  } else if (dt == DType::kF16) {
    for (uint64_t i = 0; i < numel; ++i) {
      uint16_t h;
      std::memcpy(&h, p + data_start + i * 2, 2);
      out.data[i] = F16ToF32(h);
    }
  } else if (numel > 0) {
    std::memcpy(out.data.data(), p + data_start, numel * 4);
  }
  return out;
}

void WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  std::string dims;
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) Fail(ErrorKind::kInvalidArgument, "{}: negative dimension {} in .npy shape", path, d);
    numel *= static_cast<uint64_t>(d);
    dims += std::to_string(d) + ", ";
  }
  if (shape.size() == 1) dims.pop_back();  // "(5,)"
  else if (!shape.empty()) dims.resize(dims.size() - 2);  // "(2, 3)"
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad so that the data starts on a 64-byte boundary, as numpy does.
  size_t preamble = 10;
  int major = 1;
  if (dict.size() + 1 + 64 > 65535) { preamble = 12; major = 2; }
  size_t total = preamble + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string head(kMagic, 6);
  head += static_cast<char>(major);
  head += '\0';
  uint32_t hl = static_cast<uint32_t>(dict.size());
  for (size_t i = 0; i < preamble - 8; ++i) head += static_cast<char>((hl >> (8 * i)) & 0xff);
  head += dict;
  FILE* fp = std::fopen(path.c_str(), "wb");
  if (fp == nullptr) Fail(ErrorKind::kNotFound, "{}: cannot create: {}", path, std::strerror(errno));
  bool ok = std::fwrite(head.data(), 1, head.size(), fp) == head.size();
  if (ok && numel > 0) ok = std::fwrite(data, 4, numel, fp) == numel;
  ok = (std::fclose(fp) == 0) && ok;
  if (!ok) Fail(ErrorKind::kCorrupt, "{}: write failed", path);
}

}  // namespace tessera
