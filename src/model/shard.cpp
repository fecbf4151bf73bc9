// tessera model: the split of a model over tensor-parallel ranks (see shard.h).
#include "model/shard.h"

#include <algorithm>

#include "core/error.h"

namespace tessera {

namespace {

// Near-even contiguous split of `total` over n (the first total % n parts one larger).
IndexRange EvenPart(int64_t total, int n, int r) {
  const int64_t base = total / n, extra = total % n;
  return {r * base + std::min<int64_t>(r, extra), base + (r < extra ? 1 : 0)};
}

// Heads that must split evenly: `what` names the config key in the error.
IndexRange Heads(int64_t total, int n, int r, const char* what) {
  if (total % n != 0)
    Fail(ErrorKind::kInvalidArgument, "tensor_parallel_size {} does not divide {} ({})", n, what, total);
  return {r * (total / n), total / n};
}

// Heads shared by groups of the split heads (KV heads of GQA, GDN key heads): split when they
// divide by n, else the one head this rank's group reads when n is a multiple of them.
IndexRange GroupHeads(int64_t total, int n, int r, const char* what) {
  if (total % n == 0) return {r * (total / n), total / n};
  if (n % total == 0) return {r / (n / total), 1};
  Fail(ErrorKind::kInvalidArgument,
       "tensor_parallel_size {} neither divides nor is a multiple of {} ({})", n, what, total);
}

}  // namespace

std::vector<RankShard> PlanShards(const ModelConfig& c, int n) {
  if (n < 1) Fail(ErrorKind::kInvalidArgument, "tensor_parallel_size must be at least 1 (got {})", n);
  std::vector<RankShard> out;
  const bool attn = c.NumLayersOf(LayerKind::kFullAttention) > 0;
  const bool gdn = c.NumLayersOf(LayerKind::kLinearAttention) > 0;
  if (c.vocab_size < n)
    Fail(ErrorKind::kInvalidArgument, "tensor_parallel_size {} is larger than the vocabulary ({})", n, c.vocab_size);
  for (int r = 0; r < n; ++r) {
    RankShard s;
    s.rank = r;
    s.size = n;
    if (attn) {
      s.q_heads = Heads(c.num_heads, n, r, "num_attention_heads");
      s.kv_heads = GroupHeads(c.num_kv_heads, n, r, "num_key_value_heads");
    }
    if (gdn) {
      s.value_heads = Heads(c.linear_num_value_heads, n, r, "linear_num_value_heads");
      s.key_heads = GroupHeads(c.linear_num_key_heads, n, r, "linear_num_key_heads");
    }
    s.dense_inter = EvenPart(c.intermediate_size, n, r);
    s.shared_inter = EvenPart(c.shared_expert_intermediate_size, n, r);
    s.vocab = EvenPart(c.vocab_size, n, r);
    s.vocab_stride = (c.vocab_size + n - 1) / n;
    out.push_back(s);
  }
  return out;
}

ModelConfig LocalConfig(const ModelConfig& c, const RankShard& s) {
  if (!s.sharded()) return c;
  ModelConfig l = c;
  l.num_heads = s.q_heads.count;
  l.num_kv_heads = s.kv_heads.count;
  l.linear_num_key_heads = s.key_heads.count;
  l.linear_num_value_heads = s.value_heads.count;
  l.intermediate_size = s.dense_inter.count;
  l.shared_expert_intermediate_size = s.shared_inter.count;
  return l;
}

}  // namespace tessera
