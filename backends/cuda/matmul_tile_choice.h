// Which of cuBLASLt's candidate algorithms runs a product whose output's columns (in cuBLASLt's
// column-major terms: the row-major output's rows, tokens) vary between launches (a symbolic
// sequence length). The heuristic picks per size, and its first pick's time against the columns is
// a staircase: a step each time the output's tiles need one more round over the GPU's
// multiprocessors. Measured on the H200 for the torture test's product (Linear(1024, 1024) + ReLU,
// float32, batch 32 at lengths 100..1000; bench/cublaslt_algorithms.cpp --length-sweep, docs/performance.md):
// the first pick's 128 x 128 tile steps by about 170 us every 132 lengths, where the same algorithm
// and split count with a 256 x 64 tile, which the heuristic lists too, ramps over the positions
// after each edge, up to 83 us faster there and at most 11 us slower elsewhere. A tile narrower
// along the dimension that varies adds work in finer steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace zenith::cuda {

/// A tile's extent along the output's rows and columns, in cuBLASLt's column-major terms.
struct TileShape {
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
};

/// The shape cuBLASLt's `tile_id` (a cublasLtMatmulTile_t) names, or nullopt for
/// CUBLASLT_MATMUL_TILE_UNDEFINED and values this build's cublasLt.h does not name.
std::optional<TileShape> tile_shape(std::uint32_t tile_id);

/// What the choice reads of a candidate algorithm (cuBLASLt's CUBLASLT_ALGO_CONFIG_ID, _TILE_ID
/// and _SPLITK_NUM).
struct AlgorithmSummary {
  std::uint32_t algorithm = 0;
  std::uint32_t tile = 0;
  std::int32_t splits = 1;
};

/// Index into `candidates` (the heuristic's, best first; not empty) of the one to run when the
/// output's columns vary between launches: the best-ranked candidate of the first's algorithm and
/// split count whose tile covers as many elements as the first's and is narrower along the
/// columns; the first itself when there is none or its tile's shape is unknown. The heuristic's
/// order still ranks the narrower tiles among themselves: only the 256 x 64 tile against the
/// 128 x 128 one was measured. Throws std::invalid_argument when `candidates` is empty.
std::size_t narrower_along_varying_columns(const std::vector<AlgorithmSummary>& candidates);

}  // namespace zenith::cuda
