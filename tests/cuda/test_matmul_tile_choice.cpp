// matmul_tile_choice (backends/cuda/matmul_tile_choice.h): which of cuBLASLt's candidates runs a
// product whose output's columns vary, read from the candidates' algorithm, tile and split count.
// No GPU: the candidates are written here with cuBLASLt's own enum values.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include <cublasLt.h>

#include "backends/cuda/matmul_tile_choice.h"

namespace zenith::cuda {
namespace {

constexpr std::uint32_t k128x128 = CUBLASLT_MATMUL_TILE_128x128;
constexpr std::uint32_t k256x64 = CUBLASLT_MATMUL_TILE_256x64;
constexpr std::uint32_t k64x256 = CUBLASLT_MATMUL_TILE_64x256;
constexpr std::uint32_t k512x32 = CUBLASLT_MATMUL_TILE_512x32;
constexpr std::uint32_t k64x128 = CUBLASLT_MATMUL_TILE_64x128;
constexpr std::uint32_t k128x64 = CUBLASLT_MATMUL_TILE_128x64;

TEST(MatmulTileChoice, TileShapesComeFromTheEnumsNames) {
  const auto square = tile_shape(k128x128);
  ASSERT_TRUE(square.has_value());
  EXPECT_EQ(square->rows, 128u);
  EXPECT_EQ(square->cols, 128u);
  const auto oblong = tile_shape(k256x64);
  ASSERT_TRUE(oblong.has_value());
  EXPECT_EQ(oblong->rows, 256u);
  EXPECT_EQ(oblong->cols, 64u);
  const auto last = tile_shape(CUBLASLT_MATMUL_TILE_END - 1);
  EXPECT_TRUE(last.has_value()) << "the highest named tile is in the table";
  EXPECT_FALSE(tile_shape(CUBLASLT_MATMUL_TILE_UNDEFINED).has_value());
  EXPECT_FALSE(tile_shape(CUBLASLT_MATMUL_TILE_END).has_value());
}

// The H200's sweep (docs/performance.md): algorithm 55 with 128 x 128 tiles first, the same
// algorithm and split count with 256 x 64 tiles second.
TEST(MatmulTileChoice, TakesTheSameKernelsNarrowerTile) {
  const std::vector<AlgorithmSummary> picks = {{55, k128x128, 1}, {55, k256x64, 1}, {55, k64x128, 1}};
  EXPECT_EQ(narrower_along_varying_columns(picks), 1u);
}

TEST(MatmulTileChoice, TheHeuristicsOrderRanksTheNarrowerTiles) {
  const std::vector<AlgorithmSummary> picks = {{55, k128x128, 1}, {55, k256x64, 1}, {55, k512x32, 1}};
  EXPECT_EQ(narrower_along_varying_columns(picks), 1u);
  const std::vector<AlgorithmSummary> reversed = {{55, k128x128, 1}, {55, k512x32, 1}, {55, k256x64, 1}};
  EXPECT_EQ(narrower_along_varying_columns(reversed), 1u);
}

TEST(MatmulTileChoice, KeepsTheFirstPickWithoutANarrowerTileOfItsKernel) {
  // Another algorithm, another split count, another tile area, a wider tile: none is the same kernel
  // narrower along the columns.
  EXPECT_EQ(narrower_along_varying_columns({{55, k128x128, 1}, {54, k256x64, 1}}), 0u);
  EXPECT_EQ(narrower_along_varying_columns({{55, k128x128, 1}, {55, k256x64, 5}}), 0u);
  EXPECT_EQ(narrower_along_varying_columns({{55, k128x128, 1}, {55, k64x128, 1}}), 0u);
  EXPECT_EQ(narrower_along_varying_columns({{55, k128x128, 1}, {55, k128x64, 1}}), 0u) << "narrower but half the area";
  EXPECT_EQ(narrower_along_varying_columns({{55, k128x128, 1}, {55, k64x256, 1}}), 0u);
  EXPECT_EQ(narrower_along_varying_columns({{55, k256x64, 1}, {55, k128x128, 1}}), 0u);
  EXPECT_EQ(narrower_along_varying_columns({{55, k128x128, 1}}), 0u);
}

TEST(MatmulTileChoice, AnUnknownTileKeepsTheFirstPick) {
  EXPECT_EQ(narrower_along_varying_columns({{55, CUBLASLT_MATMUL_TILE_UNDEFINED, 1}, {55, k256x64, 1}}), 0u);
  // An unknown tile among the candidates is passed over, not taken, and does not end the search.
  EXPECT_EQ(narrower_along_varying_columns({{55, k128x128, 1}, {55, CUBLASLT_MATMUL_TILE_UNDEFINED, 1}, {55, k256x64, 1}}),
            2u);
}

TEST(MatmulTileChoice, NoCandidateIsAnError) {
  EXPECT_THROW(narrower_along_varying_columns({}), std::invalid_argument);
}

}  // namespace
}  // namespace zenith::cuda
