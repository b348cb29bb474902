#include "core/attention_blind_rows.h"

#include <ATen/ATen.h>
#include <torch/library.h>

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

TORCH_LIBRARY_FRAGMENT(zenith, m) {
  m.def("attention_blind_rows(Tensor attention, Tensor query, Tensor key, Tensor value, Tensor attn_mask, float scale) "
        "-> Tensor");
}

TORCH_LIBRARY_IMPL(zenith, CompositeExplicitAutograd, m) { m.impl("attention_blind_rows", &attention_blind_rows); }

TORCH_LIBRARY_IMPL(zenith, Meta, m) { m.impl("attention_blind_rows", &attention_blind_rows_meta); }

}  // namespace zenith::ir
