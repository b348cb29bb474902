// Which values no node of a graph writes (core/read_only_values.h): in a plan's CUDA graph the JIT
// CUDA plugin loads such a weight before the kernel before it has finished
// (runtime/unwritten_inputs.h), so a value counted wrongly here would be read half-written on a GPU.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/read_only_values.h"
#include "unit/graph_builders.h"

namespace zenith {
namespace {

using testing::GraphBuilder;
using testing::ints;
using testing::scalar;
using testing::value;

TEST(ReadOnlyValues, ParametersConstantsAndTheirViewsThatNothingWrites) {
  GraphBuilder b;
  const int x = b.input({2, 8});
  const int w = b.parameter({4, 8}, "w");
  const int c = b.constant(at::ones({4, 8}));
  const int wt = b.op("aten::t", "", {value("self", w)});
  const int ct = b.op("aten::t", "", {value("self", c)});
  const int y = b.op("aten::mm", "", {value("self", x), value("mat2", wt)});
  const int z = b.op("aten::mm", "", {value("self", x), value("mat2", ct)});
  const int xv = b.op("aten::view", "", {value("self", x), ints("size", {16})});
  const int r = b.op("aten::relu", "", {value("self", y)});
  auto g = b.finish({r, z, xv});
  const auto read_only = ir::read_only_values(g);
  EXPECT_TRUE(read_only[w]) << "a parameter";
  EXPECT_TRUE(read_only[c]) << "a constant";
  EXPECT_TRUE(read_only[wt]) << "a view of a parameter";
  EXPECT_TRUE(read_only[ct]) << "a view of a constant";
  EXPECT_FALSE(read_only[x]) << "a call input: the caller's memory";
  EXPECT_FALSE(read_only[xv]) << "a view of a call input";
  EXPECT_FALSE(read_only[y]) << "a node's result";
  EXPECT_FALSE(read_only[r]);
}

TEST(ReadOnlyValues, AParameterWrittenInPlaceAndEveryViewOfItAreNot) {
  GraphBuilder b;
  const int x = b.input({2, 8});
  const int w = b.parameter({4, 8}, "w");
  const int other = b.parameter({4, 8}, "other");
  // The view is taken before the write: the write still changes what it reads.
  const int wt = b.op("aten::t", "", {value("self", w)});
  const int y = b.op("aten::mm", "", {value("self", x), value("mat2", wt)});
  const int updated = b.op("aten::add_", "Tensor", {value("self", w), value("other", other), scalar("alpha", 1)});
  auto g = b.finish({y, updated});
  const auto read_only = ir::read_only_values(g);
  EXPECT_FALSE(read_only[w]);
  EXPECT_FALSE(read_only[wt]);
  EXPECT_FALSE(read_only[updated]);
  EXPECT_TRUE(read_only[other]) << "read by the in-place op, not written";
}

TEST(ReadOnlyValues, AWriteThroughAViewReachesTheParameter) {
  GraphBuilder b;
  const int w = b.parameter({4, 8}, "w");
  const int row = b.op("aten::select", "int", {value("self", w), scalar("dim", 0), scalar("index", 1)});
  const int zeroed = b.op("aten::zero_", "", {value("self", row)});
  const int s = b.op("aten::sum", "", {value("self", w), testing::none("dtype")});
  auto g = b.finish({s, zeroed});
  const auto read_only = ir::read_only_values(g);
  EXPECT_FALSE(read_only[w]);
  EXPECT_FALSE(read_only[row]);
}

}  // namespace
}  // namespace zenith
