// tessera jinja: tokens and the syntax tree the parser builds and the interpreter walks.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/template/value.h"

namespace tessera::jinja {

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type;
  std::string value;  // text, name, decoded string literal, number spelling, operator
  int line = 1, col = 1;
};

// Splits a template into text and tag tokens, applying whitespace control (trim_blocks,
// lstrip_blocks, `-`/`+` modifiers), comments and {% raw %}. Throws on unterminated tags.
std::vector<Token> Tokenize(const std::string& source);

struct Node;
using NodePtr = std::shared_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    // expressions
    kLiteral, kName, kList, kTuple, kDict, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest,
    kUnary, kBinary, kCompare, kCondExpr,
    // statements
    kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kBreak, kContinue,
    kGeneration,
  };
  Kind kind;
  int line = 0, col = 0;
  std::string name;                 // variable, attribute, operator, filter/test/macro name, text
  Value literal;                    // kLiteral
  NodePtr a, b, c, d;               // operands (see parser.cpp for each kind's layout)
  std::vector<NodePtr> kids;        // list items, call args, dict k/v pairs, compare operands
  std::vector<std::pair<std::string, NodePtr>> kwargs;  // call/filter/test keyword args
  std::vector<std::string> names;   // compare ops, for-loop targets, macro parameters
  Body body, else_body;
  bool flag = false;                // kTest: negated; kFor: recursive
  int depth = 1;                    // expression tree height, bounded by the parser
};

// Parses tokens into a statement list. Syntax errors throw tessera::Error naming line:column.
Body Parse(const std::vector<Token>& tokens);

}  // namespace tessera::jinja
