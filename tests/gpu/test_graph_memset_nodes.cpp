// runtime/graph_memset_nodes.h: a captured graph whose memset nodes became memcpy nodes writes
// the same bytes, in the same order, as the graph as captured. Label gpu.
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/graph_memset_nodes.h"

namespace {

using zenith::kMaxRewrittenMemsetBytes;
using zenith::memsets_as_copies;

void check(cudaError_t status) { ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status); }

// cuMemsetD16Async and cuMemsetD32Async (the runtime API sets bytes only), from the driver that
// the runtime loaded, so that the test needs no link to libcuda.
using MemsetD16Async = int (*)(unsigned long long, unsigned short, std::size_t, cudaStream_t);
using MemsetD32Async = int (*)(unsigned long long, unsigned int, std::size_t, cudaStream_t);

template <typename Function>
Function driver_function(const char* name) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<Function>(function);
}

std::map<cudaGraphNodeType, int> node_types(cudaGraph_t graph) {
  std::size_t count = 0;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(count);
  EXPECT_EQ(cudaGraphGetNodes(graph, nodes.data(), &count), cudaSuccess);
  std::map<cudaGraphNodeType, int> types;
  for (auto node : nodes) {
    cudaGraphNodeType type{};
    EXPECT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
    ++types[type];
  }
  return types;
}

class GraphMemsetNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// Memsets of every element size, one of rows with gaps between them, one larger than the bound,
// and a PyTorch kernel that adds to what a memset wrote (so the copy must still come before it),
// captured into one graph; the graph and its rewritten clone, each launched on freshly poisoned
// memory, leave the same bytes, and the bytes the memsets promise.
TEST_F(GraphMemsetNodes, RewrittenGraphWritesTheBytesTheMemsetsDid) {
  const auto d16 = driver_function<MemsetD16Async>("cuMemsetD16Async");
  const auto d32 = driver_function<MemsetD32Async>("cuMemsetD32Async");
  ASSERT_NE(d16, nullptr);
  ASSERT_NE(d32, nullptr);
  const auto large = static_cast<std::int64_t>(2 * kMaxRewrittenMemsetBytes);
  const std::int64_t total = 4096 + large;
  auto memory = torch::empty({total}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kByte));
  auto* base = static_cast<unsigned char*>(memory.data_ptr());
  auto stream = c10::cuda::getStreamFromPool();
  cudaGraph_t graph = nullptr;
  {
    c10::cuda::CUDAStreamGuard on(stream);
    check(cudaStreamBeginCapture(stream.stream(), cudaStreamCaptureModeThreadLocal));
    check(cudaMemsetAsync(base + 3, 0x5a, 10, stream.stream()));                            // bytes 3-12
    check(cudaMemset2DAsync(base + 64, 64, 0x11, 16, 4, stream.stream()));                    // 16 of every 64 bytes, 4 rows
    ASSERT_EQ(d16(reinterpret_cast<unsigned long long>(base + 512), 0xbeef, 7, stream.stream()), 0);  // 7 halves
    ASSERT_EQ(d32(reinterpret_cast<unsigned long long>(base + 1024), 0x01020304u, 5, stream.stream()), 0);
    check(cudaMemsetAsync(base + 2048, 0, 256, stream.stream()));
    memory.narrow(0, 2048, 256).view(torch::kInt).add_(7);  // after the memset above, or it reads poison
    memory.narrow(0, 3072, 64).fill_(9);                    // before the memset below, or it wins
    check(cudaMemsetAsync(base + 3072, 0x44, 64, stream.stream()));
    check(cudaMemsetAsync(base + 4096, 0x33, static_cast<std::size_t>(large), stream.stream()));  // over the bound
    check(cudaStreamEndCapture(stream.stream(), &graph));
  }
  cudaGraph_t original = nullptr;
  check(cudaGraphClone(&original, graph));
  EXPECT_EQ(node_types(graph)[cudaGraphNodeTypeMemset], 7);

  const auto rewrite = memsets_as_copies(graph, memory.device().index());
  EXPECT_EQ(rewrite.rewritten, 6u);
  EXPECT_EQ(rewrite.kept, 1u);
  auto types = node_types(graph);
  EXPECT_EQ(types[cudaGraphNodeTypeMemset], 1);
  EXPECT_EQ(types[cudaGraphNodeTypeMemcpy], 6);
  EXPECT_EQ(types[cudaGraphNodeTypeKernel], 2);

  auto launch = [&](cudaGraph_t g) {
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    memory.fill_(0xa5);  // poison, on the current stream, which the launch follows
    EXPECT_EQ(cudaGraphLaunch(exec, c10::cuda::getCurrentCUDAStream().stream()), cudaSuccess);
    auto bytes = memory.cpu();
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    return bytes;
  };
  for (int launch_number = 0; launch_number < 2; ++launch_number) {
    const auto want = launch(original), got = launch(graph);
    EXPECT_TRUE(torch::equal(got, want)) << "launch " << launch_number;
    const auto* bytes = got.data_ptr<unsigned char>();
    EXPECT_EQ(bytes[2], 0xa5);
    EXPECT_EQ(bytes[3], 0x5a);
    EXPECT_EQ(bytes[12], 0x5a);
    EXPECT_EQ(bytes[13], 0xa5);
    EXPECT_EQ(bytes[64 + 3 * 64 + 15], 0x11);  // the last row's last byte
    EXPECT_EQ(bytes[64 + 16], 0xa5);            // a gap between rows
    std::uint16_t half = 0;
    std::memcpy(&half, bytes + 512 + 12, 2);
    EXPECT_EQ(half, 0xbeef);
    std::uint32_t word = 0;
    std::memcpy(&word, bytes + 1024 + 16, 4);
    EXPECT_EQ(word, 0x01020304u);
    std::int32_t added = 0;
    std::memcpy(&added, bytes + 2048 + 252, 4);
    EXPECT_EQ(added, 7);
    EXPECT_EQ(bytes[3072 + 63], 0x44);
    EXPECT_EQ(bytes[total - 1], 0x33);
  }
  check(cudaGraphDestroy(original));
  check(cudaGraphDestroy(graph));
}

