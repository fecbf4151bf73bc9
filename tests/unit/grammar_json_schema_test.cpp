// tessera tests: the JSON Schema front-end: documents each keyword must accept and reject (from the
// JSON and JSON Schema specifications), the documented generation policies (property order,
// bounded whitespace), and unsupported keywords as errors that name the keyword and where it is.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "grammar_test_util.h"

namespace tessera {
namespace {

using testing::Schema;

struct Case {
  const char* schema;
  std::vector<std::string> accept, reject;
};

void RunCases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    auto g = Schema(c.schema);
    for (const auto& s : c.accept) EXPECT_ACCEPTS(g, s);
    for (const auto& s : c.reject) EXPECT_REJECTS(g, s);
  }
}

TEST(GrammarJsonSchema, PrimitiveTypes) {
  RunCases({
      {R"({"type":"string"})",
       {R"("abc")", R"("")", R"("a\"b")", R"("\u00e9")", "\"\xC3\xA9\"", R"("\ud83d\ude00")", R"("\/\\\b\f\n\r\t")"},
       {"abc", R"("abc)", R"("a"b")", R"("\x41")", "\"a\nb\"", "'abc'", R"("\u12")", "1"}},
      {R"({"type":"integer"})", {"0", "-1", "123", "-90"}, {"01", "+1", "1.5", "\"1\"", "--1", ""}},
      {R"({"type":"number"})",
       {"0", "-1.5", "1e10", "2.5E-3", "-0.0", "3.25e+2", "10"},
       {".5", "1.", "+1", "01", "NaN", "Infinity", "0x10", "1e", "1e+", "-"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "null", "tru"}},
      {R"({"type":"null"})", {"null"}, {"Null", "nil", "0"}},
      {R"({"type":["string","null"]})", {"\"x\"", "null"}, {"1", "true"}},
      {R"({"type":["integer","boolean"]})", {"7", "false"}, {"\"7\"", "null"}},
  });
}

TEST(GrammarJsonSchema, Objects) {
  RunCases({
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"],
           "additionalProperties":false})",
       {R"({"a":1})", R"({"a":1,"b":"x"})", R"({ "a" : 1 , "b" : "x" })", "{\n  \"a\": 1,\n  \"b\": \"x\"\n}"},
       {"{}", R"({"b":"x"})", R"({"a":"1"})", R"({"a":1,"c":2})", R"({"a":1,})", R"({"a":1 "b":"x"})", "[]"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"integer"}})",
       {"{}", R"({"a":1})", R"({"a":1,"c":2})", R"({"zz":3,"q":4})", R"({"a\"":5})"},
       {R"({"a":1,"c":"x"})", R"({"c":null})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})",
       {R"({"a":1,"z":[1,{"q":null}],"y":"s"})", R"({"x":{}})"},
       {R"({"a":"1"})"}},
      {R"({"type":"object"})", {"{}", R"({"x":1})", R"({"x":{"y":[true,null,"s",1.5]}})"}, {"[]", "null"}},
      // All optional: any subset, in the order of `properties`.
      {R"({"type":"object","properties":{"a":{"type":"null"},"b":{"type":"null"},"c":{"type":"null"}}})",
       {"{}", R"({"a":null})", R"({"b":null})", R"({"c":null})", R"({"a":null,"c":null})",
        R"({"a":null,"b":null,"c":null})"},
       {R"({"a":1})", R"({,"b":null})"}},
      // Required after optional ones.
      {R"({"properties":{"a":{"type":"null"},"b":{"type":"null"},"c":{"type":"null"}},"required":["b"]})",
       {R"({"b":null})", R"({"a":null,"b":null})", R"({"b":null,"c":null})"},
       {"{}", R"({"a":null})", R"({"c":null})"}},
      // A property whose schema is false can never appear.
      {R"({"properties":{"a":false,"b":{"type":"null"}}})", {R"({"b":null})", "{}"}, {R"({"a":null})"}},
  });
}

