#include "passes/convolution_epilogue.h"

#include <map>
#include <optional>
#include <set>

#include <c10/core/MemoryFormat.h>

#include "core/convolution_relu.h"
#include "core/convolution_scale_relu.h"
#include "core/node_arguments.h"
#include "core/tensor_type.h"
#include "passes/kept_weight_copies.h"
#include "passes/meta_values.h"

namespace zenith::passes {
namespace {

bool floating(c10::ScalarType dtype) { return dtype == c10::kFloat || dtype == c10::kHalf || dtype == c10::kBFloat16; }

bool is_fusable_convolution(const ir::Graph& graph, const ir::Node& node, bool cuda_only) {
  if (node.op != "aten::_convolution" || node.outputs.size() != 1) return false;
  // The fused call never transposes, picks its algorithm as cuDNN's heuristics do, and reads
  // cuDNN's TF32 flag as the op records it (core/convolution_relu.h).
  const auto* tf32 = node.arg("allow_tf32");
  if (ir::flag_arg(node, "transposed") || ir::flag_arg(node, "deterministic") || !ir::flag_arg(node, "cudnn_enabled") ||
      tf32 == nullptr || std::get_if<bool>(&tf32->value) == nullptr) {
    return false;
  }
  const int input = ir::tensor_arg(node, "input"), weight = ir::tensor_arg(node, "weight");
  if (input < 0 || weight < 0) return false;
  const auto& x = graph.value(input).type;
  const auto& w = graph.value(weight).type;
  return x.rank() == 4 && w.rank() == 4 && floating(x.dtype) && w.dtype == x.dtype && w.device == x.device &&
         (!cuda_only || x.device.is_cuda());
}

// How a matched tail is rewritten: over a folded weight copy the plan keeps, or one it folds and
// lays out channels-last at every call (zenith::convolution_relu), or with the batch norm as a
// per-channel scale and shift in the epilogue (zenith::convolution_scale_relu).
enum class EpilogueForm { FoldedWeight, FoldedEachCall, ScaleAndShift };

// The largest weight, in elements a result element, for which cuDNN's fused graph of conv, scale,
// shift, add and ReLU ran at least as fast as the convolution alone plus 2.3 us (the batch norm's
// own kernel after it: ResNet-50 b1 took 0.1 ms more with 44 of them), float16 channels-last on an
// H200 at ResNet-50's shapes (docs/performance.md): at ratios up to 10.4 it won, at 11.8 it tied,
// at 42 and 94 it lost by 1.8 and 4.8 us. In float32 it lost at most shapes: never there.
constexpr double kScaledEpilogueLargestWeightRatio = 10.5;

// Channels-last and dense, size-1 dimensions' strides aside (a 1x1 weight is either layout).
bool laid_out_channels_last(const ir::TensorType& type) {
  if (type.rank() != 4) return false;
  const auto want = c10::get_channels_last_strides_2d(c10::IntArrayRef(type.sizes));
  for (std::size_t d = 0; d < 4; ++d) {
    if (type.sizes[d] != 1 && type.strides[d] != want[d]) return false;
  }
  return true;
}

// Whether a tail whose folded weight is not kept gets the scale-and-shift form: where cuDNN's
// fused graph takes it (16-bit, channels-last: plugins/torch_gpu/cudnn_scaled_convolution.h) and
// pays (above). `residual` is null without a residual add.
bool scaled_epilogue_pays(const ir::TensorType& input, const ir::TensorType& weight, const ir::TensorType* residual,
                          const ir::TensorType& result) {
  if (weight.dtype != c10::kHalf && weight.dtype != c10::kBFloat16) return false;
  if (!laid_out_channels_last(input) || !laid_out_channels_last(weight) || !laid_out_channels_last(result) ||
      (residual != nullptr && !laid_out_channels_last(*residual))) {
    return false;
  }
  return static_cast<double>(weight.numel()) <= kScaledEpilogueLargestWeightRatio * static_cast<double>(result.numel());
}

// One convolution's tail: the nodes it replaces, and the residual the add brings (or -1).
struct Match {
  int conv = -1, norm = -1, add = -1, relu = -1;
  int residual = -1;
};

class Matcher {
 public:
  Matcher(const ir::Graph& graph, bool cuda_only)
      : graph_(graph), cuda_only_(cuda_only), producers_(graph.producers()), consumers_(graph.consumers()),
        outputs_(graph.outputs.begin(), graph.outputs.end()) {}

