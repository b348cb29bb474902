#include "backends/cuda/reduction_codegen.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/cuda/expression_rules.h"
#include "backends/cuda/operand_checks.h"
#include "backends/cuda/row_kernel_prelude.h"
#include "core/op_registry.h"
#include "core/row_reduction.h"

namespace zenith::cuda {
namespace {

using ir::RowReduction;

// Scalar values are one element, loaded once; full values have S's shape (or broadcast to it);
// row values hold one number per row.
enum class Domain { Scalar, Full, Row };

const char* domain_name(Domain domain) {
  switch (domain) {
    case Domain::Scalar: return "scalar";
    case Domain::Full: return "full";
    case Domain::Row: return "row";
  }
  return "?";
}

enum class Combine { Sum, Max, Min };

// A named float in the kernel: its domain and the number of reductions it waits for.
struct Named {
  std::string name;
  Domain domain = Domain::Full;
  int level = 0;
};

struct Statement {
  Domain domain;
  int level;
  std::string code;
};

// A block-wide reduction of a full value, run in phase `phase`.
struct Accumulation {
  int phase;
  std::string accumulator;
  std::string input;
  Combine combine;
};

struct Operand {
  int id;
  c10::ScalarType dtype;
  Domain domain;
  bool contiguous;  // full operands exactly S-shaped and row-major contiguous: offset row*length+j
  int dim_offset;
  std::uint32_t broadcast_mask;  // S dimensions where the operand has size 1 (or none)
};


const char* combine_functor(Combine combine) {
  switch (combine) {
    case Combine::Sum: return "ZnSum";
    case Combine::Max: return "ZnMax";
    case Combine::Min: return "ZnMin";
  }
  return "";
}

class Generator {
 public:
  explicit Generator(const ir::Graph& group) : group_(group) {}

  ReductionKernel run() {
    check_nodes();
    find_row_space();
    for (std::size_t k = 0; k < group_.inputs.size(); ++k) add_input(k);
    for (const auto& node : group_.nodes) add_node(node);
    for (int id : group_.outputs) add_output(id);
    kernel_.rank = static_cast<int>(shape_.size());
    kernel_.inner_rank = inner_;
    for (const auto& op : operands_) {
      kernel_.operands.push_back(op.id);
      kernel_.dim_offset.push_back(op.dim_offset);
    }
    kernel_.index64 = needs_64bit_offsets(group_, kernel_.operands, shape_);
    kernel_.key = key();
    kernel_.name = fmt::format("zenith_row_{:016x}", key_hash(kernel_.key));
    kernel_.source = source();
    return kernel_;
  }

 private:
  void check_nodes() const {
    check_group_shape(group_);
    for (const auto& node : group_.nodes) {
      if (ir::op_info(node.op).category == ir::OpCategory::Reduction) {
        if (!ir::row_reduction(group_, node)) {
          throw Unsupported{fmt::format("{} does not reduce over trailing dimensions with constant arguments",
                                        node.qualified_name())};
        }
      } else if (!has_expression_rule(node.qualified_name())) {
        throw Unsupported{fmt::format("{} is not an op the code generator knows", node.qualified_name())};
      }
    }
  }

  // S is the shape every reduction reads; all must span the same trailing dimensions.
  void find_row_space() {
    for (const auto& node : group_.nodes) {
      auto r = ir::row_reduction(group_, node);
      if (!r) continue;
      reduced_.insert(r->input);
      const auto& sizes = group_.value(r->input).type.sizes;
      if (inner_ == 0) {
        shape_ = sizes;
        inner_ = r->inner;
      } else if (sizes != shape_ || r->inner != inner_) {
        throw Unsupported{fmt::format("the group's reductions read different row spaces ([{}] over {} against [{}] over {})",
                                      fmt::join(sizes, ", "), r->inner, fmt::join(shape_, ", "), inner_)};
      }
    }
    if (inner_ == 0) throw Unsupported{"the group has no reduction over trailing dimensions"};
  }

  const ir::TensorType& type_of(int id) const { return group_.value(id).type; }

