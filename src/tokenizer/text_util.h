// tessera tokenizer internals: UTF-8 helpers, the GPT-2 byte<->unicode alphabet used by byte-level
// BPE, and a PCRE2 regex wrapper (UTF + UCP, so \p{L}, \s and lookahead behave as in HF's Oniguruma).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::tok {

// Byte offset of the first invalid UTF-8 byte, or npos when s is valid.
size_t FindInvalidUtf8(std::string_view s);
// Decodes the code point at s[i] of a VALID UTF-8 string; returns its byte length.
size_t DecodeUtf8(std::string_view s, size_t i, char32_t* cp);
void AppendUtf8(std::string& out, char32_t cp);
// Replaces each maximal invalid subsequence with U+FFFD (as Rust's from_utf8_lossy and Python's
// errors="replace" do), so the result is always valid UTF-8.
std::string LossyUtf8(std::string_view bytes);
// Unicode helpers (via utf8proc).
bool IsWhitespace(char32_t cp);  // Rust char::is_whitespace (White_Space property)
bool IsNumeric(char32_t cp);     // general category Nd, Nl or No
bool IsAlnum(char32_t cp);       // letter or number
bool IsPunctuation(char32_t cp); // general category P*, or ASCII punctuation

// GPT-2's byte-level alphabet: every byte maps to one printable code point.
const std::array<std::string, 256>& ByteToUnicode();  // byte -> UTF-8 of its code point
int UnicodeToByte(char32_t cp);                        // -1 when cp is not in the alphabet
std::string ByteLevelEncode(std::string_view bytes);

// A compiled PCRE2 pattern. Thread-safe after construction.
class Regex {
 public:
  // `what` names the pattern's origin for error messages (e.g. "pre_tokenizer Split").
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Appends every non-empty match [start, end) of `text` (valid UTF-8), left to right.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
  std::string what_;
};

}  // namespace tessera::tok
