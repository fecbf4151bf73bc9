// tessera grammar: the Lark-like / GBNF grammar text front-end (see ebnf.h).
#include "grammar/ebnf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/regex.h"

namespace tessera::grammar {
namespace {

struct Token {
  enum Kind {
    kName,
    kString,
    kRegex,
    kClass,
    kColon,
    kPipe,
    kLParen,
    kRParen,
    kLBrack,
    kRBrack,
    kStar,
    kPlus,
    kQMark,
    kBang,
    kTilde,
    kNumber,
    kDotDot,
    kDot,
    kBraces,
    kImport,
    kArrow,
    kEnd
  } kind;
  std::string text;  // name, decoded string, regex / class source, import path
  bool flag_i = false;
  int min = 0, max = 0;  // kBraces; kNumber uses min
  int line = 0;
  bool bol = false;  // first token of its line (rule headers start lines)
};

[[noreturn]] void SyntaxError(int line, const std::string& msg) {
  Fail(ErrorKind::kInvalidArgument, "grammar: line {}: {}", line, msg);
}

class Lexer {
 public:
  Lexer(std::string_view text, bool gbnf) : t_(text), gbnf_(gbnf) {}

  std::vector<Token> Run() {
    std::vector<Token> out;
    while (true) {
      SkipSpace();
      Token tok{Token::kEnd, "", false, 0, 0, line_, line_ != last_line_};
      last_line_ = line_;
      if (p_ >= t_.size()) {
        out.push_back(tok);
        return out;
      }
      char c = t_[p_];
      auto single = [&](Token::Kind k) {
        tok.kind = k;
        ++p_;
      };
      if (c == ':' && t_.substr(p_, 3) == "::=") {
        tok.kind = Token::kColon;
        p_ += 3;
      } else if (c == ':') {
        single(Token::kColon);
      } else if (c == '|') {
        single(Token::kPipe);
      } else if (c == '(') {
        single(Token::kLParen);
      } else if (c == ')') {
        single(Token::kRParen);
      } else if (c == '[' && gbnf_) {
        tok.kind = Token::kClass;
        tok.text = ReadDelimited('[', ']', true);
      } else if (c == '[') {
        single(Token::kLBrack);
      } else if (c == ']') {
        single(Token::kRBrack);
      } else if (c == '*') {
        single(Token::kStar);
      } else if (c == '+') {
        single(Token::kPlus);
      } else if (c == '?') {
        single(Token::kQMark);
      } else if (c == '!') {
        single(Token::kBang);
      } else if (c == '~') {
        single(Token::kTilde);
      } else if (c == '-' && t_.substr(p_, 2) == "->") {
        tok.kind = Token::kArrow;
        p_ += 2;
      } else if (c == '.' && t_.substr(p_, 2) == "..") {
        tok.kind = Token::kDotDot;
        p_ += 2;
      } else if (c == '.') {
        single(Token::kDot);
      } else if (c == '{' && gbnf_) {
        tok.kind = Token::kBraces;
        ReadBraces(&tok);
      } else if (c == '"' || c == '\'') {
        tok.kind = Token::kString;
        tok.text = ReadString(c);
        if (p_ < t_.size() && t_[p_] == 'i') tok.flag_i = true, ++p_;
      } else if (c == '/' && !gbnf_) {
        tok.kind = Token::kRegex;
        tok.text = ReadDelimited('/', '/', false);
        while (p_ < t_.size() && std::isalpha(static_cast<unsigned char>(t_[p_]))) {
          SyntaxError(line_, fmt::format("regex flag '{}' is not supported", t_[p_]));
        }
      } else if (c == '%') {
        size_t e = t_.find('\n', p_);
        std::string d(t_.substr(p_, e == std::string_view::npos ? std::string_view::npos : e - p_));
        p_ = e == std::string_view::npos ? t_.size() : e;
        while (!d.empty() && std::isspace(static_cast<unsigned char>(d.back()))) d.pop_back();
        if (d.rfind("%import ", 0) != 0)
          SyntaxError(line_,
                      fmt::format("directive '{}' is not supported (%ignore: write the whitespace into the rules)", d));
        tok.kind = Token::kImport;
        tok.text = d.substr(8);
        while (!tok.text.empty() && tok.text[0] == ' ') tok.text.erase(0, 1);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        tok.kind = Token::kNumber;
        long v = 0;
        while (p_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p_]))) {
          v = v * 10 + (t_[p_++] - '0');
          if (v > 100000) SyntaxError(line_, "number too large");
        }
        tok.min = static_cast<int>(v);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        tok.kind = Token::kName;
        while (p_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[p_])) || t_[p_] == '_' ||
                                  (gbnf_ && t_[p_] == '-' && p_ + 1 < t_.size() && t_[p_ + 1] != '>')))
          tok.text += t_[p_++];
      } else {
        SyntaxError(line_, fmt::format("unexpected character '{}'", c));
      }
      out.push_back(std::move(tok));
    }
  }

 private:
  void SkipSpace() {
    while (p_ < t_.size()) {
      char c = t_[p_];
      if (c == '\n') {
        ++line_, ++p_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++p_;
      } else if (c == '#' || (c == '/' && t_.substr(p_, 2) == "//")) {
        while (p_ < t_.size() && t_[p_] != '\n') ++p_;
      } else {
        return;
      }
    }
  }

  // The raw text between open and close (escapes kept as written); keep_delims keeps the brackets.
  std::string ReadDelimited(char open, char close, bool keep_delims) {
    std::string out;
    if (keep_delims) out += open;
    ++p_;
    while (true) {
      if (p_ >= t_.size() || t_[p_] == '\n') SyntaxError(line_, fmt::format("unterminated '{}'", open));
      char c = t_[p_++];
      if (c == '\\' && p_ < t_.size()) {
        if (!(open == '/' && t_[p_] == '/')) out += c;  // \/ inside /.../ is a plain slash
        out += t_[p_++];
        continue;
      }
      if (c == close) break;
      out += c;
    }
    if (keep_delims) out += close;
    return out;
  }

  std::string ReadString(char quote) {
    std::string out;
    ++p_;
    while (true) {
      if (p_ >= t_.size() || t_[p_] == '\n') SyntaxError(line_, "unterminated string literal");
      char c = t_[p_++];
      if (c == quote) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= t_.size()) SyntaxError(line_, "unterminated string literal");
      char e = t_[p_++];
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          if (p_ >= t_.size() || !std::isxdigit(static_cast<unsigned char>(t_[p_])))
            SyntaxError(line_, "bad hex escape");
          char h = t_[p_++];
          v = v * 16 + static_cast<uint32_t>(
                           std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '0':
          out += '\0';
          break;
        case 'x':
          out += static_cast<char>(hex(2));
          break;
        case 'u': {
          uint32_t cp = hex(4);
          if (cp >= 0xD800 && cp <= 0xDFFF) SyntaxError(line_, "a surrogate \\u escape");
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          out += e;  // \\ \" \' and other punctuation stand for themselves
      }
    }
  }

  void ReadBraces(Token* tok) {
    size_t e = t_.find('}', p_);
    if (e == std::string_view::npos) SyntaxError(line_, "unterminated '{'");
    std::string body(t_.substr(p_ + 1, e - p_ - 1));
    p_ = e + 1;
    size_t comma = body.find(',');
    // Spaces around the digits only: "{ ,2}" once reached std::stoi(" "), whose
    // std::invalid_argument escaped the compiler as a 500 instead of this 400 (fuzz/grammar_fuzz.cpp).
    auto num = [&](const std::string& s, int* out) {
      const size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
      const std::string digits = b == std::string::npos ? "" : s.substr(b, e - b + 1);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 6)
        SyntaxError(line_, "bad repetition {m,n}");
      *out = std::stoi(digits);
    };
    num(body.substr(0, comma), &tok->min);
    if (comma == std::string::npos) {
      tok->max = tok->min;
    } else if (body.substr(comma + 1).find_first_not_of(' ') == std::string::npos) {
      tok->max = Grammar::kUnbounded;
    } else {
      num(body.substr(comma + 1), &tok->max);
    }
  }

  std::string_view t_;
  bool gbnf_;
  size_t p_ = 0;
  int line_ = 1;
  int last_line_ = 0;
};