  // A float16 or bfloat16 value that a reduction reads is held as eager holds it, rounded to its
  // dtype where it is computed, for the reduction and every other reader alike (relu(x - amax(x))
  // stays 0). Smooth reductions hardly care; a softmax does where the rounding decides the row: a
  // float16 score plus float16's lowest (-65504, what models mask with) rounds to a multiple of
  // 32, so eager weighs a query whose every key is masked evenly, where float32 registers would
  // give the softmax of its scores.
  bool held_rounded(int id) const {
    const auto dtype = type_of(id).dtype;
    return reduced_.count(id) > 0 && (dtype == at::kHalf || dtype == at::kBFloat16);
  }

  Operand classify(int id, Domain domain) const {
    check_operand(group_, id);
    const auto& type = type_of(id);
    Operand op{id, type.dtype, domain, false, 0, 0};
    const int rank = static_cast<int>(shape_.size());
    const int own = static_cast<int>(type.rank());
    if (domain == Domain::Full) {
      if (own > rank) throw Unsupported{fmt::format("value %{} has more dimensions than the rows' space", id)};
      op.dim_offset = rank - own;
      op.contiguous = is_contiguous_over(type, shape_);
    }
    for (int d = 0; d < rank; ++d) {
      int mine = d - op.dim_offset;
      std::int64_t size = mine >= 0 && mine < own ? type.sizes[mine] : 1;
      if (size == 1 && shape_[d] != 1) op.broadcast_mask |= 1u << d;
    }
    return op;
  }

  void add_input(std::size_t k) {
    int id = group_.inputs[k];
    auto name = fmt::format("a{}", k);
    if (type_of(id).numel() == 1) {
      operands_.push_back(classify(id, Domain::Scalar));
      named_[id] = Named{name, Domain::Scalar, 0};
      return;
    }
    // Every other input is read per element of S: it must broadcast to S.
    const auto& sizes = type_of(id).sizes;
    if (sizes.size() > shape_.size()) throw Unsupported{fmt::format("input %{} has more dimensions than the rows", id)};
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      auto target = shape_[shape_.size() - sizes.size() + d];
      if (sizes[d] != target && sizes[d] != 1) {
        throw Unsupported{fmt::format("input %{} [{}] does not broadcast to the rows' space [{}]", id, fmt::join(sizes, ", "),
                                      fmt::join(shape_, ", "))};
      }
    }
    operands_.push_back(classify(id, Domain::Full));
    named_[id] = Named{name, Domain::Full, 0};
  }

  // x - statistic, never contracted into an fma with x's own last multiply: the statistic was
  // computed from x rounded to float, so the difference must be too (softmax of one element is
  // exactly 1, a constant row's layer_norm exactly 0).
  static std::string subtract(const std::string& x, const std::string& statistic) {
    return fmt::format("__fsub_rn({}, {})", x, statistic);
  }

  std::string fresh() { return fmt::format("t{}", next_name_++); }

  Named emit(Domain domain, int level, const std::string& expression) {
    auto name = fresh();
    statements_.push_back({domain, level, fmt::format("const float {} = {};", name, expression)});
    return Named{name, domain, level};
  }

  // A block-wide reduction of the full value `input`; returns the row value holding the result,
  // after `post` (with {} standing for the combined value).
  Named reduce(const Named& input, Combine combine, const std::string& post = "{}") {
    auto accumulator = fmt::format("acc{}", accumulations_.size());
    accumulations_.push_back({input.level, accumulator, input.name, combine});
    return emit(Domain::Row, input.level + 1, fmt::format(fmt::runtime(post), accumulator));
  }

  void add_node(const ir::Node& node) {
    if (auto r = ir::row_reduction(group_, node)) {
      add_reduction(node, *r);
    } else {
      add_elementwise(node);
    }
  }

