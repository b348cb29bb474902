#include "backends/cuda/index_copy_codegen.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "backends/cuda/expression_rules.h"
#include "backends/cuda/operand_checks.h"
#include "core/node_arguments.h"

namespace zenith::cuda {
namespace {

// The kernel's body past its types and constants (E: an unsigned integer of the element's size;
// I: the offset type; RANK, DIM, THREADS, NAME). Arguments as pack_index_copy_arguments lays them
// out.
constexpr const char* kBody = R"(
struct Args {
  long long numel, dim_size;
  const long long* index;
  long long index_stride;
  const E* source;
  long long sizes[RANK], source_strides[RANK];
  E* written;
  long long written_strides[RANK];
};

extern "C" __global__ void __launch_bounds__(THREADS) NAME(const Args p) {
  zn_follow_kernel_before();
  const I step = (I)gridDim.x * THREADS;
  for (I i = (I)blockIdx.x * THREADS + threadIdx.x; i < (I)p.numel; i += step) {
    I rest = i, from = 0, to = 0;
#pragma unroll
    for (int d = RANK - 1; d >= 0; --d) {
      const I c = rest % (I)p.sizes[d];
      rest /= (I)p.sizes[d];
      from += c * (I)p.source_strides[d];
      if (d == DIM) {
        const long long target = p.index[c * (I)p.index_stride];
        if (target < 0 || target >= p.dim_size) __trap();  // PyTorch: "index out of bounds"
        to += (I)target * (I)p.written_strides[d];
      } else {
        to += c * (I)p.written_strides[d];
      }
    }
    p.written[to] = p.source[from];
  }
}
)";

const char* element_type(std::size_t bytes) {
  switch (bytes) {
    case 1: return "unsigned char";
    case 2: return "unsigned short";
    case 4: return "unsigned int";
    case 8: return "unsigned long long";
    default: return nullptr;
  }
}

class Generator {
 public:
  explicit Generator(const ir::Graph& group) : group_(group) {}

  IndexCopyKernel run() {
    if (group_.nodes.size() != 1) throw Unsupported{"an index-copy group holds one node"};
    const auto& node = group_.nodes.front();
    const int self = ir::tensor_arg(node, "self"), index = ir::tensor_arg(node, "index");
    const int source = ir::tensor_arg(node, "source");
    const auto* dim_arg = node.arg("dim");
    const auto* dim_value = dim_arg ? std::get_if<std::int64_t>(&dim_arg->value) : nullptr;
    if (self < 0 || index < 0 || source < 0 || dim_value == nullptr) {
      throw Unsupported{"index_copy_ without a tensor written, an index, a source and a constant dim"};
    }
    kernel_.operands = group_.inputs;
    kernel_.self = position(self, "tensor written");
    kernel_.index = position(index, "index");
    kernel_.source_tensor = position(source, "source");
    if (group_.outputs.size() > 1 ||
        (group_.outputs.size() == 1 && (group_.output_aliases.empty() || group_.output_aliases[0] != kernel_.self))) {
      throw Unsupported{"index_copy_ whose group returns something else than the tensor it writes"};
    }
    kernel_.operands.insert(kernel_.operands.end(), group_.outputs.begin(), group_.outputs.end());
    check_types(self, index, source, *dim_value);
    const auto& written = group_.value(self).type;
    const auto& from = group_.value(source).type;
    kernel_.index64 = needs_64bit_offsets(group_, {self, source}, from.sizes);
    kernel_.key = fmt::format("index copy v{} | {}-byte elements | rank {} | dim {} | {}", kIndexCopyCodegenVersion,
                              c10::elementSize(written.dtype), kernel_.rank, kernel_.dim,
                              kernel_.index64 ? "64-bit" : "32-bit");
    kernel_.name = fmt::format("zenith_index_copy_{:016x}", key_hash(kernel_.key));
    kernel_.source = fmt::format("{}\n// {}\ntypedef {} E;\ntypedef {} I;\n#define NAME {}\n#define RANK {}\n#define DIM {}\n"
                                 "#define THREADS {}\n{}",
                                 device_prelude(), kernel_.key, element_type(c10::elementSize(written.dtype)),
                                 kernel_.index64 ? "long long" : "int", kernel_.name, kernel_.rank, kernel_.dim,
                                 kIndexCopyThreads, kBody);
    return kernel_;
  }