// The grammar text's syntax tree, kept until every rule is declared.
struct Ast {
  enum Kind { kLit, kRegex, kClass, kRef, kSeq, kAlt, kRepeat } kind;
  std::string text;
  bool case_insensitive = false;
  int min = 0, max = 0;
  int line = 0;
  std::vector<std::unique_ptr<Ast>> kids;
};
using AstPtr = std::unique_ptr<Ast>;

AstPtr Make(Ast::Kind k, int line) {
  auto a = std::make_unique<Ast>();
  a->kind = k;
  a->line = line;
  return a;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  struct RuleDef {
    std::string name;
    AstPtr body;
    int line;
  };
  std::vector<RuleDef> rules;
  std::vector<std::pair<std::string, int>> imports;

  void Run() {
    while (Peek().kind != Token::kEnd) {
      if (Peek().kind == Token::kImport) {
        imports.emplace_back(Peek().text, Peek().line);
        ++i_;
        continue;
      }
      size_t len = RuleStart(i_);
      if (!len) SyntaxError(Peek().line, "expected a rule definition `name: ...`");
      size_t name_at = i_ + (Peek().kind == Token::kQMark || Peek().kind == Token::kBang ? 1 : 0);
      RuleDef r{toks_[name_at].text, nullptr, toks_[name_at].line};
      i_ += len;
      r.body = ParseAlt(0);
      rules.push_back(std::move(r));
    }
  }

 private:
  const Token& Peek(size_t k = 0) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }

  // Length of a rule header at position j ([?!] name [. N] :, at the start of a line), or 0.
  size_t RuleStart(size_t j) const {
    size_t k = j;
    auto at = [&](size_t x) -> const Token& { return toks_[std::min(x, toks_.size() - 1)]; };
    if (!at(k).bol) return 0;
    if (at(k).kind == Token::kQMark || at(k).kind == Token::kBang) ++k;
    if (at(k).kind != Token::kName) return 0;
    ++k;
    if (at(k).kind == Token::kDot && at(k + 1).kind == Token::kNumber) k += 2;
    if (at(k).kind != Token::kColon) return 0;
    return k + 1 - j;
  }

  AstPtr ParseAlt(int depth) {
    if (depth > 100) SyntaxError(Peek().line, "nested too deeply");
    AstPtr first = ParseSeq(depth);
    if (Peek().kind != Token::kPipe) return first;
    AstPtr alt = Make(Ast::kAlt, first->line);
    alt->kids.push_back(std::move(first));
    while (Peek().kind == Token::kPipe) {
      ++i_;
      alt->kids.push_back(ParseSeq(depth));
    }
    return alt;
  }

  AstPtr ParseSeq(int depth) {
    AstPtr seq = Make(Ast::kSeq, Peek().line);
    while (true) {
      Token::Kind k = Peek().kind;
      if (k == Token::kEnd || k == Token::kPipe || k == Token::kRParen || k == Token::kRBrack || k == Token::kImport ||
          RuleStart(i_))
        break;
      if (k == Token::kArrow) {  // Lark alias: `-> name` names the alternative's tree node
        i_ += 2;
        continue;
      }
      seq->kids.push_back(ParseItem(depth));
    }
    return seq;
  }

  AstPtr ParseItem(int depth) {
    AstPtr atom = ParseAtom(depth);
    while (true) {
      const Token& t = Peek();
      int min, max;
      if (t.kind == Token::kStar) {
        min = 0, max = Grammar::kUnbounded;
      } else if (t.kind == Token::kPlus) {
        min = 1, max = Grammar::kUnbounded;
      } else if (t.kind == Token::kQMark && !RuleStart(i_)) {
        min = 0, max = 1;
      } else if (t.kind == Token::kBraces) {
        min = t.min, max = t.max;
      } else if (t.kind == Token::kTilde) {
        ++i_;
        if (Peek().kind != Token::kNumber) SyntaxError(Peek().line, "expected a count after '~'");
        min = max = Peek().min;
        if (Peek(1).kind == Token::kDotDot) {
          if (Peek(2).kind != Token::kNumber) SyntaxError(Peek().line, "expected a count after '..'");
          max = Peek(2).min;
          i_ += 2;
        }
        if (max < min) SyntaxError(Peek().line, "repetition range with max < min");
      } else {
        return atom;
      }
      ++i_;
      AstPtr r = Make(Ast::kRepeat, atom->line);
      r->min = min;
      r->max = max;
      r->kids.push_back(std::move(atom));
      atom = std::move(r);
    }
  }

  AstPtr ParseAtom(int depth) {
    const Token& t = Peek();
    ++i_;
    switch (t.kind) {
      case Token::kString: {
        AstPtr a = Make(Ast::kLit, t.line);
        a->text = t.text;
        a->case_insensitive = t.flag_i;
        return a;
      }
      case Token::kRegex:
      case Token::kClass: {
        AstPtr a = Make(t.kind == Token::kRegex ? Ast::kRegex : Ast::kClass, t.line);
        a->text = t.text;
        return a;
      }
      case Token::kName: {
        AstPtr a = Make(Ast::kRef, t.line);
        a->text = t.text;
        return a;
      }
      case Token::kLParen:
      case Token::kLBrack: {
        AstPtr inner = ParseAlt(depth + 1);
        Token::Kind close = t.kind == Token::kLParen ? Token::kRParen : Token::kRBrack;
        if (Peek().kind != close) SyntaxError(Peek().line, close == Token::kRParen ? "missing ')'" : "missing ']'");
        ++i_;
        if (t.kind == Token::kLParen) return inner;
        AstPtr r = Make(Ast::kRepeat, t.line);
        r->min = 0;
        r->max = 1;
        r->kids.push_back(std::move(inner));
        return r;
      }
      default:
        SyntaxError(t.line, "expected a string, regex, rule name or group");
    }
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
};