// A capture forked over two streams and joined again: a memset with a kernel before it and two
// nodes after it (a memset on the other branch and a kernel past the join), and a last memset that
// nothing follows. The rewritten graph keeps every edge: launched on poisoned memory, it leaves
// what the graph as captured leaves.
TEST_F(GraphMemsetNodes, ForkedCaptureKeepsEveryEdge) {
  auto memory = torch::empty({1024}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kByte));
  auto* base = static_cast<unsigned char*>(memory.data_ptr());
  auto first = c10::cuda::getStreamFromPool(), second = c10::cuda::getStreamFromPool();
  cudaEvent_t forked = nullptr, joined = nullptr;
  check(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
  check(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
  cudaGraph_t graph = nullptr;
  {
    c10::cuda::CUDAStreamGuard on(first);
    check(cudaStreamBeginCapture(first.stream(), cudaStreamCaptureModeThreadLocal));
    memory.narrow(0, 0, 256).fill_(1);  // a kernel the memset on the second stream must follow
    check(cudaEventRecord(forked, first.stream()));
    check(cudaStreamWaitEvent(second.stream(), forked, 0));
    check(cudaMemsetAsync(base, 0, 256, second.stream()));
    check(cudaEventRecord(joined, second.stream()));
    check(cudaMemsetAsync(base + 256, 0x22, 256, first.stream()));  // beside it, on the first stream
    check(cudaStreamWaitEvent(first.stream(), joined, 0));
    memory.narrow(0, 0, 256).view(torch::kInt).add_(5);  // after both memsets
    check(cudaMemsetAsync(base + 768, 0x66, 16, first.stream()));  // nothing after it
    check(cudaStreamEndCapture(first.stream(), &graph));
  }
  cudaGraph_t original = nullptr;
  check(cudaGraphClone(&original, graph));
  const auto rewrite = memsets_as_copies(graph, memory.device().index());
  EXPECT_EQ(rewrite.rewritten, 3u);
  EXPECT_EQ(rewrite.kept, 0u);
  EXPECT_EQ(node_types(graph)[cudaGraphNodeTypeMemset], 0);
  std::size_t edges_before = 0, edges_after = 0;
  check(cudaGraphGetEdges(original, nullptr, nullptr, nullptr, &edges_before));
  check(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges_after));
  EXPECT_EQ(edges_after, edges_before);
  for (auto* g : {original, graph}) {
    cudaGraphExec_t exec = nullptr;
    check(cudaGraphInstantiate(&exec, g, 0));
    memory.fill_(0xa5);
    check(cudaGraphLaunch(exec, c10::cuda::getCurrentCUDAStream().stream()));
    const auto bytes = memory.cpu();
    check(cudaGraphExecDestroy(exec));
    const auto* b = bytes.data_ptr<unsigned char>();
    std::int32_t added = 0;
    std::memcpy(&added, b + 252, 4);
    EXPECT_EQ(added, 5) << (g == graph ? "rewritten" : "as captured");
    EXPECT_EQ(b[256], 0x22);
    EXPECT_EQ(b[512], 0xa5);
    EXPECT_EQ(b[768 + 15], 0x66);
    EXPECT_EQ(b[768 + 16], 0xa5);
  }
  check(cudaGraphDestroy(original));
  check(cudaGraphDestroy(graph));
  check(cudaEventDestroy(forked));
  check(cudaEventDestroy(joined));
}

