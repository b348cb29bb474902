#include "common/random_projection.h"

#include <cmath>
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

enum class Form { Linear, MatmulPlusBias, Addmm };
enum class Activation { None, Relu, GeluTanh, Gelu, Silu };
enum class Combine { Single, SwiGlu, Sum, Cat };
enum class Norm { None, LayerNorm, RmsNorm };
enum class Layout { Contiguous, Transposed, Sliced };

struct Projection {
  std::int64_t n = 8;
  int weight_input = -1, bias_input = -1;
  Activation activation = Activation::None;
};

struct Spec {
  Shape lead;
  std::int64_t rows = 1, k = 8;
  Layout layout = Layout::Contiguous;
  Form form = Form::Linear;
  std::vector<Projection> projections;
  Combine combine = Combine::Single;
  bool residual = false;
  Norm norm = Norm::None;
  int norm_input = -1;
  double eps = 1e-5;
  int inputs = 1;  // x, then each projection's weight and bias, then the norm's weight
  c10::ScalarType dtype = at::kFloat;

  std::int64_t width() const {
    std::int64_t n = 0;
    for (const auto& p : projections) n = combine == Combine::Cat ? n + p.n : p.n;
    return n;
  }
  Shape x_shape() const {
    Shape shape = lead;
    shape.push_back(rows);
    shape.push_back(k);
    return shape;
  }
};

const char* form_text(Form form) {
  return form == Form::Linear ? "linear" : form == Form::Addmm ? "addmm(b, x, W.t())" : "matmul(x, W.t()) + b";
}

const char* activation_text(Activation a) {
  const char* names[] = {"none", "relu", "gelu (tanh)", "gelu", "silu"};
  return names[static_cast<int>(a)];
}

const char* combine_text(Combine c) {
  const char* names[] = {"one projection", "silu(a) * b", "a + b (+ c)", "cat"};
  return names[static_cast<int>(c)];
}

class SpecDraw : SeededDraws {
 public:
  using SeededDraws::next;
  explicit SpecDraw(std::mt19937_64& rng) : SeededDraws(rng) {}

  Spec draw(c10::ScalarType dtype) {
    Spec s;
    s.dtype = dtype;
    s.lead = pick<Shape>({{}, {}, {2}, {1}, {2, 3}});
    s.rows = pick<std::int64_t>({1, 1, 1, 2, 3, 5, 8, 9, 16, 33});
    // Multiples of 16 bytes in every dtype, and widths that are not (7, 12 in float16).
    s.k = pick<std::int64_t>({8, 16, 64, 64, 72, 128, 12, 7});
    s.layout = pick({Layout::Contiguous, Layout::Contiguous, Layout::Transposed, Layout::Sliced});
    s.form = s.lead.empty() ? pick({Form::Linear, Form::MatmulPlusBias, Form::Addmm})
                            : pick({Form::Linear, Form::MatmulPlusBias});
    const int count = static_cast<int>(pick<std::int64_t>({1, 1, 2, 2, 3}));
    const bool same_width = chance(0.6);
    const std::int64_t shared = pick<std::int64_t>({8, 16, 24, 64, 100, 128});
    for (int p = 0; p < count; ++p) {
      Projection projection;
      projection.n = same_width ? shared : pick<std::int64_t>({8, 16, 24, 64, 100, 128});
      projection.weight_input = s.inputs++;
      // addmm always adds its bias; the others sometimes.
      if (s.form != Form::Linear || chance(0.5)) projection.bias_input = s.inputs++;
      projection.activation = pick({Activation::None, Activation::None, Activation::Relu, Activation::GeluTanh,
                                    Activation::Gelu, Activation::Silu});
      s.projections.push_back(projection);
    }
    const bool equal = same_width || count == 1;
    if (count == 1) s.combine = Combine::Single;
    else if (count == 2 && equal) s.combine = pick({Combine::SwiGlu, Combine::Sum, Combine::Cat});
    else s.combine = equal ? pick({Combine::Sum, Combine::Cat}) : Combine::Cat;
    s.residual = s.width() == s.k && chance(0.5);
    s.norm = pick({Norm::None, Norm::None, Norm::LayerNorm, Norm::RmsNorm});
    if (s.norm != Norm::None) {
      s.norm_input = s.inputs++;
      s.eps = pick({1e-5, 1e-6});
    }
    return s;
  }
};

at::Tensor activate(const at::Tensor& y, Activation a) {
  switch (a) {
    case Activation::Relu:
      return at::relu(y);
    case Activation::GeluTanh:
      return at::gelu(y, "tanh");
    case Activation::Gelu:
      return at::gelu(y);
    case Activation::Silu:
      return at::silu(y);
    default:
      return y;
  }
}

at::Tensor project(const Spec& s, const Projection& p, const at::Tensor& x, const std::vector<at::Tensor>& args) {
  const auto& w = args[static_cast<std::size_t>(p.weight_input)];
  std::optional<at::Tensor> bias;
  if (p.bias_input >= 0) bias = args[static_cast<std::size_t>(p.bias_input)];
  at::Tensor y;
  switch (s.form) {
    case Form::Addmm:
      y = at::addmm(*bias, x, w.t());
      break;
    case Form::MatmulPlusBias:
      y = at::matmul(x, w.t());
      if (bias) y = y + *bias;
      break;
    default:
      y = at::linear(x, w, bias);
  }
  return activate(y, p.activation);
}