 private:
  int position(int id, const char* what) const {
    auto it = std::find(group_.inputs.begin(), group_.inputs.end(), id);
    if (it == group_.inputs.end()) throw Unsupported{fmt::format("index_copy_'s {} is not an input of its group", what)};
    return static_cast<int>(it - group_.inputs.begin());
  }

  void check_types(int self, int index, int source, std::int64_t dim) {
    const auto& written = group_.value(self).type;
    const auto& idx = group_.value(index).type;
    const auto& from = group_.value(source).type;
    for (const auto* type : {&written, &idx, &from}) {
      if (!type->device.is_cuda() || type->device != written.device) {
        throw Unsupported{fmt::format("index_copy_ over {}, {} and {}: one CUDA device expected", written.device.str(),
                                      idx.device.str(), from.device.str())};
      }
    }
    if (idx.dtype != c10::ScalarType::Long || idx.rank() > 1) {
      throw Unsupported{fmt::format("index_copy_ with an index {}: int64 of at most one dimension expected", idx.to_string())};
    }
    if (from.dtype != written.dtype || element_type(c10::elementSize(written.dtype)) == nullptr) {
      throw Unsupported{fmt::format("index_copy_ of {} into {}", from.to_string(), written.to_string())};
    }
    kernel_.rank = static_cast<int>(written.rank());
    if (kernel_.rank < 1 || kernel_.rank > kIndexCopyMaxRank || from.rank() != written.rank()) {
      throw Unsupported{fmt::format("index_copy_ of {} into {}: one rank from 1 to {} expected", from.to_string(),
                                    written.to_string(), kIndexCopyMaxRank)};
    }
    if (dim < -kernel_.rank || dim >= kernel_.rank) throw Unsupported{fmt::format("index_copy_ along dim {}", dim)};
    kernel_.dim = static_cast<int>(dim < 0 ? dim + kernel_.rank : dim);
    for (int d = 0; d < kernel_.rank; ++d) {
      if (d != kernel_.dim && from.sizes[d] != written.sizes[d]) {
        throw Unsupported{fmt::format("index_copy_ of {} into {}: sizes other than dim {}'s differ", from.to_string(),
                                      written.to_string(), kernel_.dim)};
      }
      // Elements that share memory (an expanded tensor): PyTorch refuses to write them.
      if (written.sizes[d] > 1 && written.strides[d] == 0) {
        throw Unsupported{fmt::format("index_copy_ into {}, whose elements share memory", written.to_string())};
      }
    }
    if (idx.numel() != from.sizes[kernel_.dim]) {
      throw Unsupported{fmt::format("index_copy_ with {} indices for {} source entries along dim {}", idx.numel(),
                                    from.sizes[kernel_.dim], kernel_.dim)};
    }
  }

  const ir::Graph& group_;
  IndexCopyKernel kernel_;
};

}  // namespace

bool has_index_copy(const ir::Graph& group) {
  return std::any_of(group.nodes.begin(), group.nodes.end(),
                     [](const ir::Node& node) { return node.op == "aten::index_copy_"; });
}

std::variant<IndexCopyKernel, std::string> generate_index_copy(const ir::Graph& group) {
  try {
    return Generator(group).run();
  } catch (const Unsupported& unsupported) {
    return unsupported.reason;
  }
}

std::vector<std::int64_t> pack_index_copy_arguments(const IndexCopyKernel& kernel,
                                                    const std::vector<const DLTensor*>& operands) {
  const DLTensor& written = *operands.at(static_cast<std::size_t>(kernel.self));
  const DLTensor& index = *operands.at(static_cast<std::size_t>(kernel.index));
  const DLTensor& source = *operands.at(static_cast<std::size_t>(kernel.source_tensor));
  std::int64_t numel = 1;
  for (int d = 0; d < source.ndim; ++d) numel *= source.shape[d];
  std::vector<std::int64_t> words{numel, written.shape[kernel.dim], address_word(index),
                                  index.ndim == 1 ? index.strides[0] : 0, address_word(source)};
  for (int d = 0; d < kernel.rank; ++d) words.push_back(source.shape[d]);
  for (int d = 0; d < kernel.rank; ++d) words.push_back(source.strides[d]);
  words.push_back(address_word(written));
  for (int d = 0; d < kernel.rank; ++d) words.push_back(written.strides[d]);
  return words;
}

}  // namespace zenith::cuda