// What the schema allows but generation leaves out by design (json_schema.h): other property
// orders, duplicate names, undeclared properties without additionalProperties.
TEST(GrammarJsonSchema, DocumentedGenerationPolicies) {
  auto g = Schema(R"({"properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]})");
  EXPECT_ACCEPTS(g, R"({"a":1,"b":2})");
  EXPECT_REJECTS(g, R"({"b":2,"a":1})");
  EXPECT_REJECTS(g, R"({"a":1,"b":2,"c":3})");
  auto add = Schema(R"({"properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"integer"}})");
  EXPECT_REJECTS(add, R"({"a":1,"a":2})");
  // Whitespace: at most 32 bytes in one gap (room for indentation 8 levels deep), none around the
  // document.
  auto ws = Schema(R"({"type":"array","items":{"type":"integer"}})");
  std::string gap32 = "[", gap33 = "[", indented = "[1,\n";
  gap32.append(32, ' ').append("1]");
  gap33.append(33, ' ').append("1]");
  indented.append(31, ' ').append("2]");
  EXPECT_ACCEPTS(ws, gap32);
  EXPECT_REJECTS(ws, gap33);
  EXPECT_ACCEPTS(ws, indented);
  EXPECT_REJECTS(ws, " [1]");
  EXPECT_REJECTS(ws, "[1] ");
}

TEST(GrammarJsonSchema, Arrays) {
  RunCases({
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
       {"[1]", "[1,2,3]", "[ 1 , 2 ]"},
       {"[]", "[1,2,3,4]", "[\"a\"]", "[1,]", "[,1]", "[1 2]"}},
      {R"({"type":"array"})", {"[]", "[1,\"a\",null,[],{}]"}, {"{}", "[1,]"}},
      {R"({"type":"array","items":{"type":"string"},"maxItems":0})", {"[]"}, {"[\"a\"]"}},
      {R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})",
       {"[]", "[1]", "[1,\"a\"]"},
       {"[\"a\"]", "[1,2]", "[1,\"a\",3]"}},
      {R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"minItems":2})",
       {"[1,\"a\"]"},
       {"[1]", "[]"}},
      {R"({"type":"array","items":{"type":"array","items":{"type":"boolean"}}})",
       {"[[true],[],[false,true]]"},
       {"[[1]]", "[true]"}},
  });
}

TEST(GrammarJsonSchema, EnumConstAndCombinators) {
  RunCases({
      {R"({"enum":["red","green",1,null,{"a":[1]},"a\"b"]})",
       {"\"red\"", "\"green\"", "1", "null", R"({"a":[1]})", R"("a\"b")"},
       {"\"blue\"", "\"Red\"", "2", "\"red", R"({"a":[2]})"}},
      {R"({"type":"string","enum":["a",1]})", {"\"a\""}, {"1"}},
      {R"({"const":"fixed"})", {"\"fixed\""}, {"\"other\""}},
      {R"({"const":{"k":[true,2.5]}})", {R"({"k":[true,2.5]})"}, {R"({"k":[true]})"}},
      {R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer","minimum":10}]})",
       {"\"ab\"", "10", "99"},
       {"\"abc\"", "9", "null"}},
      {R"({"oneOf":[{"type":"string"},{"type":"integer"}]})", {"\"s\"", "3"}, {"true"}},
      {R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"]},
                    {"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},"required":["kind","y"]}]})",
       {R"({"kind":"a","x":1})", R"({"kind":"b","y":"s"})"},
       {R"({"kind":"a","y":"s"})", R"({"kind":"c","x":1})"}},
      {R"({"allOf":[{"type":"integer","maximum":5}],"description":"x"})", {"5"}, {"6"}},
      {R"({"allOf":[{"description":"only words"},{"type":"integer","minimum":2},true]})", {"2"}, {"1"}},
      {R"({"anyOf":[{"type":"string"},{"type":"null"}],"default":null,"title":"T"})", {"null", "\"x\""}, {"0"}},
  });
}