// Lark's common.lark terminals, as regexes.
const char* CommonTerminal(const std::string& name) {
  static const std::map<std::string, const char*> kCommon = {
      {"DIGIT", "[0-9]"},
      {"HEXDIGIT", "[a-fA-F0-9]"},
      {"INT", "[0-9]+"},
      {"SIGNED_INT", "[+-]?[0-9]+"},
      {"DECIMAL", "[0-9]+\\.[0-9]*|\\.[0-9]+"},
      {"FLOAT", "[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?"},
      {"SIGNED_FLOAT", "[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?)"},
      {"NUMBER", "[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+"},
      {"SIGNED_NUMBER", "[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+)"},
      {"LCASE_LETTER", "[a-z]"},
      {"UCASE_LETTER", "[A-Z]"},
      {"LETTER", "[A-Za-z]"},
      {"WORD", "[A-Za-z]+"},
      {"CNAME", "[_A-Za-z][_A-Za-z0-9]*"},
      {"WS_INLINE", "[ \\t]+"},
      {"WS", "[ \\t\\f\\r\\n]+"},
      {"CR", "\\r"},
      {"LF", "\\n"},
      {"NEWLINE", "(\\r?\\n)+"},
      {"ESCAPED_STRING", "\"([^\"\\\\\\n]|\\\\[^\\n])*\""},
  };
  auto it = kCommon.find(name);
  return it == kCommon.end() ? nullptr : it->second;
}

