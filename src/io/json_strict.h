// tessera io (internal): JSON parsing for machine-written headers (safetensors, index.json) that
// also rejects duplicate object keys, which nlohmann would silently resolve to the last one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tessera::io_internal {

// Parses `text`; throws Error(kCorrupt) "<what>: ..." on invalid UTF-8 (naming the byte offset),
// a JSON syntax error (naming the byte offset) or a key repeated within one object (naming it).
nlohmann::json ParseJsonStrict(std::string_view text, const std::string& what);

// Offset of the first byte that is not part of well-formed UTF-8 (no overlongs, no surrogates,
// nothing above U+10FFFF), or npos when all of `text` is valid.
size_t FindInvalidUtf8(std::string_view text);

// An nlohmann exception's message without its "[json.exception.parse_error.101] " tag: the tag is
// the library's internal id, which means nothing to whoever reads the error about their file.
std::string JsonErrorText(const std::exception& e);

}  // namespace tessera::io_internal
