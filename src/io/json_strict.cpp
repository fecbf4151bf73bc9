// tessera io (internal): strict JSON parsing for file headers (see json_strict.h).
#include "io/json_strict.h"

#include <set>
#include <vector>

#include "core/error.h"

namespace tessera::io_internal {

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) { ++i; continue; }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else return i;  // continuation byte in lead position, 0xC0/0xC1 overlong leads, > 0xF4
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      uint8_t cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

nlohmann::json ParseJsonStrict(std::string_view text, const std::string& what) {
  size_t bad = FindInvalidUtf8(text);
  if (bad != std::string_view::npos)
    Fail(ErrorKind::kCorrupt, "{}: not valid UTF-8 (byte {})", what, bad);
  // One key set per open object; a repeated key is reported after parsing (the callback must
  // not throw through nlohmann's parser state, so it records the first duplicate instead).
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) {
      open.emplace_back();
    } else if (ev == E::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (ev == E::key && !open.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::parse_error& e) {
    Fail(ErrorKind::kCorrupt, "{}: invalid JSON at byte {}: {}", what, e.byte > 0 ? e.byte - 1 : 0, JsonErrorText(e));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond a double's range (a shape of 1e400) is out_of_range, not parse_error: it
    // escaped as a bare nlohmann message naming no file (fuzz/safetensors_fuzz.cpp).
    Fail(ErrorKind::kCorrupt, "{}: invalid JSON: {}", what, JsonErrorText(e));
  }
  if (!duplicate.empty()) Fail(ErrorKind::kCorrupt, "{}: duplicate key '{}'", what, duplicate);
  return j;
}

std::string JsonErrorText(const std::exception& e) {
  std::string_view m = e.what();
  if (m.rfind("[json.exception.", 0) == 0) {
    const size_t end = m.find("] ");
    if (end != std::string_view::npos) m.remove_prefix(end + 2);
  }
  return std::string(m);
}

}  // namespace tessera::io_internal
