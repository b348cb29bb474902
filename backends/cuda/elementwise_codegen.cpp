#include "backends/cuda/elementwise_codegen.h"

#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/cuda/expression_rules.h"
#include "backends/cuda/operand_checks.h"

namespace zenith::cuda {
namespace {

struct Operand {
  int id;
  c10::ScalarType dtype;
  OperandClass cls;
  std::uint32_t broadcast_mask;  // dimensions (of the iteration space) where the operand has size 1
  int axis = -1;                 // OperandClass::Axis: the one dimension it varies along
};

// The iteration order: the shape operand's dimensions from its largest stride to its smallest
// (stable, so row-major tensors keep theirs). Iterating in memory order makes a channels-last
// output, and every operand laid out like it, contiguous in the kernel's index space.
std::vector<int> memory_order(const ir::TensorType& out, std::size_t rank) {
  std::vector<std::int64_t> strides(rank, 0);
  const std::size_t offset = rank - out.strides.size();
  for (std::size_t d = 0; d < out.strides.size(); ++d) strides[offset + d] = out.sizes[d] == 1 ? 0 : out.strides[d];
  // Size-1 dimensions (stride 0 above) keep their places: they move no data. The others are
  // sorted into the places they leave free.
  std::vector<int> order(rank), moving, places;
  for (std::size_t d = 0; d < rank; ++d) {
    order[d] = static_cast<int>(d);
    if (strides[d] != 0) moving.push_back(static_cast<int>(d)), places.push_back(static_cast<int>(d));
  }
  std::stable_sort(moving.begin(), moving.end(), [&](int a, int b) { return strides[a] > strides[b]; });
  for (std::size_t k = 0; k < places.size(); ++k) order[static_cast<std::size_t>(places[k])] = moving[k];
  return order;
}

// Whether `type` is row-major and dense, size-1 dimensions' strides aside.
bool row_major(const ir::TensorType& type) {
  std::int64_t expected = 1;
  for (std::size_t d = type.sizes.size(); d-- > 0;) {
    if (type.sizes[d] != 1 && type.strides[d] != expected) return false;
    expected *= type.sizes[d];
  }
  return true;
}

// A relayout: the shape operand is laid out otherwise (channels-last, say) and an input of its
// shape is row-major, as a convolution's weight folded and copied channels-last at every call.
// Iterating in the output's memory order, consecutive threads read that input at a stride (9
// elements for a 3x3 kernel) and every element's coordinates take a division and a remainder per
// dimension per operand. Instead the kernel iterates in row-major order, each thread over the
// `run` elements after the output's innermost dimension (the 9 of a 3x3 kernel): a warp's reads of
// one step fill the lines its next steps read from L1, at each step consecutive threads write
// consecutive elements, and the divisions are done once a run (run_loop). On an H200, ResNet-50
// b1 float32's sixteen such folds took 0.105 ms a call in the output's order, and 0.115 with this
// order but divisions per element (ATen's plain layout copy of the same weights 0.071, a plain
// copy of their bytes 0.045): about ten integer divisions an element, not the memory, bound
// both. With the run loop they took 0.059 ms. Returns that dimension (of the right-aligned
// rank-`rank` space), or -1 where no input is row-major over the shape, an output is smaller than
// it, or the run is not between 2 and kLongestRun elements (a longer run keeps a thread's lines
// alive too long).
constexpr std::int64_t kLongestRun = 64;

int relayout_run_dimension(const ir::Graph& group, const ir::TensorType& shape_type, const std::vector<int>& order) {
  const bool source = std::any_of(group.inputs.begin(), group.inputs.end(), [&](int id) {
    const auto& type = group.value(id).type;
    return type.sizes == shape_type.sizes && row_major(type);
  });
  // Every output has the iteration's shape: the run loop stores each element it visits.
  const bool whole = std::all_of(group.outputs.begin(), group.outputs.end(),
                                 [&](int id) { return group.value(id).type.sizes == shape_type.sizes; });
  if (!source || !whole || order.empty()) return -1;
  const std::size_t offset = order.size() - shape_type.sizes.size();
  const int innermost = order.back();
  std::int64_t run = 1;
  for (std::size_t d = static_cast<std::size_t>(innermost) + 1; d < order.size(); ++d) run *= shape_type.sizes[d - offset];
  return run >= 2 && run <= kLongestRun ? innermost : -1;
}

// `type` right-aligned into `order.size()` dimensions (leading ones of size 1) and permuted.
ir::TensorType in_order(const ir::TensorType& type, const std::vector<int>& order) {
  const std::size_t rank = order.size();
  std::vector<std::int64_t> sizes(rank, 1), strides(rank, 0);
  const std::size_t offset = rank - type.sizes.size();
  for (std::size_t d = 0; d < type.sizes.size(); ++d) {
    sizes[offset + d] = type.sizes[d];
    strides[offset + d] = type.strides[d];
  }
  ir::TensorType permuted = type;
  permuted.sizes.clear();
  permuted.strides.clear();
  for (int d : order) {
    permuted.sizes.push_back(sizes[static_cast<std::size_t>(d)]);
    permuted.strides.push_back(strides[static_cast<std::size_t>(d)]);
  }
  return permuted;
}

Operand classify(const ir::Graph& group, int id, const std::vector<std::int64_t>& shape, const std::vector<int>& order) {
  check_operand(group, id);
  if (group.value(id).type.rank() > static_cast<std::int64_t>(shape.size())) {
    throw Unsupported{fmt::format("value %{} has more dimensions than the outputs", id)};
  }
  const auto type = in_order(group.value(id).type, order);
  Operand op{id, type.dtype, OperandClass::Strided, 0};
  std::vector<int> moving;  // dimensions where the operand spans more than one element
  for (std::size_t d = 0; d < shape.size(); ++d) {
    std::int64_t size = type.sizes[d];
    if (size != shape[d] && size != 1) throw Unsupported{fmt::format("value %{} does not broadcast to the outputs", id)};
    if (size == 1 && shape[d] != 1) op.broadcast_mask |= 1u << d;
    if (size != 1) moving.push_back(static_cast<int>(d));
  }
  const bool input = std::find(group.inputs.begin(), group.inputs.end(), id) != group.inputs.end();
  if (type.numel() == 1) op.cls = OperandClass::Scalar;
  else if (is_contiguous_over(type, shape)) op.cls = OperandClass::Contiguous;
  else if (input && moving.size() == 1) op.cls = OperandClass::Axis, op.axis = moving.front();
  return op;
}

const char* class_name(OperandClass cls) {
  switch (cls) {
    case OperandClass::Contiguous: return "contig";
    case OperandClass::Scalar: return "scalar";
    case OperandClass::Axis: return "axis";
    case OperandClass::Strided: return "strided";
  }
  return "?";
}

class Generator {
 public:
  explicit Generator(const ir::Graph& group) : group_(group) {}

