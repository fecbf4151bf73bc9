// tessera tokenizer internals: UTF-8 helpers, byte-level alphabet and the PCRE2 wrapper.
#include "tokenizer/text_util.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include "core/error.h"

namespace tessera::tok {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 if it is invalid; *maximal gets the length of
// the maximal prefix that could start a valid sequence (at least 1), used for U+FFFD replacement.
size_t ValidSeqLen(std::string_view s, size_t i, size_t* maximal) {
  auto b0 = static_cast<unsigned char>(s[i]);
  *maximal = 1;
  if (b0 < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return 0;
    auto b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    *maximal = k + 1;
  }
  return need;
}

}  // namespace

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0, m;
  while (i < s.size()) {
    size_t n = ValidSeqLen(s, i, &m);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

size_t DecodeUtf8(std::string_view s, size_t i, char32_t* cp) {
  auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t c = b0 & (0x7F >> n);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) c = (c << 6) | (s[i + k] & 0x3F);
  *cp = c;
  return n;
}

void AppendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string LossyUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0, m;
  while (i < s.size()) {
    size_t n = ValidSeqLen(s, i, &m);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += m;
    }
  }
  return out;
}

bool IsWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool IsNumeric(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool IsAlnum(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || IsNumeric(c);
}

bool IsPunctuation(char32_t c) {
  if (c < 0x80 && c > 0x20 && c != 0x7F && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                                            (c >= 'A' && c <= 'Z')))
    return true;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

namespace {
struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int, 324> from_unicode;  // code points of the alphabet are all < 324
  ByteTables() {
    from_unicode.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      AppendUtf8(to_unicode[b], cp);
      from_unicode[cp] = b;
    }
  }
};
const ByteTables& Tables() {
  static const ByteTables t;
  return t;
}
}  // namespace

const std::array<std::string, 256>& ByteToUnicode() { return Tables().to_unicode; }

int UnicodeToByte(char32_t cp) { return cp < 324 ? Tables().from_unicode[cp] : -1; }

std::string ByteLevelEncode(std::string_view bytes) {
  const auto& t = Tables().to_unicode;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t[static_cast<unsigned char>(c)];
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& what) : what_(what) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    Fail(ErrorKind::kUnsupported, "{}: cannot compile regex '{}' at offset {}: {}", what, pattern,
         off, reinterpret_cast<const char*>(buf));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  if (!md) Fail(ErrorKind::kInternal, "{}: out of memory for regex match data", what_);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The text was validated once by the caller: skip PCRE2's per-call UTF check (it is O(n)).
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_) {
      // JIT stack exhausted on a pathological input: the interpreter uses the heap instead.
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                       nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof(buf));
      Fail(ErrorKind::kInvalidArgument, "{}: regex match failed: {}", what_,
           reinterpret_cast<const char*>(buf));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t s = ov[0], e = ov[1];
    if (e > s) {
      out->emplace_back(s, e);
      pos = e;
    } else {
      // Empty match: step over one whole character.
      if (pos >= text.size()) break;
      char32_t cp;
      pos += DecodeUtf8(text, pos, &cp);
    }
  }
  pcre2_match_data_free(md);
}

}  // namespace tessera::tok
