// tessera tests: a tiny in-process HTTP/1.1 server for the load generator's tests. Each
// connection gets a thread; for each request a script returns what to send: a status, a plain
// body, or a list of raw chunked-encoding pieces with a delay before each (so TTFT / ITL have
// known lower bounds and SSE events can be split across chunks). Keep-alive is honoured unless
// the reply asks to close.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::testing_loadgen {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

struct FakePiece {
  int delay_ms = 0;   // sleep before sending it
  std::string bytes;  // one HTTP chunk (sent with chunked framing)
};

struct FakeReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;                // when `pieces` is empty
  std::vector<FakePiece> pieces;   // a chunked (streaming) body
  int delay_ms = 0;                // before the status line
  bool close = false;              // say "Connection: close" and close after the reply
  bool drop_after = false;         // close silently after the reply (keep-alive promised)
  bool cut_stream = false;         // close mid-body, without the terminating chunk
};

struct FakeRequest {
  std::string method, target, body, authorization;
};

class FakeServer {
 public:
  using Script = std::function<FakeReply(const FakeRequest&, int index)>;

  explicit FakeServer(Script script) : script_(std::move(script)), acceptor_(ioc_) {
    tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~FakeServer() {
    stopping_ = true;
    boost::system::error_code ec;
    {  // wake the blocking accept() with a connection of our own
      asio::io_context io;
      tcp::socket poke(io);
      poke.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)), ec);
    }
    if (accept_thread_.joinable()) accept_thread_.join();
    acceptor_.close(ec);
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& s : sockets_) s->shutdown(tcp::socket::shutdown_both, ec);  // wakes blocked reads
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

  int port() const { return port_; }
  int connections() const { return connections_.load(); }
  int requests() const { return requests_.load(); }
  std::vector<FakeRequest> seen() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }

 private:
  void AcceptLoop() {
    while (!stopping_) {
      auto sock = std::make_shared<tcp::socket>(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(*sock, ec);
      if (ec || stopping_) return;
      ++connections_;
      std::lock_guard<std::mutex> l(mu_);
      sockets_.push_back(sock);
      threads_.emplace_back([this, sock] { Serve(*sock); });
    }
  }

  static void Send(tcp::socket& s, const std::string& bytes, boost::system::error_code& ec) {
    asio::write(s, asio::buffer(bytes), ec);
  }

  void Serve(tcp::socket& s) {
    boost::beast::flat_buffer buf;
    boost::system::error_code ec;
    while (!stopping_) {
      http::request<http::string_body> req;
      http::read(s, buf, req, ec);
      if (ec) return;
      FakeRequest fr{std::string(req.method_string()), std::string(req.target()), req.body(),
                     std::string(req[http::field::authorization])};
      int index = requests_++;
      {
        std::lock_guard<std::mutex> l(mu_);
        seen_.push_back(fr);
      }
      FakeReply r = script_(fr, index);
      if (r.delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(r.delay_ms));
      std::string head = "HTTP/1.1 " + std::to_string(r.status) + " X\r\nContent-Type: " + r.content_type + "\r\n";
      head += r.close ? "Connection: close\r\n" : "Connection: keep-alive\r\n";
      if (r.pieces.empty()) {
        head += "Content-Length: " + std::to_string(r.body.size()) + "\r\n\r\n" + r.body;
        Send(s, head, ec);
      } else {
        Send(s, head + "Transfer-Encoding: chunked\r\n\r\n", ec);
        for (const auto& p : r.pieces) {
          if (ec) break;
          if (p.delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(p.delay_ms));
          char size[32];
          std::snprintf(size, sizeof size, "%zx\r\n", p.bytes.size());
          Send(s, size + p.bytes + "\r\n", ec);
        }
        if (!ec && !r.cut_stream) Send(s, "0\r\n\r\n", ec);
      }
      if (ec || r.close || r.drop_after || r.cut_stream) {
        s.shutdown(tcp::socket::shutdown_both, ec);
        return;
      }
    }
  }

  Script script_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0}, requests_{0};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  std::vector<std::thread> threads_;
  std::vector<FakeRequest> seen_;
};

// SSE framing of one data payload.
inline std::string Sse(const std::string& data) { return "data: " + data + "\n\n"; }

}  // namespace tessera::testing_loadgen