  ElementwiseKernel run() {
    check_group();
    // The iteration space is the largest output; the others must broadcast to it (an intermediate
    // of a smaller shape that is also read after the group).
    std::size_t largest = 0;
    for (std::size_t o = 0; o < group_.outputs.size(); ++o) {
      const auto& type = group_.value(group_.outputs[o]).type;
      const auto& best = group_.value(group_.outputs[largest]).type;
      if (type.numel() > best.numel() || (type.numel() == best.numel() && type.rank() > best.rank())) largest = o;
    }
    const auto& shape_type = group_.value(group_.outputs[largest]).type;
    kernel_.shape_operand = static_cast<int>(group_.inputs.size() + largest);
    const std::size_t rank = std::max<std::size_t>(shape_type.sizes.size(), 1);
    auto order = memory_order(shape_type, rank);
    bool identity = true;
    for (std::size_t d = 0; d < order.size(); ++d) identity = identity && order[d] == static_cast<int>(d);
    if (!identity) {
      kernel_.run_dimension = relayout_run_dimension(group_, shape_type, order);
      if (kernel_.run_dimension >= 0) {
        for (std::size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int>(d);
        identity = true;
      }
    }
    shape_ = in_order(shape_type, order).sizes;
    if (!identity) kernel_.order = order;
    for (int id : group_.inputs) operands_.push_back(classify(group_, id, shape_, order));
    for (int id : group_.outputs) {
      operands_.push_back(classify(group_, id, shape_, order));
      if (operands_.back().cls == OperandClass::Scalar && shape_ != std::vector<std::int64_t>{1}) {
        operands_.back().cls = OperandClass::Strided;
      }
    }
    name_values();
    build_expressions();
    kernel_.rank = static_cast<int>(shape_.size());
    kernel_.index64 = needs_64bit_offsets(group_, operand_ids(), shape_);
    decide_vector_path();
    for (const auto& op : operands_) {
      kernel_.operands.push_back(op.id);
      kernel_.classes.push_back(op.cls);
      kernel_.axes.push_back(op.axis);
    }
    kernel_.key = key();
    kernel_.name = fmt::format("zenith_ew_{:016x}", key_hash(kernel_.key));
    kernel_.source = source();
    return kernel_;
  }

 private:
  std::vector<int> operand_ids() const {
    std::vector<int> ids;
    for (const auto& op : operands_) ids.push_back(op.id);
    return ids;
  }

  void check_group() const {
    check_group_shape(group_);
    for (const auto& node : group_.nodes) {
      if (!has_expression_rule(node.qualified_name())) {
        throw Unsupported{fmt::format("{} is not an elementwise op the code generator knows", node.qualified_name())};
      }
    }
  }

  // Canonical names: inputs a0.., node results t0..; the key uses them, so graph ids never leak in.
  void name_values() {
    for (std::size_t i = 0; i < group_.inputs.size(); ++i) names_[group_.inputs[i]] = fmt::format("a{}", i);
    int t = 0;
    for (const auto& node : group_.nodes) {
      for (int id : node.outputs) names_[id] = fmt::format("t{}", t++);
    }
  }

  void build_expressions() {
    for (const auto& node : group_.nodes) {
      auto expr = expression(group_, node, names_);
      for (int id : node.outputs) {
        statements_.push_back(fmt::format("const float {} = {};", names_.at(id), expr));
        // The key holds the canonical statement: op, constants and data flow, no ids.
        key_ops_.push_back(node.qualified_name() + ":" + statements_.back());
      }
    }
  }

  void decide_vector_path() {
    bool eligible = true;
    for (const auto& op : operands_) {
      eligible = eligible && op.dtype == operands_.front().dtype && op.cls != OperandClass::Strided;
    }
    for (std::size_t i = group_.inputs.size(); i < operands_.size(); ++i) {
      eligible = eligible && operands_[i].cls == OperandClass::Contiguous;
    }
    kernel_.vectorized = eligible;
    kernel_.vector_width = eligible ? static_cast<int>(16 / c10::elementSize(operands_.front().dtype)) : 1;
  }

  std::string key() const {
    std::vector<std::string> operands;
    for (const auto& op : operands_) {
      operands.push_back(fmt::format("{}/{}{}/{:x}", ir::dtype_name(op.dtype), class_name(op.cls),
                                     op.axis >= 0 ? std::to_string(op.axis) : "", op.broadcast_mask));
    }
    const std::string runs = kernel_.run_dimension >= 0 ? fmt::format(" | runs after {}", kernel_.run_dimension) : "";
    return fmt::format("zenith-elementwise v{} | rank {} | index{} | vec {}{} | in {} out {} | {} | {}",
                       kElementwiseCodegenVersion, shape_.size(), kernel_.index64 ? 64 : 32, kernel_.vector_width, runs,
                       group_.inputs.size(), group_.outputs.size(), fmt::join(operands, " "), fmt::join(key_ops_, " "));
  }

  // The dimensions Axis operands vary along, each once.
  std::vector<int> axes() const {
    std::vector<int> found;
    for (const auto& op : operands_) {
      if (op.axis >= 0 && std::find(found.begin(), found.end(), op.axis) == found.end()) found.push_back(op.axis);
    }
    return found;
  }
  bool innermost(int axis) const { return axis + 1 == static_cast<int>(shape_.size()); }

  // in<d>: elements per step along axis d (the product of the sizes after it), once per launch.
  std::string axis_strides_code() const {
    std::string code;
    for (int d : axes()) {
      if (innermost(d)) continue;  // one element per step
      code += fmt::format("  const Index in{} = (Index)1", d);
      for (std::size_t e = static_cast<std::size_t>(d) + 1; e < shape_.size(); ++e) code += fmt::format(" * (Index)p.sizes[{}]", e);
      code += ";\n";
    }
    return code;
  }

  // c<d>: the coordinate of element `index` along axis d.
  std::string axis_coordinate(int d, const std::string& index) const {
    return innermost(d) ? fmt::format("({} % (Index)p.sizes[{}])", index, d)
                        : fmt::format("(({} / in{}) % (Index)p.sizes[{}])", index, d, d);
  }

  std::string offset_code(const std::string& index) const {
    // Only strided operands need the multi-index; contiguous ones use the linear index itself.
    std::string code;
    for (int d : axes()) code += fmt::format("      const Index c{} = {};\n", d, axis_coordinate(d, index));
    bool any_strided = false;
    for (const auto& op : operands_) any_strided = any_strided || op.cls == OperandClass::Strided;
    if (!any_strided) return code;
    code += fmt::format("      Index rest = {};\n", index);
    for (std::size_t k = 0; k < operands_.size(); ++k) {
      if (operands_[k].cls == OperandClass::Strided) code += fmt::format("      Index o{} = 0;\n", k);
      if (broadcast_output(k)) code += fmt::format("      bool w{} = true;\n", k);
    }
    for (std::size_t d = shape_.size(); d-- > 0;) {
      code += fmt::format("      {{ const Index c = rest % (Index)p.sizes[{0}]; rest /= (Index)p.sizes[{0}];", d);
      for (std::size_t k = 0; k < operands_.size(); ++k) {
        if (operands_[k].cls == OperandClass::Strided) code += fmt::format(" o{0} += c * (Index)p.strides{0}[{1}];", k, d);
        if (broadcast_output(k) && (operands_[k].broadcast_mask >> d & 1u)) code += fmt::format(" w{0} = w{0} && c == 0;", k);
      }
      code += " }\n";
    }
    return code;
  }

  // An output smaller than the iteration space: stored only where its broadcast coordinates are 0.
  bool broadcast_output(std::size_t k) const { return k >= group_.inputs.size() && operands_[k].broadcast_mask != 0; }

  std::string operand_address(std::size_t k, const std::string& index) const {
    switch (operands_[k].cls) {
      case OperandClass::Contiguous: return fmt::format("(p{} + {})", k, index);
      case OperandClass::Scalar: return fmt::format("p{}", k);
      case OperandClass::Axis: return fmt::format("(p{0} + c{1} * (Index)p.strides{0}[{1}])", k, operands_[k].axis);
      case OperandClass::Strided: return fmt::format("(p{} + o{})", k, k);
    }
    return "";
  }

  std::string body(const std::string& index) const { return offset_code(index) + element_code(index); }

  // One element's loads, expressions and stores, its offsets (o<k>, c<d>) already known.
  std::string element_code(const std::string& index) const {
    std::string code;
    for (std::size_t k = 0; k < group_.inputs.size(); ++k) {
      if (operands_[k].cls == OperandClass::Scalar) continue;  // loaded once, before the loop
      code += fmt::format("      const float a{} = zn_load({});\n", k, operand_address(k, index));
    }
    for (const auto& statement : statements_) code += "      " + statement + "\n";
    for (std::size_t o = 0; o < group_.outputs.size(); ++o) {
      std::size_t k = group_.inputs.size() + o;
      code += fmt::format("      {}zn_store({}, {});\n", broadcast_output(k) ? fmt::format("if (w{}) ", k) : "",
                          operand_address(k, index), names_.at(group_.outputs[o]));
    }
    return code;
  }

  std::string vector_loop() const {
    if (!kernel_.vectorized) return "";
    const char* type = storage_type(operands_.front().dtype);
    const int flags = axes().empty() ? 1 : 3;
    std::string code = fmt::format(
        "  constexpr int V = {};\n"
        "  if ((p.flags & {}) == {}) {{\n"
        "    const Index vectors = (Index)(p.numel / V);\n"
        "    for (Index j = first; j < vectors; j += step) {{\n",
        kernel_.vector_width, flags, flags);
    // A vector lies within one coordinate of a non-innermost axis, and starts at a multiple of V
    // along an innermost one, where the operand is contiguous (flags bit 1): one 16-byte load.
    for (int d : axes()) code += fmt::format("      const Index c{} = {};\n", d, axis_coordinate(d, "j * V"));
    for (std::size_t k = 0; k < group_.inputs.size(); ++k) {
      const auto& op = operands_[k];
      if (op.cls == OperandClass::Axis && !innermost(op.axis)) {
        code += fmt::format("      const float a{0} = zn_load(p{0} + c{1} * (Index)p.strides{0}[{1}]);\n", k, op.axis);
      }
      const bool vector_load = op.cls == OperandClass::Contiguous || (op.cls == OperandClass::Axis && innermost(op.axis));
      if (!vector_load) continue;
      const std::string first = op.cls == OperandClass::Contiguous ? "j * V" : fmt::format("c{}", op.axis);
      code += fmt::format("      const uint4 r{0} = *reinterpret_cast<const uint4*>(p{0} + {2});\n"
                          "      const {1}* e{0} = reinterpret_cast<const {1}*>(&r{0});\n",
                          k, type, first);
    }
    for (std::size_t o = 0; o < group_.outputs.size(); ++o) code += fmt::format("      uint4 w{0}; {1}* f{0} = reinterpret_cast<{1}*>(&w{0});\n", o, type);
    code += "#pragma unroll\n      for (int v = 0; v < V; ++v) {\n";
    for (std::size_t k = 0; k < group_.inputs.size(); ++k) {
      const auto& op = operands_[k];
      if (op.cls == OperandClass::Contiguous || (op.cls == OperandClass::Axis && innermost(op.axis))) {
        code += fmt::format("        const float a{0} = zn_cvt(e{0}[v]);\n", k);
      }
    }
    for (const auto& statement : statements_) code += "        " + statement + "\n";
    for (std::size_t o = 0; o < group_.outputs.size(); ++o) {
      code += fmt::format("        zn_store(f{} + v, {});\n", o, names_.at(group_.outputs[o]));
    }
    code += "      }\n";
    for (std::size_t o = 0; o < group_.outputs.size(); ++o) {
      code += fmt::format("      *reinterpret_cast<uint4*>(p{} + j * V) = w{};\n", group_.inputs.size() + o, o);
    }
    code += "    }\n    start = vectors * V + first;\n  }\n";
    return code;
  }

  std::string source() const {
    std::string code = device_prelude();
    code += fmt::format("\n// {}\nstruct Args {{\n  long long numel;\n  long long flags;\n  long long sizes[{}];\n",
                        kernel_.key, shape_.size());
    for (std::size_t k = 0; k < operands_.size(); ++k) {
      code += fmt::format("  void* ptr{0};\n  long long strides{0}[{1}];\n", k, shape_.size());
    }
    code += "};\n\n";
    code += fmt::format("extern \"C\" __global__ void __launch_bounds__(256) {}(const Args p) {{\n", kernel_.name);
    code += "  zn_follow_kernel_before();\n";
    code += fmt::format("  typedef {} Index;\n", kernel_.index64 ? "long long" : "int");
    for (std::size_t k = 0; k < operands_.size(); ++k) {
      const char* type = storage_type(operands_[k].dtype);
      bool output = k >= group_.inputs.size();
      code += fmt::format("  {}{}* __restrict__ p{} = reinterpret_cast<{}{}*>(p.ptr{});\n", output ? "" : "const ", type, k,
                          output ? "" : "const ", type, k);
    }
    for (std::size_t k = 0; k < group_.inputs.size(); ++k) {
      if (operands_[k].cls == OperandClass::Scalar) code += fmt::format("  const float a{0} = zn_load(p{0});\n", k);
    }
    code += "  const Index first = (Index)(blockIdx.x * blockDim.x + threadIdx.x);\n";
    code += "  const Index step = (Index)(blockDim.x * gridDim.x);\n";
    code += "  const Index numel = (Index)p.numel;\n";
    code += "  Index start = first;\n";
    code += axis_strides_code();
    code += vector_loop();
    if (kernel_.run_dimension >= 0) code += "  if (p.flags & 4) {\n" + run_loop() + "    return;\n  }\n";
    code += "  for (Index i = start; i < numel; i += step) {\n";
    code += body("i");
    code += "  }\n}\n";
    return code;
  }

  // A relayout's loop (relayout_run_dimension): each thread walks one run of consecutive
  // elements, the product of the sizes after the run dimension. The divisions that find an
  // element's coordinates (about ten an element here otherwise: the strided output's four
  // dimensions and the per-channel operand's) are done once a run, for its leading coordinates;
  // within the run the trailing coordinates q<d> (not t<d>: node results are named so) step as a
  // counter and offsets are sums of products. Taken where the launch's run is at most
  // kLongestRun (pack_arguments sets flags bit 2); other sizes of a shape-generic kernel run the
  // element loop after it. Outputs all have the iteration's shape (relayout_run_dimension), so
  // none is stored conditionally.
  std::string run_loop() const {
    const std::size_t first_trailing = static_cast<std::size_t>(kernel_.run_dimension) + 1;
    std::string code = "  const Index run = (Index)1";
    for (std::size_t d = first_trailing; d < shape_.size(); ++d) code += fmt::format(" * (Index)p.sizes[{}]", d);
    code += ";\n  const Index runs = numel / run;\n";
    code += "  for (Index r = first; r < runs; r += step) {\n";
    // The run's leading coordinates, once: base offsets b<k>, and the leading axes' c<d>.
    code += "    Index rest = r;\n";
    for (std::size_t k = 0; k < operands_.size(); ++k) {
      if (operands_[k].cls == OperandClass::Strided) code += fmt::format("    Index b{} = 0;\n", k);
    }
    const auto axis_list = axes();
    for (std::size_t d = first_trailing; d-- > 0;) {
      code += fmt::format("    Index c{0}; {{ const Index c = rest % (Index)p.sizes[{0}]; rest /= (Index)p.sizes[{0}]; c{0} = c;", d);
      for (std::size_t k = 0; k < operands_.size(); ++k) {
        if (operands_[k].cls == OperandClass::Strided) code += fmt::format(" b{0} += c * (Index)p.strides{0}[{1}];", k, d);
      }
      code += " }\n";
    }
    for (std::size_t d = first_trailing; d < shape_.size(); ++d) code += fmt::format("    Index q{} = 0;\n", d);
    code += "    for (Index i = r * run; i < (r + 1) * run; ++i) {\n";
    for (int d : axis_list) {
      if (static_cast<std::size_t>(d) >= first_trailing) code += fmt::format("      const Index c{0} = q{0};\n", d);
    }
    for (std::size_t k = 0; k < operands_.size(); ++k) {
      if (operands_[k].cls != OperandClass::Strided) continue;
      code += fmt::format("      const Index o{0} = b{0}", k);
      for (std::size_t d = first_trailing; d < shape_.size(); ++d) code += fmt::format(" + q{1} * (Index)p.strides{0}[{1}]", k, d);
      code += ";\n";
    }
    code += element_code("i");
    // The next element's trailing coordinates: the innermost steps, carrying outwards.
    code += fmt::format("      if (++q{} == (Index)p.sizes[{}]) {{", shape_.size() - 1, shape_.size() - 1);
    std::string closing = " }";
    for (std::size_t d = shape_.size() - 1; d-- > first_trailing;) {
      code += fmt::format(" q{} = 0; if (++q{} == (Index)p.sizes[{}]) {{", d + 1, d, d);
      closing += " }";
    }
    code += fmt::format(" q{} = 0;{}\n", first_trailing, closing);
    code += "    }\n  }\n";
    return code;
  }

  const ir::Graph& group_;
  std::vector<std::int64_t> shape_;
  std::vector<Operand> operands_;
  std::map<int, std::string> names_;
  std::vector<std::string> statements_;
  std::vector<std::string> key_ops_;
  ElementwiseKernel kernel_;
};

}  // namespace

std::variant<ElementwiseKernel, std::string> generate_elementwise(const ir::Graph& group) {
  try {
    return Generator(group).run();
  } catch (const Unsupported& unsupported) {
    return unsupported.reason;
  }
}

namespace {

// Bit 2 of the flags: a relayout kernel walks runs at these sizes (relayout_run_dimension's bounds).
bool run_fits(const ElementwiseKernel& kernel, const std::vector<std::int64_t>& words) {
  if (kernel.run_dimension < 0) return false;
  const std::int64_t run = relayout_run(kernel, words);
  return run >= 2 && run <= kLongestRun;
}

}  // namespace

std::vector<std::int64_t> pack_arguments(const ElementwiseKernel& kernel, const std::vector<const DLTensor*>& operands) {
  // The iteration space: the shape operand's sizes, right-aligned into the kernel's rank.
  const DLTensor& out = *operands.at(static_cast<std::size_t>(kernel.shape_operand));
  std::vector<std::int64_t> shape(static_cast<std::size_t>(kernel.rank), 1);
  for (int d = 0; d < out.ndim && d < kernel.rank; ++d) shape[kernel.rank - out.ndim + d] = out.shape[d];
  std::int64_t numel = 1;
  for (auto s : shape) numel *= s;
  bool aligned = true;
  std::vector<std::int64_t> words{numel, 0};
  words.insert(words.end(), shape.begin(), shape.end());
  // Dimension j of the kernel's index space is dimension order[j] of the tensors (memory order).
  auto dim = [&](std::size_t j) { return kernel.order.empty() ? j : static_cast<std::size_t>(kernel.order[j]); };
  for (std::size_t j = 0; j < shape.size(); ++j) words[2 + j] = shape[dim(j)];
  for (const DLTensor* t : operands) {
    auto* base = static_cast<char*>(t->data) + t->byte_offset;
    aligned = aligned && reinterpret_cast<std::uintptr_t>(base) % 16 == 0;
    words.push_back(static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(base)));
    std::size_t offset = shape.size() - static_cast<std::size_t>(t->ndim);
    for (std::size_t j = 0; j < shape.size(); ++j) {
      const std::size_t d = dim(j);
      bool present = d >= offset && t->shape[d - offset] != 1;
      words.push_back(present ? t->strides[d - offset] : 0);
    }
  }
  // Bit 1: each vector of V elements stays within one coordinate of every non-innermost axis (the
  // elements per step along it are a multiple of V), and starts at a multiple of V along an
  // innermost one (its size is a multiple of V) where the operand is contiguous (stride 1), so the
  // vector path reads axis operands correctly: once, or as one 16-byte load.
  bool axes_fit = true;
  const auto rank = shape.size();
  for (std::size_t k = 0; k < kernel.axes.size(); ++k) {
    const int axis = kernel.axes[k];
    if (axis < 0) continue;
    const auto a = static_cast<std::size_t>(axis);
    std::int64_t inner = 1;
    for (std::size_t j = a + 1; j < rank; ++j) inner *= words[2 + j];
    const bool last = a + 1 == rank;
    const std::int64_t stride = words[2 + rank + k * (1 + rank) + 1 + a];
    axes_fit = axes_fit && (last ? words[2 + a] : inner) % kernel.vector_width == 0 && (!last || stride == 1);
  }
  words[1] = (aligned ? 1 : 0) | (axes_fit ? 2 : 0) | (run_fits(kernel, words) ? 4 : 0);
  return words;
}

std::int64_t relayout_run(const ElementwiseKernel& kernel, const std::vector<std::int64_t>& words) {
  std::int64_t run = 1;
  for (int d = kernel.run_dimension + 1; d < kernel.rank; ++d) run *= words[2 + static_cast<std::size_t>(d)];
  return run;
}

bool takes_run_path(const ElementwiseKernel& kernel, std::int64_t flags) {
  return kernel.run_dimension >= 0 && (flags & 4) != 0;
}

bool takes_vector_path(const ElementwiseKernel& kernel, std::int64_t flags) {
  if (!kernel.vectorized) return false;
  const bool axes = std::any_of(kernel.axes.begin(), kernel.axes.end(), [](int axis) { return axis >= 0; });
  const std::int64_t needed = axes ? 3 : 1;
  return (flags & needed) == needed;
}

}  // namespace zenith::cuda
