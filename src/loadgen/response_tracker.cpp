// tessera loadgen: reading one OpenAI response into a RequestResult (see response_tracker.h).
#include "loadgen/response_tracker.h"

#include <nlohmann/json.hpp>

namespace tessera::loadgen {

namespace {

using json = nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool NonEmptyString(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

// Whether a chunk's first choice carries output: text (completions), or content, reasoning or a
// tool call delta (chat). Role-only and finish-only chunks do not.
bool CarriesOutput(const json& chunk, Endpoint endpoint, bool stream) {
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return false;
  const json& c = (*choices)[0];
  if (!c.is_object()) return false;
  if (endpoint == Endpoint::kCompletions) return NonEmptyString(c, "text");
  auto d = c.find(stream ? "delta" : "message");
  if (d == c.end() || !d->is_object()) return false;
  if (NonEmptyString(*d, "content") || NonEmptyString(*d, "reasoning_content")) return true;
  auto tc = d->find("tool_calls");
  return tc != d->end() && tc->is_array() && !tc->empty();
}

}  // namespace

std::string ErrorMessageFromBody(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object()) {
    auto e = j.find("error");
    if (e != j.end() && e->is_object() && e->contains("message") && (*e)["message"].is_string())
      return (*e)["message"].get<std::string>();
    if (e != j.end() && e->is_string()) return e->get<std::string>();
  }
  std::string s = body.substr(0, 200);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

ResponseTracker::ResponseTracker(Endpoint endpoint, bool stream, Clock::time_point start, int64_t prompt_len)
    : endpoint_(endpoint), stream_(stream), start_(start), now_(start), last_output_(start) {
  result_.prompt_tokens = prompt_len;
}

void ResponseTracker::Fail(const std::string& kind, const std::string& message) {
  if (!result_.failure.empty()) return;  // keep the first reason
  result_.failure = kind;
  result_.error = message;
}

void ResponseTracker::OnBody(std::string_view bytes, Clock::time_point at) {
  now_ = at;
  if (!stream_) {
    body_.append(bytes);
    return;
  }
  sse_.Feed(bytes, [this](const SseEvent& ev) { OnEvent(ev); });
}

void ResponseTracker::OnEvent(const SseEvent& ev) {
  if (!ev.event.empty() && ev.event != "message") return;  // named extension events
  if (ev.data == "[DONE]") {
    done_ = true;
    return;
  }
  OnChunkJson(ev.data, false);
}

void ResponseTracker::OnChunkJson(const std::string& data, bool final_body) {
  json j = json::parse(data, nullptr, false);
  if (!j.is_object()) {
    Fail("protocol", "response is not a JSON object: " + data.substr(0, 120));
    return;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    Fail("stream", ErrorMessageFromBody(data));
    return;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (u->contains("prompt_tokens") && (*u)["prompt_tokens"].is_number_integer())
      result_.prompt_tokens = (*u)["prompt_tokens"].get<int64_t>();
    if (u->contains("completion_tokens") && (*u)["completion_tokens"].is_number_integer()) {
      result_.output_tokens = (*u)["completion_tokens"].get<int64_t>();
      result_.usage_seen = true;
    }
  }
  if (!CarriesOutput(j, endpoint_, stream_ && !final_body)) return;
  if (result_.output_chunks == 0) {
    result_.ttft_s = Seconds(now_ - start_);
    result_.ttft_measured = true;
  } else result_.itl_s.push_back(Seconds(now_ - last_output_));
  last_output_ = now_;
  ++result_.output_chunks;
}

RequestResult ResponseTracker::Finish(Clock::time_point at, const std::string& transport_failure,
                                      const std::string& message, const std::string& error_body) {
  now_ = at;
  result_.e2e_s = Seconds(at - start_);
  if (!transport_failure.empty()) {
    // A transport failure outranks what the partial stream said, except a server error message.
    if (result_.failure.empty()) Fail(transport_failure, message);
  } else if (result_.http_status < 200 || result_.http_status > 299) {
    result_.failure.clear();
    Fail(std::to_string(result_.http_status), ErrorMessageFromBody(error_body));
  } else if (!stream_) {
    OnChunkJson(body_, true);
    result_.ttft_s = result_.e2e_s;  // no stream: the first token arrives with the last
    result_.ttft_measured = true;
  } else if (!done_) {
    Fail("stream", sse_.HasPartial() ? "stream ended inside an event" : "stream ended without [DONE]");
  }
  if (result_.failure.empty() && !result_.usage_seen) result_.output_tokens = result_.output_chunks;
  result_.success = result_.failure.empty();
  return result_;
}

}  // namespace tessera::loadgen
