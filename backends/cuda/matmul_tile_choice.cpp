#include "backends/cuda/matmul_tile_choice.h"

#include <algorithm>
#include <stdexcept>

namespace zenith::cuda {
namespace {

struct NamedTile {
  std::uint32_t id, rows, cols;
};

// Every CUBLASLT_MATMUL_TILE_<rows>x<cols> of the toolkit's cublasLt.h, read at configure time
// (cmake/cublaslt_tile_shapes.cmake).
constexpr NamedTile kTiles[] = {
#include "cublaslt_tile_shapes.inc"
};

}  // namespace

std::optional<TileShape> tile_shape(std::uint32_t tile_id) {
  const auto found = std::find_if(std::begin(kTiles), std::end(kTiles), [&](const NamedTile& t) { return t.id == tile_id; });
  if (found == std::end(kTiles)) return std::nullopt;
  return TileShape{found->rows, found->cols};
}

std::size_t narrower_along_varying_columns(const std::vector<AlgorithmSummary>& candidates) {
  if (candidates.empty()) throw std::invalid_argument("narrower_along_varying_columns: no candidate algorithm");
  const auto& first = candidates.front();
  const auto first_shape = tile_shape(first.tile);
  if (!first_shape) return 0;
  const std::uint64_t area = std::uint64_t{first_shape->rows} * first_shape->cols;
  for (std::size_t i = 1; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    if (c.algorithm != first.algorithm || c.splits != first.splits) continue;
    const auto shape = tile_shape(c.tile);
    if (shape && std::uint64_t{shape->rows} * shape->cols == area && shape->cols < first_shape->cols) return i;
  }
  return 0;
}

}  // namespace zenith::cuda
