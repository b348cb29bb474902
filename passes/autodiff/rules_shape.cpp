// Derivative rules of views, reshapes, permutes, slicing and concatenation.
#include <limits>
#include <numeric>

#include <ATen/ATen.h>
#include <c10/core/WrapDimMinimal.h>

#include "passes/autodiff/derivative_rules.h"

namespace zenith::autodiff {
namespace {

// Any op that only rearranges the same elements into other sizes.
void reshape_back(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad().reshape(c.input("self").sizes())); }

void transpose(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", c.grad().transpose(c.integer("dim0"), c.integer("dim1")));
}

void permute(const RuleCall& c, GradientSink& s) {
  auto dims = c.integers("dims");
  const auto rank = static_cast<std::int64_t>(dims.size());
  std::vector<std::int64_t> inverse(dims.size());
  for (std::int64_t k = 0; k < rank; ++k) inverse[c10::maybe_wrap_dim(dims[k], rank)] = k;
  s.add(c, "self", c.grad().permute(inverse));
}

// expand: the sink sums the broadcast gradient back to the input's sizes.
void expand(const RuleCall& c, GradientSink& s) { s.add(c, "self", c.grad()); }

void narrow(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  const auto dim = c10::maybe_wrap_dim(c.integer("dim"), self.dim());
  auto start = c.integer("start");
  if (start < 0) start += self.size(dim);
  s.add(c, "self", at::slice_backward(c.grad(), self.sizes(), dim, start, start + c.integer("length"), 1));
}

void slice(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  const auto start = c.is_none("start") ? 0 : c.integer("start");
  const auto end = c.is_none("end") ? std::numeric_limits<std::int64_t>::max() : c.integer("end");
  s.add(c, "self", at::slice_backward(c.grad(), self.sizes(), c.integer("dim"), start, end, c.integer("step")));
}

void select(const RuleCall& c, GradientSink& s) {
  s.add(c, "self", at::select_backward(c.grad(), c.input("self").sizes(), c.integer("dim"), c.integer("index")));
}

void cat(const RuleCall& c, GradientSink& s) {
  const auto tensors = c.inputs("tensors");
  const auto dim = c10::maybe_wrap_dim(c.integer("dim"), c.output().dim());
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    // cat skips legacy empty 1-D tensors whatever the others' rank.
    if (tensors[k].dim() == 1 && tensors[k].numel() == 0 && c.output().dim() != 1) continue;
    const auto size = tensors[k].size(dim);
    s.add_element(c, "tensors", k, c.grad().narrow(dim, offset, size));
    offset += size;
  }
}

void stack(const RuleCall& c, GradientSink& s) {
  const auto tensors = c.inputs("tensors");
  const auto dim = c10::maybe_wrap_dim(c.integer("dim"), c.output().dim());
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    s.add_element(c, "tensors", k, c.grad().select(dim, static_cast<std::int64_t>(k)));
  }
}

}  // namespace

void register_shape_rules(std::function<void(const std::string&, DerivativeRule)> add) {
  for (const char* op : {"aten::view", "aten::reshape", "aten::_unsafe_view", "aten::flatten.using_ints",
                         "aten::unflatten.int", "aten::squeeze", "aten::squeeze.dim", "aten::squeeze.dims",
                         "aten::unsqueeze", "aten::view_as", "aten::reshape_as"}) {
    add(op, reshape_back);
  }
  add("aten::transpose.int", transpose);
  add("aten::permute", permute);
  add("aten::expand", expand);
  add("aten::expand_as", expand);
  add("aten::narrow", narrow);
  add("aten::slice.Tensor", slice);
  add("aten::select.int", select);
  add("aten::cat", cat);
  add("aten::stack", stack);
}

}  // namespace zenith::autodiff
