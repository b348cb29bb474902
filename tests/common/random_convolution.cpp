#include "common/random_convolution.h"

#include <cmath>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "common/seeded_draws.h"

namespace zenith::testing {
namespace {

using Shape = std::vector<std::int64_t>;

enum class Activation { None, Relu, Relu6, Silu, Gelu, Hardswish };
enum class Pool { None, Max, Average };

struct Block {
  std::int64_t in_channels = 1, out_channels = 1, kernel = 1, stride = 1, padding = 0, dilation = 1, groups = 1;
  std::int64_t height = 1, width = 1;  // of the block's input
  int bias_input = -1, norm_input = -1;
  int weight_input = -1;
  double eps = 1e-5;
  Activation activation = Activation::None;
  bool residual = false;
  Pool pool = Pool::None;

  std::int64_t out_size(std::int64_t in) const {
    return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
  }
};

struct Spec {
  std::int64_t batch = 1, channels = 1, height = 1, width = 1;
  bool channels_last_input = false;
  bool global_average = false;
  std::vector<Block> blocks;
  int inputs = 1;  // x, then each block's weight, bias and batch-norm statistics
  c10::ScalarType dtype = at::kFloat;
};

const char* activation_text(Activation a) {
  switch (a) {
    case Activation::Relu:
      return "relu";
    case Activation::Relu6:
      return "relu6 (hardtanh 0, 6)";
    case Activation::Silu:
      return "silu";
    case Activation::Gelu:
      return "gelu";
    case Activation::Hardswish:
      return "hardswish";
    default:
      return "none";
  }
}

class SpecDraw : SeededDraws {
 public:
  using SeededDraws::next;
  explicit SpecDraw(std::mt19937_64& rng) : SeededDraws(rng) {}

  Spec draw(c10::ScalarType dtype) {
    Spec s;
    s.dtype = dtype;
    s.batch = pick({1, 2, 3});
    s.channels = pick({1, 3, 4, 8, 16});
    s.height = pick({1, 4, 7, 8, 12, 15});
    s.width = chance(0.5) ? s.height : pick({1, 5, 8, 13});
    s.channels_last_input = chance(0.3);
    s.global_average = chance(0.6);
    const int blocks = 1 + static_cast<int>(below(2));
    std::int64_t channels = s.channels, height = s.height, width = s.width;
    for (int k = 0; k < blocks; ++k) {
      Block b = block(channels, height, width, s.inputs);
      channels = b.out_channels;
      height = b.out_size(height);
      width = b.out_size(width);
      if (b.pool != Pool::None) {
        height /= 2;
        width /= 2;
      }
      s.blocks.push_back(b);
    }
    return s;
  }