TEST(GrammarJsonSchema, ReferencesAndRecursion) {
  RunCases({
      {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
             "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v","children"],
             "additionalProperties":false}},"$ref":"#/$defs/node"})",
       {R"({"v":1,"children":[]})", R"({"v":1,"children":[{"v":2,"children":[{"v":3,"children":[]}]}]})"},
       {R"({"v":1})", R"({"v":1,"children":[{"v":2}]})"}},
      {R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"]})",
       {R"({"next":null})", R"({"next":{"next":{"next":null}}})"},
       {R"({"next":{}})"}},
      {R"({"definitions":{"id":{"type":"string","pattern":"^[0-9]+$"}},"properties":{"a":{"$ref":"#/definitions/id"}},"required":["a"]})",
       {R"({"a":"123"})"},
       {R"({"a":"12a"})", R"({"a":123})"}},
      {R"({"$defs":{"a/b":{"type":"integer"}},"$ref":"#/$defs/a~1b"})", {"1"}, {"\"1\""}},
  });
}

TEST(GrammarJsonSchema, StringKeywords) {
  RunCases({
      {R"({"type":"string","pattern":"^[a-z]+$"})", {"\"abc\""}, {"\"abc1\"", "\"\"", "\"ABC\""}},
      // Without anchors a pattern may match anywhere (ECMA-262 search).
      {R"({"type":"string","pattern":"ab"})", {"\"ab\"", "\"xaby\"", "\"zzab\""}, {"\"a b\"", "\"\""}},
      // The pattern applies to the decoded value; the grammar emits its JSON escapes.
      {R"({"type":"string","pattern":"^a\"b\\\\$"})", {R"("a\"b\\")"}, {R"("a"b\")", R"("a\"b")"}},
      {R"({"type":"string","pattern":"^\\s$"})", {R"("\n")", R"("\t")", R"(" ")"}, {"\"\n\"", "\"a\""}},
      {R"({"type":"string","minLength":2,"maxLength":3})",
       // Length counts characters (code points), each in its canonical encoding (json_strings.h).
       {"\"ab\"", "\"abc\"", "\"\xC3\xA9\xF0\x9F\x98\x80\"", R"("a\n")", R"("\"\\")"},
       {"\"a\"", "\"abcd\"", "\"\"", R"("\n")", "\"\xF0\x9F\x98\x80\""}},
      {R"({"type":"string","pattern":"^a+$","maxLength":3})", {"\"aaa\"", "\"a\""}, {"\"aaaa\""}},
      {R"({"type":"string","format":"date"})",
       {"\"2024-02-28\"", "\"1999-12-31\"", "\"2023-04-30\""},
       {"\"2024-13-01\"", "\"2024-02-30\"", "\"2023-04-31\"", "\"24-01-01\"", "\"2024-1-1\""}},
      {R"({"type":"string","format":"time"})",
       {"\"23:59:59Z\"", "\"08:30:00.5+02:00\""},
       {"\"24:00:00Z\"", "\"12:60:00Z\""}},
      {R"({"type":"string","format":"date-time"})", {"\"2024-01-15T10:30:00Z\""}, {"\"2024-01-15 10:30:00Z\""}},
      {R"({"type":"string","format":"uuid"})",
       {"\"123e4567-e89b-12d3-a456-426614174000\""},
       {"\"123e4567e89b12d3a456426614174000\""}},
      {R"({"type":"string","format":"email"})", {"\"a.b@example.com\""}, {"\"ab.example.com\"", "\"a@b\""}},
      {R"({"type":"string","format":"ipv4"})",
       {"\"192.168.0.1\"", "\"0.0.0.0\""},
       {"\"256.1.1.1\"", "\"1.2.3\"", "\"01.2.3.4\""}},
  });
}