  void add_reduction(const ir::Node& node, const RowReduction& r) {
    Named x = named_.at(r.input);
    if (x.domain == Domain::Scalar) x.domain = Domain::Full;  // a one-element row space
    if (x.domain != Domain::Full || type_of(r.input).sizes != shape_) {
      throw Unsupported{fmt::format("{} reads a value that is not of the rows' full shape", node.qualified_name())};
    }
    using Kind = RowReduction::Kind;
    const std::string count = "(float)row_length";
    Named result;
    switch (r.kind) {
      case Kind::Sum: result = reduce(x, Combine::Sum); break;
      case Kind::Mean: result = reduce(x, Combine::Sum, "{} / " + count); break;
      case Kind::Max: result = reduce(x, Combine::Max); break;
      case Kind::Min: result = reduce(x, Combine::Min); break;
      case Kind::Var:
      case Kind::Std: {
        // Two sweeps (mean, then squared deviations) are exact where one-pass sums of squares cancel.
        Named mean = reduce(x, Combine::Sum, "{} / " + count);
        Named deviation = emit(Domain::Full, mean.level, fmt::format("{0} * {0}", subtract(x.name, mean.name)));
        auto divide = fmt::format("{{}} / fmaxf({} - {}, 0.f)", count, float_literal(r.correction));
        result = reduce(deviation, Combine::Sum, r.kind == Kind::Std ? "sqrtf(" + divide + ")" : divide);
        break;
      }
      case Kind::Softmax:
      case Kind::LogSoftmax: {
        Named max = reduce(x, Combine::Max);
        Named shifted = emit(Domain::Full, max.level, subtract(x.name, max.name));
        Named exp = emit(Domain::Full, shifted.level, fmt::format("expf({})", shifted.name));
        Named sum = reduce(exp, Combine::Sum);
        result = r.kind == Kind::Softmax ? emit(Domain::Full, sum.level, fmt::format("{} / {}", exp.name, sum.name))
                                         : emit(Domain::Full, sum.level, fmt::format("{} - logf({})", shifted.name, sum.name));
        break;
      }
      case Kind::LayerNorm: result = layer_norm(node, x); break;
    }
    const int out = node.outputs.at(0);
    if (held_rounded(out)) {
      result = emit(result.domain, result.level, rounded(result.name, type_of(out).dtype));  // reduced again
    }
    named_[out] = Named{result.name, result.domain, result.level};
  }

  Named layer_norm(const ir::Node& node, const Named& x) {
    const std::string count = "(float)row_length";
    const auto* eps_arg = node.arg("eps");
    const auto* eps = eps_arg ? std::get_if<double>(&eps_arg->value) : nullptr;
    if (eps == nullptr) throw Unsupported{"aten::layer_norm: eps is not a constant"};
    Named mean = reduce(x, Combine::Sum, "{} / " + count);
    Named centered = emit(Domain::Full, mean.level, subtract(x.name, mean.name));
    Named square = emit(Domain::Full, centered.level, fmt::format("{0} * {0}", centered.name));
    Named variance = reduce(square, Combine::Sum, "{} / " + count);
    Named rstd = emit(Domain::Row, variance.level, fmt::format("rsqrtf({} + {})", variance.name, float_literal(*eps)));
    std::string y = fmt::format("{} * {}", centered.name, rstd.name);
    int level = rstd.level;
    for (const char* affine : {"weight", "bias"}) {
      const auto* a = node.arg(affine);
      const auto* ref = a ? std::get_if<ir::ValueRef>(&a->value) : nullptr;
      if (ref == nullptr) continue;
      const Named& param = named_.at(ref->id);
      if (param.domain == Domain::Row) throw Unsupported{"aten::layer_norm: a per-row weight or bias"};
      y = fmt::format(std::string(affine) == "weight" ? "({}) * {}" : "({}) + {}", y, param.name);
      level = std::max(level, param.level);  // a weight computed after other reductions
    }
    return emit(Domain::Full, level, y);
  }

  // A row value read per element must keep its reduced dimensions (keepdim), so that broadcasting
  // lines it up with its own row.
  void check_row_broadcast(int id) const {
    const auto& sizes = type_of(id).sizes;
    const int rank = static_cast<int>(shape_.size());
    if (inner_ == rank) return;  // one row: the value broadcasts everywhere
    bool keepdim_form = static_cast<int>(sizes.size()) == rank;
    for (int d = 0; keepdim_form && d < rank; ++d) {
      keepdim_form = d < rank - inner_ ? (sizes[d] == shape_[d] || shape_[d] == 1) : sizes[d] == 1;
    }
    if (!keepdim_form) {
      throw Unsupported{fmt::format("value %{} [{}] is a per-row result without keepdim, combined with a full value",
                                    id, fmt::join(sizes, ", "))};
    }
  }

