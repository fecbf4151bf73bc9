// tessera loadgen: the asynchronous HTTP/1.1 client (see http_client.h), written as Asio C++20
// coroutines: connect (or reuse), write the request, read the header, then read the body piece
// by piece with the parser's string body drained into the sink after every read.
#include "loadgen/http_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/version.hpp>

#include <charconv>
#include <optional>

#include "core/error.h"

namespace tessera::loadgen {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

std::string FailureOf(const boost::system::error_code& ec) {
  return ec == beast::error::timeout ? "timeout" : "connection";
}

// Errors that mean a reused keep-alive connection was closed by the server before it took our
// request: worth one retry on a fresh connection.
bool StaleConnection(const boost::system::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == http::error::partial_message;
}

}  // namespace

HttpUrl ParseBaseUrl(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    Fail(ErrorKind::kInvalidArgument, "--base-url {}: https is not supported (use a plain http:// address)", url);
  if (url.rfind(scheme, 0) != 0)
    Fail(ErrorKind::kInvalidArgument, "--base-url {}: expected http://HOST[:PORT][/PATH]", url);
  std::string rest = url.substr(scheme.size());
  HttpUrl u;
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  u.base_path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!u.base_path.empty() && u.base_path.back() == '/') u.base_path.pop_back();
  if (u.base_path.size() >= 3 && u.base_path.compare(u.base_path.size() - 3, 3, "/v1") == 0)
    u.base_path.resize(u.base_path.size() - 3);
  std::string host = authority;
  u.port = 80;
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    size_t close = authority.find(']');
    if (close == std::string::npos) Fail(ErrorKind::kInvalidArgument, "--base-url {}: bad IPv6 address", url);
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') Fail(ErrorKind::kInvalidArgument, "--base-url {}: bad port", url);
      authority = authority.substr(close + 1);
    } else {
      authority.clear();
    }
  } else if (size_t colon = authority.rfind(':'); colon != std::string::npos) {
    host = authority.substr(0, colon);
    authority = authority.substr(colon);
  } else {
    authority.clear();
  }
  if (!authority.empty()) {
    std::string p = authority.substr(1);
    int port = 0;
    auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (p.empty() || ec != std::errc() || ptr != p.data() + p.size() || port < 1 || port > 65535)
      Fail(ErrorKind::kInvalidArgument, "--base-url {}: bad port '{}'", url, p);
    u.port = port;
  }
  if (host.empty()) Fail(ErrorKind::kInvalidArgument, "--base-url {}: no host", url);
  u.host = host;
  return u;
}

tcp::resolver::results_type Resolve(const HttpUrl& url) {
  asio::io_context ioc;
  tcp::resolver r(ioc);
  boost::system::error_code ec;
  auto res = r.resolve(url.host, std::to_string(url.port), ec);
  if (ec) Fail(ErrorKind::kInvalidArgument, "cannot resolve {}:{}: {}", url.host, url.port, ec.message());
  return res;
}

HttpClient::HttpClient(asio::io_context& ioc, tcp::resolver::results_type endpoints, std::string host_header)
    : ioc_(ioc), endpoints_(std::move(endpoints)), host_header_(std::move(host_header)) {}

HttpClient::~HttpClient() {
  for (auto& s : idle_) {
    boost::system::error_code ec;
    s->socket().shutdown(tcp::socket::shutdown_both, ec);
    s->close();
  }
}

asio::awaitable<HttpReply> HttpClient::Send(HttpExchange ex, StatusSink on_status,
                                            BodySink on_body) {
  HttpReply reply;
  http::request<http::string_body> req{ex.method == "GET" ? http::verb::get : http::verb::post, ex.target, 11};
  req.set(http::field::host, host_header_);
  req.set(http::field::user_agent, "tessera-bench");
  if (!ex.api_key.empty()) req.set(http::field::authorization, "Bearer " + ex.api_key);
  if (req.method() == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = ex.body;
  }
  req.keep_alive(true);
  req.prepare_payload();

  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<beast::tcp_stream> s;
    bool reused = false;
    if (!idle_.empty()) {
      s = std::move(idle_.back());
      idle_.pop_back();
      reused = true;
    } else {
      s = std::make_unique<beast::tcp_stream>(ioc_);
      s->expires_at(ex.deadline);
      auto [ec, ep] = co_await s->async_connect(endpoints_, kTuple);
      if (ec) {
        reply.failure = FailureOf(ec);
        reply.message = "connect: " + ec.message();
        co_return reply;
      }
      ++opened_;
      s->socket().set_option(tcp::no_delay(true), ec);
    }
    s->expires_at(ex.deadline);
    auto [wec, wn] = co_await http::async_write(*s, req, kTuple);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    boost::system::error_code hec = wec;
    if (!hec) {
      auto [ec, n] = co_await http::async_read_header(*s, buf, parser, kTuple);
      hec = ec;
    }
    if (hec) {
      if (reused && attempt == 0 && StaleConnection(hec)) continue;
      reply.failure = FailureOf(hec);
      reply.message = (wec ? "write: " : "reading the response: ") + hec.message();
      co_return reply;
    }
    reply.status = parser.get().result_int();
    if (on_status) on_status(reply.status);
    const bool to_sink = on_body && reply.status >= 200 && reply.status <= 299;
    auto drain = [&] {
      auto& b = parser.get().body();
      if (to_sink && !b.empty()) {
        on_body(b, std::chrono::steady_clock::now());
        b.clear();
      }
    };
    drain();  // body bytes that came with the header
    while (!parser.is_done()) {
      auto [ec, n] = co_await http::async_read_some(*s, buf, parser, kTuple);
      drain();
      if (ec) {
        reply.failure = FailureOf(ec);
        reply.message = "reading the body: " + ec.message();
        if (!to_sink) reply.body = std::move(parser.get().body());
        co_return reply;
      }
    }
    if (!to_sink) reply.body = std::move(parser.get().body());
    if (parser.get().keep_alive()) {
      s->expires_never();
      idle_.push_back(std::move(s));
    } else {
      boost::system::error_code ec;
      s->socket().shutdown(tcp::socket::shutdown_both, ec);
    }
    co_return reply;
  }
  co_return reply;  // not reached: the second attempt always returns
}

HttpReply FetchSync(const HttpUrl& url, const HttpExchange& ex) {
  auto endpoints = Resolve(url);
  asio::io_context ioc;
  HttpReply out;
  std::exception_ptr error;
  {
    HttpClient client(ioc, endpoints, url.host + ":" + std::to_string(url.port));
    asio::co_spawn(ioc, client.Send(ex, nullptr, nullptr), [&](std::exception_ptr e, HttpReply r) {
      error = e;
      out = std::move(r);
    });
    ioc.run();
  }
  if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace tessera::loadgen