// A memset of pinned host memory (mapped for the device) stays a memset node, and still writes.
// Skipped, not passed, where the driver refuses to capture such a memset.
TEST_F(GraphMemsetNodes, AMemsetOfHostMemoryStaysAMemset) {
  auto host = torch::empty({64}, torch::TensorOptions().dtype(torch::kByte).pinned_memory(true));
  host.fill_(0xa5);
  auto stream = c10::cuda::getStreamFromPool();
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(stream.stream(), cudaStreamCaptureModeThreadLocal));
  const auto captured = cudaMemsetAsync(host.data_ptr(), 0x17, 32, stream.stream());
  const auto ended = cudaStreamEndCapture(stream.stream(), &graph);  // invalidated, if the memset was refused
  if (captured != cudaSuccess) {
    // Then no captured graph holds such a node, and there is nothing to keep.
    if (ended == cudaSuccess && graph != nullptr) check(cudaGraphDestroy(graph));
    (void)cudaGetLastError();
    GTEST_SKIP() << "this driver does not capture a memset of pinned host memory: " << cudaGetErrorString(captured);
  }
  check(ended);
  const auto rewrite = memsets_as_copies(graph, c10::cuda::current_device());
  EXPECT_EQ(rewrite.rewritten, 0u);
  EXPECT_EQ(rewrite.kept, 1u);
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0));
  check(cudaGraphLaunch(exec, stream.stream()));
  check(cudaStreamSynchronize(stream.stream()));
  EXPECT_EQ(host[31].item<std::uint8_t>(), 0x17);
  EXPECT_EQ(host[32].item<std::uint8_t>(), 0xa5);
  check(cudaGraphExecDestroy(exec));
  check(cudaGraphDestroy(graph));
}

// A graph of cuDNN's attention, as PyTorch captures it, holds a memset node before each kernel
// (where ATen picks cuDNN); rewritten, it gives the result of the graph as captured, on two
// different inputs.
TEST_F(GraphMemsetNodes, AttentionGraphRewrittenGivesTheSameResult) {
  torch::manual_seed(11);
  auto f16 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kHalf);
  auto x = torch::randn({1, 12, 128, 64}, f16);
  auto mask = torch::randn({1, 1, 1, 128}, f16);
  auto chain = [&] {
    auto y = x;
    for (int i = 0; i < 3; ++i) y = at::scaled_dot_product_attention(y, y, y, mask);
    return y;
  };
  chain();  // libraries initialize outside the capture
  at::cuda::CUDAGraph graph(/*keep_graph=*/true);
  at::Tensor y;
  {
    c10::cuda::CUDAStreamGuard on(c10::cuda::getStreamFromPool());
    graph.capture_begin();
    y = chain();
    graph.capture_end();
  }
  cudaGraph_t original = nullptr;
  check(cudaGraphClone(&original, graph.raw_cuda_graph()));
  const auto memsets = node_types(original)[cudaGraphNodeTypeMemset];
  if (memsets == 0) {
    check(cudaGraphDestroy(original));
    GTEST_SKIP() << "ATen did not pick cuDNN's attention here: the graph has no memset node to rewrite";
  }
  const auto rewrite = memsets_as_copies(graph.raw_cuda_graph(), x.device().index());
  EXPECT_EQ(static_cast<int>(rewrite.rewritten), memsets);
  EXPECT_EQ(node_types(graph.raw_cuda_graph())[cudaGraphNodeTypeMemset], 0);
  graph.instantiate();
  cudaGraphExec_t as_captured = nullptr;
  check(cudaGraphInstantiate(&as_captured, original, 0));
  for (int call = 0; call < 2; ++call) {
    x.copy_(torch::randn_like(x));
    y.fill_(std::numeric_limits<float>::quiet_NaN());
    check(cudaGraphLaunch(as_captured, c10::cuda::getCurrentCUDAStream().stream()));
    const auto want = y.clone();
    y.fill_(std::numeric_limits<float>::quiet_NaN());
    graph.replay();
    // The same kernels on the same bytes: equal, not close.
    EXPECT_TRUE(torch::equal(y, want)) << "call " << call;
    EXPECT_FALSE(want.isnan().any().item<bool>());
  }
  check(cudaGraphExecDestroy(as_captured));
  check(cudaGraphDestroy(original));
}

}  // namespace
