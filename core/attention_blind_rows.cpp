#include "core/attention_blind_rows.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include "core/node_arguments.h"

namespace zenith::ir {
namespace {

// The definition every backend without a kernel of its own runs: the attention as models write
// it, in the operands' dtype, and its blind rows taken.
at::Tensor attention_blind_rows(const at::Tensor& attention, const at::Tensor& query, const at::Tensor& key,
                                const at::Tensor& value, const at::Tensor& attn_mask, double scale) {
  const auto scores = at::matmul(query, key.transpose(-2, -1)).mul(scale).add(attn_mask);
  const auto written = at::matmul(at::softmax(scores, -1), value);
  const auto blind = attn_mask.amax(-1, /*keepdim=*/true).lt(kBlindRowMaskLimit);
  auto result = at::empty_like(attention);
  result.copy_(at::where(blind, written, attention));
  return result;
}

// On the meta device (where has no meta kernel): attention's sizes, dtype and layout, as the
// definition above gives them.
at::Tensor attention_blind_rows_meta(const at::Tensor& attention, const at::Tensor&, const at::Tensor&,
                                     const at::Tensor&, const at::Tensor&, double) {
  return at::empty_like(attention);
}

}  // namespace

std::optional<std::size_t> blind_rows_after(const Graph& graph, std::size_t index,
                                            const std::vector<std::vector<int>>& consumers) {
  const auto& attention = graph.nodes[index];
  if (attention.outputs.size() != 1) return std::nullopt;
  const auto& readers = consumers[static_cast<std::size_t>(attention.outputs.front())];
  if (readers.size() != 1) return std::nullopt;
  const auto& blind = graph.nodes[static_cast<std::size_t>(readers.front())];
  if (blind.op != kAttentionBlindRowsOp || tensor_arg(blind, "attention") != attention.outputs.front()) {
    return std::nullopt;
  }
  for (const char* role : {"query", "key", "value", "attn_mask"}) {
    if (tensor_arg(blind, role) != tensor_arg(attention, role)) return std::nullopt;
  }
  return static_cast<std::size_t>(readers.front());
}

TORCH_LIBRARY_FRAGMENT(zenith, m) {
  m.def("attention_blind_rows(Tensor attention, Tensor query, Tensor key, Tensor value, Tensor attn_mask, float scale) "
        "-> Tensor");
}

TORCH_LIBRARY_IMPL(zenith, CompositeExplicitAutograd, m) { m.impl("attention_blind_rows", &attention_blind_rows); }

TORCH_LIBRARY_IMPL(zenith, Meta, m) { m.impl("attention_blind_rows", &attention_blind_rows_meta); }

}  // namespace zenith::ir
