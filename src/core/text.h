// tessera core: small text helpers shared by the parsers of configuration and request text.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace tessera {

// s without leading and trailing white space (std::isspace: space, \t, \n, \v, \f, \r).
inline std::string TrimSpace(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace tessera
