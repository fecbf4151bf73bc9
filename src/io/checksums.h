// tessera io: SHA-256 of files and verification against a SHA256SUMS file (sha256sum format:
// "<64 hex>  <name>" or "<64 hex> *<name>" per line).
#pragma once

#include <string>
#include <vector>

namespace tessera {

std::string Sha256File(const std::string& path);  // lowercase hex; throws Error on I/O failure
std::string Sha256Hex(const void* data, size_t n);  // lowercase hex of a buffer

struct ChecksumResult {
  std::string file;
  std::string expected, actual;  // actual is "" when the file is missing
  bool ok = false;
  std::string error;  // why `actual` is "" ("missing", "cannot read: ..."); "" otherwise
};

// Checks every line of DIR/SHA256SUMS. Throws Error(kNotFound) when there is no such file and
// Error(kCorrupt) on a malformed line (naming its number), on a name that leaves DIR (absolute or
// with a ".." component) and on a file listing nothing. One result per line, in file order;
// missing or differing files are results with ok = false, not exceptions.
std::vector<ChecksumResult> VerifyChecksums(const std::string& dir);

}  // namespace tessera
