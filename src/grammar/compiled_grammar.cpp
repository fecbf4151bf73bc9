// tessera grammar: token-class precomputation and the shared mask cache (see compiled_grammar.h).
#include "grammar/compiled_grammar.h"

#include <chrono>

namespace tessera::grammar {

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Pda> pda, std::shared_ptr<const TokenVocabulary> vocab,
                                 int32_t max_parses, size_t mask_cache_bytes)
    : pda_(std::move(pda)), vocab_(std::move(vocab)), max_parses_(max_parses), cache_budget_(mask_cache_bytes) {
  const int32_t n = pda_->num_states();
  classes_.reset(new std::atomic<const StateTokenClasses*>[static_cast<size_t>(n)]);
  for (int32_t s = 0; s < n; ++s) classes_[static_cast<size_t>(s)].store(nullptr);
  stats_.num_states = n;

  // States a parse position can be rooted at: the start, every byte transition's target, every
  // call's return state (pda_stack.h: roots are kernels and what ending a rule returns to).
  std::vector<bool> rootable(static_cast<size_t>(n), false);
  rootable[static_cast<size_t>(pda_->root_start())] = true;
  for (int32_t s = 0; s < n; ++s) {
    const PdaState& st = pda_->state(s);
    for (int b = 0; b < 256; ++b)
      if (st.bytes.Has(b)) rootable[static_cast<size_t>(pda_->Next(s, static_cast<uint8_t>(b)))] = true;
    for (const PdaCall* c = pda_->calls_begin(s); c != pda_->calls_end(s); ++c)
      rootable[static_cast<size_t>(c->ret)] = true;
  }
  auto t0 = std::chrono::steady_clock::now();
  TrieWalker walker(*pda_, *vocab_, max_parses_);
  StackArena arena(1 << 20);
  for (int32_t s = 0; s < n; ++s) {
    if (!rootable[static_cast<size_t>(s)]) continue;
    auto* c = new StateTokenClasses(walker.Classify(s, &arena));
    stats_.classes_bytes += c->MemoryBytes();
    classes_[static_cast<size_t>(s)].store(c);
  }
  stats_.precompute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

CompiledGrammar::~CompiledGrammar() {
  for (int32_t s = 0; s < pda_->num_states(); ++s) delete classes_[static_cast<size_t>(s)].load();
}

const StateTokenClasses& CompiledGrammar::Classes(int32_t state) const {
  const StateTokenClasses* c = classes_[static_cast<size_t>(state)].load(std::memory_order_acquire);
  if (c) return *c;
  std::lock_guard<std::mutex> lock(classes_mu_);
  c = classes_[static_cast<size_t>(state)].load(std::memory_order_acquire);
  if (c) return *c;
  TrieWalker walker(*pda_, *vocab_, max_parses_);
  StackArena arena(1 << 20);
  auto* fresh = new StateTokenClasses(walker.Classify(state, &arena));
  classes_[static_cast<size_t>(state)].store(fresh, std::memory_order_release);
  return *fresh;
}

size_t CompiledGrammar::KeyHash::operator()(const std::vector<int32_t>& k) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ k.size();
  for (int32_t x : k) {
    h ^= static_cast<uint32_t>(x);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  return static_cast<size_t>(h);
}

bool CompiledGrammar::LookupMask(const std::vector<int32_t>& key, uint32_t* words) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return false;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  const auto& w = it->second->words;
  std::copy(w.begin(), w.end(), words);
  return true;
}

void CompiledGrammar::StoreMask(const std::vector<int32_t>& key, const uint32_t* words) const {
  const size_t n = BitmaskWords(vocab_->vocab_size());
  const size_t entry_bytes = n * 4 + key.size() * 8 + 64;
  if (entry_bytes > cache_budget_) return;
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (index_.count(key)) return;
  while (cache_bytes_ + entry_bytes > cache_budget_ && !lru_.empty()) {
    const CacheEntry& old = lru_.back();
    cache_bytes_ -= old.words.size() * 4 + old.key.size() * 8 + 64;
    index_.erase(old.key);
    lru_.pop_back();
  }
  lru_.push_front(CacheEntry{key, std::vector<uint32_t>(words, words + n)});
  index_.emplace(key, lru_.begin());
  cache_bytes_ += entry_bytes;
}

CompiledGrammar::CacheStats CompiledGrammar::cache_stats() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return CacheStats{hits_, misses_, index_.size(), cache_bytes_};
}

}  // namespace tessera::grammar
