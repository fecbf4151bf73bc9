// tessera server: lookup of the embedded chat-page files (see static_assets.h).
#include "server/static_assets.h"

#include <algorithm>

namespace tessera {

std::string_view ContentTypeFor(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".json")) return "application/json";
  return "application/octet-stream";
}

const std::vector<StaticAsset>& StaticAssets() {
  static const std::vector<StaticAsset> assets = [] {
    std::vector<StaticAsset> v;
    for (size_t i = 0; i < static_assets_detail::kNumEmbeddedFiles; ++i) {
      const auto& f = static_assets_detail::kEmbeddedFiles[i];
      std::string_view name(f.name);
      std::string etag = "\"";
      etag.append(f.sha256_prefix).push_back('"');
      v.push_back({name, ContentTypeFor(name), std::string_view(reinterpret_cast<const char*>(f.data), f.size),
                   std::move(etag)});
    }
    return v;
  }();
  return assets;
}

const StaticAsset* FindStaticAsset(std::string_view path) {
  std::string_view name;
  constexpr std::string_view kPrefix = "/static/";
  if (path == "/" || path == "/index.html")
    name = "index.html";
  else if (path.substr(0, kPrefix.size()) == kPrefix)
    name = path.substr(kPrefix.size());
  else
    return nullptr;
  if (name.empty() || name.find("..") != std::string_view::npos ||
      name.find_first_of("/\\") != std::string_view::npos)
    return nullptr;
  const auto& all = StaticAssets();
  auto it = std::find_if(all.begin(), all.end(), [&](const StaticAsset& a) { return a.name == name; });
  return it == all.end() ? nullptr : &*it;
}

bool EtagMatches(std::string_view if_none_match, std::string_view etag) {
  size_t pos = 0;
  while (pos < if_none_match.size()) {
    size_t comma = if_none_match.find(',', pos);
    std::string_view item = if_none_match.substr(pos, comma == std::string_view::npos ? std::string_view::npos
                                                                                       : comma - pos);
    pos = comma == std::string_view::npos ? if_none_match.size() : comma + 1;
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.substr(0, 2) == "W/") item.remove_prefix(2);  // weak comparison, RFC 9110 13.1.2
    if (item == "*" || item == etag) return true;
  }
  return false;
}

}  // namespace tessera