  void add_elementwise(const ir::Node& node) {
    bool any_full = false, any_row = false;
    int level = 0;
    std::map<int, std::string> names;
    for (int id : node.input_ids()) {
      const Named& in = named_.at(id);
      names[id] = in.name;
      any_full = any_full || in.domain == Domain::Full;
      any_row = any_row || in.domain == Domain::Row;
      level = std::max(level, in.level);
    }
    // A node over one-element tensors only is uniform: computing it per element is right anywhere.
    const Domain domain = any_full || !any_row ? Domain::Full : Domain::Row;
    const auto& out_sizes = type_of(node.outputs.at(0)).sizes;
    for (int id : node.input_ids()) {
      if (named_.at(id).domain != Domain::Row) continue;
      if (domain == Domain::Full) check_row_broadcast(id);
      else if (type_of(id).sizes != out_sizes) {
        throw Unsupported{fmt::format("{} broadcasts per-row results of different shapes", node.qualified_name())};
      }
    }
    std::string value = expression(group_, node, names);
    const int out = node.outputs.at(0);
    if (held_rounded(out)) value = rounded(value, type_of(out).dtype);
    const Named result = emit(domain, level, value);
    for (int id : node.outputs) named_[id] = result;
  }

  void add_output(int id) {
    const Named& value = named_.at(id);
    const auto& sizes = type_of(id).sizes;
    if (value.domain == Domain::Full && sizes != shape_) {
      throw Unsupported{fmt::format("output %{} [{}] is neither per element of the rows' space [{}] nor per row", id,
                                    fmt::join(sizes, ", "), fmt::join(shape_, ", "))};
    }
    if (value.domain == Domain::Scalar) throw Unsupported{fmt::format("output %{} is a one-element input", id)};
    operands_.push_back(classify(id, value.domain));
    outputs_.push_back(value);
  }

  std::string key() const {
    std::vector<std::string> operands, statements, accumulations;
    for (const auto& op : operands_) {
      operands.push_back(fmt::format("{}/{}/{}/{:x}/{}", ir::dtype_name(op.dtype), domain_name(op.domain),
                                     op.contiguous ? "contig" : "strided", op.broadcast_mask, op.dim_offset));
    }
    for (const auto& s : statements_) statements.push_back(fmt::format("{}@{}:{}", domain_name(s.domain), s.level, s.code));
    for (const auto& a : accumulations_) {
      accumulations.push_back(fmt::format("{}@{}:{}({})", a.accumulator, a.phase, combine_functor(a.combine), a.input));
    }
    std::vector<std::string> outputs;
    for (const auto& o : outputs_) outputs.push_back(o.name);
    return fmt::format("zenith-reduction v{} | rank {} inner {} | index{} | in {} out {} | {} | {} | {} | writes {}",
                       kReductionCodegenVersion, shape_.size(), inner_, kernel_.index64 ? 64 : 32, group_.inputs.size(),
                       group_.outputs.size(), fmt::join(operands, " "), fmt::join(statements, " "),
                       fmt::join(accumulations, " "), fmt::join(outputs, " "));
  }

  bool strided_full(const Operand& op) const { return op.domain == Domain::Full && !op.contiguous; }

  // Offsets of the strided operands' row starts (full strided operands and every row operand).
  std::string row_offsets() const {
    const int outer = static_cast<int>(shape_.size()) - inner_;
    std::string code;
    for (std::size_t k = 0; k < operands_.size(); ++k) {
      if (strided_full(operands_[k]) || operands_[k].domain == Domain::Row) code += fmt::format("    Index o{} = 0;\n", k);
    }
    if (outer == 0 || code.empty()) return code;
    code += "    {\n      Index rest = row;\n";
    for (int d = outer; d-- > 0;) {
      code += fmt::format("      {{ const Index c = rest % (Index)p.sizes[{0}]; rest /= (Index)p.sizes[{0}];", d);
      for (std::size_t k = 0; k < operands_.size(); ++k) {
        if (strided_full(operands_[k]) || operands_[k].domain == Domain::Row) {
          code += fmt::format(" o{0} += c * (Index)p.strides{0}[{1}];", k, d);
        }
      }
      code += " }\n";
    }
    return code + "    }\n";
  }

