#include "backends/cuda/kernel_codegen.h"

#include <algorithm>

namespace zenith::cuda {

const std::string& GeneratedKernel::key() const {
  return std::visit([](const auto& k) -> const std::string& { return k.key; }, kernel);
}
const std::string& GeneratedKernel::name() const {
  return std::visit([](const auto& k) -> const std::string& { return k.name; }, kernel);
}
const std::string& GeneratedKernel::source() const {
  return std::visit([](const auto& k) -> const std::string& { return k.source; }, kernel);
}
const std::vector<int>& GeneratedKernel::operands() const {
  return std::visit([](const auto& k) -> const std::vector<int>& { return k.operands; }, kernel);
}
bool GeneratedKernel::index64() const {
  return std::visit([](const auto& k) { return k.index64; }, kernel);
}

bool GeneratedKernel::follows_kernel_before() const { return !std::holds_alternative<PoolKernel>(kernel); }

namespace {

template <typename Kernel>
std::variant<GeneratedKernel, std::string> wrap(std::variant<Kernel, std::string> generated) {
  if (auto* why = std::get_if<std::string>(&generated)) return std::move(*why);
  return GeneratedKernel{std::get<Kernel>(std::move(generated))};
}

}  // namespace

std::variant<GeneratedKernel, std::string> generate_kernel(const ir::Graph& group) {
  if (has_attention(group)) return wrap(generate_attention(group));
  if (has_blind_rows(group)) return wrap(generate_blind_rows(group));
  if (has_max_pool(group)) return wrap(generate_max_pool(group));
  if (has_index_copy(group)) return wrap(generate_index_copy(group));
  if (has_row_reduction(group)) return wrap(generate_reduction(group));
  return wrap(generate_elementwise(group));
}

namespace {

constexpr int kElementwiseThreads = 256;

// Blocks of `threads` for `work` items of a grid-stride kernel: enough to fill the device several
// times over; the grid-stride loop covers the rest.
std::int64_t grid_stride_blocks(std::int64_t work, int threads, int multiprocessors) {
  return std::min<std::int64_t>((work + threads - 1) / threads, multiprocessors * 16LL);
}

LaunchConfig elementwise_launch(const ElementwiseKernel& kernel, const std::vector<const DLTensor*>& operands,
                                int multiprocessors) {
  LaunchConfig config;
  config.words = pack_arguments(kernel, operands);
  const std::int64_t numel = config.words[0];
  if (numel == 0) return config;
  const bool vector_path = takes_vector_path(kernel, config.words[1]);
  std::int64_t work = vector_path ? (numel + kernel.vector_width - 1) / kernel.vector_width : numel;
  if (takes_run_path(kernel, config.words[1])) work = numel / relayout_run(kernel, config.words);  // a thread a run
  config.threads = kElementwiseThreads;
  config.blocks = grid_stride_blocks(work, kElementwiseThreads, multiprocessors);
  return config;
}

LaunchConfig reduction_launch(const ReductionKernel& kernel, const std::vector<const DLTensor*>& operands,
                              int multiprocessors) {
  LaunchConfig config;
  config.words = pack_reduction_arguments(kernel, operands);
  const std::int64_t rows = config.words[0], row_length = config.words[1];
  if (rows == 0) return config;
  // kRowElementsPerThread elements a thread, whole warps, at most kRowMaxThreads: a row of up to
  // 4,096 elements can take the vector path, read once into registers. One block per row,
  // grid-striding over rows beyond what fills the device.
  const std::int64_t per_thread = kRowElementsPerThread;
  const std::int64_t wanted = std::min<std::int64_t>((row_length + per_thread - 1) / per_thread, kRowMaxThreads);
  const std::int64_t threads = (wanted + 31) / 32 * 32;
  config.threads = static_cast<int>(std::max<std::int64_t>(threads, 32));
  config.blocks = std::min<std::int64_t>(rows, multiprocessors * 32LL);
  return config;
}

// One block per (batch, head, chunk of query rows), each over every key.
LaunchConfig attention_launch(const AttentionKernel& kernel, const std::vector<const DLTensor*>& operands) {
  LaunchConfig config;
  config.words = pack_attention_arguments(kernel, operands);
  config.blocks = attention_blocks(config.words);
  config.threads = kAttentionThreads;
  return config;
}

// A warp per (batch, head, query row).
LaunchConfig blind_rows_launch(const BlindRowsKernel& kernel, const std::vector<const DLTensor*>& operands) {
  LaunchConfig config;
  config.words = pack_blind_rows_arguments(kernel, operands);
  config.blocks = blind_rows_blocks(config.words);
  config.threads = kBlindRowsThreads;
  return config;
}

LaunchConfig pool_launch(const PoolKernel& kernel, const std::vector<const DLTensor*>& operands, int multiprocessors) {
  LaunchConfig config;
  config.words = pack_pool_arguments(kernel, operands);
  config.threads = kPoolThreads;
  config.blocks = grid_stride_blocks(pool_work_items(kernel, config.words), kPoolThreads, multiprocessors);
  return config;
}

LaunchConfig index_copy_launch(const IndexCopyKernel& kernel, const std::vector<const DLTensor*>& operands,
                               int multiprocessors) {
  LaunchConfig config;
  config.words = pack_index_copy_arguments(kernel, operands);
  config.threads = kIndexCopyThreads;
  config.blocks = grid_stride_blocks(config.words[0], kIndexCopyThreads, multiprocessors);
  return config;
}

}  // namespace

LaunchConfig launch_config(const GeneratedKernel& kernel, const std::vector<const DLTensor*>& operands,
                           int multiprocessors) {
  if (const auto* e = std::get_if<ElementwiseKernel>(&kernel.kernel)) return elementwise_launch(*e, operands, multiprocessors);
  if (const auto* a = std::get_if<AttentionKernel>(&kernel.kernel)) return attention_launch(*a, operands);
  if (const auto* b = std::get_if<BlindRowsKernel>(&kernel.kernel)) return blind_rows_launch(*b, operands);
  if (const auto* p = std::get_if<PoolKernel>(&kernel.kernel)) return pool_launch(*p, operands, multiprocessors);
  if (const auto* c = std::get_if<IndexCopyKernel>(&kernel.kernel)) return index_copy_launch(*c, operands, multiprocessors);
  return reduction_launch(std::get<ReductionKernel>(kernel.kernel), operands, multiprocessors);
}

}  // namespace zenith::cuda
