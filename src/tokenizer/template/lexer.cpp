// tessera jinja: the lexer. Mirrors Jinja2's with trim_blocks=True, lstrip_blocks=True and
// keep_trailing_newline=False (the Hugging Face chat-template environment).
#include <cctype>
#include <cstring>

#include "core/error.h"
#include "tokenizer/template/ast.h"
#include "tokenizer/text_util.h"

namespace tessera::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

class Lexer {
 public:
  explicit Lexer(const std::string& src) {
    // Newlines are normalized to \n and one trailing newline dropped, like Jinja's splitlines/join.
    src_.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r') {
        src_ += '\n';
        if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        src_ += src[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos <= src_.size()) {
      size_t p = FindTagStart(pos);
      std::string text = src_.substr(pos, p - pos);
      if (p == std::string::npos || p >= src_.size()) {
        Emit(Token::Type::kText, text, pos);
        break;
      }
      char kind = src_[p + 1];  // '{', '%' or '#'
      char mod = p + 2 < src_.size() ? src_[p + 2] : 0;
      if (mod == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (mod != '+' && kind != '{') {
        LStripLine(text, line_starting);
      }
      Emit(Token::Type::kText, text, pos);
      size_t inner = p + 2 + (mod == '-' || mod == '+');
      if (kind == '#') {
        size_t e = src_.find("#}", inner);
        if (e == std::string::npos) Error(p, "unterminated comment");
        bool strip = e > inner && src_[e - 1] == '-';
        bool keep = e > inner && src_[e - 1] == '+';
        pos = AfterTagEnd(e + 2, strip, !keep, line_starting);
      } else if (kind == '%' && IsRawStart(inner)) {
        pos = LexRaw(p, inner, line_starting);
      } else {
        pos = LexTag(p, inner, kind == '%', line_starting);
      }
    }
    Emit(Token::Type::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // lstrip_blocks: spaces/tabs between a line start and a block or comment tag are removed.
  static void LStripLine(std::string& text, bool line_starting) {
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return;
    for (size_t i = l_pos; i < text.size(); ++i)
      if (!IsSpace(text[i])) return;
    text.resize(l_pos);
  }

  // Position after a closing delimiter ending at `end`, consuming `-` whitespace or the
  // trim_blocks newline; records whether the next text starts a line.
  size_t AfterTagEnd(size_t end, bool strip, bool trim_newline, bool& line_starting) {
    size_t pos = end;
    if (strip) {
      while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
    } else if (trim_newline && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    line_starting = pos > end && src_[pos - 1] == '\n';
    return pos;
  }

  bool IsRawStart(size_t i) const {
    while (i < src_.size() && IsSpace(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    while (i < src_.size() && IsSpace(src_[i])) ++i;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    return src_.compare(i, 2, "%}") == 0;
  }

  size_t LexRaw(size_t tag, size_t inner, bool& line_starting) {
    size_t close = src_.find("%}", inner);
    bool strip = src_[close - 1] == '-';
    // Unlike other block tags, Jinja's {% raw %} opening tag has no trim_blocks newline removal.
    size_t pos = AfterTagEnd(close + 2, strip, false, line_starting);
    // Find {%[-+]? endraw [-+]?%}
    for (size_t s = src_.find("{%", pos); s != std::string::npos; s = src_.find("{%", s + 2)) {
      size_t i = s + 2;
      char mod = i < src_.size() ? src_[i] : 0;
      if (mod == '-' || mod == '+') ++i;
      while (i < src_.size() && IsSpace(src_[i])) ++i;
      if (src_.compare(i, 6, "endraw") != 0) continue;
      i += 6;
      while (i < src_.size() && IsSpace(src_[i])) ++i;
      char emod = i < src_.size() ? src_[i] : 0;
      if (emod == '-' || emod == '+') ++i;
      if (src_.compare(i, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos, s - pos);
      if (mod == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (mod != '+') {
        LStripLine(text, line_starting);
      }
      Emit(Token::Type::kText, text, pos);
      return AfterTagEnd(i + 2, emod == '-', emod != '+', line_starting);
    }
    Error(tag, "missing end of raw directive");
  }

  size_t LexTag(size_t tag, size_t i, bool block, bool& line_starting) {
    Emit(block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", tag);
    int depth = 0;
    const char* end = block ? "%}" : "}}";
    while (true) {
      while (i < src_.size() && IsSpace(src_[i])) ++i;
      if (i >= src_.size()) Error(tag, block ? "unclosed block tag '{%'" : "unclosed variable tag '{{'");
      if (depth == 0) {
        bool mod = (src_[i] == '-' || src_[i] == '+') && src_.compare(i + 1, 2, end) == 0;
        if (mod || src_.compare(i, 2, end) == 0) {
          Emit(block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", i);
          bool strip = mod && src_[i] == '-';
          bool keep = mod && src_[i] == '+';
          return AfterTagEnd(i + 2 + mod, strip, block && !keep, line_starting);
        }
      }
      char c = src_[i];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = i;
        while (i < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[i])) || src_[i] == '_')) ++i;
        Emit(Token::Type::kName, src_.substr(s, i - s), s);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        i = LexNumber(i);
      } else if (c == '\'' || c == '"') {
        i = LexString(i);
      } else {
        static const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* o : kOps2)
          if (src_.compare(i, 2, o) == 0) op = o;
        if (op.size() == 1 && !std::strchr("+-*/%~<>=.,:|()[]{}", c))
          Error(i, fmt::format("unexpected character '{}'", c));
        if (op == "(" || op == "[" || op == "{") ++depth;
        if (op == ")" || op == "]" || op == "}") {
          if (depth == 0) Error(i, fmt::format("unexpected '{}'", op));
          --depth;
        }
        Emit(Token::Type::kOp, op, i);
        i += op.size();
      }
    }
  }

  size_t LexNumber(size_t i) {
    size_t s = i;
    auto digits = [&] {
      while (i < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[i])) || src_[i] == '_')) ++i;
    };
    digits();
    bool is_float = false;
    // After a '.', digits are an attribute index (x.0.1), never a float: Jinja's (?<!\.) rule.
    bool after_dot = s > 0 && src_[s - 1] == '.';
    if (!after_dot && i + 1 < src_.size() && src_[i] == '.' && std::isdigit(static_cast<unsigned char>(src_[i + 1]))) {
      is_float = true;
      ++i;
      digits();
    }
    if (!after_dot && i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
      size_t j = i + 1;
      if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
      if (j < src_.size() && std::isdigit(static_cast<unsigned char>(src_[j]))) {
        is_float = true;
        i = j;
        digits();
      }
    }
    std::string num;
    for (size_t k = s; k < i; ++k)
      if (src_[k] != '_') num += src_[k];
    Emit(is_float ? Token::Type::kFloat : Token::Type::kInt, num, s);
    return i;
  }

  // String literals decode Python escapes (Jinja uses the unicode-escape codec); unknown escapes
  // keep their backslash.
  size_t LexString(size_t i) {
    size_t s = i;
    char q = src_[i++];
    std::string out;
    while (true) {
      if (i >= src_.size()) Error(s, "unterminated string literal");
      char c = src_[i];
      if (c == q) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        out += c;
        ++i;
        continue;
      }
      char e = src_[i + 1];
      i += 2;
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k, ++i) {
          if (i >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[i])))
            Error(s, "truncated \\x/\\u escape in string literal");
          v = v * 16 + (std::isdigit(static_cast<unsigned char>(src_[i])) ? src_[i] - '0'
                                                                           : (std::tolower(src_[i]) - 'a' + 10));
        }
        tok::AppendUtf8(out, static_cast<char32_t>(v));
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = e - '0';
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
              v = v * 8 + (src_[i] - '0');
            tok::AppendUtf8(out, static_cast<char32_t>(v));
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    Emit(Token::Type::kString, out, s);
    return i + 1;
  }

  void Emit(Token::Type t, std::string v, size_t at) {
    if (t == Token::Type::kText && v.empty()) return;
    auto [line, col] = LineCol(at);
    tokens_.push_back(Token{t, std::move(v), line, col});
  }

  std::pair<int, int> LineCol(size_t at) {
    // Tokens are emitted in order, so the line count advances incrementally.
    at = std::min(at, src_.size());
    if (at < lc_pos_) lc_pos_ = 0, lc_line_ = 1, lc_line_start_ = 0;
    for (; lc_pos_ < at; ++lc_pos_)
      if (src_[lc_pos_] == '\n') ++lc_line_, lc_line_start_ = lc_pos_ + 1;
    return {lc_line_, static_cast<int>(at - lc_line_start_) + 1};
  }

  [[noreturn]] void Error(size_t at, const std::string& what) {
    auto [line, col] = LineCol(at);
    Fail(ErrorKind::kInvalidArgument, "template syntax error at line {}, column {}: {}", line, col, what);
  }

  std::string src_;
  std::vector<Token> tokens_;
  size_t lc_pos_ = 0, lc_line_start_ = 0;
  int lc_line_ = 1;
};

}  // namespace

std::vector<Token> Tokenize(const std::string& source) { return Lexer(source).Run(); }

}  // namespace tessera::jinja
