#include "common/random_attention.h"

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "common/lowest_finite.h"
#include "common/seeded_draws.h"

namespace zenith::testing {
namespace {

using Shape = std::vector<std::int64_t>;

enum class Sharing { Same, RepeatKv, RepeatInterleave, EnableGqa };
enum class Mask { None, Additive, Bias, Bool, CausalBuilt, IsCausal };
enum class Scaling { Default, Explicit, Multiply, Divide, Unscaled };

// One program's choices; the program is a function of them alone.
struct Spec {
  std::int64_t batch = 1, heads = 1, kv_heads = 1, rows = 1, keys = 1, dim = 8, value_dim = 8;
  bool written_out = false;
  bool hidden_layout = false;  // q, k, v arrive as [B, T, H * D] and are split inside
  Sharing sharing = Sharing::Same;
  Mask mask = Mask::None;
  Shape mask_shape;            // when the mask is an input
  Scaling scaling = Scaling::Default;
  double scale = 1;            // the factor (Multiply, Explicit) or the divisor (Divide)
  bool float32_softmax = false;
  bool bool_by_where = false;  // written out: where(mask, scores, lowest) instead of masked_fill(-inf)
  bool merge_heads = false;
  bool blind_row = false;      // one query sees no key (a bool mask, or written out with an additive one)
  double spread = 1;           // q and k values in [-spread, spread] * dim^-1/4
  c10::ScalarType dtype = at::kFloat;