 private:
  // A block over [channels, height, width]; `inputs` counts the program's inputs so far (at most
  // kMaxRandomProgramInputs in all).
  Block block(std::int64_t channels, std::int64_t height, std::int64_t width, int& inputs) {
    Block b;
    b.in_channels = channels;
    b.height = height;
    b.width = width;
    const bool depthwise = channels > 1 && chance(0.25);
    b.out_channels = depthwise ? channels : pick<std::int64_t>({channels, 4, 8, 16});
    b.groups = depthwise ? channels : 1;
    b.kernel = pick<std::int64_t>({1, 3, 3, 5});
    b.dilation = b.kernel > 1 && chance(0.2) ? 2 : 1;
    b.stride = chance(0.3) ? 2 : 1;
    b.padding = chance(0.7) ? b.dilation * (b.kernel - 1) / 2 : 0;
    // A kernel larger than the padded input leaves no output: pad to "same" and stride 1 then.
    const auto span = b.dilation * (b.kernel - 1) + 1;
    if (height + 2 * b.padding < span || width + 2 * b.padding < span) {
      b.padding = b.dilation * (b.kernel - 1) / 2;
      b.stride = 1;
    }
    b.weight_input = inputs++;
    if (chance(0.5)) b.bias_input = inputs++;
    if (chance(0.7)) {
      b.norm_input = inputs++;
      b.eps = pick({1e-5, 1e-3});
    }
    b.activation = pick({Activation::None, Activation::Relu, Activation::Relu, Activation::Relu6, Activation::Silu,
                         Activation::Gelu, Activation::Hardswish});
    b.residual = b.out_channels == channels && b.out_size(height) == height && b.out_size(width) == width && chance(0.5);
    if (b.out_size(height) >= 2 && b.out_size(width) >= 2 && chance(0.3)) b.pool = chance(0.5) ? Pool::Max : Pool::Average;
    return b;
  }
};

at::Tensor activate(const at::Tensor& y, Activation a) {
  switch (a) {
    case Activation::Relu:
      return at::relu(y);
    case Activation::Relu6:
      return at::hardtanh(y, 0, 6);
    case Activation::Silu:
      return at::silu(y);
    case Activation::Gelu:
      return at::gelu(y);
    case Activation::Hardswish:
      return at::hardswish(y);
    default:
      return y;
  }
}

std::vector<at::Tensor> run_spec(const Spec& s, const std::vector<at::Tensor>& args) {
  TORCH_CHECK(static_cast<int>(args.size()) == s.inputs, "random convolution: expected ", s.inputs, " inputs, got ",
              args.size());
  auto x = args[0];
  for (const auto& b : s.blocks) {
    std::optional<at::Tensor> bias;
    if (b.bias_input >= 0) bias = args[static_cast<std::size_t>(b.bias_input)];
    auto y = at::conv2d(x, args[static_cast<std::size_t>(b.weight_input)], bias, {b.stride, b.stride},
                        {b.padding, b.padding}, {b.dilation, b.dilation}, b.groups);
    if (b.norm_input >= 0) {
      const auto& n = args[static_cast<std::size_t>(b.norm_input)];
      y = at::batch_norm(y, n[2], n[3], n[0], n[1], /*training=*/false, 0.1, b.eps, /*cudnn_enabled=*/true);
    }
    y = activate(y, b.activation);
    if (b.residual) y = y + x;
    if (b.pool == Pool::Max) y = at::max_pool2d(y, {2, 2});
    if (b.pool == Pool::Average) y = at::avg_pool2d(y, {2, 2});
    x = y;
  }
  if (s.global_average) x = at::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return {x};
}

// One draw of the inputs on the CPU, in float32 then the dtype: x in [-1, 1]; weights in
// [-1, 1] * sqrt(3 / fan_in), so that a convolution keeps its input's scale; biases in [-0.1,
// 0.1]; statistics a mean in [-0.5, 0.5], a variance, weight in [0.5, 1.5], a bias in [-0.5, 0.5].
std::vector<at::Tensor> draw_inputs(const Spec& s, at::Generator& generator) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  auto uniform = [&](const Shape& shape, double lo, double hi) {
    return at::rand(shape, generator, f32) * (hi - lo) + lo;
  };
  std::vector<at::Tensor> inputs(static_cast<std::size_t>(s.inputs));
  if (s.channels_last_input) {
    inputs[0] = uniform({s.batch, s.height, s.width, s.channels}, -1, 1).permute({0, 3, 1, 2});
  } else {
    inputs[0] = uniform({s.batch, s.channels, s.height, s.width}, -1, 1);
  }
  for (const auto& b : s.blocks) {
    const auto fan_in = b.in_channels / b.groups * b.kernel * b.kernel;
    const double bound = std::sqrt(3.0 / static_cast<double>(fan_in));
    inputs[static_cast<std::size_t>(b.weight_input)] =
        uniform({b.out_channels, b.in_channels / b.groups, b.kernel, b.kernel}, -bound, bound);
    if (b.bias_input >= 0) inputs[static_cast<std::size_t>(b.bias_input)] = uniform({b.out_channels}, -0.1, 0.1);
    if (b.norm_input >= 0) {
      inputs[static_cast<std::size_t>(b.norm_input)] = at::stack(
          {uniform({b.out_channels}, -0.5, 0.5), uniform({b.out_channels}, 0.5, 1.5),
           uniform({b.out_channels}, 0.5, 1.5), uniform({b.out_channels}, -0.5, 0.5)});
    }
  }
  for (auto& input : inputs) input = input.to(s.dtype);
  return inputs;
}

std::string describe(const Spec& s, std::uint64_t seed, int redraws) {
  std::ostringstream text;
  text << "random convolution: seed " << seed << ", " << c10::toString(s.dtype)
       << "; rebuild it with " << rebuild_call("make_random_convolution", seed, s.dtype) << "\n";
  text << "  input [" << s.batch << ", " << s.channels << ", " << s.height << ", " << s.width << "]"
       << (s.channels_last_input ? " channels-last" : " contiguous") << "\n";
  for (const auto& b : s.blocks) {
    text << "  conv " << b.in_channels << " -> " << b.out_channels << " over " << b.height << "x" << b.width
         << ", kernel " << b.kernel << ", stride " << b.stride << ", padding " << b.padding << ", dilation "
         << b.dilation << ", groups " << b.groups << (b.bias_input >= 0 ? ", bias" : ", no bias");
    if (b.norm_input >= 0) text << "; batch norm (eps " << b.eps << ")";
    text << "; activation " << activation_text(b.activation) << (b.residual ? "; residual add" : "");
    if (b.pool != Pool::None) text << (b.pool == Pool::Max ? "; max pool 2" : "; average pool 2");
    text << "\n";
  }
  text << "  result: " << (s.global_average ? "the global average [N, C]" : "the last map") << "\n";
  if (redraws > 0) text << "  (draw " << redraws << " of this seed; earlier ones were ill-conditioned)\n";
  return text.str();
}

}  // namespace

RandomProgram make_random_convolution(std::uint64_t seed, c10::ScalarType dtype, c10::Device device) {
  std::mt19937_64 rng(seed);
  auto draft = [&](int redraw) {
    SpecDraw choices(rng);
    const Spec spec = choices.draw(dtype);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(choices.next());
    return program_of_draws(
        seed, dtype, [&] { return draw_inputs(spec, generator); },
        [spec](const std::vector<at::Tensor>& args) { return run_spec(spec, args); }, describe(spec, seed, redraw));
  };
  // `to` keeps a channels-last input's strides.
  auto place = [&](RandomProgram& program) {
    for (auto& input : program.inputs) input = input.to(device);
    for (auto& inputs : program.fresh_inputs) {
      for (auto& input : inputs) input = input.to(device);
    }
  };
  return first_well_conditioned("make_random_convolution", seed, draft, place);
}

}  // namespace zenith::testing
