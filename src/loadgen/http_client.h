// tessera loadgen: an asynchronous HTTP/1.1 client over Boost.Beast for the load generator.
// One HttpClient belongs to one io_context run by one thread (no locks); it keeps idle
// keep-alive connections and reuses them, so many concurrent streams need a few threads and as
// many sockets as requests in flight. A response body is handed to a sink as it is read
// (chunked or close-delimited alike), with the time it arrived.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::loadgen {

struct HttpUrl {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string base_path;  // "" or "/prefix" (no trailing slash); endpoint paths are appended
};

// "http://HOST[:PORT][/PATH]" (a trailing "/v1" is dropped: the endpoints add it). Throws
// Error(kInvalidArgument) for anything else (https is not supported).
HttpUrl ParseBaseUrl(const std::string& url);

struct HttpExchange {
  std::string method = "POST";  // POST or GET
  std::string target;           // path + query
  std::string body;             // JSON (POST)
  std::string api_key;          // sent as "Authorization: Bearer KEY" when not empty
  std::chrono::steady_clock::time_point deadline;
};

struct HttpReply {
  int status = 0;           // 0: no HTTP status line was read
  std::string failure;      // "" (read whole), "connection" or "timeout"
  std::string message;      // transport error text
  std::string body;         // the body when it was not given to the sink (non-2xx, or no sink)
};

// Receives the bytes of a 2xx response body as they arrive.
using BodySink = std::function<void(std::string_view bytes, std::chrono::steady_clock::time_point at)>;
using StatusSink = std::function<void(int status)>;

class HttpClient {
 public:
  HttpClient(boost::asio::io_context& ioc, boost::asio::ip::tcp::resolver::results_type endpoints,
             std::string host_header);
  ~HttpClient();

  // Never throws for network or HTTP errors: they come back in the reply. An idle connection
  // the server closed meanwhile is retried once on a fresh one.
  // Arguments are taken by value: the coroutine runs after the caller's temporaries are gone.
  boost::asio::awaitable<HttpReply> Send(HttpExchange ex, StatusSink on_status,
                                         BodySink on_body);

  size_t idle_connections() const { return idle_.size(); }
  int64_t connections_opened() const { return opened_; }

 private:
  boost::asio::io_context& ioc_;
  boost::asio::ip::tcp::resolver::results_type endpoints_;
  std::string host_header_;
  std::vector<std::unique_ptr<boost::beast::tcp_stream>> idle_;
  int64_t opened_ = 0;
};

// Resolves host:port now (blocking); Error(kInvalidArgument) when it cannot.
boost::asio::ip::tcp::resolver::results_type Resolve(const HttpUrl& url);

// One request on a private io_context, blocking (for GET /v1/models, /health).
HttpReply FetchSync(const HttpUrl& url, const HttpExchange& ex);

}  // namespace tessera::loadgen