  // Inside a sweep: each full operand's offset for element j of the row.
  std::string element_offsets() const {
    const int rank = static_cast<int>(shape_.size());
    std::string code;
    for (std::size_t k = 0; k < operands_.size(); ++k) {
      if (!strided_full(operands_[k])) continue;
      if (inner_ == 1) {
        code += fmt::format("        const Index e{0} = o{0} + j * (Index)p.strides{0}[{1}];\n", k, rank - 1);
      } else {
        code += fmt::format("        Index e{0} = o{0};\n", k);
      }
    }
    if (inner_ == 1 || code.empty()) return code;
    code += "        {\n          Index rest = j;\n";
    for (int d = rank; d-- > rank - inner_;) {
      code += fmt::format("          {{ const Index c = rest % (Index)p.sizes[{0}]; rest /= (Index)p.sizes[{0}];", d);
      for (std::size_t k = 0; k < operands_.size(); ++k) {
        if (strided_full(operands_[k])) code += fmt::format(" e{0} += c * (Index)p.strides{0}[{1}];", k, d);
      }
      code += " }\n";
    }
    return code + "        }\n";
  }

  std::string address(std::size_t k) const {
    const auto& op = operands_[k];
    if (op.domain == Domain::Row) return fmt::format("(p{0} + o{0})", k);
    if (op.contiguous) return fmt::format("(p{} + row * row_length + j)", k);
    return fmt::format("(p{0} + e{0})", k);
  }

  // How a sweep reaches the row. On the vector path (a row of at most kRowElementsPerThread per
  // thread, its length a multiple of kRowVectorWidth, every contiguous operand aligned to a
  // vector) each thread takes whole vectors of kRowVectorWidth consecutive elements: the first
  // sweep (Fill) loads the contiguous inputs' vectors into registers with one load each, and the
  // other full inputs (a weight broadcast over rows) an element at a time, the later sweeps
  // (Cached) read them there, and the contiguous outputs are stored a vector at a time. Anything
  // else reads its row element by element, again in every sweep (Stream).
  enum class Reach { Stream, Fill, Cached };

  bool contiguous_full(std::size_t k) const { return operands_[k].domain == Domain::Full && operands_[k].contiguous; }

  bool has_vector_path() const {
    for (std::size_t k = 0; k < operands_.size(); ++k) {
      if (contiguous_full(k)) return true;
    }
    return false;
  }

  // The kernel's own check, uniform across the block: whether these rows take the vector path.
  std::string vector_condition() const {
    std::string code = fmt::format("row_length % {0} == 0 && row_length <= {1} * (Index)blockDim.x", kRowVectorWidth,
                                   kRowElementsPerThread);
    for (std::size_t k = 0; k < operands_.size(); ++k) {
      if (contiguous_full(k)) code += fmt::format(" && zn_vector_aligned(p{})", k);
    }
    return code;
  }

  std::string row_start(std::size_t k) const { return fmt::format("(p{} + row * row_length + jv)", k); }

