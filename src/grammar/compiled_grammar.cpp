// tessera grammar: token-class precomputation and the shared mask cache (see compiled_grammar.h).
#include "grammar/compiled_grammar.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <unordered_map>

namespace tessera::grammar {
namespace {

constexpr int64_t kRefineBudget = int64_t{1} << 28;  // signature entries over all rounds

struct VecHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// For each state, the first state of its call-free rule that no token can tell apart from it: the
// two agree, for every byte string of at most `depth` bytes, on whether it can be read and whether
// the rule may end after it (Moore's partition refinement, stopped after `depth` rounds). Their
// token classes are then equal, so one walk serves both. This is what keeps a long counted
// repetition (maxLength 1000 is a chain of ~1000 states per character shape) cheap: positions
// farther than a token's length from the end of the count all behave alike.
std::vector<int32_t> Representatives(const Pda& pda, int32_t depth) {
  const int32_t n = pda.num_states();
  std::vector<int32_t> rep(static_cast<size_t>(n));
  for (int32_t s = 0; s < n; ++s) rep[static_cast<size_t>(s)] = s;
  for (int32_t r = 0; r < pda.num_rules(); ++r) {
    const PdaRule& rule = pda.rule(r);
    if (rule.start < 0 || !rule.call_free || rule.num_states < 2) continue;
    const int32_t a = rule.start, m = rule.num_states;
    // The byte classes this rule tells apart: global classes with different transition columns.
    std::vector<uint8_t> reps;
    {
      std::unordered_map<std::vector<int32_t>, int, VecHash> columns;
      for (int b = 0; b < 256; ++b) {
        std::vector<int32_t> col(static_cast<size_t>(m));
        for (int32_t i = 0; i < m; ++i) col[static_cast<size_t>(i)] = pda.Next(a + i, static_cast<uint8_t>(b));
        if (columns.emplace(std::move(col), b).second) reps.push_back(static_cast<uint8_t>(b));
      }
    }
    // Refinement may only stop when stable (stopping early would merge states a token can tell
    // apart), so a rule too big to refine `depth` times is left unshared: slower, still exact.
    if (static_cast<int64_t>(m) * static_cast<int64_t>(reps.size() + 1) * depth > kRefineBudget) continue;
    // Round 0: final or not (numbered densely, so counting blocks tells when refinement stops).
    std::vector<int32_t> block(static_cast<size_t>(m)), next(static_cast<size_t>(m));
    const bool first_final = pda.state(a).final;
    int32_t num_blocks = 1;
    for (int32_t i = 0; i < m; ++i) {
      block[static_cast<size_t>(i)] = pda.state(a + i).final == first_final ? 0 : 1;
      num_blocks = std::max(num_blocks, block[static_cast<size_t>(i)] + 1);
    }
    std::vector<int32_t> sig;
    for (int32_t round = 0; round < depth; ++round) {
      std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
      for (int32_t i = 0; i < m; ++i) {
        sig.assign(1, block[static_cast<size_t>(i)]);
        for (uint8_t b : reps) {
          int32_t t = pda.Next(a + i, b);
          sig.push_back(t < 0 ? -1 : block[static_cast<size_t>(t - a)]);
        }
        next[static_cast<size_t>(i)] = ids.emplace(sig, static_cast<int32_t>(ids.size())).first->second;
      }
      block.swap(next);
      if (static_cast<int32_t>(ids.size()) == num_blocks) break;  // stable: refining further changes nothing
      num_blocks = static_cast<int32_t>(ids.size());
    }
    std::vector<int32_t> first(static_cast<size_t>(num_blocks), -1);
    for (int32_t i = 0; i < m; ++i) {
      int32_t& f = first[static_cast<size_t>(block[static_cast<size_t>(i)])];
      if (f < 0) f = a + i;
      rep[static_cast<size_t>(a + i)] = f;
    }
  }
  return rep;
}

}  // namespace

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Pda> pda, std::shared_ptr<const TokenVocabulary> vocab,
                                 int32_t max_parses, size_t mask_cache_bytes, int32_t threads)
    : pda_(std::move(pda)), vocab_(std::move(vocab)), max_parses_(max_parses), cache_budget_(mask_cache_bytes) {
  const int32_t n = pda_->num_states();
  classes_.reset(new std::atomic<const StateTokenClasses*>[static_cast<size_t>(n)]);
  owned_.resize(static_cast<size_t>(n));
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
  {
    PdaStepper stepper(*pda_, max_parses_);
    StackArena arena(1 << 20);
    std::vector<Config> scan;
    for (int32_t s = 0; s < n; ++s) {
      if (!pda_->state(s).has_calls) continue;
      arena.Clear();
      Config k{s, StackArena::kBottom};
      stepper.Closure(&arena, &k, 1, &scan, nullptr);
      max_closure_push_ = std::max(max_closure_push_, arena.max_depth_seen());
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> rep = Representatives(*pda_, vocab_->max_token_bytes());
  std::vector<int32_t> todo;  // representatives whose classes are needed
  std::vector<bool> queued(static_cast<size_t>(n), false);
  for (int32_t s = 0; s < n; ++s) {
    const int32_t r = rep[static_cast<size_t>(s)];
    if (rootable[static_cast<size_t>(s)] && !queued[static_cast<size_t>(r)]) {
      queued[static_cast<size_t>(r)] = true;
      todo.push_back(r);
    }
  }
  // Walks are independent: threads take them in turn, each with its own walker and scratch stack.
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(std::max(1, threads)));
  auto work = [&](size_t t) {
    try {
      TrieWalker walker(*pda_, *vocab_, max_parses_);
      StackArena arena(1 << 20);
      for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
        const int32_t r = todo[i];
        owned_[static_cast<size_t>(r)] = std::make_unique<StateTokenClasses>(walker.Classify(r, &arena));
      }
    } catch (...) {
      errors[t] = std::current_exception();
      next.store(todo.size());
    }
  };
  const size_t num_threads =
      std::min<size_t>(static_cast<size_t>(std::max(1, threads)), std::max<size_t>(1, todo.size() / 16));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < num_threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int32_t r : todo) stats_.classes_bytes += owned_[static_cast<size_t>(r)]->MemoryBytes();
  stats_.num_walks = static_cast<int32_t>(todo.size());
  for (int32_t s = 0; s < n; ++s)
    if (rootable[static_cast<size_t>(s)])
      classes_[static_cast<size_t>(s)].store(owned_[static_cast<size_t>(rep[static_cast<size_t>(s)])].get());
  stats_.precompute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

CompiledGrammar::~CompiledGrammar() = default;

const StateTokenClasses& CompiledGrammar::Classes(int32_t state) const {
  const StateTokenClasses* c = classes_[static_cast<size_t>(state)].load(std::memory_order_acquire);
  if (c) return *c;
  std::lock_guard<std::mutex> lock(classes_mu_);
  c = classes_[static_cast<size_t>(state)].load(std::memory_order_acquire);
  if (c) return *c;
  // A state no root uses was not precomputed (it may still own the classes of equivalent states).
  std::unique_ptr<StateTokenClasses>& own = owned_[static_cast<size_t>(state)];
  if (!own) {
    TrieWalker walker(*pda_, *vocab_, max_parses_);
    StackArena arena(1 << 20);
    own = std::make_unique<StateTokenClasses>(walker.Classify(state, &arena));
  }
  classes_[static_cast<size_t>(state)].store(own.get(), std::memory_order_release);
  return *own;
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
