// Grouped-query attention without the repeated keys and values. Models with fewer key-value heads
// than query heads (Llama, Mistral, Qwen) repeat each key-value head for its group of query heads
// before attention, as Hugging Face's repeat_kv does:
//
//   k = K.unsqueeze(2).expand(B, kv, rep, S, D).reshape(B, kv * rep, S, D)   (a copy)
//
// which copies the whole cache, keys and values, at every call: at a decode step that is rep times
// the cache written and read again, for a result of one token. When the mask is the same for every
// query of a group (it broadcasts over heads and over the query positions, as a decode step's or a
// padding mask does), the group's query heads are instead treated as that key-value head's queries:
//
//   q [B, kv * rep, T, D] -> [B, kv, rep * T, D]  (a view where q's heads lie evenly)
//   o = scaled_dot_product_attention(q', K, V, mask)          [B, kv, rep * T, Dv]
//   o [B, kv, rep, T, Dv] -> [B, T, kv, rep, Dv] -> [B, T, H, Dv] (one copy of the result) -> [B, H, T, Dv]
//
// the same sums over the same keys for every query, and the result in the [B, T, H, Dv] memory
// the fused kernels give, so the head merge after it stays a view. An attention_blind_rows node
// that alone reads the attention over the same operands (attention fusion's, for a mask that is
// data) is rewritten with it, reading q', K, V and o before the heads' order is restored.
#pragma once

#include "passes/pass.h"

namespace zenith::passes {

class GroupedQueryAttention : public Pass {
 public:
  /// `cuda_only`: rewrite only attention on CUDA tensors. Tests pass false to check the rewrite's
  /// results on the CPU.
  explicit GroupedQueryAttention(bool cuda_only = true) : cuda_only_(cuda_only) {}
  std::string name() const override { return "grouped_query_attention"; }
  /// Counter "ungrouped": scaled_dot_product_attention nodes now reading the key-value heads as
  /// they are. A node is left alone unless its key and value are both repeated by the same factor
  /// from [B, kv, S, D] tensors (unsqueeze(2), expand, reshape; full slices between are allowed),
  /// it has no dropout, no causal flag and no enable_gqa, and its mask (if any) has size 1 along
  /// the heads and the query positions.
  void run(ir::Graph& graph, PassReport& report) override;

 private:
  bool cuda_only_;
};

}  // namespace zenith::passes
