#include "common/random_program.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>

#include "common/seeded_draws.h"

namespace zenith::testing {
namespace {

using Shape = std::vector<std::int64_t>;
using Values = std::vector<at::Tensor>;
using Apply = std::function<at::Tensor(const Values&)>;

// Every value the generator emits stays within this magnitude (ops whose result could leave it
// are redrawn). It keeps float16 far from overflow, and it keeps the rounding eager applies after
// every op (which a fused kernel skips) small next to the values an output is made of.
constexpr double kLimit = 8.0;

// Bounds of a value. Conservative interval arithmetic, except after normalizations (noted there).
struct Range {
  double lo = 0;
  double hi = 0;
  double magnitude() const { return std::max(std::abs(lo), std::abs(hi)); }
};

Range hull(Range a, Range b) { return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)}; }
Range plus(Range a, Range b) { return {a.lo + b.lo, a.hi + b.hi}; }
Range shift(Range a, double s) { return {a.lo + s, a.hi + s}; }
Range scaled(Range a, double s) { return s >= 0 ? Range{a.lo * s, a.hi * s} : Range{a.hi * s, a.lo * s}; }
Range times(Range a, Range b) {
  const double p[] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  return {*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
}
// Division by a value known to be positive.
Range over_positive(Range a, Range d) { return times(a, Range{1 / d.hi, 1 / d.lo}); }
Range absolute(Range a) {
  double low = a.lo >= 0 ? a.lo : a.hi <= 0 ? -a.hi : 0.0;
  return {low, a.magnitude()};
}
template <typename F>
Range increasing(Range a, F f) {
  return {f(a.lo), f(a.hi)};
}
// Functions with a single minimum below zero (gelu, silu, mish, hardswish): at least `least`, and
// below the identity for positive arguments.
Range dip(Range a, double least) { return {a.lo >= 0 ? 0.0 : least, std::max(a.hi, 0.0)}; }

// Where a value lives. Full values broadcast against the program's shape (every dimension is 1 or
// the program's). Rows values are per-row results without keepdim (the program's shape minus its
// last dimension): they only meet each other, since broadcasting one against a full value would
// line it up with the wrong dimensions. Conditions are bool masks, read only by where and
// masked_fill.
enum class Space { Full, Rows, Condition };

struct ValueInfo {
  std::string name;
  Shape shape;
  Range range;
  Space space = Space::Full;
  bool is_input = false;
  int uses = 0;
};

enum class Layout { Contiguous, Transposed, Sliced, Strided };

struct InputSpec {
  int id = -1;
  Shape shape;
  Range range;
  Layout layout = Layout::Contiguous;
};

struct Step {
  int id = -1;
  Apply apply;
};

Shape broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto da = i < a.size() ? a[a.size() - 1 - i] : 1;
    auto db = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

std::string shape_text(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

const char* layout_text(Layout layout) {
  switch (layout) {
    case Layout::Transposed:
      return " transposed";
    case Layout::Sliced:
      return " sliced (narrowed last dim)";
    case Layout::Strided:
      return " strided (every other element of the last dim)";
    default:
      return "";
  }
}

class ProgramBuilder : SeededDraws {
 public:
  ProgramBuilder(std::mt19937_64& rng, std::uint64_t seed, c10::ScalarType dtype)
      : SeededDraws(rng), rng_(rng), seed_(seed), dtype_(dtype) {}

  /// A draft: the program with its inputs on the CPU, and the recipe of its device inputs.
  RandomProgram build() {
    shape_ = choose_shape();
    const int extra_inputs = static_cast<int>(below(4));
    add_input(shape_, {-2, 2});  // one full input, so that the program spans the whole shape
    for (int k = 0; k < extra_inputs; ++k) add_input(broadcast_variant(), {-2, 2});
    const int ops = 3 + static_cast<int>(below(10));
    // The reduction and its epilogue take two of the ops, so it starts at the last-but-one at latest.
    const int reduce_at = chance(0.5) ? static_cast<int>(below(static_cast<std::uint64_t>(ops - 1))) : -1;
    for (int k = 0; k < ops; ++k) {
      if (k == reduce_at) {
        row_reduction();
        ++k;
      } else {
        random_op(pick_operand());
      }
    }
    choose_outputs();
    return finish();
  }

  /// The draft's inputs of draw `draw` (0: `inputs`, then `fresh_inputs`) made again on `device`,
  /// from the same values and with the same layouts.
  std::vector<at::Tensor> inputs_on(c10::Device device, std::size_t draw) const {
    std::vector<at::Tensor> inputs;
    for (std::size_t k = 0; k < inputs_.size(); ++k) inputs.push_back(view_of(inputs_[k], bases_[draw][k].to(device)));
    return inputs;
  }

 private:
  // Rank 1 to 4 of at most 16384 elements, with sizes of 1 and odd sizes among them; row lengths
  // from 1 to 512, crossing a warp, a vector width and a block.
  Shape choose_shape() {
    const std::size_t rank = 1 + below(4);
    Shape shape(rank);
    shape.back() = pick<std::int64_t>({1, 7, 8, 33, 64, 128, 255, 512});
    std::int64_t numel = shape.back();
    for (std::size_t d = 0; d + 1 < rank; ++d) {
      std::vector<std::int64_t> fitting;
      for (std::int64_t size : {1, 2, 3, 4, 7, 16, 33}) {
        if (numel * size <= 16384) fitting.push_back(size);
      }
      shape[d] = fitting[below(fitting.size())];
      numel *= shape[d];
    }
    return shape;
  }

  // A shape that broadcasts to the program's: [N], [1, ..., N], [M, 1] (one value per row), the
  // full shape with dimensions set to 1, or a suffix of it.
  Shape broadcast_variant() {
    Shape shape = shape_;
    switch (below(6)) {
      case 0:
      case 1:
        return shape;
      case 2:
        return {shape_.back()};
      case 3:
        std::fill(shape.begin(), shape.end() - 1, 1);
        return shape;
      case 4:
        shape.back() = 1;
        return shape;
      default: {
        for (auto& size : shape) {
          if (chance(0.4)) size = 1;
        }
        const auto drop = below(shape.size());
        return Shape(shape.begin() + static_cast<std::ptrdiff_t>(drop), shape.end());
      }
    }
  }

  int add_value(const std::string& text, Shape shape, Range range, Space space, bool is_input) {
    int id = static_cast<int>(values_.size());
    ValueInfo info;
    info.name = "v" + std::to_string(id);
    info.shape = std::move(shape);
    info.range = range;
    info.space = space;
    info.is_input = is_input;
    values_.push_back(info);
    lines_.push_back("  " + values_.back().name + " = " + text);
    return id;
  }

  int add_input(Shape shape, Range range) {
    InputSpec spec;
    spec.shape = shape;
    spec.range = range;
    // About a third of the inputs are views that are not contiguous; a transpose needs two
    // dimensions that are not both 1 to change anything.
    if (chance(0.3)) {
      const bool can_transpose = shape.size() >= 2 && (shape[shape.size() - 1] > 1 || shape[shape.size() - 2] > 1);
      auto choice = below(3);
      spec.layout = choice == 0 && can_transpose ? Layout::Transposed : choice == 1 ? Layout::Strided : Layout::Sliced;
    }
    std::string text = "input " + std::to_string(inputs_.size()) + ": " + c10::toString(dtype_) + shape_text(shape) +
                       layout_text(spec.layout) + ", uniform in [" + number(range.lo) + ", " + number(range.hi) + "]";
    spec.id = add_value(text, std::move(shape), range, Space::Full, true);
    inputs_.push_back(spec);
    return spec.id;
  }

  // Appends `op(operands..., args)` computed by `apply`.
  int emit(const std::string& op, const std::vector<int>& operands, const std::string& args, Shape shape, Range range,
           Space space, Apply apply) {
    std::string text = op + "(";
    for (std::size_t i = 0; i < operands.size(); ++i) {
      text += (i ? ", " : "") + values_[operands[i]].name;
      values_[operands[i]].uses += 1;
    }
    if (!args.empty()) text += (operands.empty() ? "" : ", ") + args;
    text += ")";
    int id = add_value(text, std::move(shape), range, space, false);
    steps_.push_back(Step{id, std::move(apply)});
    return id;
  }

  const ValueInfo& info(int id) const { return values_[id]; }

  int unary(int a, const std::string& op, const std::string& args, Range range,
            std::function<at::Tensor(const at::Tensor&)> f) {
    if (range.magnitude() > kLimit) return -1;
    return emit(op, {a}, args, info(a).shape, range, info(a).space, [a, f](const Values& v) { return f(v[a]); });
  }

  int binary(int a, int b, const std::string& op, const std::string& args, Range range,
             std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> f) {
    if (range.magnitude() > kLimit) return -1;
    return emit(op, {a, b}, args, broadcast(info(a).shape, info(b).shape), range, info(a).space,
                [a, b, f](const Values& v) { return f(v[a], v[b]); });
  }

  // A value of at least `floor` made from `a`, for the ops that need a positive argument: `a`
  // itself when it is, else abs(a) + floor.
  Range positive_range(int a, double floor = 1) const {
    return info(a).range.lo >= floor ? info(a).range : shift(absolute(info(a).range), floor);
  }
  int positive(int a, double floor = 1) {
    if (info(a).range.lo >= floor) return a;
    int m = emit("abs", {a}, "", info(a).shape, absolute(info(a).range), info(a).space,
                 [a](const Values& v) { return at::abs(v[a]); });
    return emit("add", {m}, number(floor), info(m).shape, shift(info(m).range, floor), info(m).space,
                [m, floor](const Values& v) { return at::add(v[m], floor); });
  }

  // The most recent value half of the time (chains grow deep), any earlier one otherwise (values
  // are read again, so groups get several outputs and several readers).
  int pick_operand() {
    std::vector<int> candidates;
    for (std::size_t id = 0; id < values_.size(); ++id) {
      if (values_[id].space != Space::Condition) candidates.push_back(static_cast<int>(id));
    }
    return chance(0.5) ? candidates.back() : candidates[below(candidates.size())];
  }

  int partner(int a) {
    std::vector<int> candidates;
    for (std::size_t id = 0; id < values_.size(); ++id) {
      if (values_[id].space == info(a).space) candidates.push_back(static_cast<int>(id));
    }
    return candidates[below(candidates.size())];
  }

  int random_op(int a) {
    for (int attempt = 0; attempt < 24; ++attempt) {
      auto category = below(100);
      int made = category < 38   ? try_unary(a)
                 : category < 68 ? try_binary(a)
                 : category < 80 ? try_scalar(a)
                 : category < 90 ? try_select(a)
                                 : try_ternary(a);
      if (made >= 0) return made;
    }
    // Every draw would have left the range: squash instead.
    return unary(a, "tanh", "", increasing(info(a).range, [](double x) { return std::tanh(x); }),
                 [](const at::Tensor& x) { return at::tanh(x); });
  }

  int try_unary(int a) {
    const Range r = info(a).range;
    switch (below(22)) {
      case 0:
        return unary(a, "relu", "", increasing(r, [](double x) { return std::max(x, 0.0); }),
                     [](const at::Tensor& x) { return at::relu(x); });
      case 1:
        return unary(a, "gelu", "", dip(r, -0.2), [](const at::Tensor& x) { return at::gelu(x); });
      case 2:
        return unary(a, "gelu", "approximate='tanh'", dip(r, -0.2),
                     [](const at::Tensor& x) { return at::gelu(x, "tanh"); });
      case 3:
        return unary(a, "silu", "", dip(r, -0.3), [](const at::Tensor& x) { return at::silu(x); });
      case 4:
        return unary(a, "sigmoid", "", increasing(r, [](double x) { return 1 / (1 + std::exp(-x)); }),
                     [](const at::Tensor& x) { return at::sigmoid(x); });
      case 5:
        return unary(a, "tanh", "", increasing(r, [](double x) { return std::tanh(x); }),
                     [](const at::Tensor& x) { return at::tanh(x); });
      case 6: {
        // exp only of arguments within [-2, 2]; larger ones are squashed by tanh first.
        auto e = [](double x) { return std::exp(x); };
        if (r.magnitude() <= 2)
          return unary(a, "exp", "", increasing(r, e), [](const at::Tensor& x) { return at::exp(x); });
        int t = unary(a, "tanh", "", increasing(r, [](double x) { return std::tanh(x); }),
                      [](const at::Tensor& x) { return at::tanh(x); });
        return unary(t, "exp", "", increasing(info(t).range, e), [](const at::Tensor& x) { return at::exp(x); });
      }
      case 7: {
        // Of at least 2: near 1, log's result is small next to the rounding of its argument, so
        // eager's own error (rounding that argument) would be what the comparison measures.
        int p = positive(a, 2);
        return unary(p, "log", "", increasing(info(p).range, [](double x) { return std::log(x); }),
                     [](const at::Tensor& x) { return at::log(x); });
      }
      case 8: {
        int p = positive(a);
        return unary(p, "sqrt", "", increasing(info(p).range, [](double x) { return std::sqrt(x); }),
                     [](const at::Tensor& x) { return at::sqrt(x); });
      }
      case 9: {
        Range p = positive_range(a);
        int q = positive(a);
        return unary(q, "rsqrt", "", {1 / std::sqrt(p.hi), 1 / std::sqrt(p.lo)},
                     [](const at::Tensor& x) { return at::rsqrt(x); });
      }
      case 10: {
        Range p = positive_range(a);
        int q = positive(a);
        return unary(q, "reciprocal", "", {1 / p.hi, 1 / p.lo}, [](const at::Tensor& x) { return at::reciprocal(x); });
      }
      case 11: {
        Range sq = absolute(r);
        return unary(a, "pow", "2", {sq.lo * sq.lo, sq.hi * sq.hi}, [](const at::Tensor& x) { return at::pow(x, 2); });
      }
      case 12: {
        // pow 1.5 of a negative number is NaN: of abs(a) unless a is known not negative.
        Range m = absolute(r);
        if (std::pow(m.hi, 1.5) > kLimit) return -1;
        int base = a;
        if (r.lo < 0) {
          base = emit("abs", {a}, "", info(a).shape, m, info(a).space, [a](const Values& v) { return at::abs(v[a]); });
        }
        return unary(base, "pow", "1.5", {std::pow(m.lo, 1.5), std::pow(m.hi, 1.5)},
                     [](const at::Tensor& x) { return at::pow(x, 1.5); });
      }
      case 13: {
        const double beta = pick({1.0, 2.0});
        auto f = [beta](double x) { return std::log1p(std::exp(beta * x)) / beta; };
        return unary(a, "softplus", "beta=" + number(beta), increasing(r, f),
                     [beta](const at::Tensor& x) { return at::softplus(x, beta, 20); });
      }
      case 14: {
        const double slope = pick({0.01, 0.2});
        return unary(a, "leaky_relu", number(slope), increasing(r, [slope](double x) { return x > 0 ? x : x * slope; }),
                     [slope](const at::Tensor& x) { return at::leaky_relu(x, slope); });
      }
      case 15:
        return unary(a, "hardswish", "", dip(r, -0.375), [](const at::Tensor& x) { return at::hardswish(x); });
      case 16: {
        const double alpha = pick({1.0, 0.5});
        auto f = [alpha](double x) { return x > 0 ? x : alpha * std::expm1(x); };
        return unary(a, "elu", "alpha=" + number(alpha), increasing(r, f),
                     [alpha](const at::Tensor& x) { return at::elu(x, alpha); });
      }
      case 17:
        return unary(a, "mish", "", dip(r, -0.31), [](const at::Tensor& x) { return at::mish(x); });
      case 18:
        return unary(a, "abs", "", absolute(r), [](const at::Tensor& x) { return at::abs(x); });
      case 19:
        return unary(a, "neg", "", scaled(r, -1), [](const at::Tensor& x) { return at::neg(x); });
      case 20: {
        const double lo = pick({-1.5, -0.5}), hi = pick({0.5, 1.0, 2.0});
        auto clip = [lo, hi](double x) { return std::min(std::max(x, lo), hi); };
        return unary(a, "clamp", "min=" + number(lo) + ", max=" + number(hi), increasing(r, clip),
                     [lo, hi](const at::Tensor& x) {
                       return at::clamp(x, std::optional<at::Scalar>(lo), std::optional<at::Scalar>(hi));
                     });
      }
      default: {
        // One-sided clamps (clamp_min and clamp_max in the IR, or clamp with a None bound).
        const bool lower = chance(0.5);
        const double bound = pick({-0.5, 0.25, 1.0});
        if (lower) {
          return unary(
              a, "clamp", "min=" + number(bound), increasing(r, [bound](double x) { return std::max(x, bound); }),
              [bound](const at::Tensor& x) { return at::clamp(x, std::optional<at::Scalar>(bound), std::nullopt); });
        }
        return unary(
            a, "clamp", "max=" + number(bound), increasing(r, [bound](double x) { return std::min(x, bound); }),
            [bound](const at::Tensor& x) { return at::clamp(x, std::nullopt, std::optional<at::Scalar>(bound)); });
      }
    }
  }

  int try_binary(int a) {
    const int b = partner(a);
    const Range ra = info(a).range, rb = info(b).range;
    switch (below(7)) {
      case 0: {
        const double alpha = pick({1.0, 1.0, 0.5});
        return binary(a, b, "add", alpha == 1 ? "" : "alpha=" + number(alpha), plus(ra, scaled(rb, alpha)),
                      [alpha](const at::Tensor& x, const at::Tensor& y) { return at::add(x, y, alpha); });
      }
      case 1: {
        const double alpha = pick({1.0, 1.0, 2.0});
        return binary(a, b, "sub", alpha == 1 ? "" : "alpha=" + number(alpha), plus(ra, scaled(rb, -alpha)),
                      [alpha](const at::Tensor& x, const at::Tensor& y) { return at::sub(x, y, alpha); });
      }
      case 2:
        return binary(a, b, "mul", "", times(ra, rb),
                      [](const at::Tensor& x, const at::Tensor& y) { return at::mul(x, y); });
      case 3: {
        // Division by a value kept away from zero.
        Range d = rb.lo >= 0.5 ? rb : positive_range(b);
        if (over_positive(ra, d).magnitude() > kLimit) return -1;
        int q = rb.lo >= 0.5 ? b : positive(b);
        return binary(a, q, "div", "", over_positive(ra, d),
                      [](const at::Tensor& x, const at::Tensor& y) { return at::div(x, y); });
      }
      case 4:
        return binary(a, b, "maximum", "", {std::max(ra.lo, rb.lo), std::max(ra.hi, rb.hi)},
                      [](const at::Tensor& x, const at::Tensor& y) { return at::maximum(x, y); });
      case 5:
        return binary(a, b, "minimum", "", {std::min(ra.lo, rb.lo), std::min(ra.hi, rb.hi)},
                      [](const at::Tensor& x, const at::Tensor& y) { return at::minimum(x, y); });
      default: {
        // One node reading one value twice.
        return binary(a, a, "mul", "", times(ra, ra),
                      [](const at::Tensor& x, const at::Tensor& y) { return at::mul(x, y); });
      }
    }
  }

  int try_scalar(int a) {
    const Range r = info(a).range;
    const double c = pick({0.5, -1.25, 2.0, 3.0, -0.75});
    auto with = [&](const char* op, Range range, std::function<at::Tensor(const at::Tensor&)> f) {
      return unary(a, op, number(c), range, std::move(f));
    };
    switch (below(5)) {
      case 0:
        return with("add", shift(r, c), [c](const at::Tensor& x) { return at::add(x, c); });
      case 1:
        return with("sub", shift(r, -c), [c](const at::Tensor& x) { return at::sub(x, c); });
      case 2:
        return with("mul", scaled(r, c), [c](const at::Tensor& x) { return at::mul(x, c); });
      case 3:
        return with("div", scaled(r, 1 / c), [c](const at::Tensor& x) { return at::div(x, c); });
      default:
        return with("rsub", shift(scaled(r, -1), c), [c](const at::Tensor& x) { return at::rsub(x, c); });
    }
  }

  // A bool mask from comparing inputs (against a constant or another input) whose shape fits
  // into `target` when one is given. Only inputs: the kernel compares float32 intermediates that
  // eager would have rounded first, so a comparison of a computed value could flip, and where()
  // would then pick a different branch in a way no tolerance covers. Inputs are loaded exactly,
  // and the thresholds are exact in every dtype.
  int condition(const Shape* target) {
    std::vector<int> candidates;
    for (std::size_t id = 0; id < values_.size(); ++id) {
      const auto& v = values_[id];
      if (v.is_input && v.space == Space::Full && (target == nullptr || broadcast(v.shape, *target) == *target)) {
        candidates.push_back(static_cast<int>(id));
      }
    }
    if (candidates.empty()) return -1;
    const int x = candidates[below(candidates.size())];
    const auto which = below(4);
    const char* names[] = {"gt", "lt", "ge", "le"};
    if (chance(0.6) || candidates.size() < 2) {
      const double threshold = pick({0.0, 0.5, -0.25, 1.0});
      return emit(names[which], {x}, number(threshold), info(x).shape, {0, 1}, Space::Condition,
                  [x, which, threshold](const Values& v) {
                    switch (which) {
                      case 0:
                        return at::gt(v[x], threshold);
                      case 1:
                        return at::lt(v[x], threshold);
                      case 2:
                        return at::ge(v[x], threshold);
                      default:
                        return at::le(v[x], threshold);
                    }
                  });
    }
    const int y = candidates[below(candidates.size())];
    return emit(names[which], {x, y}, "", broadcast(info(x).shape, info(y).shape), {0, 1}, Space::Condition,
                [x, y, which](const Values& v) {
                  switch (which) {
                    case 0:
                      return at::gt(v[x], v[y]);
                    case 1:
                      return at::lt(v[x], v[y]);
                    case 2:
                      return at::ge(v[x], v[y]);
                    default:
                      return at::le(v[x], v[y]);
                  }
                });
  }

  int try_select(int a) {
    if (info(a).space != Space::Full) return -1;
    if (chance(0.5)) {
      const int b = partner(a);
      const int c = condition(nullptr);
      Shape shape = broadcast(broadcast(info(c).shape, info(a).shape), info(b).shape);
      return emit("where", {c, a, b}, "", std::move(shape), hull(info(a).range, info(b).range), Space::Full,
                  [a, b, c](const Values& v) { return at::where(v[c], v[a], v[b]); });
    }
    // masked_fill keeps self's shape, so the mask must broadcast into it.
    const Shape target = info(a).shape;
    const int c = condition(&target);
    if (c < 0) return -1;
    const double fill = pick({0.0, -1.0, 0.5, 2.0});
    return emit("masked_fill", {a, c}, number(fill), target, hull(info(a).range, {fill, fill}), Space::Full,
                [a, c, fill](const Values& v) { return at::masked_fill(v[a], v[c], fill); });
  }

  int try_ternary(int a) {
    const int b = partner(a);
    const Range ra = info(a).range, rb = info(b).range;
    switch (below(3)) {
      case 0: {
        const double w = pick({0.25, 0.75});
        return binary(a, b, "lerp", "weight=" + number(w), hull(ra, rb),
                      [w](const at::Tensor& x, const at::Tensor& y) { return at::lerp(x, y, w); });
      }
      case 1: {
        // A tensor weight within [0, 1] keeps the result between the ends.
        const int c = partner(a);
        int w = unary(c, "sigmoid", "", increasing(info(c).range, [](double x) { return 1 / (1 + std::exp(-x)); }),
                      [](const at::Tensor& x) { return at::sigmoid(x); });
        Shape shape = broadcast(broadcast(info(a).shape, info(b).shape), info(w).shape);
        return emit("lerp", {a, b, w}, "", std::move(shape), hull(ra, rb), info(a).space,
                    [a, b, w](const Values& v) { return at::lerp(v[a], v[b], v[w]); });
      }
      default: {
        const int c = partner(a);
        const double value = pick({0.5, -1.0});
        Range range = plus(ra, scaled(times(rb, info(c).range), value));
        if (range.magnitude() > kLimit) return -1;
        Shape shape = broadcast(broadcast(info(a).shape, info(b).shape), info(c).shape);
        return emit("addcmul", {a, b, c}, "value=" + number(value), std::move(shape), range, info(a).space,
                    [a, b, c, value](const Values& v) { return at::addcmul(v[a], v[b], v[c], value); });
      }
    }
  }

  // One reduction or normalization over the last dimension, and an elementwise epilogue reading
  // its result.
  void row_reduction() {
    has_reduction_ = true;
    const std::int64_t n = shape_.back();
    enum Kind { Sum, Mean, Amax, Amin, Var, Std, Softmax, LogSoftmax, LayerNorm, RmsNorm };
    auto kind = static_cast<Kind>(below(10));
    // On the CPU, eager computes the variance of a tensor holding one row through .item()
    // (a whole-tensor fast path), which a trace cannot hold; the CPU test captures every program.
    std::int64_t numel = 1;
    for (auto size : shape_) numel *= size;
    if ((kind == Var || kind == Std) && numel == n) kind = Mean;
    // The most recent full value.
    int v = -1;
    for (int id = static_cast<int>(values_.size()) - 1; id >= 0 && v < 0; --id) {
      if (values_[id].space == Space::Full) v = id;
    }
    // The reduced value spans the whole shape. Variance and the norms divide by the spread of a
    // row, which amplifies the rounding of nearly constant rows without bound; adding a fresh
    // input (a residual) keeps every row's spread at least that input's.
    const bool divides_by_spread = kind == Var || kind == Std || kind == LayerNorm || kind == RmsNorm;
    int x = v;
    if (info(v).shape != shape_ || divides_by_spread) {
      const int fresh = add_input(shape_, {-2, 2});
      x = emit("add", {v, fresh}, "", shape_, plus(info(v).range, info(fresh).range), Space::Full,
               [v, fresh](const Values& values) { return at::add(values[v], values[fresh]); });
    }
    const Range r = info(x).range;
    const bool keepdim = chance(0.6);
    Shape reduced = shape_;
    if (keepdim) {
      reduced.back() = 1;
    } else {
      reduced.pop_back();
    }
    const Space reduced_space = keepdim ? Space::Full : Space::Rows;
    const std::string keep = keepdim ? ", keepdim=True" : "";
    // A row of one element has no unbiased variance (eager divides by zero).
    const bool unbiased = n > 1 && chance(0.5);
    const std::string correction = unbiased ? "" : ", unbiased=False";
    // Rows of random values rarely reach 4 standard deviations; using sqrt(n), the bound for any
    // row, would make every op after a norm of a long row a squashing one.
    const double spread = std::min(std::sqrt(static_cast<double>(n)), 4.0);
    int result = -1;
    switch (kind) {
      case Sum: {
        result = emit("sum", {x}, "dim=-1" + keep, reduced, scaled(r, static_cast<double>(n)), reduced_space,
                      [x, keepdim](const Values& values) { return at::sum(values[x], {-1}, keepdim); });
        if (info(result).range.magnitude() > kLimit) {
          const double inverse = 1.0 / static_cast<double>(n);
          const int s = result;
          result = emit("mul", {s}, number(inverse), reduced, r, reduced_space,
                        [s, inverse](const Values& values) { return at::mul(values[s], inverse); });
        }
        break;
      }
      case Mean:
        result = emit("mean", {x}, "dim=-1" + keep, reduced, r, reduced_space,
                      [x, keepdim](const Values& values) { return at::mean(values[x], {-1}, keepdim); });
        break;
      case Amax:
        result = emit("amax", {x}, "dim=-1" + keep, reduced, r, reduced_space,
                      [x, keepdim](const Values& values) { return at::amax(values[x], {-1}, keepdim); });
        break;
      case Amin:
        result = emit("amin", {x}, "dim=-1" + keep, reduced, r, reduced_space,
                      [x, keepdim](const Values& values) { return at::amin(values[x], {-1}, keepdim); });
        break;
      case Var:
      case Std: {
        const double width = r.hi - r.lo;
        const double var_bound = width * width / 4 * (unbiased ? 2.0 : 1.0);
        const bool is_std = kind == Std;
        result = emit(is_std ? "std" : "var", {x}, "dim=-1" + correction + keep, reduced,
                      {0, is_std ? std::sqrt(var_bound) : var_bound}, reduced_space,
                      [x, keepdim, unbiased, is_std](const Values& values) {
                        return is_std ? at::std(values[x], {-1}, unbiased, keepdim)
                                      : at::var(values[x], {-1}, unbiased, keepdim);
                      });
        break;
      }
      case Softmax:
        result = emit("softmax", {x}, "dim=-1", shape_, {0, 1}, Space::Full,
                      [x](const Values& values) { return at::softmax(values[x], -1); });
        break;
      case LogSoftmax:
        result = emit("log_softmax", {x}, "dim=-1", shape_, {-(r.hi - r.lo) - std::log(static_cast<double>(n)), 0},
                      Space::Full, [x](const Values& values) { return at::log_softmax(values[x], -1); });
        break;
      case LayerNorm: {
        const int w = add_input({n}, {0.5, 1.5});
        const bool with_bias = chance(0.7);
        const int b = with_bias ? add_input({n}, {-0.5, 0.5}) : -1;
        const Range y = {-(spread * 1.5 + 0.5), spread * 1.5 + 0.5};
        std::vector<int> operands = {x, w};
        if (with_bias) operands.push_back(b);
        result = emit("layer_norm", operands, "normalized_shape=[" + std::to_string(n) + "], eps=1e-05", shape_, y,
                      Space::Full, [x, w, b, n](const Values& values) {
                        auto bias = b >= 0 ? std::optional<at::Tensor>(values[b]) : std::nullopt;
                        return at::layer_norm(values[x], {n}, values[w], bias, 1e-5);
                      });
        break;
      }
      case RmsNorm: {
        // LLaMA's RMSNorm spelled out, as models write it.
        const int w = add_input({n}, {0.5, 1.5});
        Range sq = absolute(r);
        sq = {sq.lo * sq.lo, sq.hi * sq.hi};
        int p =
            emit("pow", {x}, "2", shape_, sq, Space::Full, [x](const Values& values) { return at::pow(values[x], 2); });
        Shape rows = shape_;
        rows.back() = 1;
        int m = emit("mean", {p}, "dim=-1, keepdim=True", rows, sq, Space::Full,
                     [p](const Values& values) { return at::mean(values[p], {-1}, true); });
        int e = emit("add", {m}, "1e-06", rows, shift(sq, 1e-6), Space::Full,
                     [m](const Values& values) { return at::add(values[m], 1e-6); });
        int s = emit("rsqrt", {e}, "", rows, {1 / std::sqrt(sq.hi + 1e-6), 1 / std::sqrt(sq.lo + 1e-6)}, Space::Full,
                     [e](const Values& values) { return at::rsqrt(values[e]); });
        int y = emit("mul", {x, s}, "", shape_, {-spread, spread}, Space::Full,
                     [x, s](const Values& values) { return at::mul(values[x], values[s]); });
        result = emit("mul", {y, w}, "", shape_, {-spread * 1.5, spread * 1.5}, Space::Full,
                      [y, w](const Values& values) { return at::mul(values[y], values[w]); });
        break;
      }
    }
    const char* names[] = {"sum", "mean",    "amax",        "amin",       "var",
                           "std", "softmax", "log_softmax", "layer_norm", "rms_norm"};
    reduction_name_ = names[kind];
    if (kind == Softmax || kind == LogSoftmax || kind == LayerNorm || kind == RmsNorm || !keepdim) {
      random_op(result);
    } else {
      per_row_epilogue(x, result);
    }
  }

  // A per-row value (keepdim) broadcast against the full value it was reduced from.
  void per_row_epilogue(int x, int per_row) {
    const Range rx = info(x).range, rr = info(per_row).range;
    auto both = [&](const char* op, Range range, std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> f) {
      return binary(x, per_row, op, "", range, std::move(f));
    };
    for (int attempt = 0; attempt < 16; ++attempt) {
      int made = -1;
      switch (below(7)) {
        case 0:
          made = both("sub", plus(rx, scaled(rr, -1)),
                      [](const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b); });
          break;
        case 1:
          made = both("add", plus(rx, rr), [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); });
          break;
        case 2:
          made = both("mul", times(rx, rr), [](const at::Tensor& a, const at::Tensor& b) { return at::mul(a, b); });
          break;
        case 3:
          made = both("maximum", {std::max(rx.lo, rr.lo), std::max(rx.hi, rr.hi)},
                      [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); });
          break;
        case 4:
          made = both("minimum", {std::min(rx.lo, rr.lo), std::min(rx.hi, rr.hi)},
                      [](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); });
          break;
        case 5: {
          const Shape target = shape_;
          const int c = condition(&target);
          if (c < 0) break;
          made = emit("where", {c, x, per_row}, "", shape_, hull(rx, rr), Space::Full,
                      [c, x, per_row](const Values& v) { return at::where(v[c], v[x], v[per_row]); });
          break;
        }
        default:
          break;
      }
      if (made >= 0) return;
    }
    // Always tame: x / (|per_row| + 1).
    Range d = positive_range(per_row);
    int q = positive(per_row);
    binary(x, q, "div", "", over_positive(rx, d),
           [](const at::Tensor& a, const at::Tensor& b) { return at::div(a, b); });
  }

  // The last value, and up to two more: half of the time one that later ops also read, so that a
  // group has to store a value it also uses.
  void choose_outputs() {
    auto computed = [&](int id) { return !values_[id].is_input && values_[id].space != Space::Condition; };
    int last = static_cast<int>(values_.size()) - 1;
    while (!computed(last)) --last;
    outputs_ = {last};
    const auto extra = below(3);
    for (std::uint64_t k = 0; k < extra; ++k) {
      const bool read_later = chance(0.5);
      std::vector<int> candidates;
      for (int id = 0; id < static_cast<int>(values_.size()); ++id) {
        if (computed(id) && std::find(outputs_.begin(), outputs_.end(), id) == outputs_.end() &&
            (!read_later || values_[id].uses > 0)) {
          candidates.push_back(id);
        }
      }
      if (!candidates.empty()) outputs_.push_back(candidates[below(candidates.size())]);
    }
  }

  // The storage an input is a view of: values drawn on the CPU in float32, so that they do not
  // depend on the device, then rounded to the dtype.
  at::Tensor make_base(const InputSpec& spec, at::Generator& generator) const {
    Shape base = spec.shape;
    const auto rank = base.size();
    switch (spec.layout) {
      case Layout::Transposed:
        std::swap(base[rank - 1], base[rank - 2]);
        break;
      case Layout::Sliced:
        base.back() += 3;
        break;
      case Layout::Strided:
        base.back() *= 2;
        break;
      default:
        break;
    }
    auto values = at::rand(base, generator, at::TensorOptions().dtype(at::kFloat));
    return (values * (spec.range.hi - spec.range.lo) + spec.range.lo).to(dtype_);
  }

  // The view is taken on the device: moving a view that is not dense makes a contiguous copy.
  static at::Tensor view_of(const InputSpec& spec, const at::Tensor& base) {
    const std::int64_t n = spec.shape.back();
    switch (spec.layout) {
      case Layout::Transposed:
        return base.transpose(-2, -1);
      case Layout::Sliced:
        return base.narrow(-1, 1, n);
      case Layout::Strided:
        return base.slice(-1, 0, 2 * n, 2);
      default:
        return base;
    }
  }

  RandomProgram finish() {
    RandomProgram program;
    program.seed = seed_;
    program.dtype = dtype_;
    program.has_reduction = has_reduction_;
    // Draw 0 first, so that a seed's `inputs` are what they were before fresh draws existed.
    auto generator = at::make_generator<at::CPUGeneratorImpl>(rng_());
    bases_.resize(1 + kFreshInputDraws);
    for (std::size_t draw = 0; draw < bases_.size(); ++draw) {
      std::vector<at::Tensor> inputs;
      for (const auto& spec : inputs_) {
        bases_[draw].push_back(make_base(spec, generator));
        inputs.push_back(view_of(spec, bases_[draw].back()));
      }
      if (draw == 0) program.inputs = std::move(inputs);
      else program.fresh_inputs.push_back(std::move(inputs));
    }

    std::vector<int> input_ids;
    for (const auto& spec : inputs_) input_ids.push_back(spec.id);
    auto steps = std::make_shared<const std::vector<Step>>(std::move(steps_));
    const std::size_t count = values_.size();
    program.run = [steps, input_ids, outputs = outputs_, count](const std::vector<at::Tensor>& args) {
      TORCH_CHECK(args.size() == input_ids.size(), "random program: expected ", input_ids.size(), " inputs, got ",
                  args.size());
      Values values(count);
      for (std::size_t k = 0; k < args.size(); ++k) values[input_ids[k]] = args[k];
      for (const auto& step : *steps) values[step.id] = step.apply(values);
      std::vector<at::Tensor> results;
      for (int id : outputs) results.push_back(values[id]);
      return results;
    };

    std::ostringstream text;
    text << "random program: seed " << seed_ << ", " << c10::toString(dtype_) << ", shape " << shape_text(shape_)
         << ", " << inputs_.size() << " inputs, " << steps->size() << " ops"
         << (has_reduction_ ? ", row reduction " + reduction_name_ : std::string(", elementwise only"))
         << "; rebuild it with " << rebuild_call("make_random_program", seed_, dtype_) << "\n";
    for (const auto& line : lines_) text << line << "\n";
    text << "  outputs:";
    for (int id : outputs_) text << " " << values_[id].name;
    text << "\n";
    program.description = text.str();
    return program;
  }

  std::mt19937_64& rng_;
  std::uint64_t seed_;
  c10::ScalarType dtype_;
  Shape shape_;
  std::vector<ValueInfo> values_;
  std::vector<InputSpec> inputs_;
  std::vector<std::vector<at::Tensor>> bases_;  // per draw of the inputs, per input
  std::vector<Step> steps_;
  std::vector<std::string> lines_;
  std::vector<int> outputs_;
  bool has_reduction_ = false;
  std::string reduction_name_;
};

}  // namespace

RandomProgram make_random_program(std::uint64_t seed, c10::ScalarType dtype, c10::Device device) {
  std::mt19937_64 rng(seed);
  std::string rejected;
  for (int draw = 0; draw < 32; ++draw) {
    ProgramBuilder builder(rng, seed, dtype);
    auto program = builder.build();
    auto why = ill_conditioned(program);
    if (!why.empty()) {
      rejected += "\n  draw " + std::to_string(draw) + ": " + why;
      continue;
    }
    program.inputs = builder.inputs_on(device, 0);
    for (std::size_t draw = 0; draw < program.fresh_inputs.size(); ++draw)
      program.fresh_inputs[draw] = builder.inputs_on(device, draw + 1);
    if (draw > 0)
      program.description += "  (draw " + std::to_string(draw) + " of this seed; earlier ones were ill-conditioned)\n";
    return program;
  }
  throw std::runtime_error("make_random_program: no well-conditioned program for seed " + std::to_string(seed) +
                           rejected);
}

}  // namespace zenith::testing
