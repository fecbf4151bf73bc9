// tessera loadgen: the benchmark driver (see runner.h). A dispatcher coroutine on the first event
// loop walks the requests in order, waits for each one's arrival time and for a free slot, and
// spawns the request on loop i % threads; a finished request reports on a thread-safe channel,
// which is how the dispatcher learns that a slot is free.
#include "loadgen/runner.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <optional>
#include <thread>

namespace tessera::loadgen {

namespace asio = boost::asio;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
using Channel = asio::experimental::concurrent_channel<void(boost::system::error_code)>;
using Guard = asio::executor_work_guard<asio::io_context::executor_type>;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// State shared by the dispatcher and the requests; each request writes only its own result.
struct Shared {
  const std::vector<BenchRequest>* requests = nullptr;
  const RunOptions* opt = nullptr;
  std::vector<RequestResult>* results = nullptr;
  Channel* done = nullptr;
  std::string target;
  Clock::time_point start;
};

asio::awaitable<void> RunOne(Shared* sh, HttpClient* client, size_t i) {
  const BenchRequest& r = (*sh->requests)[i];
  const Clock::time_point t = Clock::now();
  RequestResult res;
  try {
    ResponseTracker tracker(sh->opt->endpoint, sh->opt->stream, t, r.prompt_len);
    HttpExchange ex;
    ex.target = sh->target;
    ex.body = r.body;
    ex.api_key = sh->opt->api_key;
    ex.deadline = t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sh->opt->timeout_s));
    HttpReply reply = co_await client->Send(
        std::move(ex), [&tracker](int status) { tracker.OnStatus(status); },
        [&tracker](std::string_view bytes, Clock::time_point at) { tracker.OnBody(bytes, at); });
    res = tracker.Finish(Clock::now(), reply.failure, reply.message, reply.body);
  } catch (const std::exception& e) {
    res = RequestResult{};
    res.failure = "internal";
    res.error = e.what();
  }
  res.send_s = Seconds(t - sh->start);
  (*sh->results)[i] = std::move(res);
  sh->done->try_send(boost::system::error_code{});
}

asio::awaitable<void> Dispatch(Shared* sh, std::vector<asio::io_context*> loops, std::vector<HttpClient*> clients,
                               RunOutput* out, std::vector<std::optional<Guard>>* guards) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const size_t n = sh->requests->size();
  const int64_t limit = sh->opt->concurrency;
  int64_t in_flight = 0;
  auto reap = [&] {
    while (sh->done->try_receive([&](boost::system::error_code) { --in_flight; })) {
    }
  };
  sh->start = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    double at = i < sh->opt->arrivals.size() ? sh->opt->arrivals[i] : 0.0;
    auto due = sh->start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at));
    if (due > Clock::now()) {
      timer.expires_at(due);
      co_await timer.async_wait(kTuple);
    }
    reap();
    while (limit > 0 && in_flight >= limit) {
      co_await sh->done->async_receive(kTuple);
      --in_flight;
    }
    ++in_flight;
    out->max_in_flight = std::max(out->max_in_flight, in_flight);
    size_t k = i % loops.size();
    asio::co_spawn(*loops[k], RunOne(sh, clients[k], i), asio::detached);
  }
  while (in_flight > 0) {
    co_await sh->done->async_receive(kTuple);
    --in_flight;
  }
  out->duration_s = Seconds(Clock::now() - sh->start);
  for (auto& g : *guards) g.reset();
}

}  // namespace

RunOutput RunRequests(const std::vector<BenchRequest>& requests, const RunOptions& opt) {
  RunOutput out;
  out.results.resize(requests.size());
  if (requests.empty()) return out;
  auto endpoints = Resolve(opt.url);
  const int threads = std::max(1, opt.threads);
  std::vector<std::unique_ptr<asio::io_context>> loops;
  std::vector<std::unique_ptr<HttpClient>> clients;
  std::vector<std::optional<Guard>> guards(threads);
  for (int i = 0; i < threads; ++i) {
    loops.push_back(std::make_unique<asio::io_context>(1));
    clients.push_back(std::make_unique<HttpClient>(*loops.back(), endpoints,
                                                   opt.url.host + ":" + std::to_string(opt.url.port)));
    if (i > 0) guards[i].emplace(loops.back()->get_executor());
  }
  Channel done(loops[0]->get_executor(), requests.size());
  Shared sh;
  sh.requests = &requests;
  sh.opt = &opt;
  sh.results = &out.results;
  sh.done = &done;
  sh.target = opt.url.base_path + EndpointPath(opt.endpoint);

  std::vector<asio::io_context*> loop_ptrs;
  std::vector<HttpClient*> client_ptrs;
  for (int i = 0; i < threads; ++i) {
    loop_ptrs.push_back(loops[i].get());
    client_ptrs.push_back(clients[i].get());
  }
  std::exception_ptr error;
  asio::co_spawn(*loops[0], Dispatch(&sh, loop_ptrs, client_ptrs, &out, &guards),
                 [&error](std::exception_ptr e) { error = e; });
  std::vector<std::thread> workers;
  for (int i = 1; i < threads; ++i) workers.emplace_back([l = loops[i].get()] { l->run(); });
  loops[0]->run();
  for (auto& g : guards) g.reset();  // in case the dispatcher failed before releasing them
  for (auto& w : workers) w.join();
  for (auto& c : clients) out.connections_opened += c->connections_opened();
  if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace tessera::loadgen