  std::optional<Match> at_relu(int relu) const {
    const auto& node = graph_.nodes[static_cast<std::size_t>(relu)];
    if (node.op != "aten::relu" || !node.overload.empty() || node.outputs.size() != 1) return std::nullopt;
    const int in = ir::tensor_arg(node, "self");
    if (in < 0 || !only_reader(in, relu)) return std::nullopt;
    Match match;
    match.relu = relu;
    const int producer = producers_[static_cast<std::size_t>(in)];
    if (producer < 0) return std::nullopt;
    if (auto norm = norm_of_convolution(producer, relu)) {
      match.norm = producer;
      match.conv = *norm;
      return match;
    }
    const auto& add = graph_.nodes[static_cast<std::size_t>(producer)];
    if (add.op != "aten::add" || add.overload != "Tensor" || ir::number_arg(add, "alpha").value_or(0) != 1) {
      return std::nullopt;
    }
    const int self = ir::tensor_arg(add, "self"), other = ir::tensor_arg(add, "other");
    if (self < 0 || other < 0 || self == other) return std::nullopt;
    for (auto [folded, residual] : {std::pair{self, other}, std::pair{other, self}}) {
      const int norm = producers_[static_cast<std::size_t>(folded)];
      if (norm < 0) continue;
      auto conv = norm_of_convolution(norm, producer);
      const auto& a = graph_.value(folded).type;
      const auto& z = graph_.value(residual).type;
      if (!conv || z.dtype != a.dtype || z.sizes != a.sizes || z.device != a.device) continue;
      match.add = producer;
      match.norm = norm;
      match.conv = *conv;
      match.residual = residual;
      return match;
    }
    return std::nullopt;
  }

 private:
  // Whether node `reader` alone reads value `id`, once, and the caller does not get it.
  bool only_reader(int id, int reader) const {
    const auto& readers = consumers_[static_cast<std::size_t>(id)];
    return readers.size() == 1 && readers.front() == reader && !outputs_.count(id);
  }

  // The convolution node a batch norm at `norm`, read by `reader` alone, normalizes; nullopt
  // unless the batch norm is in eval mode and alone reads the convolution's result.
  std::optional<int> norm_of_convolution(int norm, int reader) const {
    const auto& node = graph_.nodes[static_cast<std::size_t>(norm)];
    if (!ir::is_inference_batch_norm(node) || !only_reader(node.outputs.front(), reader)) return std::nullopt;
    const int in = ir::tensor_arg(node, "input");
    const int conv = producers_[static_cast<std::size_t>(in)];
    if (conv < 0 || !only_reader(in, norm) ||
        !is_fusable_convolution(graph_, graph_.nodes[static_cast<std::size_t>(conv)], cuda_only_)) {
      return std::nullopt;
    }
    return conv;
  }

  const ir::Graph& graph_;
  bool cuda_only_;
  std::vector<int> producers_;
  std::vector<std::vector<int>> consumers_;
  std::set<int> outputs_;
};

// Builds one match's replacement, each new value typed on meta tensors.
class Fold {
 public:
  Fold(ir::Graph& graph, const Match& match) : graph_(graph), match_(match), meta_(graph) {}

