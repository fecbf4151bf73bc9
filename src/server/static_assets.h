// tessera server: the chat page's files (web/), built into the binary by cmake/embed_assets.cmake,
// looked up by URL path: "/" is index.html, "/static/<name>" any other file. Each carries its
// Content-Type and a strong ETag (a prefix of the file's SHA-256) for conditional GETs.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct StaticAsset {
  std::string_view name;          // file name in web/ ("index.html")
  std::string_view content_type;  // "text/html; charset=utf-8", ... (a literal: .data() is NUL-terminated)
  std::string_view body;
  std::string etag;  // quoted, e.g. "\"3f2a...\""
};

// The asset served at `path` (no query string), or nullptr. Only "/" and "/static/<name>" with a
// plain file name match; anything with "..", "/" or a backslash in the name does not.
const StaticAsset* FindStaticAsset(std::string_view path);
// Every embedded file (for tests and listings).
const std::vector<StaticAsset>& StaticAssets();
// Content-Type from a file name's extension (application/octet-stream when unknown).
std::string_view ContentTypeFor(std::string_view name);
// True when an If-None-Match header value names `etag` (a list, weak "W/" forms, or "*").
bool EtagMatches(std::string_view if_none_match, std::string_view etag);

namespace static_assets_detail {
// The generated table (build dir, web_assets.cpp), terminated by a null entry.
struct EmbeddedFile {
  const char* name;
  const unsigned char* data;
  size_t size;
  const char* sha256_prefix;
};
extern const EmbeddedFile kEmbeddedFiles[];
extern const size_t kNumEmbeddedFiles;
}  // namespace static_assets_detail

}  // namespace tessera