  // One sweep over the row: the inputs (from memory or the registers), the full statements that
  // phase `level` can compute, then `tail` (accumulations or stores), with `vector_stores` after
  // each vector on the vector path.
  std::string sweep(Reach reach, int level, const std::string& tail, const std::string& vector_stores = "") const {
    std::string code;
    if (reach == Reach::Stream) {
      code = "    for (Index j = threadIdx.x; j < row_length; j += blockDim.x) {\n" + element_offsets();
    } else {
      code = fmt::format("#pragma unroll\n    for (int i = 0; i < {0}; ++i) {{\n"
                         "      const Index jv = ((Index)threadIdx.x + (Index)i * blockDim.x) * {1};\n"
                         "      if (jv < row_length) {{\n",
                         kRowElementsPerThread / kRowVectorWidth, kRowVectorWidth);
      for (std::size_t k = 0; k < group_.inputs.size(); ++k) {
        if (reach == Reach::Fill && contiguous_full(k)) {
          code += fmt::format("        zn_load4({}, c{} + i * {});\n", row_start(k), k, kRowVectorWidth);
        }
      }
      for (std::size_t o = 0; o < outputs_.size(); ++o) {
        const std::size_t k = group_.inputs.size() + o;
        if (contiguous_full(k) && !vector_stores.empty()) {
          code += fmt::format("        float s{}[{}];\n", k, kRowVectorWidth);
        }
      }
      code += fmt::format("#pragma unroll\n        for (int v = 0; v < {}; ++v) {{\n        const Index j = jv + v;\n",
                          kRowVectorWidth);
      code += element_offsets();
    }
    for (std::size_t k = 0; k < group_.inputs.size(); ++k) {
      if (operands_[k].domain != Domain::Full) continue;
      if (reach == Reach::Fill && !contiguous_full(k)) {
        // Read an element at a time (a weight broadcast over rows, a strided input), once: the
        // first sweep keeps it in registers, so that its load is issued before the first block
        // reduction rather than after it.
        code += fmt::format("        c{0}[i * {1} + v] = zn_load({2});\n", k, kRowVectorWidth, address(k));
      }
      if (reach != Reach::Stream) {
        code += fmt::format("        const float a{0} = c{0}[i * {1} + v];\n", k, kRowVectorWidth);
      } else {
        code += fmt::format("        const float a{} = zn_load({});\n", k, address(k));
      }
    }
    for (const auto& s : statements_) {
      if (s.domain == Domain::Full && s.level <= level) code += "        " + s.code + "\n";
    }
    code += tail;
    if (reach == Reach::Stream) return code + "    }\n";
    return code + "        }\n" + vector_stores + "      }\n    }\n";
  }

  // The work on one row, on the vector path or streaming it.
  std::string body(bool vector) const {
    int phases = 0;
    for (const auto& a : accumulations_) phases = std::max(phases, a.phase + 1);
    std::string code = row_offsets();
    if (vector) {
      for (std::size_t k = 0; k < group_.inputs.size(); ++k) {
        if (operands_[k].domain == Domain::Full) code += fmt::format("    float c{}[{}];\n", k, kRowElementsPerThread);
      }
    }
    auto reach = [&](int sweep_index) {
      if (!vector) return Reach::Stream;
      return sweep_index == 0 ? Reach::Fill : Reach::Cached;
    };
    for (int phase = 0; phase < phases; ++phase) {
      std::string tail;
      for (const auto& a : accumulations_) {
        if (a.phase != phase) continue;
        code += fmt::format("    float {} = {}::identity();\n", a.accumulator, combine_functor(a.combine));
        tail += fmt::format("        {0} = {1}()({0}, {2});\n", a.accumulator, combine_functor(a.combine), a.input);
      }
      code += sweep(reach(phase), phase, tail);
      for (const auto& a : accumulations_) {
        if (a.phase == phase) code += fmt::format("    {0} = zn_block_reduce({0}, {1}());\n", a.accumulator, combine_functor(a.combine));
      }
      for (const auto& s : statements_) {
        if (s.domain == Domain::Row && s.level == phase + 1) code += "    " + s.code + "\n";
      }
    }
    std::string stores, vector_stores, row_stores;
    for (std::size_t o = 0; o < outputs_.size(); ++o) {
      std::size_t k = group_.inputs.size() + o;
      if (outputs_[o].domain == Domain::Row) {
        row_stores += fmt::format("      zn_store({}, {});\n", address(k), outputs_[o].name);
      } else if (vector && contiguous_full(k)) {
        stores += fmt::format("        s{}[v] = {};\n", k, outputs_[o].name);
        vector_stores += fmt::format("        zn_store4({}, s{});\n", row_start(k), k);
      } else {
        stores += fmt::format("        zn_store({}, {});\n", address(k), outputs_[o].name);
      }
    }
    if (!stores.empty()) code += sweep(reach(phases), phases, stores, vector_stores);
    if (!row_stores.empty()) code += "    if (threadIdx.x == 0) {\n" + row_stores + "    }\n";
    return code;
  }