  // The nodes computing the ReLU's value in `form`, or nullopt when the fused op's result would
  // not have exactly its type, or a per-channel tensor is not one value a channel.
  std::optional<std::vector<ir::Node>> build(EpilogueForm form) {
    const auto& conv = node(match_.conv);
    const auto& norm = node(match_.norm);
    const int weight = ir::tensor_arg(conv, "weight");
    const std::int64_t channels = graph_.value(weight).type.sizes[0];
    try {
      auto per_channel = [&](const char* name) -> int {
        const int id = ir::tensor_arg(norm, name);
        if (id >= 0 && graph_.value(id).type.sizes != std::vector<std::int64_t>{channels}) throw Refused{};
        return id;
      };
      const int mean = per_channel("running_mean"), var = per_channel("running_var");
      const int gamma = per_channel("weight"), beta = per_channel("bias");
      const int conv_bias = ir::tensor_arg(conv, "bias");
      if (conv_bias >= 0 && graph_.value(conv_bias).type.sizes != std::vector<std::int64_t>{channels}) throw Refused{};
      const double eps = std::get<double>(norm.arg("eps")->value);
      // The fold computes in float32 and rounds once to the weight's dtype. In float16 each of
      // rsqrt, * gamma and * W would round, and the scale's error is the same for a whole channel:
      // not noise that averages out but a bias of each channel, which grows layer by layer (a
      // random-weight torchvision ResNet-50 ended 11% away from eager in float16 with it so).
      // Eager's batch norm computes its scale in float32 too.
      const auto dtype = graph_.value(weight).type.dtype;
      auto wide = [&](int id) { return id < 0 || dtype == c10::kFloat ? id : cast(id, c10::kFloat); };
      // s = gamma * rsqrt(var + eps), as the batch norm scales each channel.
      const int shifted = emit("aten::add", "Scalar", {ref("self", wide(var)), {"other", eps}, {"alpha", std::int64_t{1}}});
      int scale = emit("aten::rsqrt", "", {ref("self", shifted)});
      if (gamma >= 0) scale = emit("aten::mul", "Tensor", {ref("self", scale), ref("other", wide(gamma))});
      // (b - mean) * s + beta: the batch norm's shift of the convolution's bias.
      const int centered =
          conv_bias >= 0 ? emit("aten::sub", "Tensor",
                                {ref("self", wide(conv_bias)), ref("other", wide(mean)), {"alpha", std::int64_t{1}}})
                         : emit("aten::neg", "", {ref("self", wide(mean))});
      int shift = emit("aten::mul", "Tensor", {ref("self", centered), ref("other", scale)});
      if (beta >= 0) {
        shift = emit("aten::add", "Tensor", {ref("self", shift), ref("other", wide(beta)), {"alpha", std::int64_t{1}}});
      }
      const auto residual =
          match_.residual >= 0 ? ref("residual", match_.residual) : ir::Argument{"residual", ir::NoneArg{}};
      int out = -1;
      if (form == EpilogueForm::ScaleAndShift) {
        out = emit(ir::kConvolutionScaleReluOp, "",
                   {ir::copy_arg(conv, "input"), ir::copy_arg(conv, "weight"), ref("scale", scale), ref("shift", shift),
                    residual, ir::copy_arg(conv, "stride"), ir::copy_arg(conv, "padding"),
                    ir::copy_arg(conv, "dilation"), ir::copy_arg(conv, "groups"), ir::copy_arg(conv, "allow_tf32")});
      } else {
        const int column =
            emit("aten::view", "", {ref("self", scale), {"size", std::vector<std::int64_t>{channels, 1, 1, 1}}});
        // Folded at every call, the weight's nodes are marked so (ir::Node::per_call) and write it
        // channels-last: one elementwise kernel reads the weight and writes the copy the
        // convolution reads, where ATen's convolution would have laid the weight out anew itself.
        each_call_ = form == EpilogueForm::FoldedEachCall;
        int folded_weight = emit("aten::mul", "Tensor", {ref("self", wide(weight)), ref("other", column)});
        if (dtype != c10::kFloat) folded_weight = cast(folded_weight, dtype);
        if (each_call_) {
          folded_weight =
              emit("aten::clone", "",
                   {ref("self", folded_weight),
                    {"memory_format", static_cast<std::int64_t>(c10::MemoryFormat::ChannelsLast)}});
        }
        each_call_ = false;
        const int folded_bias = dtype != c10::kFloat ? cast(shift, dtype) : shift;
        out = emit(ir::kConvolutionReluOp, "",
                   {ir::copy_arg(conv, "input"), ref("weight", folded_weight), ref("bias", folded_bias), residual,
                    ir::copy_arg(conv, "stride"), ir::copy_arg(conv, "padding"), ir::copy_arg(conv, "dilation"),
                    ir::copy_arg(conv, "groups"), ir::copy_arg(conv, "allow_tf32")});
      }
      const auto& want = graph_.value(node(match_.relu).outputs.front()).type;
      const auto& got = graph_.value(out).type;
      if (got.dtype != want.dtype || got.sizes != want.sizes || got.strides != want.strides) throw Refused{};
      result_ = out;
    } catch (const Refused&) {
      return std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;  // a meta kernel refused the arguments: the tail stays as written
    }
    return std::move(nodes_);
  }

