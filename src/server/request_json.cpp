// tessera server: a request body as JSON: nesting bounded before the parser runs (deep bodies
// would overflow a thread's stack later), and every parser failure a 400 that says where and why,
// a number beyond a double's range included (named by its field path).
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "server/openai_protocol.h"

namespace tessera {

bool JsonNestingExceeds(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

namespace {

// Where the parser is, as a request field path ("messages[1].content"): a number that overflows a
// double ("temperature": 1e999) fails inside the parser, before any field check could name it.
class JsonPathTracker {
 public:
  bool OnEvent(ojson::parse_event_t event, const ojson& parsed) {
    using E = ojson::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        frames_.push_back({event == E::array_start, 0, ""});
        break;
      case E::key:
        if (!frames_.empty()) frames_.back().key = parsed.get<std::string>();
        break;
      case E::object_end:
      case E::array_end:
        if (!frames_.empty()) frames_.pop_back();
        ElementDone();
        break;
      case E::value:
        ElementDone();
        break;
    }
    return true;
  }
  std::string Path() const {
    std::string path;
    for (const Frame& f : frames_) {
      if (f.array)
        path += fmt::format("[{}]", f.index);
      else
        path += (path.empty() ? "" : ".") + f.key;
    }
    return path;
  }

 private:
  struct Frame {
    bool array;
    size_t index;  // arrays: elements completed so far, so the one being parsed
    std::string key;  // objects: the key whose value is being parsed
  };
  void ElementDone() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  std::vector<Frame> frames_;
};

}  // namespace

ojson ParseRequestJson(std::string_view text) {
  if (JsonNestingExceeds(text, kMaxJsonDepth))
    throw InvalidRequest(fmt::format("the request body is nested deeper than {} levels", kMaxJsonDepth));
  JsonPathTracker where;
  try {
    return ojson::parse(text, [&where](int, ojson::parse_event_t event, ojson& parsed) {
      return where.OnEvent(event, parsed);
    });
  } catch (const ojson::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 7: <why>".
    std::string why = e.what();
    if (size_t p = why.find("] "); p != std::string::npos) why.erase(0, p + 2);
    throw InvalidRequest("the request body is not valid JSON: " + why);
  } catch (const ojson::out_of_range& e) {
    // 406: a number beyond a double's range ("number overflow parsing '1e999'").
    std::string why = e.what();
    if (size_t p = why.find("] "); p != std::string::npos) why.erase(0, p + 2);
    std::string field = where.Path();
    throw InvalidRequest(fmt::format("{}: {} (not representable as a finite number)",
                                     field.empty() ? "the request body" : field, why),
                         field);
  }
}

}  // namespace tessera
