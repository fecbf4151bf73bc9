// tessera server: incremental tagged tool-call parsing, and the <tool_call> bodies of Qwen JSON and
// Qwen3-Coder XML. JSON in
// the model's output nested deeper than kMaxJsonDepth is never parsed: nlohmann parses iteratively,
// but dumping or copying the value recurses once a level, and 100k '[' would overflow the stack.
#include "server/tool_parser.h"

#include <cctype>
#include <random>

#include "server/openai_protocol.h"

namespace tessera {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view TrimView(std::string_view s) {
  while (!s.empty() && IsWs(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsWs(s.back())) s.remove_suffix(1);
  return s;
}

std::string Dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// The model's text as JSON; discarded when malformed or nested too deep to handle (see the top).
ojson ParseModelJson(std::string_view text) {
  if (JsonNestingExceeds(text, kMaxJsonDepth)) return ojson(ojson::value_t::discarded);
  return ojson::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::optional<ToolCall> ParseJsonBody(std::string_view body) {
  ojson j = ParseModelJson(body);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_object()) {
    call.arguments = Dump(*args);
  } else if (args->is_string()) {
    // Some models put the arguments object in a string; accept it when it is one.
    ojson inner = ParseModelJson(args->get<std::string>());
    if (inner.is_discarded() || !inner.is_object()) return std::nullopt;
    call.arguments = Dump(inner);
  } else {
    return std::nullopt;
  }
  return call;
}

// The JSON-schema type(s) of parameter `param` of function `fn`, lower-cased; empty when unknown.
std::vector<std::string> ParamTypes(const ojson& tools, const std::string& fn, const std::string& param) {
  std::vector<std::string> out;
  if (!tools.is_array()) return out;
  for (const auto& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const auto& f = t["function"];
    if (!f.contains("name") || f["name"] != fn) continue;
    if (!f.contains("parameters") || !f["parameters"].is_object()) return out;
    const auto& params = f["parameters"];
    if (!params.contains("properties") || !params["properties"].is_object()) return out;
    const auto& props = params["properties"];
    if (!props.contains(param) || !props[param].is_object()) return out;
    const auto& p = props[param];
    if (p.contains("type")) {
      if (p["type"].is_string()) out.push_back(p["type"].get<std::string>());
      if (p["type"].is_array())
        for (const auto& x : p["type"])
          if (x.is_string()) out.push_back(x.get<std::string>());
    } else if (p.contains("enum") || p.contains("anyOf") || p.contains("oneOf")) {
      out.push_back("any");
    }
    return out;
  }
  return out;
}

ojson ConvertParam(const std::string& value, const std::vector<std::string>& types) {
  bool is_string = false, has_non_string = false;
  for (const auto& t : types) {
    if (t == "string")
      is_string = true;
    else if (t != "null")
      has_non_string = true;
  }
  if (is_string && !has_non_string) return value;
  ojson parsed = ParseModelJson(value);
  if (parsed.is_discarded()) return value;
  if (has_non_string) return parsed;  // the schema wants a number / bool / object ...
  // No schema information: keep JSON-looking scalars and structures, else the plain string.
  if (parsed.is_number() || parsed.is_boolean() || parsed.is_object() || parsed.is_array()) return parsed;
  return value;
}

std::optional<ToolCall> ParseXmlBody(std::string_view body, const ojson& tools) {
  constexpr std::string_view kFn = "<function=", kFnEnd = "</function>";
  constexpr std::string_view kParam = "<parameter=", kParamEnd = "</parameter>";
  if (body.substr(0, kFn.size()) != kFn) return std::nullopt;
  size_t gt = body.find('>', kFn.size());
  if (gt == std::string_view::npos) return std::nullopt;
  ToolCall call;
  call.name = std::string(TrimView(body.substr(kFn.size(), gt - kFn.size())));
  if (call.name.empty() || call.name.find_first_of("<\n") != std::string::npos) return std::nullopt;
  ojson args = ojson::object();
  size_t pos = gt + 1;
  for (;;) {
    while (pos < body.size() && IsWs(body[pos])) ++pos;
    if (body.substr(pos, kFnEnd.size()) == kFnEnd) {
      pos += kFnEnd.size();
      break;
    }
    if (body.substr(pos, kParam.size()) != kParam) return std::nullopt;
    size_t pgt = body.find('>', pos + kParam.size());
    if (pgt == std::string_view::npos) return std::nullopt;
    std::string pname(TrimView(body.substr(pos + kParam.size(), pgt - pos - kParam.size())));
    if (pname.empty() || pname.find_first_of("<\n") != std::string::npos) return std::nullopt;
    size_t vstart = pgt + 1;
    // The value ends at </parameter>, or (tolerating a missing close tag) at the next parameter
    // or the end of the function, whichever comes first.
    size_t end_param = body.find(kParamEnd, vstart);
    size_t next_param = body.find(kParam, vstart);
    size_t end_fn = body.find(kFnEnd, vstart);
    size_t vend = std::min({end_param, next_param, end_fn});
    if (vend == std::string_view::npos) return std::nullopt;
    std::string value(body.substr(vstart, vend - vstart));
    if (!value.empty() && value.front() == '\n') value.erase(0, 1);
    if (!value.empty() && value.back() == '\n') value.pop_back();
    args[pname] = ConvertParam(value, ParamTypes(tools, call.name, pname));
    pos = vend == end_param ? vend + kParamEnd.size() : vend;
  }
  if (!TrimView(body.substr(pos)).empty()) return std::nullopt;
  call.arguments = Dump(args);
  return call;
}

}  // namespace

std::string NewToolCallId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % 62];
  return id;
}

