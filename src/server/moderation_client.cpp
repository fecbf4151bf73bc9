// tessera server: the /v1/moderations client of the content-safety stage (Boost.Beast, one private
// io_context per call so a slow classifier holds only the calling prompt thread). See the header.
#include "server/moderation_client.h"

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

HttpUrl ParseHttpUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, 8) == "https://")
    Fail(ErrorKind::kInvalidArgument, "'{}': https is not supported (use http://, or a local TLS proxy)", url);
  if (url.substr(0, kScheme.size()) != kScheme)
    Fail(ErrorKind::kInvalidArgument, "'{}' is not an http:// URL", url);
  std::string_view rest = url.substr(kScheme.size());
  HttpUrl u;
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  u.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (authority.find('@') != std::string_view::npos)
    Fail(ErrorKind::kInvalidArgument, "'{}': credentials in the URL are not supported (use the api key)", url);
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) Fail(ErrorKind::kInvalidArgument, "'{}': unterminated '['", url);
    u.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty() && authority.front() != ':')
      Fail(ErrorKind::kInvalidArgument, "'{}': text after ']' must be ':port'", url);
    u.port = authority.empty() ? "80" : std::string(authority.substr(1));
  } else {
    const size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    u.port = colon == std::string_view::npos ? "80" : std::string(authority.substr(colon + 1));
  }
  if (u.host.empty()) Fail(ErrorKind::kInvalidArgument, "'{}' has no host", url);
  bool digits = !u.port.empty() && u.port.size() <= 5;
  for (char c : u.port) digits = digits && c >= '0' && c <= '9';
  if (!digits || std::stoi(u.port) < 1 || std::stoi(u.port) > 65535)
    Fail(ErrorKind::kInvalidArgument, "'{}': bad port '{}'", url, u.port);
  return u;
}

ModerationClient::ModerationClient(const std::string& url, std::string model, std::string api_key, double timeout_s)
    : url_(ParseHttpUrl(url)), model_(std::move(model)), api_key_(std::move(api_key)), timeout_s_(timeout_s) {}

ModerationResult ModerationClient::Check(const std::string& text) const {
  nlohmann::json body = {{"input", text}};
  if (!model_.empty()) body["model"] = model_;
  http::request<http::string_body> req{http::verb::post, url_.target, 11};
  req.set(http::field::host, url_.host + ":" + url_.port);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::connection, "close");
  if (!api_key_.empty()) req.set(http::field::authorization, "Bearer " + api_key_);
  // Invalid UTF-8 in a prompt was refused at parsing; replace rather than throw all the same.
  req.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  req.prepare_payload();

  const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s_));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1 << 20);
  beast::error_code failure;
  const char* stage = "resolve";
  bool done = false;
  // The stream's deadline covers connect, write and read; run_until bounds the resolve too.
  resolver.async_resolve(url_.host, url_.port, [&](beast::error_code ec, tcp::resolver::results_type results) {
    if (ec) return void(failure = ec);
    stage = "connect";
    stream.expires_at(deadline);
    stream.async_connect(results, [&](beast::error_code ec2, const tcp::endpoint&) {
      if (ec2) return void(failure = ec2);
      stage = "send";
      http::async_write(stream, req, [&](beast::error_code ec3, size_t) {
        if (ec3) return void(failure = ec3);
        stage = "answer";
        http::async_read(stream, buffer, parser, [&](beast::error_code ec4, size_t) {
          failure = ec4;
          done = !ec4;
        });
      });
    });
  });
  ioc.run_until(deadline);
  if (!done && !failure) failure = beast::error::timeout;
  if (failure) {
    if (failure == beast::error::timeout)
      throw ModerationError(fmt::format("classifier timed out after {} s ({})", timeout_s_, stage));
    throw ModerationError(fmt::format("classifier {} failed: {}", stage, failure.message()));
  }
  const auto& res = parser.get();
  if (res.result_int() != 200)
    throw ModerationError(fmt::format("classifier answered HTTP {}", res.result_int()));
  nlohmann::json j = nlohmann::json::parse(res.body(), nullptr, false);
  if (!j.is_object() || !j.contains("results") || !j["results"].is_array() || j["results"].empty())
    throw ModerationError("classifier answer has no 'results' list");
  ModerationResult out;
  for (const auto& r : j["results"]) {
    if (!r.is_object() || !r.contains("flagged") || !r["flagged"].is_boolean())
      throw ModerationError("classifier result has no boolean 'flagged'");
    out.flagged = out.flagged || r["flagged"].get<bool>();
    if (r.contains("categories") && r["categories"].is_object())
      for (const auto& [name, v] : r["categories"].items())
        if (v.is_boolean() && v.get<bool>() &&
            std::find(out.categories.begin(), out.categories.end(), name) == out.categories.end())
          out.categories.push_back(name);
  }
  return out;
}

}  // namespace tessera