TEST(GrammarJsonSchema, NumericBounds) {
  RunCases({
      {R"({"type":"integer","minimum":0,"maximum":150})", {"0", "7", "99", "150"}, {"-1", "151", "1000", "-0.5"}},
      {R"({"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":3})", {"-2", "0", "2"}, {"-3", "3"}},
      {R"({"type":"integer","minimum":1.5,"maximum":4.5})", {"2", "4"}, {"1", "5"}},
      {R"({"type":"integer","minimum":-1000})", {"-1000", "-999", "5", "123456789012"}, {"-1001", "-99999"}},
      {R"({"type":"number","minimum":0,"maximum":1})", {"0", "0.5", "1", "1.0", "0.999"}, {"-0.1", "1.01", "2"}},
      {R"({"type":"number","exclusiveMinimum":0})", {"0.001", "5", "123.25"}, {"0", "-1", "0.0"}},
      {R"({"type":"number","minimum":-2.5,"exclusiveMaximum":-1.25})", {"-2.5", "-2", "-1.3"}, {"-1.25", "-2.51", "0"}},
  });
}

TEST(GrammarJsonSchema, AnyJsonObject) {
  auto g = testing::Compile(grammar::GrammarFormat::kJsonObject, "");
  for (const char* s : {"{}", R"({"a":[1,2,{"b":null}],"c":"d"})", R"({ "x" : -1.5e3 })"}) EXPECT_ACCEPTS(g, s);
  for (const char* s : {"[]", "1", "\"s\"", "{", R"({"a":})", R"({a:1})"}) EXPECT_REJECTS(g, s);
}

TEST(GrammarJsonSchema, UnsupportedKeywordsAreNamed) {
  using testing::ExpectError;
  const std::vector<std::tuple<const char*, const char*, const char*>> bad = {
      {R"({"type":"integer","multipleOf":3})", "multipleOf", "(root)"},
      {R"({"type":"object","patternProperties":{"^x":{}}})", "patternProperties", "(root)"},
      {R"({"properties":{"a":{"not":{"type":"null"}}}})", "not", "/properties/a"},
      {R"({"if":{"type":"string"},"then":{"minLength":1}})", "if", "(root)"},
      {R"({"type":"array","uniqueItems":true})", "uniqueItems", "(root)"},
      {R"({"type":"string","nullable":true})", "nullable", "(root)"},
      {R"({"$ref":"https://example.com/s.json"})", "$ref", "local"},
      {R"({"type":"string","format":"hostname"})", "hostname", "format"},
      {R"({"type":"array","contains":{"type":"integer"}})", "contains", "(root)"},
      {R"({"type":"object","unevaluatedProperties":false})", "unevaluatedProperties", "(root)"},
      {R"({"type":"object","propertyNames":{"maxLength":3}})", "propertyNames", "(root)"},
      {R"({"type":"object","minProperties":1})", "minProperties", "(root)"},
      {R"({"allOf":[{"type":"object"},{"required":["a"]}]})", "allOf", "(root)"},
      {R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})", "oneOf", "overlap"},
      {R"({"type":"array","items":[{"type":"integer"}]})", "items", "prefixItems"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"]})", "required property 'b'", "(root)"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "no integer", "(root)"},
      {R"({"type":"string","minLength":3,"maxLength":2})", "maxLength", "(root)"},
      {R"({"$ref":"#/$defs/missing"})", "does not resolve", "missing"},
      {R"({"type":"strin"})", "unknown type", "strin"},
      {R"j({"type":"string","pattern":"(?=x)"})j", "lookaround", "/pattern"},
      {R"({"type":"integer","exclusiveMinimum":true,"minimum":1})", "exclusiveMinimum", "draft 4"},
      {R"({"type":"string","pattern":"^a$","format":"date"})", "no string satisfies", "(root)"},
      {"{not json", "not valid JSON", "json schema"},
  };
  for (const auto& [schema, part1, part2] : bad) {
    SCOPED_TRACE(schema);
    ExpectError([&, s = schema] { Schema(s); }, ErrorKind::kInvalidArgument, {part1, part2});  // clang 14: no captured bindings
  }
}

}  // namespace
}  // namespace tessera