  /// The value the last node computes, which replaces the ReLU's.
  int result() const { return result_; }

 private:
  struct Refused {};

  const ir::Node& node(int index) const { return graph_.nodes[static_cast<std::size_t>(index)]; }
  static ir::Argument ref(const char* name, int id) { return {name, ir::ValueRef{id}}; }

  int emit(const char* op, const char* overload, std::vector<ir::Argument> args) {
    ir::Node made;
    made.op = op;
    made.overload = overload;
    made.args = std::move(args);
    return emit(std::move(made));
  }

  int emit(ir::Node made) {
    made.per_call = each_call_;
    const int id = type_result(graph_, meta_, made);
    nodes_.push_back(std::move(made));
    return id;
  }

  int cast(int id, c10::ScalarType dtype) { return emit(ir::plain_cast(id, dtype)); }

  ir::Graph& graph_;
  const Match& match_;
  MetaValues meta_;
  std::vector<ir::Node> nodes_;
  int result_ = -1;
  bool each_call_ = false;  // the nodes emitted now make the weight folded at every call
};

}  // namespace

void ConvolutionEpilogue::run(ir::Graph& graph, PassReport& report) {
  std::int64_t fused = 0, with_residual = 0, scaled = 0, each_call = 0, too_large = 0;
  std::vector<Match> matches;
  {
    const Matcher matcher(graph, cuda_only_);
    for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
      if (auto match = matcher.at_relu(static_cast<int>(n))) matches.push_back(*match);
    }
  }
  std::map<int, std::vector<ir::Node>> replacement_at;  // the ReLU's index -> the nodes replacing it
  std::set<int> dropped;
  std::map<int, int> replaced;  // the ReLU's value -> the fused op's
  for (const auto& match : matches) {
    const auto& weight = graph.value(ir::tensor_arg(graph.nodes[static_cast<std::size_t>(match.conv)], "weight")).type;
    const auto& result = graph.value(graph.nodes[static_cast<std::size_t>(match.relu)].outputs.front()).type;
    EpilogueForm form = EpilogueForm::FoldedWeight;
    if (!weight_copy_kept(weight, result, kept_fraction_)) {
      const auto& conv = graph.nodes[static_cast<std::size_t>(match.conv)];
      const auto& input = graph.value(ir::tensor_arg(conv, "input")).type;
      const auto* residual = match.residual >= 0 ? &graph.value(match.residual).type : nullptr;
      if (scaled_epilogue_pays(input, weight, residual, result)) {
        form = EpilogueForm::ScaleAndShift;
      } else if (laid_out_channels_last(input) && !laid_out_channels_last(weight)) {
        // The convolution would copy this weight channels-last at every call anyway: folding
        // the batch norm into that copy reads and writes the same bytes, and saves the batch
        // norm's and the ReLU's passes over the result.
        form = EpilogueForm::FoldedEachCall;
      } else {
        ++too_large;
        continue;
      }
    }
    Fold fold(graph, match);
    auto nodes = fold.build(form);
    if (!nodes) continue;
    scaled += form == EpilogueForm::ScaleAndShift;
    each_call += form == EpilogueForm::FoldedEachCall;
    replaced[graph.nodes[static_cast<std::size_t>(match.relu)].outputs.front()] = fold.result();
    replacement_at[match.relu] = std::move(*nodes);
    for (int index : {match.conv, match.norm, match.add}) {
      if (index >= 0) dropped.insert(index);
    }
    ++fused;
    with_residual += match.residual >= 0;
  }
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size());
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    const int index = static_cast<int>(n);
    if (auto it = replacement_at.find(index); it != replacement_at.end()) {
      for (auto& made : it->second) nodes.push_back(std::move(made));
      continue;
    }
    if (!dropped.count(index)) nodes.push_back(std::move(graph.nodes[n]));
  }
  graph.nodes = std::move(nodes);
  for (const auto& [from, to] : replaced) graph.replace_uses(from, to);
  graph.remove_unused_values();
  report.counters["fused"] = fused;
  report.counters["with_residual"] = with_residual;
  report.counters["scaled"] = scaled;
  report.counters["folded_each_call"] = each_call;
  report.counters["weight_too_large"] = too_large;
}

}  // namespace zenith::passes
