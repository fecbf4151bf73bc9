// tessera jinja: recursive-descent parser with Jinja2's grammar and operator precedence
// (condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary < postfix/filter/test).
#include <algorithm>
#include <set>

#include "core/error.h"
#include "tokenizer/template/ast.h"

namespace tessera::jinja {
namespace {

// Deeper input is rejected, not a stack overflow (in parsing, evaluation or tree destruction).
constexpr int kMaxNesting = 256;     // recursive-descent nesting: parentheses, statements
constexpr int kMaxExprDepth = 1024;  // expression tree height: long `a + b + ...` or `x.a.b...` chains

using T = Token::Type;
using K = Node::Kind;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& toks) : t_(toks) {}

  Body ParseTemplate() {
    Body body = ParseBody({});
    if (Cur().type != T::kEof) Error(Cur(), "unexpected tag");
    return body;
  }

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  const Token& Next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool IsOp(const char* op) const { return Cur().type == T::kOp && Cur().value == op; }
  bool IsName(const char* n) const { return Cur().type == T::kName && Cur().value == n; }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* n) {
    if (!IsName(n)) return false;
    Next();
    return true;
  }
  void ExpectOp(const char* op) {
    if (!SkipOp(op)) Error(Cur(), fmt::format("expected '{}'", op));
  }
  std::string ExpectName() {
    if (Cur().type != T::kName) Error(Cur(), "expected a name");
    return Next().value;
  }
  void ExpectBlockEnd() {
    if (Cur().type != T::kBlockEnd) Error(Cur(), "expected end of statement block '%}'");
    Next();
  }

  static std::string Describe(const Token& tok) {
    switch (tok.type) {
      case T::kEof: return "end of template";
      case T::kBlockEnd: return "'%}'";
      case T::kVarEnd: return "'}}'";
      case T::kText: return "text";
      case T::kString: return "string literal";
      default: return "'" + tok.value + "'";
    }
  }
  [[noreturn]] void Error(const Token& tok, const std::string& what) {
    Fail(ErrorKind::kInvalidArgument, "template syntax error at line {}, column {}: {} (found {})", tok.line,
         tok.col, what, Describe(tok));
  }

  NodePtr Make(K kind, const Token& at) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->line = at.line;
    n->col = at.col;
    return n;
  }

  // Records a finished expression node's height; too tall a tree is a syntax error.
  NodePtr Fin(NodePtr n) {
    int d = 0;
    for (const NodePtr* c : {&n->a, &n->b, &n->c, &n->d})
      if (*c) d = std::max(d, (*c)->depth);
    for (const auto& k : n->kids)
      if (k) d = std::max(d, k->depth);
    for (const auto& kv : n->kwargs) d = std::max(d, kv.second->depth);
    n->depth = d + 1;
    if (n->depth > kMaxExprDepth) {
      Token at{Token::Type::kOp, "", n->line, n->col};
      Error(at, "expression nested too deeply");
    }
    return n;
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxNesting) p->Error(p->Cur(), "template nested too deeply");
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  // Parses statements until a block tag whose keyword is in `ends` (left unconsumed, positioned
  // at the keyword) or end of input.
  Body ParseBody(const std::set<std::string>& ends) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& tok = Cur();
      if (tok.type == T::kEof) {
        if (!ends.empty()) {
          std::string list;
          for (const auto& e : ends) list += (list.empty() ? "'" : " or '") + e + "'";
          Error(tok, "unexpected end of template, expected " + list);
        }
        return body;
      }
      if (tok.type == T::kText) {
        auto n = Make(K::kText, tok);
        n->name = tok.value;
        body.push_back(n);
        Next();
      } else if (tok.type == T::kVarBegin) {
        Next();
        auto n = Make(K::kOutput, tok);
        n->a = ParseTuple(false);
        if (Cur().type != T::kVarEnd) Error(Cur(), "expected end of print statement '}}'");
        Next();
        body.push_back(n);
      } else if (tok.type == T::kBlockBegin) {
        const Token& kw = Peek();
        if (kw.type == T::kName && ends.count(kw.value)) {
          Next();
          return body;
        }
        Next();
        body.push_back(ParseStatement());
      } else {
        Error(tok, "unexpected token");
      }
    }
  }

  NodePtr ParseStatement() {
    const Token& kw = Cur();
    if (kw.type != T::kName) Error(kw, "expected a statement keyword");
    std::string k = Next().value;
    if (k == "if") return ParseIf(kw);
    if (k == "for") return ParseFor(kw);
    if (k == "set") return ParseSet(kw);
    if (k == "macro") return ParseMacro(kw);
    if (k == "call") return ParseCallBlock(kw);
    if (k == "filter") {
      auto n = Make(K::kFilterBlock, kw);
      n->c = ParseFilterChain(nullptr);
      ExpectBlockEnd();
      n->body = ParseBody({"endfilter"});
      EndTag("endfilter");
      return n;
    }
    if (k == "generation") {
      auto n = Make(K::kGeneration, kw);
      ExpectBlockEnd();
      n->body = ParseBody({"endgeneration"});
      EndTag("endgeneration");
      return n;
    }
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) Error(kw, "'" + k + "' outside of a loop");
      auto n = Make(k == "break" ? K::kBreak : K::kContinue, kw);
      ExpectBlockEnd();
      return n;
    }
    Error(kw, "unknown or unsupported statement '" + k + "'");
  }

  void EndTag(const char* name) {
    ExpectName();  // the end keyword ParseBody stopped at
    (void)name;
    ExpectBlockEnd();
  }

  NodePtr ParseIf(const Token& kw) {
    auto n = Make(K::kIf, kw);
    n->a = ParseTuple(false);
    ExpectBlockEnd();
    n->body = ParseBody({"elif", "else", "endif"});
    std::string end = Next().value;
    if (end == "elif") {
      n->else_body.push_back(ParseIf(t_[i_ - 1]));
      return n;
    }
    if (end == "else") {
      ExpectBlockEnd();
      n->else_body = ParseBody({"endif"});
      Next();
    }
    ExpectBlockEnd();
    return n;
  }

  NodePtr ParseFor(const Token& kw) {
    auto n = Make(K::kFor, kw);
    n->a = ParseAssignTarget(false);
    if (!SkipName("in")) Error(Cur(), "expected 'in' in for loop");
    n->b = ParseTuple(true);
    if (SkipName("if")) n->c = ParseTuple(false);
    if (SkipName("recursive")) n->flag = true;
    ExpectBlockEnd();
    ++loop_depth_;
    n->body = ParseBody({"else", "endfor"});
    --loop_depth_;
    if (Next().value == "else") {
      ExpectBlockEnd();
      n->else_body = ParseBody({"endfor"});
      Next();
    }
    ExpectBlockEnd();
    return n;
  }

  // Targets: name, name.attr (set only), or a tuple of names.
  NodePtr ParseAssignTarget(bool allow_attr) {
    const Token& start = Cur();
    std::vector<NodePtr> items;
    bool paren = SkipOp("(");
    do {
      const Token& at = Cur();
      auto name = Make(K::kName, at);
      name->name = ExpectName();
      if (allow_attr && SkipOp(".")) {
        auto attr = Make(K::kGetAttr, at);
        attr->a = name;
        attr->name = ExpectName();
        items.push_back(attr);
      } else {
        items.push_back(name);
      }
    } while (SkipOp(",") && Cur().type == T::kName);
    if (paren) ExpectOp(")");
    if (items.size() == 1 && !paren) return items[0];
    auto tup = Make(K::kTuple, start);
    tup->kids = std::move(items);
    return tup;
  }

  NodePtr ParseSet(const Token& kw) {
    NodePtr target = ParseAssignTarget(true);
    if (SkipOp("=")) {
      auto n = Make(K::kSet, kw);
      n->a = target;
      n->b = ParseTuple(false);
      ExpectBlockEnd();
      return n;
    }
    auto n = Make(K::kSetBlock, kw);
    n->a = target;
    if (IsOp("|")) n->c = ParseFilterChain(nullptr);
    ExpectBlockEnd();
    n->body = ParseBody({"endset"});
    Next();
    ExpectBlockEnd();
    return n;
  }

  void ParseSignature(Node& n) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!n.names.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      n.names.push_back(ExpectName());
      n.kids.push_back(SkipOp("=") ? ParseExpression() : nullptr);
    }
    ExpectOp(")");
  }

  NodePtr ParseMacro(const Token& kw) {
    auto n = Make(K::kMacro, kw);
    n->name = ExpectName();
    ParseSignature(*n);
    ExpectBlockEnd();
    int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = ParseBody({"endmacro"});
    loop_depth_ = saved;
    Next();
    ExpectBlockEnd();
    return n;
  }

  NodePtr ParseCallBlock(const Token& kw) {
    auto n = Make(K::kCallBlock, kw);
    if (IsOp("(")) ParseSignature(*n);
    n->a = ParseExpression();
    if (n->a->kind != K::kCall) Error(Cur(), "expected a call in {% call %}");
    ExpectBlockEnd();
    n->body = ParseBody({"endcall"});
    Next();
    ExpectBlockEnd();
    return n;
  }

  // --- expressions ---

  // A bare comma-separated list is a tuple ({{ a, b }}, for-loop iterables).
  NodePtr ParseTuple(bool no_condexpr) {
    const Token& start = Cur();
    std::vector<NodePtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!SkipOp(",")) break;
        comma = true;
        if (Cur().type == T::kVarEnd || Cur().type == T::kBlockEnd || IsOp(")") || IsName("in") ||
            IsName("if"))
          break;
      }
      items.push_back(no_condexpr ? ParseOr() : ParseExpression());
    }
    if (items.size() == 1 && !comma) return items[0];
    auto n = Make(K::kTuple, start);
    n->kids = std::move(items);
    return n;
  }

  NodePtr ParseExpression() {
    DepthGuard guard(this);
    NodePtr expr = ParseOr();
    while (IsName("if")) {
      const Token& at = Next();
      auto n = Make(K::kCondExpr, at);
      n->b = expr;
      n->a = ParseOr();
      if (SkipName("else")) n->c = ParseExpression();
      expr = Fin(n);
    }
    return expr;
  }

  NodePtr Binary(const std::string& op, NodePtr l, NodePtr r, const Token& at) {
    auto n = Make(K::kBinary, at);
    n->name = op;
    n->a = std::move(l);
    n->b = std::move(r);
    return Fin(n);
  }

  NodePtr ParseOr() {
    NodePtr l = ParseAnd();
    while (IsName("or")) {
      const Token& at = Next();
      l = Binary("or", l, ParseAnd(), at);
    }
    return l;
  }
  NodePtr ParseAnd() {
    NodePtr l = ParseNot();
    while (IsName("and")) {
      const Token& at = Next();
      l = Binary("and", l, ParseNot(), at);
    }
    return l;
  }
  NodePtr ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(this);
      auto n = Make(K::kUnary, Next());
      n->name = "not";
      n->a = ParseNot();
      return Fin(n);
    }
    return ParseCompare();
  }
  NodePtr ParseCompare() {
    const Token& start = Cur();
    NodePtr first = ParseMath1();
    auto n = Make(K::kCompare, start);
    while (true) {
      static const std::set<std::string> kOps = {"==", "!=", "<", "<=", ">", ">="};
      if (Cur().type == T::kOp && kOps.count(Cur().value)) {
        n->names.push_back(Next().value);
      } else if (SkipName("in")) {
        n->names.push_back("in");
      } else if (IsName("not") && Peek().type == T::kName && Peek().value == "in") {
        Next();
        Next();
        n->names.push_back("notin");
      } else {
        break;
      }
      n->kids.push_back(ParseMath1());
    }
    if (n->names.empty()) return first;
    n->a = first;
    return Fin(n);
  }
  NodePtr ParseMath1() {
    NodePtr l = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& at = Next();
      l = Binary(at.value, l, ParseConcat(), at);
    }
    return l;
  }
  NodePtr ParseConcat() {
    NodePtr l = ParseMath2();
    while (IsOp("~")) {
      const Token& at = Next();
      l = Binary("~", l, ParseMath2(), at);
    }
    return l;
  }
  NodePtr ParseMath2() {
    NodePtr l = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& at = Next();
      l = Binary(at.value, l, ParsePow(), at);
    }
    return l;
  }
  NodePtr ParsePow() {
    NodePtr l = ParseUnary(true);
    while (IsOp("**")) {
      const Token& at = Next();
      l = Binary("**", l, ParseUnary(true), at);
    }
    return l;
  }
  NodePtr ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    NodePtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& at = Next();
      node = Make(K::kUnary, at);
      node->name = at.value;
      node->a = ParseUnary(false);
      node = Fin(node);
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(node);
    if (with_filter) node = ParseFilterExpr(node);
    return node;
  }

  NodePtr ParsePrimary() {
    const Token& tok = Cur();
    if (tok.type == T::kName) {
      Next();
      const std::string& v = tok.value;
      auto lit = Make(K::kLiteral, tok);
      if (v == "true" || v == "True") {
        lit->literal = Value(true);
      } else if (v == "false" || v == "False") {
        lit->literal = Value(false);
      } else if (v == "none" || v == "None") {
        lit->literal = Value::None();
      } else {
        auto n = Make(K::kName, tok);
        n->name = v;
        return n;
      }
      return lit;
    }
    if (tok.type == T::kString) {
      std::string s;
      while (Cur().type == T::kString) s += Next().value;  // adjacent literals concatenate
      auto lit = Make(K::kLiteral, tok);
      lit->literal = Value(std::move(s));
      return lit;
    }
    if (tok.type == T::kInt || tok.type == T::kFloat) {
      Next();
      auto lit = Make(K::kLiteral, tok);
      try {
        lit->literal = tok.type == T::kInt ? Value(static_cast<int64_t>(std::stoll(tok.value)))
                                           : Value(std::stod(tok.value));
      } catch (const std::exception&) {
        Error(tok, "number literal out of range");
      }
      return lit;
    }
    if (tok.type == T::kOp && tok.value == "(") {
      Next();
      if (SkipOp(")")) {
        auto n = Make(K::kTuple, tok);
        return n;
      }
      NodePtr inner = ParseExpression();
      if (IsOp(",")) {
        auto n = Make(K::kTuple, tok);
        n->kids.push_back(inner);
        while (SkipOp(",")) {
          if (IsOp(")")) break;
          n->kids.push_back(ParseExpression());
        }
        inner = Fin(n);
      }
      ExpectOp(")");
      return inner;
    }
    if (tok.type == T::kOp && tok.value == "[") {
      Next();
      auto n = Make(K::kList, tok);
      while (!IsOp("]")) {
        if (!n->kids.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        n->kids.push_back(ParseExpression());
      }
      ExpectOp("]");
      return Fin(n);
    }
    if (tok.type == T::kOp && tok.value == "{") {
      Next();
      auto n = Make(K::kDict, tok);
      while (!IsOp("}")) {
        if (!n->kids.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        n->kids.push_back(ParseExpression());
        ExpectOp(":");
        n->kids.push_back(ParseExpression());
      }
      ExpectOp("}");
      return Fin(n);
    }
    Error(tok, "unexpected token in expression");
  }

  NodePtr ParsePostfix(NodePtr node) {
    while (true) {
      const Token& at = Cur();
      if (SkipOp(".")) {
        auto n = Make(K::kGetAttr, at);
        n->a = node;
        if (Cur().type == T::kName || Cur().type == T::kInt) {
          n->name = Next().value;
        } else {
          Error(Cur(), "expected an attribute name after '.'");
        }
        if (n->name.find_first_not_of("0123456789") == std::string::npos) {
          // x.0 is a subscript in Jinja.
          n->kind = K::kGetItem;
          n->b = Make(K::kLiteral, at);
          try {
            n->b->literal = Value(static_cast<int64_t>(std::stoll(n->name)));
          } catch (const std::exception&) {
            Error(at, "index out of range");
          }
        }
        node = Fin(n);
      } else if (SkipOp("[")) {
        node = ParseSubscript(node, at);
      } else if (IsOp("(")) {
        node = ParseCall(node);
      } else {
        return node;
      }
    }
  }

  NodePtr ParseSubscript(NodePtr obj, const Token& at) {
    NodePtr parts[3];
    int idx = 0;
    bool slice = false;
    while (!IsOp("]")) {
      if (SkipOp(":")) {
        slice = true;
        if (++idx > 2) Error(Cur(), "too many ':' in slice");
        continue;
      }
      if (parts[idx]) Error(Cur(), "expected ']' or ':'");
      parts[idx] = ParseExpression();
    }
    ExpectOp("]");
    if (!slice) {
      if (!parts[0]) Error(at, "empty subscript");
      auto n = Make(K::kGetItem, at);
      n->a = obj;
      n->b = parts[0];
      return Fin(n);
    }
    auto n = Make(K::kSlice, at);
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return Fin(n);
  }

  void ParseArgs(Node& n) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!n.kids.empty() || !n.kwargs.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      if (Cur().type == T::kName && Peek().type == T::kOp && Peek().value == "=") {
        std::string key = Next().value;
        Next();
        n.kwargs.emplace_back(key, ParseExpression());
      } else {
        if (!n.kwargs.empty()) Error(Cur(), "positional argument after keyword argument");
        n.kids.push_back(ParseExpression());
      }
    }
    ExpectOp(")");
  }

  NodePtr ParseCall(NodePtr callee) {
    auto n = Make(K::kCall, Cur());
    n->a = callee;
    ParseArgs(*n);
    return Fin(n);
  }

  std::string ParseDottedName() {
    std::string name = ExpectName();
    while (IsOp(".") && Peek().type == T::kName) {
      Next();
      name += "." + Next().value;
    }
    return name;
  }

  // `{% filter upper | trim %}` has no leading pipe, `{% set x | upper %}` has one.
  NodePtr ParseFilterChain(NodePtr node) {
    SkipOp("|");
    do {
      auto n = Make(K::kFilter, Cur());
      n->a = node;
      n->name = ParseDottedName();
      if (IsOp("(")) ParseArgs(*n);
      node = Fin(n);
    } while (SkipOp("|"));
    return node;
  }

  NodePtr ParseFilterExpr(NodePtr node) {
    while (true) {
      if (IsOp("|")) {
        Next();
        auto n = Make(K::kFilter, Cur());
        n->a = node;
        n->name = ParseDottedName();
        if (IsOp("(")) ParseArgs(*n);
        node = Fin(n);
      } else if (IsName("is")) {
        auto n = Make(K::kTest, Next());
        n->flag = SkipName("not");
        n->a = node;
        n->name = ParseDottedName();
        if (IsOp("(")) {
          ParseArgs(*n);
        } else if ((Cur().type == T::kName && !IsName("else") && !IsName("or") && !IsName("and") &&
                    !IsName("if") && !IsName("in") && !IsName("is") && !IsName("not")) ||
                   Cur().type == T::kString || Cur().type == T::kInt || Cur().type == T::kFloat ||
                   IsOp("[") || IsOp("{")) {
          n->kids.push_back(ParsePostfix(ParsePrimary()));
        }
        node = Fin(n);
      } else if (IsOp("(")) {
        node = ParseCall(node);
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace tessera::jinja