  std::string source() const {
    std::string code = device_prelude();
    code += row_kernel_prelude();
    const auto rank = shape_.size();
    code += fmt::format("\n// {}\nstruct Args {{\n  long long rows;\n  long long row_length;\n  long long sizes[{}];\n",
                        kernel_.key, rank);
    for (std::size_t k = 0; k < operands_.size(); ++k) code += fmt::format("  void* ptr{0};\n  long long strides{0}[{1}];\n", k, rank);
    code += "};\n\n";
    code += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(const Args p) {{\n", kRowMaxThreads,
                        kernel_.name);
    code += "  zn_follow_kernel_before();\n";
    code += fmt::format("  typedef {} Index;\n", kernel_.index64 ? "long long" : "int");
    for (std::size_t k = 0; k < operands_.size(); ++k) {
      const char* type = storage_type(operands_[k].dtype);
      bool output = k >= group_.inputs.size();
      code += fmt::format("  {0}{1}* __restrict__ p{2} = reinterpret_cast<{0}{1}*>(p.ptr{2});\n", output ? "" : "const ",
                          type, k);
    }
    for (std::size_t k = 0; k < group_.inputs.size(); ++k) {
      if (operands_[k].domain == Domain::Scalar) code += fmt::format("  const float a{0} = zn_load(p{0});\n", k);
    }
    code += "  const Index rows = (Index)p.rows;\n  const Index row_length = (Index)p.row_length;\n";
    if (has_vector_path()) {
      code += "  const bool vector_rows = " + vector_condition() + ";\n";
      code += "  for (Index row = blockIdx.x; row < rows; row += gridDim.x) {\n";
      code += "  if (vector_rows) {\n" + body(true) + "  } else {\n" + body(false) + "  }\n";
    } else {
      code += "  for (Index row = blockIdx.x; row < rows; row += gridDim.x) {\n" + body(false);
    }
    code += "  }\n}\n";
    return code;
  }

  const ir::Graph& group_;
  std::vector<std::int64_t> shape_;
  int inner_ = 0;
  std::vector<Operand> operands_;
  std::map<int, Named> named_;
  std::set<int> reduced_;  // the values reductions read
  std::vector<Statement> statements_;
  std::vector<Accumulation> accumulations_;
  std::vector<Named> outputs_;
  int next_name_ = 0;
  ReductionKernel kernel_;
};

}  // namespace

bool has_row_reduction(const ir::Graph& group) {
  return std::any_of(group.nodes.begin(), group.nodes.end(), [](const ir::Node& node) {
    return ir::op_info(node.op).category == ir::OpCategory::Reduction;
  });
}

std::variant<ReductionKernel, std::string> generate_reduction(const ir::Graph& group) {
  try {
    return Generator(group).run();
  } catch (const Unsupported& unsupported) {
    return unsupported.reason;
  }
}

std::vector<std::int64_t> pack_reduction_arguments(const ReductionKernel& kernel,
                                                   const std::vector<const DLTensor*>& operands) {
  const auto rank = static_cast<std::size_t>(kernel.rank);
  // S from the operands: each of its dimensions is some operand's size there (broadcasting).
  std::vector<std::int64_t> shape(rank, 1);
  for (std::size_t k = 0; k < operands.size(); ++k) {
    const DLTensor& t = *operands[k];
    for (int d = 0; d < t.ndim; ++d) {
      auto s = static_cast<std::size_t>(d + kernel.dim_offset[k]);
      if (s < rank && t.shape[d] != 1) shape[s] = t.shape[d];
    }
  }
  std::int64_t rows = 1, row_length = 1;
  for (std::size_t d = 0; d < rank; ++d) (d + kernel.inner_rank < rank ? rows : row_length) *= shape[d];
  std::vector<std::int64_t> words{rows, row_length};
  words.insert(words.end(), shape.begin(), shape.end());
  for (std::size_t k = 0; k < operands.size(); ++k) {
    const DLTensor& t = *operands[k];
    words.push_back(address_word(t));
    for (std::size_t s = 0; s < rank; ++s) {
      int d = static_cast<int>(s) - kernel.dim_offset[k];
      bool present = d >= 0 && d < t.ndim && t.shape[d] != 1;
      words.push_back(present ? t.strides[d] : 0);
    }
  }
  return words;
}

}  // namespace zenith::cuda