std::optional<ToolCall> ParseToolCallBody(std::string_view body, const ojson& tools) {
  std::string_view t = TrimView(body);
  if (t.substr(0, 10) == "<function=") return ParseXmlBody(t, tools);
  return ParseJsonBody(t);
}

TaggedToolCallParser::TaggedToolCallParser(std::string open, std::string close, std::function<std::string()> make_id)
    : open_(std::move(open)), close_(std::move(close)), make_id_(std::move(make_id)) {}

ToolCallParser::ToolCallParser(ojson tools, std::function<std::string()> make_id)
    : TaggedToolCallParser(std::string(kOpen), std::string(kClose), std::move(make_id)), tools_(std::move(tools)) {}

std::optional<ToolCall> ToolCallParser::ParseBody(std::string_view body) const {
  return ParseToolCallBody(body, tools_);
}

void TaggedToolCallParser::EmitText(std::string_view s, std::vector<ToolStreamEvent>& out) {
  if (after_call_) {
    while (!s.empty() && IsWs(s.front())) s.remove_prefix(1);
    if (s.empty()) return;
    after_call_ = false;
  }
  size_t last = s.size();
  while (last > 0 && IsWs(s[last - 1])) --last;
  if (last == 0) {
    held_ws_.append(s);
    return;
  }
  std::string text = std::move(held_ws_);
  held_ws_.assign(s.substr(last));
  text.append(s.substr(0, last));
  if (!out.empty() && !out.back().is_call) {
    out.back().content += text;
  } else {
    ToolStreamEvent ev;
    ev.content = std::move(text);
    out.push_back(std::move(ev));
  }
}

void TaggedToolCallParser::Process(std::vector<ToolStreamEvent>& out) {
  for (;;) {
    if (!in_call_) {
      size_t p = pending_.find(open_);
      if (p != std::string::npos) {
        EmitText(std::string_view(pending_).substr(0, p), out);
        pending_.erase(0, p + open_.size());
        in_call_ = true;
        continue;
      }
      // Hold back the longest tail that could still become the opening tag.
      size_t keep = 0;
      for (size_t k = std::min(pending_.size(), open_.size() - 1); k > 0; --k) {
        if (std::string_view(pending_).substr(pending_.size() - k) == std::string_view(open_).substr(0, k)) {
          keep = k;
          break;
        }
      }
      EmitText(std::string_view(pending_).substr(0, pending_.size() - keep), out);
      pending_.erase(0, pending_.size() - keep);
      return;
    }
    size_t q = pending_.find(close_);
    if (q == std::string::npos) return;
    std::string body = pending_.substr(0, q);
    pending_.erase(0, q + close_.size());
    in_call_ = false;
    if (auto call = ParseBody(body)) {
      call->id = make_id_();
      held_ws_.clear();
      after_call_ = true;
      ToolStreamEvent ev;
      ev.is_call = true;
      ev.index = num_calls_++;
      ev.call = std::move(*call);
      out.push_back(std::move(ev));
    } else {
      EmitText(open_ + body + close_, out);
    }
  }
}

std::vector<ToolStreamEvent> TaggedToolCallParser::Push(std::string_view text) {
  std::vector<ToolStreamEvent> out;
  pending_.append(text);
  Process(out);
  return out;
}

std::vector<ToolStreamEvent> TaggedToolCallParser::Finish() {
  std::vector<ToolStreamEvent> out;
  if (in_call_) {  // an unterminated call (max_tokens, say) is plain text
    in_call_ = false;
    EmitText(open_ + pending_, out);
  } else {
    EmitText(pending_, out);
  }
  pending_.clear();
  if (num_calls_ == 0 && !held_ws_.empty()) {
    ToolStreamEvent ev;
    ev.content = std::move(held_ws_);
    if (!out.empty() && !out.back().is_call)
      out.back().content += ev.content;
    else
      out.push_back(std::move(ev));
  }
  held_ws_.clear();
  return out;
}

ToolParseResult ParseToolCalls(std::string_view text, const ojson& tools,
                               std::function<std::string()> make_id) {
  ToolCallParser parser(tools, std::move(make_id));
  return RunToolParser(parser, text);
}

ToolParseResult RunToolParser(ToolStreamParser& parser, std::string_view text) {
  ToolParseResult r;
  auto take = [&](std::vector<ToolStreamEvent> evs) {
    for (auto& e : evs) {
      if (e.is_call)
        r.calls.push_back(std::move(e.call));
      else
        r.content += e.content;
    }
  };
  take(parser.Push(text));
  take(parser.Finish());
  return r;
}

}  // namespace tessera