class Builder {
 public:
  Builder(Grammar* g, const std::map<std::string, int32_t>& ids) : g_(g), ids_(ids) {}

  ExprId Convert(const Ast& a) {
    switch (a.kind) {
      case Ast::kLit: {
        if (!a.case_insensitive) return g_->Literal(a.text);
        std::vector<ExprId> seq;
        for (unsigned char c : a.text) {
          ByteSet s = ByteSet::Single(c);
          if (std::isalpha(c)) s |= ByteSet::Single(std::islower(c) ? std::toupper(c) : std::tolower(c));
          seq.push_back(g_->Bytes(s));
        }
        return g_->Seq(std::move(seq));
      }
      case Ast::kRegex:
      case Ast::kClass:
        return CompileRegex(g_, a.text, RegexOptions{}, fmt::format("grammar: line {}: regex", a.line));
      case Ast::kRef: {
        auto it = ids_.find(a.text);
        if (it == ids_.end()) SyntaxError(a.line, fmt::format("rule '{}' is not defined", a.text));
        return g_->Call(it->second);
      }
      case Ast::kSeq:
      case Ast::kAlt: {
        std::vector<ExprId> parts;
        for (const auto& k : a.kids) parts.push_back(Convert(*k));
        return a.kind == Ast::kSeq ? g_->Seq(std::move(parts)) : g_->Alt(std::move(parts));
      }
      case Ast::kRepeat:
        return g_->Repeat(Convert(*a.kids[0]), a.min, a.max);
    }
    return g_->Nothing();
  }