std::vector<at::Tensor> run_spec(const Spec& s, const std::vector<at::Tensor>& args) {
  TORCH_CHECK(static_cast<int>(args.size()) == s.inputs, "random projection: expected ", s.inputs, " inputs, got ",
              args.size());
  const auto& x = args[0];
  std::vector<at::Tensor> ys;
  for (const auto& p : s.projections) ys.push_back(project(s, p, x, args));
  at::Tensor y = ys[0];
  switch (s.combine) {
    case Combine::SwiGlu:
      y = at::silu(ys[0]) * ys[1];
      break;
    case Combine::Sum:
      for (std::size_t i = 1; i < ys.size(); ++i) y = y + ys[i];
      break;
    case Combine::Cat:
      y = at::cat(ys, -1);
      break;
    default:
      break;
  }
  if (s.residual) y = y + x;
  if (s.norm == Norm::LayerNorm) {
    y = at::layer_norm(y, {s.width()}, args[static_cast<std::size_t>(s.norm_input)], {}, s.eps);
  } else if (s.norm == Norm::RmsNorm) {
    y = y * at::rsqrt(y.pow(2).mean(-1, /*keepdim=*/true) + s.eps) * args[static_cast<std::size_t>(s.norm_input)];
  }
  return {y};
}

// One draw of the inputs on the CPU, in float32 then the dtype: x in [-1, 1] (laid out as the
// spec says); weights in [-1, 1] * sqrt(3 / K), so that a product keeps x's scale; biases in
// [-0.1, 0.1]; the norm's weight in [0.5, 1.5].
std::vector<at::Tensor> draw_inputs(const Spec& s, at::Generator& generator) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  auto uniform = [&](const Shape& shape, double lo, double hi) {
    return (at::rand(shape, generator, f32) * (hi - lo) + lo).to(s.dtype);
  };
  std::vector<at::Tensor> inputs(static_cast<std::size_t>(s.inputs));
  auto shape = s.x_shape();
  if (s.layout == Layout::Transposed) {
    std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    inputs[0] = uniform(shape, -1, 1).transpose(-1, -2);
  } else if (s.layout == Layout::Sliced) {
    shape.back() += 3;
    inputs[0] = uniform(shape, -1, 1).narrow(-1, 1, s.k);
  } else {
    inputs[0] = uniform(shape, -1, 1);
  }
  const double bound = std::sqrt(3.0 / static_cast<double>(s.k));
  for (const auto& p : s.projections) {
    inputs[static_cast<std::size_t>(p.weight_input)] = uniform({p.n, s.k}, -bound, bound);
    if (p.bias_input >= 0) inputs[static_cast<std::size_t>(p.bias_input)] = uniform({p.n}, -0.1, 0.1);
  }
  if (s.norm_input >= 0) inputs[static_cast<std::size_t>(s.norm_input)] = uniform({s.width()}, 0.5, 1.5);
  return inputs;
}

std::string describe(const Spec& s, std::uint64_t seed, int redraws) {
  std::ostringstream text;
  text << "random projection: seed " << seed << ", " << c10::toString(s.dtype)
       << "; rebuild it with " << rebuild_call("make_random_projection", seed, s.dtype) << "\n";
  const auto x = s.x_shape();
  text << "  x " << c10::str(c10::IntArrayRef(x)) << " "
       << (s.layout == Layout::Transposed ? "a transposed view"
           : s.layout == Layout::Sliced   ? "a slice of a wider tensor"
                                          : "contiguous")
       << "; " << form_text(s.form) << "\n";
  for (const auto& p : s.projections) {
    text << "  weight [" << p.n << ", " << s.k << "]" << (p.bias_input >= 0 ? " with a bias" : "") << ", then "
         << activation_text(p.activation) << "\n";
  }
  text << "  combined: " << combine_text(s.combine) << (s.residual ? "; residual add of x" : "")
       << (s.norm == Norm::LayerNorm ? "; layer norm" : s.norm == Norm::RmsNorm ? "; RMSNorm" : "") << "\n";
  if (redraws > 0) text << "  (draw " << redraws << " of this seed; earlier ones were ill-conditioned)\n";
  return text.str();
}

}  // namespace

RandomProgram make_random_projection(std::uint64_t seed, c10::ScalarType dtype, c10::Device device) {
  std::mt19937_64 rng(seed);
  Spec spec;
  auto draft = [&](int redraw) {
    SpecDraw choices(rng);
    spec = choices.draw(dtype);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(choices.next());
    return program_of_draws(
        seed, dtype, [&] { return draw_inputs(spec, generator); },
        [spec](const std::vector<at::Tensor>& args) { return run_spec(spec, args); }, describe(spec, seed, redraw));
  };
  // A view moved to another device becomes a contiguous copy: x is laid out again there.
  auto place = [&](RandomProgram& program) {
    auto move = [&](std::vector<at::Tensor>& inputs) {
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        if (i > 0 || spec.layout == Layout::Contiguous) {
          inputs[i] = inputs[i].to(device);
        } else if (spec.layout == Layout::Transposed) {
          inputs[i] = inputs[i].transpose(-1, -2).contiguous().to(device).transpose(-1, -2);
        } else {
          auto shape = spec.x_shape();
          shape.back() += 3;
          auto base = at::zeros(shape, inputs[i].options().device(device));
          base.narrow(-1, 1, spec.k).copy_(inputs[i]);
          inputs[i] = base.narrow(-1, 1, spec.k);
        }
      }
    };
    move(program.inputs);
    for (auto& inputs : program.fresh_inputs) move(inputs);
  };
  return first_well_conditioned("make_random_projection", seed, draft, place);
}

}  // namespace zenith::testing
