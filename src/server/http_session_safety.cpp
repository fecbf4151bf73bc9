// tessera server: the content-safety half of Session (docs/CONTENT_SAFETY.md): the prompt's rules
// and the external classifier (on the prompt pool, before the chat template), the refusal answer
// that never reaches the engine, and each choice's output through its StreamFilter.
#include "core/error.h"
#include "server/http_session.h"

namespace tessera {
namespace {

AccessLogEntry::SafetyHit LogHit(const char* stage, const char* source, const ContentHit& h) {
  return {stage, source, h.rule, h.category, ContentActionName(h.action)};
}

}  // namespace

// Runs on the prompt pool: g is not shared yet; metrics are thread-safe; the session is not touched.
void Session::CheckInputSafety(Gen& g, bool chat) {
  const ContentSafetySection& cs = srv_->cfg.content_safety;
  ServerMetrics& m = srv_->m;
  const char* param = chat ? "messages" : "prompt";
  std::string block_category;  // the first reason to block, "" = none
  // Token-id prompts are checked as their decoded text; ids cannot be masked, so there a mask
  // rule's match blocks (a client must not get around the rules by sending ids).
  const bool ids = !chat && g.req.prompt_is_ids;
  auto scan = [&](std::string& text) {
    ContentScan s = ScanContent(srv_->safety_in, text);
    for (const ContentHit& h : s.hits) {
      const bool blocks = h.action == ContentAction::kBlock || (ids && h.action == ContentAction::kMask);
      m.content_safety_hits.Inc({"rule", "input", h.category, blocks ? "block" : ContentActionName(h.action)});
      g.input_log.AddSafetyHit(LogHit("input", "rule", h));
      if (blocks && block_category.empty()) block_category = h.category;
    }
    if (!ids) text = std::move(s.text);
  };
  std::string classifier_text;  // the prompt's text (masked), what the classifier reviews
  if (chat) {
    for (auto& msg : g.req.messages) {
      if (!msg.contains("content") || !msg["content"].is_string()) continue;
      std::string t = msg["content"].get<std::string>();
      if (srv_->safety_in) {
        scan(t);
        msg["content"] = t;
      }
      if (!t.empty()) classifier_text += (classifier_text.empty() ? "" : "\n") + t;
    }
  } else if (ids) {
    std::string t = srv_->prompts.Decode(g.req.prompt_ids);
    if (srv_->safety_in) scan(t);
    classifier_text = t;
  } else {
    if (srv_->safety_in) scan(g.req.prompt_text);
    classifier_text = g.req.prompt_text;
  }
  auto refuse = [&](const std::string& why) {
    if (cs.input_block == "refusal") {
      g.refused = true;
      return;
    }
    throw ContentSafetyError(ApiError(400, "invalid_request_error",
                                      fmt::format("the prompt was refused by the content-safety policy ({})", why),
                                      param, "content_filter"),
                             g.input_log.content_safety);
  };
  if (!block_category.empty()) return refuse("category " + block_category);
  if (!srv_->classifier) return;
  ModerationResult r;
  try {
    r = srv_->classifier->Check(classifier_text);
  } catch (const ModerationError& e) {
    m.content_safety_classifier.Inc({"error"});
    g.input_log.AddSafetyHit({"input", "classifier", "error", "", cs.classifier_failure == "open" ? "fail_open" : "fail_closed"});
    if (cs.classifier_failure == "open") return;
    throw ContentSafetyError(ApiError(503, "service_unavailable",
                                      fmt::format("the content-safety classifier is unavailable: {}", e.what()), "",
                                      "content_filter_unavailable"),
                             g.input_log.content_safety);
  }
  m.content_safety_classifier.Inc({r.flagged ? "flagged" : "clean"});
  if (!r.flagged) return;
  if (r.categories.empty()) r.categories.push_back("flagged");  // flagged without a category named
  for (const std::string& c : r.categories) {
    m.content_safety_hits.Inc({"classifier", "input", c, cs.classifier_action});
    g.input_log.AddSafetyHit({"input", "classifier", c, c, cs.classifier_action});
  }
  if (cs.classifier_action == "block") refuse("flagged: " + r.categories.front());
}

// input_block refusal: the reply is refusal_message with finish_reason content_filter, as a stream
// or one response, with no engine request (and so no tokens, no slot, no rate-limit charge beyond
// the request itself).
void Session::RespondRefusal(const std::shared_ptr<Gen>& g) {
  gen_ = g;
  g->first_token_seen = true;
  StartStream(g);
  for (int64_t i = 0; i < g->req.n; ++i) {
    EmitContent(g, i, srv_->cfg.content_safety.refusal_message, nullptr);
    GenChoice& c = g->choices[static_cast<size_t>(i)];
    c.raw_text = srv_->cfg.content_safety.refusal_message;
    RequestStats st;
    st.prompt_tokens = static_cast<int64_t>(g->prompt.size());
    FinishChoice(g, i, FinishReason::kNone, st, "content_filter");
  }
}

void Session::RecordOutputHits(const std::vector<ContentHit>& hits) {
  for (const ContentHit& h : hits) {
    srv_->m.content_safety_hits.Inc({"rule", "output", h.category, ContentActionName(h.action)});
    entry_.AddSafetyHit(LogHit("output", "rule", h));
  }
}

// The choice's text through its output filter (held back, masked, or cut at a block), then the
// tool-call parser or the content. A block ends the choice with finish_reason content_filter; with
// one choice that ends the generation, which cancels the engine's sequence.
void Session::EmitFiltered(const std::shared_ptr<Gen>& g, int64_t index, const std::string& text,
                           const ojson& logprobs, bool final) {
  GenChoice& c = g->choices[static_cast<size_t>(index)];
  std::string out = text;
  if (c.filter) {
    out = c.filter->Push(text);
    if (final) out += c.filter->Finish();
    RecordOutputHits(c.filter->TakeNewHits());
  }
  if (c.parser)
    EmitParsed(g, index, c.parser->Push(out), logprobs);
  else
    EmitContent(g, index, out, logprobs);
  if (c.filter && c.filter->blocked()) {
    RequestStats st;
    st.prompt_tokens = static_cast<int64_t>(g->prompt.size());
    st.completion_tokens = c.completion_tokens;
    FinishChoice(g, index, FinishReason::kNone, st, "content_filter");
  }
}

}  // namespace tessera