  // A rule `r: r a | r b | c | d` becomes `r: (c | d) (a | b)*`.
  ExprId ConvertRule(const std::string& name, const Ast& body) {
    std::vector<const Ast*> alts;
    if (body.kind == Ast::kAlt) {
      for (const auto& k : body.kids) alts.push_back(k.get());
    } else {
      alts.push_back(&body);
    }
    std::vector<ExprId> base, tails;
    for (const Ast* alt : alts) {
      const Ast* first = alt->kind == Ast::kSeq ? (alt->kids.empty() ? nullptr : alt->kids[0].get()) : alt;
      if (first && first->kind == Ast::kRef && first->text == name) {
        std::vector<ExprId> rest;
        if (alt->kind == Ast::kSeq)
          for (size_t i = 1; i < alt->kids.size(); ++i) rest.push_back(Convert(*alt->kids[i]));
        tails.push_back(g_->Seq(std::move(rest)));
      } else {
        base.push_back(Convert(*alt));
      }
    }
    if (tails.empty()) return g_->Alt(std::move(base));
    if (base.empty()) SyntaxError(body.line, fmt::format("rule '{}' only refers to itself and can never end", name));
    return g_->Seq({g_->Alt(std::move(base)), g_->Star(g_->Alt(std::move(tails)))});
  }

 private:
  Grammar* g_;
  const std::map<std::string, int32_t>& ids_;
};

}  // namespace

Grammar EbnfGrammar(std::string_view text) {
  bool gbnf = text.find("::=") != std::string_view::npos;
  Parser parser(Lexer(text, gbnf).Run());
  parser.Run();
  Grammar g;
  std::map<std::string, int32_t> ids;
  for (const auto& r : parser.rules) {
    if (ids.count(r.name)) SyntaxError(r.line, fmt::format("rule '{}' is defined twice", r.name));
    ids[r.name] = g.AddRule(r.name);
  }
  std::vector<std::pair<int32_t, const char*>> imported;
  for (const auto& [path, line] : parser.imports) {
    // `%import common.NAME` or `%import common.NAME -> ALIAS`
    std::string name = path, alias;
    size_t arrow = name.find("->");
    if (arrow != std::string::npos) {
      alias = name.substr(arrow + 2);
      name = name.substr(0, arrow);
      auto trim = [](std::string& x) {
        while (!x.empty() && std::isspace(static_cast<unsigned char>(x.back()))) x.pop_back();
        while (!x.empty() && std::isspace(static_cast<unsigned char>(x.front()))) x.erase(0, 1);
      };
      trim(name);
      trim(alias);
    }
    if (name.rfind("common.", 0) != 0) SyntaxError(line, fmt::format("only common.* can be imported, not '{}'", path));
    name = name.substr(7);
    const char* re = CommonTerminal(name);
    if (!re) SyntaxError(line, fmt::format("unknown terminal '{}' in common", name));
    if (alias.empty()) alias = name;
    if (ids.count(alias)) continue;
    ids[alias] = g.AddRule(alias);
    imported.emplace_back(ids[alias], re);
  }
  Builder b(&g, ids);
  for (const auto& r : parser.rules) g.SetBody(ids[r.name], b.ConvertRule(r.name, *r.body));
  for (const auto& [id, re] : imported) g.SetBody(id, CompileRegex(&g, re, RegexOptions{}, "grammar: common terminal"));
  const char* start = gbnf ? "root" : "start";
  auto it = ids.find(start);
  if (it == ids.end()) {
    Fail(ErrorKind::kInvalidArgument, "grammar: no '{}' rule (the start of the grammar)", start);
  }
  g.set_root(it->second);
  return g;
}

}  // namespace tessera::grammar
