// Derivative rules of views, reshapes, permutes, slicing and concatenation.
#include <limits>
#include <numeric>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/PadNd.h>
#include <c10/core/WrapDimMinimal.h>

#include "passes/autodiff/derivative_rules.h"
#include "zenith/error.h"

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

// chunk, split and unbind: the pieces' gradients side by side again, zeros for a piece that
// received none.
std::vector<at::Tensor> piece_gradients(const RuleCall& c) {
  std::vector<at::Tensor> pieces;
  for (std::size_t k = 0; k < c.node().outputs.size(); ++k) {
    pieces.push_back(c.grad(k).defined() ? c.grad(k) : at::zeros_like(c.output(k)));
  }
  return pieces;
}

std::int64_t split_dim(const RuleCall& c) { return c10::maybe_wrap_dim(c.integer("dim"), c.input("self").dim()); }

void split_back(const RuleCall& c, GradientSink& s) { s.add(c, "self", at::cat(piece_gradients(c), split_dim(c))); }

void unbind(const RuleCall& c, GradientSink& s) { s.add(c, "self", at::stack(piece_gradients(c), split_dim(c))); }

// numpy_T (`x.T`) reverses every dimension; so does its gradient's permutation.
void reverse_dims(const RuleCall& c, GradientSink& s) {
  std::vector<std::int64_t> reversed(static_cast<std::size_t>(c.grad().dim()));
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  s.add(c, "self", c.grad().permute(reversed));
}

// repeat tiles the input: each repeat dimension is split into (copies, size) and the copies summed.
void repeat(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  const auto repeats = c.integers("repeats");
  const auto lead = static_cast<std::int64_t>(repeats.size()) - self.dim();
  std::vector<std::int64_t> split_sizes, copies;
  for (std::int64_t k = 0; k < static_cast<std::int64_t>(repeats.size()); ++k) {
    copies.push_back(static_cast<std::int64_t>(split_sizes.size()));
    split_sizes.push_back(repeats[k]);
    split_sizes.push_back(k < lead ? 1 : self.size(k - lead));
  }
  s.add(c, "self", c.grad().reshape(split_sizes).sum(copies).reshape(self.sizes()));
}

// The mode is a name for aten::pad and an at::padding_mode for aten::_pad_enum (what LibTorch's
// F::pad calls).
bool pads_with_a_constant(const RuleCall& c) {
  const auto* mode = c.node().arg("mode");
  if (mode == nullptr) return true;  // constant_pad_nd
  if (const auto* name = std::get_if<std::string>(&mode->value)) return *name == "constant";
  if (const auto* number = std::get_if<std::int64_t>(&mode->value)) {
    return *number == static_cast<std::int64_t>(at::padding_mode::constant);
  }
  return false;
}

// Constant padding: the gradient is padded by the opposite amounts (a positive pad crops it, a
// negative one, which cropped the input, gives zeros back).
void constant_pad(const RuleCall& c, GradientSink& s) {
  if (!pads_with_a_constant(c)) {
    throw Error("padding that reflects, replicates or wraps has no derivative rule (only constant padding has)");
  }
  auto pad = c.integers("pad");
  for (auto& amount : pad) amount = -amount;
  s.add(c, "self", at::constant_pad_nd(c.grad(), pad, 0));
}

void roll(const RuleCall& c, GradientSink& s) {
  auto shifts = c.integers("shifts");
  for (auto& shift : shifts) shift = -shift;
  s.add(c, "self", at::roll(c.grad(), shifts, c.integers("dims")));
}

// Indexing: the gradient accumulated back at the positions read (a position read twice gets both).
void index(const RuleCall& c, GradientSink& s) {
  c10::List<std::optional<at::Tensor>> indices;
  for (const auto& tensor : c.inputs("indices")) {
    indices.push_back(tensor.defined() ? std::optional<at::Tensor>(tensor) : std::nullopt);
  }
  s.add(c, "self", at::index_put(at::zeros_like(c.input("self")), indices, c.grad(), /*accumulate=*/true));
}

void gather(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  s.add(c, "self", at::zeros_like(self).scatter_add(c.integer("dim"), c.input("index"), c.grad()));
}

}  // namespace

// repeat_interleave(self, repeats, dim): each element repeated `repeats` times in place along dim
// (the flattened input without a dim); its gradient sums each run of repeats.
void repeat_interleave(const RuleCall& c, GradientSink& s) {
  const auto& self = c.input("self");
  const auto repeats = c.integer("repeats");
  if (c.is_none("dim")) {
    s.add(c, "self", c.grad().reshape({-1, repeats}).sum(1).reshape(self.sizes()));
    return;
  }
  const auto dim = c10::maybe_wrap_dim(c.integer("dim"), self.dim());
  s.add(c, "self", c.grad().unflatten(dim, {self.size(dim), repeats}).sum(dim + 1));
}

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
  add("aten::chunk", split_back);
  add("aten::split.Tensor", split_back);
  add("aten::split_with_sizes", split_back);
  add("aten::unsafe_chunk", split_back);
  add("aten::unsafe_split.Tensor", split_back);
  add("aten::unbind.int", unbind);
  add("aten::numpy_T", reverse_dims);
  add("aten::repeat", repeat);
  add("aten::repeat_interleave.self_int", repeat_interleave);
  add("aten::index.Tensor", index);
  add("aten::gather", gather);
  add("aten::roll", roll);
  add("aten::pad", constant_pad);
  add("aten::_pad_enum", constant_pad);
  add("aten::constant_pad_nd", constant_pad);
}

}  // namespace zenith::autodiff
