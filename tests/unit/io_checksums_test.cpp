// tessera tests: SHA-256 and SHA256SUMS verification, checked against coreutils' sha256sum.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/error.h"
#include "io/checksums.h"
#include "expect_error.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::RunCommand;
using testing::ScratchDir;
using testing::WriteFile;

using testing::ExpectError;

// sha256sum's hash of a file, from coreutils.
std::string CoreutilsSha(const std::string& path) {
  auto r = RunCommand("sha256sum " + path);
  if (r.exit_code != 0 || r.out.size() < 64) throw std::runtime_error("sha256sum failed: " + r.err);
  return r.out.substr(0, 64);
}

std::string RandomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// A directory of files (one in a subdirectory) with SHA256SUMS written by sha256sum itself.
std::string MakeDir(const std::string& name, const std::string& mode_flag) {
  std::string dir = ScratchDir(name);
  WriteFile(dir + "/a.bin", RandomBytes(1000, 1));
  WriteFile(dir + "/b.txt", "hello\n");
  std::filesystem::create_directories(dir + "/sub");
  WriteFile(dir + "/sub/c.bin", RandomBytes(3 << 20, 2));
  WriteFile(dir + "/empty", "");
  auto r = RunCommand("(cd " + dir + " && sha256sum " + mode_flag + " a.bin b.txt sub/c.bin empty > SHA256SUMS)");
  if (r.exit_code != 0) throw std::runtime_error("sha256sum failed: " + r.err);
  return dir;
}

TEST(IoChecksums, Sha256MatchesCoreutils) {
  std::string dir = ScratchDir("io-sha");
  // Sizes around the 1 MiB read chunk, plus empty and tiny files.
  size_t sizes[] = {0, 1, 55, 64, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, (5 << 20) + 123};
  unsigned seed = 10;
  for (size_t n : sizes) {
    std::string path = dir + "/f" + std::to_string(n);
    std::string bytes = RandomBytes(n, seed++);
    WriteFile(path, bytes);
    std::string expected = CoreutilsSha(path);
    EXPECT_EQ(Sha256File(path), expected) << n;
    EXPECT_EQ(Sha256Hex(bytes.data(), bytes.size()), expected) << n;
  }
  ExpectError([&] { Sha256File(dir + "/missing"); }, ErrorKind::kNotFound, {dir + "/missing"});
}

TEST(IoChecksums, VerifyOkTextAndBinaryMode) {
  for (const char* flag : {"-t", "-b"}) {
    SCOPED_TRACE(flag);
    std::string dir = MakeDir(std::string("io-sums-ok") + flag, flag);
    // The file sha256sum wrote must use the mode we think it does.
    std::string sums = testing::ReadFile(dir + "/SHA256SUMS");
    EXPECT_NE(sums.find(std::string(flag) == "-b" ? " *a.bin" : "  a.bin"), std::string::npos) << sums;
    auto results = VerifyChecksums(dir);
    ASSERT_EQ(results.size(), 4u);
    EXPECT_EQ(results[2].file, "sub/c.bin");
    for (const auto& r : results) {
      EXPECT_TRUE(r.ok) << r.file;
      EXPECT_EQ(r.actual, r.expected);
      EXPECT_EQ(r.actual, CoreutilsSha(dir + "/" + r.file));
    }
  }
}

TEST(IoChecksums, EachMismatchAndMissingFileReported) {
  std::string dir = MakeDir("io-sums-bad", "");
  WriteFile(dir + "/b.txt", "hellO\n");
  WriteFile(dir + "/empty", "x");
  std::filesystem::remove(dir + "/sub/c.bin");
  // Blank lines (and a CRLF ending) are tolerated.
  std::string sums = testing::ReadFile(dir + "/SHA256SUMS");
  WriteFile(dir + "/SHA256SUMS", "\n" + sums + "\n   \n");
  auto results = VerifyChecksums(dir);
  ASSERT_EQ(results.size(), 4u);
  std::map<std::string, ChecksumResult> by;
  for (const auto& r : results) by[r.file] = r;
  EXPECT_TRUE(by["a.bin"].ok);
  EXPECT_FALSE(by["b.txt"].ok);
  EXPECT_EQ(by["b.txt"].actual, CoreutilsSha(dir + "/b.txt"));
  EXPECT_NE(by["b.txt"].actual, by["b.txt"].expected);
  EXPECT_FALSE(by["empty"].ok);
  EXPECT_EQ(by["empty"].actual, CoreutilsSha(dir + "/empty"));
  EXPECT_FALSE(by["sub/c.bin"].ok);
  EXPECT_EQ(by["sub/c.bin"].actual, "");
  EXPECT_EQ(by["sub/c.bin"].error, "missing");
  // coreutils agrees on which lines fail.
  auto r = RunCommand("cd " + dir + " && sha256sum -c SHA256SUMS");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("a.bin: OK"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("b.txt: FAILED"), std::string::npos) << r.out;
}

TEST(IoChecksums, MissingSumsFile) {
  std::string dir = ScratchDir("io-sums-none");
  ExpectError([&] { VerifyChecksums(dir); }, ErrorKind::kNotFound, {dir + "/SHA256SUMS"});
}

TEST(IoChecksums, MalformedLineNamesItsNumber) {
  std::string dir = MakeDir("io-sums-malformed", "");
  std::string sums = testing::ReadFile(dir + "/SHA256SUMS");
  const std::string bad_lines[] = {
      "abc  x.bin\n",                                        // short hash
      std::string(64, 'g') + "  x.bin\n",                    // not hex
      std::string(64, 'a') + " x.bin\n",                     // one space
      std::string(64, 'a') + "  \n",                         // no name
      "# comment\n",
  };
  for (const auto& bad : bad_lines) {
    SCOPED_TRACE(bad);
    WriteFile(dir + "/SHA256SUMS", sums + "\n" + bad);  // 4 entries + blank line: the bad one is line 6
    ExpectError([&] { VerifyChecksums(dir); }, ErrorKind::kCorrupt, {dir + "/SHA256SUMS:6", "malformed"});
  }
}

TEST(IoChecksums, PathEscapesRejected) {
  std::string dir = ScratchDir("io-sums-escape");
  for (const char* name : {"../secret", "sub/../../secret", "/etc/passwd"}) {
    WriteFile(dir + "/SHA256SUMS", std::string(64, '0') + "  " + name + "\n");
    ExpectError([&] { VerifyChecksums(dir); }, ErrorKind::kCorrupt, {":1", name, "outside"});
  }
  WriteFile(dir + "/SHA256SUMS", "\n\n");
  ExpectError([&] { VerifyChecksums(dir); }, ErrorKind::kCorrupt, {"lists no files"});
}

}  // namespace
}  // namespace tessera
