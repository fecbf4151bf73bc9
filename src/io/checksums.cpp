// tessera io: SHA-256 (OpenSSL EVP, streamed in 1 MiB chunks) and SHA256SUMS verification.
#include "io/checksums.h"

#include <openssl/evp.h>

#include <cctype>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "io/hf_config.h"

namespace tessera {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

MdCtx NewSha256() {
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    Fail(ErrorKind::kInternal, "OpenSSL: cannot initialise SHA-256");
  return ctx;
}

std::string FinishHex(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, md, &len) != 1) Fail(ErrorKind::kInternal, "OpenSSL: SHA-256 failed");
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// sha256sum escapes names holding '\n' or '\\' by starting the line with '\\'.
bool Unescape(const std::string& in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\') { *out += in[i]; continue; }
    if (++i >= in.size()) return false;
    if (in[i] == 'n') *out += '\n';
    else if (in[i] == '\\') *out += '\\';
    else return false;
  }
  return true;
}

bool EscapesDir(const std::string& name) {
  if (name.empty() || name[0] == '/') return true;
  for (const auto& part : std::filesystem::path(name))
    if (part == "..") return true;
  return false;
}

}  // namespace

std::string Sha256Hex(const void* data, size_t n) {
  MdCtx ctx = NewSha256();
  if (n > 0 && EVP_DigestUpdate(ctx.get(), data, n) != 1) Fail(ErrorKind::kInternal, "OpenSSL: SHA-256 failed");
  return FinishHex(ctx.get());
}

std::string Sha256File(const std::string& path) {
  MdCtx ctx = NewSha256();
  ReadFileChunks(path, kChunkBytes, [&](const char* p, size_t n) {
    if (EVP_DigestUpdate(ctx.get(), p, n) != 1) Fail(ErrorKind::kInternal, "OpenSSL: SHA-256 failed on {}", path);
  });
  return FinishHex(ctx.get());
}

std::vector<ChecksumResult> VerifyChecksums(const std::string& dir) {
  const std::string sums_path = JoinPath(dir, "SHA256SUMS");
  if (!FileExists(sums_path)) Fail(ErrorKind::kNotFound, "{}: no such file", sums_path);
  const std::string text = ReadFileText(sums_path);
  std::vector<ChecksumResult> results;
  size_t pos = 0;
  for (int line_no = 1; pos < text.size(); ++line_no) {
    size_t eol = text.find('\n', pos);
    std::string line = text.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    pos = eol == std::string::npos ? text.size() : eol + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    bool escaped = line[0] == '\\';
    std::string body = escaped ? line.substr(1) : line;
    // "<64 hex><space><space|*><name>"
    bool ok = body.size() > 66 && body[64] == ' ' && (body[65] == ' ' || body[65] == '*');
    for (size_t i = 0; ok && i < 64; ++i) ok = IsHex(body[i]);
    std::string name = ok ? body.substr(66) : "";
    if (ok && escaped) ok = Unescape(body.substr(66), &name);
    if (!ok)
      Fail(ErrorKind::kCorrupt, "{}:{}: malformed line (want \"<64 hex digits>  <file name>\"): '{}'",
           sums_path, line_no, line.substr(0, 120));
    if (EscapesDir(name))
      Fail(ErrorKind::kCorrupt, "{}:{}: file name '{}' points outside {}", sums_path, line_no, name, dir);
    ChecksumResult r;
    r.file = name;
    r.expected = body.substr(0, 64);
    for (char& c : r.expected) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string path = JoinPath(dir, name);
    if (!FileExists(path)) {
      r.error = "missing";
    } else {
      try {
        r.actual = Sha256File(path);
      } catch (const Error& e) {
        r.error = e.what();
      }
    }
    r.ok = !r.actual.empty() && r.actual == r.expected;
    results.push_back(std::move(r));
  }
  if (results.empty()) Fail(ErrorKind::kCorrupt, "{}: lists no files", sums_path);
  return results;
}

}  // namespace tessera