  std::int64_t repeats() const { return heads / kv_heads; }
  bool mask_is_input() const { return mask == Mask::Additive || mask == Mask::Bias || mask == Mask::Bool; }
};

const char* sharing_text(Sharing sharing) {
  switch (sharing) {
    case Sharing::RepeatKv:
      return "repeat_kv (unsqueeze, expand, reshape)";
    case Sharing::RepeatInterleave:
      return "repeat_interleave";
    case Sharing::EnableGqa:
      return "enable_gqa";
    default:
      return "one key-value head per query head";
  }
}

const char* mask_text(Mask mask) {
  switch (mask) {
    case Mask::Additive:
      return "additive (0 or the dtype's lowest)";
    case Mask::Bias:
      return "additive random bias";
    case Mask::Bool:
      return "bool";
    case Mask::CausalBuilt:
      return "causal, built inside with tril";
    case Mask::IsCausal:
      return "is_causal";
    default:
      return "none";
  }
}

std::string shape_text(const Shape& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

class SpecDraw : SeededDraws {
 public:
  using SeededDraws::next;
  explicit SpecDraw(std::mt19937_64& rng) : SeededDraws(rng) {}

  Spec draw(c10::ScalarType dtype) {
    Spec s;
    s.dtype = dtype;
    s.written_out = chance(0.5);
    s.hidden_layout = chance(0.4);
    s.batch = pick({1, 1, 2, 3});
    s.kv_heads = pick({1, 2, 3, 4});
    s.heads = s.kv_heads * pick({1, 1, 2, 4, 8});
    // Decode steps (one row, or a few) are the common case; a few prompts cross the kernel's limit.
    s.rows = pick({1, 1, 1, 1, 2, 3, 4, 5, 8, 16, 17, 33});
    s.keys = s.rows + pick({0, 1, 6, 31, 63, 64, 200, 255, 300});
    // Head dims the kernel takes and some it declines (80 floats is not a power-of-two count of
    // 16-byte slices, 24 halves neither).
    s.dim = pick({8, 16, 24, 32, 64, 64, 80, 128});
    s.value_dim = chance(0.2) ? pick({8, 16, 32, 64}) : s.dim;
    if (s.repeats() > 1) {
      s.sharing = s.written_out ? pick({Sharing::RepeatKv, Sharing::RepeatKv, Sharing::RepeatInterleave})
                                : pick({Sharing::RepeatKv, Sharing::RepeatKv, Sharing::RepeatInterleave,
                                        Sharing::EnableGqa});
    }
    s.mask = pick({Mask::None, Mask::Additive, Mask::Bias, Mask::Bool, Mask::Bool, Mask::CausalBuilt, Mask::IsCausal});
    if (s.written_out && s.mask == Mask::IsCausal) s.mask = Mask::CausalBuilt;
    if (s.mask_is_input()) s.mask_shape = mask_shape(s);
    // A query that sees no key: through scaled_dot_product_attention with a bool mask (0 in eager's
    // math and efficient kernels), or written out with the dtype's lowest as its additive mask
    // throughout (eager's sums decide it: the average of the values).
    const bool can_blind = (!s.written_out && s.mask == Mask::Bool) || (s.written_out && s.mask == Mask::Additive);
    s.blind_row = can_blind && s.mask_shape.size() >= 2 && s.mask_shape[s.mask_shape.size() - 2] > 1 && chance(0.5);
    if (s.written_out) {
      s.scaling = pick({Scaling::Multiply, Scaling::Divide, Scaling::Unscaled});
      s.float32_softmax = dtype != at::kFloat && chance(0.5);
      s.bool_by_where = chance(0.5);
    } else {
      s.scaling = pick({Scaling::Default, Scaling::Default, Scaling::Explicit});
    }
    const double root = std::sqrt(static_cast<double>(s.dim));
    s.scale = s.scaling == Scaling::Multiply   ? 1 / root
              : s.scaling == Scaling::Divide   ? root
              : s.scaling == Scaling::Explicit ? pick({0.05, 0.3, 1.0})
                                               : 1.0;
    s.merge_heads = chance(0.75);
    s.spread = pick({0.5, 1.0, 2.0});
    return s;
  }

 private:
  // The shapes models give masks: per batch and query row ([B, 1, T, S]), shared by the batch,
  // padding only ([B, 1, 1, S]), per head (a bias: [1, H, T, S]), or [T, S].
  Shape mask_shape(const Spec& s) {
    if (s.mask == Mask::Bias) return pick<Shape>({{1, s.heads, s.rows, s.keys}, {s.batch, s.heads, s.rows, s.keys}});
    return pick<Shape>({{s.batch, 1, s.rows, s.keys},
                        {1, 1, s.rows, s.keys},
                        {s.batch, 1, 1, s.keys},
                        {s.batch, s.heads, s.rows, s.keys},
                        {s.rows, s.keys}});
  }
};

at::Tensor split_heads(const at::Tensor& x, std::int64_t heads, std::int64_t dim) {
  return x.view({x.size(0), x.size(1), heads, dim}).transpose(1, 2);
}

// [B, kv, S, D] -> [B, kv * rep, S, D], as Hugging Face's repeat_kv writes it.
at::Tensor repeat_kv(const at::Tensor& x, std::int64_t rep) {
  const auto b = x.size(0), kv = x.size(1), s = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({b, kv, rep, s, d}).reshape({b, kv * rep, s, d});
}

at::Tensor share(const Spec& s, const at::Tensor& x) {
  if (s.sharing == Sharing::RepeatKv) return repeat_kv(x, s.repeats());
  if (s.sharing == Sharing::RepeatInterleave) return x.repeat_interleave(s.repeats(), 1);
  return x;
}

// Key j visible from query i when j - i <= keys - rows: the rows are the cache's last positions.
at::Tensor causal_mask(const Spec& s, c10::Device device) {
  return at::ones({s.rows, s.keys}, at::TensorOptions().dtype(at::kBool).device(device)).tril(s.keys - s.rows);
}

at::Tensor written_out(const Spec& s, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& mask) {
  auto scores = at::matmul(q, k.transpose(-2, -1));
  if (s.scaling == Scaling::Multiply) scores = scores * s.scale;
  if (s.scaling == Scaling::Divide) scores = scores / s.scale;
  const double minus_infinity = -std::numeric_limits<double>::infinity();
  switch (s.mask) {
    case Mask::Additive:
    case Mask::Bias:
      scores = scores + mask;
      break;
    case Mask::Bool:
      scores = s.bool_by_where ? at::where(mask, scores, at::scalar_tensor(lowest_finite(s.dtype), scores.options()))
                               : scores.masked_fill(mask.logical_not(), minus_infinity);
      break;
    case Mask::CausalBuilt:
      scores = scores.masked_fill(causal_mask(s, q.device()).logical_not(), minus_infinity);
      break;
    default:
      break;
  }
  auto probabilities = s.float32_softmax ? at::softmax(scores, -1, at::kFloat).to(s.dtype) : at::softmax(scores, -1);
  return at::matmul(probabilities, v);
}

std::vector<at::Tensor> attend(const Spec& s, const std::vector<at::Tensor>& args) {
  TORCH_CHECK(args.size() == (s.mask_is_input() ? 4u : 3u), "random attention: expected ",
              s.mask_is_input() ? 4 : 3, " inputs, got ", args.size());
  auto q = args[0], k = args[1], v = args[2];
  if (s.hidden_layout) {
    q = split_heads(q, s.heads, s.dim);
    k = split_heads(k, s.kv_heads, s.dim);
    v = split_heads(v, s.kv_heads, s.value_dim);
  }
  k = share(s, k);
  v = share(s, v);
  at::Tensor mask = s.mask_is_input() ? args[3] : at::Tensor();
  at::Tensor out;
  if (s.written_out) {
    out = written_out(s, q, k, v, mask);
  } else {
    if (s.mask == Mask::CausalBuilt) mask = causal_mask(s, q.device());
    std::optional<at::Tensor> attn_mask;
    if (mask.defined()) attn_mask = mask;
    std::optional<double> scale;
    if (s.scaling == Scaling::Explicit) scale = s.scale;
    out = at::scaled_dot_product_attention(q, k, v, attn_mask, 0.0, s.mask == Mask::IsCausal, scale,
                                           s.sharing == Sharing::EnableGqa);
  }
  if (s.merge_heads) out = out.transpose(1, 2).reshape({s.batch, s.rows, s.heads * s.value_dim});
  return {out};
}

// The inputs' sizes: heads first, or hidden states.
std::vector<Shape> input_shapes(const Spec& s) {
  if (s.hidden_layout) {
    return {{s.batch, s.rows, s.heads * s.dim},
            {s.batch, s.keys, s.kv_heads * s.dim},
            {s.batch, s.keys, s.kv_heads * s.value_dim}};
  }
  return {{s.batch, s.heads, s.rows, s.dim},
          {s.batch, s.kv_heads, s.keys, s.dim},
          {s.batch, s.kv_heads, s.keys, s.value_dim}};
}

// One draw of the inputs on the CPU. q and k are scaled by dim^-1/4 so that unscaled scores stay
// of the order of spread^2 whatever the head dim: a softmax over logits in the tens is decided by
// the rounding of its largest score, and eager rounds scores to the dtype where a fused kernel
// does not. Every query sees key 0 (the mask's column 0), except the blind row.
std::vector<at::Tensor> draw_inputs(const Spec& s, at::Generator& generator, std::uint64_t row_draw) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const auto shapes = input_shapes(s);
  const double qk = s.spread / std::pow(static_cast<double>(s.dim), 0.25);
  std::vector<at::Tensor> inputs;
  for (int i = 0; i < 3; ++i) {
    const double range = i < 2 ? qk : 1.0;
    inputs.push_back(((at::rand(shapes[i], generator, f32) * 2 - 1) * range).to(s.dtype));
  }
  if (!s.mask_is_input()) return inputs;
  auto uniform = at::rand(s.mask_shape, generator, f32);
  at::Tensor mask;
  if (s.mask == Mask::Bias) {
    mask = ((uniform * 2 - 1) * 2).to(s.dtype);
  } else {
    auto visible = uniform < 0.7;
    visible.select(-1, 0).fill_(true);
    if (s.blind_row) visible.select(-2, static_cast<std::int64_t>(row_draw % s.mask_shape[s.mask_shape.size() - 2])).fill_(false);
    if (s.mask == Mask::Bool) {
      mask = visible;
    } else {
      mask = at::zeros(s.mask_shape, f32.dtype(s.dtype)).masked_fill(visible.logical_not(), lowest_finite(s.dtype));
    }
  }
  inputs.push_back(mask);
  return inputs;
}

std::string describe(const Spec& s, std::uint64_t seed) {
  std::ostringstream text;
  text << "random attention: seed " << seed << ", " << c10::toString(s.dtype)
       << "; rebuild it with " << rebuild_call("make_random_attention", seed, s.dtype) << "\n";
  text << "  batch " << s.batch << ", " << s.heads << " query heads, " << s.kv_heads << " key-value heads ("
       << sharing_text(s.sharing) << "), " << s.rows << " query rows, " << s.keys << " keys, head dim " << s.dim
       << ", value dim " << s.value_dim << "\n";
  text << "  inputs " << (s.hidden_layout ? "as hidden states, split by view and transpose" : "as heads") << ":";
  for (const auto& shape : input_shapes(s)) text << " " << shape_text(shape);
  if (s.mask_is_input()) text << ", mask " << shape_text(s.mask_shape);
  text << "\n  " << (s.written_out ? "written out (matmul, scale, mask, softmax, matmul)" : "scaled_dot_product_attention")
       << "; mask " << mask_text(s.mask);
  if (s.written_out && s.mask == Mask::Bool) text << (s.bool_by_where ? " by where" : " by masked_fill(-inf)");
  if (s.blind_row) text << ", one query seeing no key";
  text << "; scale ";
  switch (s.scaling) {
    case Scaling::Multiply:
      text << "* " << s.scale;
      break;
    case Scaling::Divide:
      text << "/ " << s.scale;
      break;
    case Scaling::Explicit:
      text << s.scale << " (explicit)";
      break;
    case Scaling::Unscaled:
      text << "none";
      break;
    default:
      text << "default";
  }
  if (s.float32_softmax) text << "; softmax in float32";
  text << "; q and k spread " << s.spread << (s.merge_heads ? "; heads merged" : "; heads kept") << "\n";
  return text.str();
}

}  // namespace

RandomProgram make_random_attention(std::uint64_t seed, c10::ScalarType dtype, c10::Device device) {
  std::mt19937_64 rng(seed);
  SpecDraw choices(rng);
  const Spec spec = choices.draw(dtype);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(choices.next());
  std::uint64_t draw = 0;  // the blind row moves from draw to draw
  auto program = program_of_draws(
      seed, dtype,
      [&] {
        std::vector<at::Tensor> inputs;
        for (const auto& input : draw_inputs(spec, generator, draw)) inputs.push_back(input.to(device));
        ++draw;
        return inputs;
      },
      [spec](const std::vector<at::Tensor>& args) { return attend(spec, args); }, describe(spec, seed));
  program.has_query_seeing_no_key = spec.blind_row;
  return program;
}

}  // namespace zenith::testing
