// The TorchScript importer on graphs written by hand (as the tracer leaves them: complete tensor
// types), for the structure a traced model holds: tuples, lists and string-keyed dicts of tensors
// and constants, indexed with constants, and returned as forward returned them.
#include <gtest/gtest.h>

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "capture/torchscript_import.h"
#include "common/fresh_inputs.h"
#include "core/verifier.h"
#include "zenith/compile.h"
#include "zenith/error.h"

namespace zenith {
namespace {

using testing::call_name;
using testing::kCallsPerSignature;

ir::Graph import(const std::string& source) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(source, graph.get());
  std::vector<capture::InputBinding> inputs(graph->inputs().size());
  return capture::import_torchscript(graph, inputs);
}

std::string import_error(const std::string& source) {
  try {
    import(source);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

constexpr const char* kInput = "%x : Float(2, 3, strides=[3, 1], requires_grad=0, device=cpu)";

TEST(TorchScriptImport, ADictOutputKeepsItsKeysInOrder) {
  auto graph = import(std::string("graph(") + kInput + R"IR():
    %r : Float(2, 3, strides=[3, 1], requires_grad=0, device=cpu) = aten::relu(%x)
    %k1 : str = prim::Constant[value="last_hidden_state"]()
    %k2 : str = prim::Constant[value="pooler_output"]()
    %d : Dict(str, Tensor) = prim::DictConstruct(%k1, %r, %k2, %x)
    return (%d))IR");
  ir::verify(graph);
  const auto& structure = graph.output_structure;
  ASSERT_EQ(structure.kind, ir::OutputStructure::Kind::Dict);
  EXPECT_EQ(structure.keys, (std::vector<std::string>{"last_hidden_state", "pooler_output"}));
  ASSERT_EQ(structure.elements.size(), 2u);
  EXPECT_EQ(graph.outputs.at(structure.elements[0].index), graph.nodes[0].outputs[0]);
  EXPECT_EQ(graph.outputs.at(structure.elements[1].index), graph.inputs[0]);
}

TEST(TorchScriptImport, ConstantIndexesReadTuplesListsAndDicts) {
  auto graph = import(std::string("graph(") + kInput + R"IR():
    %r : Float(2, 3, strides=[3, 1], requires_grad=0, device=cpu) = aten::relu(%x)
    %one : int = prim::Constant[value=1]()
    %last : int = prim::Constant[value=-1]()
    %t : (Tensor, Tensor) = prim::TupleConstruct(%x, %r)
    %a : Tensor = prim::TupleIndex(%t, %one)
    %l : Tensor[] = prim::ListConstruct(%a, %x)
    %b : Tensor = aten::__getitem__(%l, %last)
    %k : str = prim::Constant[value="relu"]()
    %d : Dict(str, Tensor) = prim::DictConstruct(%k, %a)
    %c : Tensor = aten::__getitem__(%d, %k)
    %s : Float(2, 3, strides=[3, 1], requires_grad=0, device=cpu) = aten::mul(%b, %c)
    return (%s))IR");
  ir::verify(graph);
  ASSERT_EQ(graph.nodes.size(), 2u);
  const auto& mul = graph.nodes[1];
  EXPECT_EQ(mul.op, "aten::mul");
  // x * relu(x): the tuple's element 1, the list's last element, the dict's "relu".
  EXPECT_EQ(mul.input_ids(), (std::vector<int>{graph.inputs[0], graph.nodes[0].outputs[0]}));
}

TEST(TorchScriptImport, ConstantsAndNoneInTheOutputComeBackAsThemselves) {
  auto graph = import(std::string("graph(") + kInput + R"IR():
    %none : NoneType = prim::Constant()
    %n : int = prim::Constant[value=7]()
    %t : (Tensor, NoneType, int) = prim::TupleConstruct(%x, %none, %n)
    return (%t))IR");
  const auto& elements = graph.output_structure.elements;
  ASSERT_EQ(elements.size(), 3u);
  EXPECT_EQ(elements[1].kind, ir::OutputStructure::Kind::Constant);
  EXPECT_TRUE(std::holds_alternative<ir::NoneArg>(elements[1].constant));
  EXPECT_EQ(std::get<std::int64_t>(elements[2].constant), 7);
}

TEST(TorchScriptImport, AnUnreadResultTheTracerCouldNotTypeIsAnEmptyTensor) {
  // As torchvision's eval attention leaves aten::_native_multi_head_attention's weights (undefined).
  auto graph = import(std::string("graph(") + kInput + R"IR():
    %one : int = prim::Constant[value=1]()
    %no : bool = prim::Constant[value=0]()
    %v : Float(2, strides=[1], requires_grad=0, device=cpu), %i : Tensor = aten::max(%x, %one, %no)
    return (%v))IR");
  ASSERT_EQ(graph.nodes.size(), 1u);
  const auto& unread = graph.value(graph.nodes[0].outputs.at(1)).type;
  EXPECT_EQ(unread.sizes, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(unread.device, at::Device(at::kCPU));
  // Read, it needs its type.
  auto read = import_error(std::string("graph(") + kInput + R"IR():
    %one : int = prim::Constant[value=1]()
    %no : bool = prim::Constant[value=0]()
    %v : Float(2, strides=[1], requires_grad=0, device=cpu), %i : Tensor = aten::max(%x, %one, %no)
    return (%i))IR");
  EXPECT_NE(read.find("incomplete tensor type"), std::string::npos) << read;
}

TEST(TorchScriptImport, WhatCannotBeHeldIsNamed) {
  auto key = import_error(std::string("graph(") + kInput + R"IR():
    %k : int = prim::Constant[value=3]()
    %d : Dict(int, Tensor) = prim::DictConstruct(%k, %x)
    return (%d))IR");
  EXPECT_NE(key.find("has a key that is not a constant string"), std::string::npos) << key;
  auto missing = import_error(std::string("graph(") + kInput + R"IR():
    %k : str = prim::Constant[value="a"]()
    %j : str = prim::Constant[value="b"]()
    %d : Dict(str, Tensor) = prim::DictConstruct(%k, %x)
    %c : Tensor = aten::__getitem__(%d, %j)
    return (%c))IR");
  EXPECT_NE(missing.find("reads the key 'b', which the dict does not hold"), std::string::npos) << missing;
  auto outside = import_error(std::string("graph(") + kInput + R"IR():
    %i : int = prim::Constant[value=2]()
    %t : (Tensor, Tensor) = prim::TupleConstruct(%x, %x)
    %a : Tensor = prim::TupleIndex(%t, %i)
    return (%a))IR");
  EXPECT_NE(outside.find("reads element 2 of 2"), std::string::npos) << outside;
  auto nested = import_error(std::string("graph(") + kInput + R"IR():
    %l : Tensor[] = prim::ListConstruct(%x, %x)
    %n : Tensor[][] = prim::ListConstruct(%l, %l)
    return (%n))IR");
  EXPECT_NE(nested.find("holds lists, tuples or dicts"), std::string::npos) << nested;
}

TEST(TorchScriptImport, AScriptedModuleReturningADictCompilesAndReturnsADict) {
  torch::manual_seed(21);
  torch::jit::Module scripted("Heads");
  scripted.register_parameter("w", torch::randn({4, 4}), false);
  scripted.define(R"(
    def forward(self, x):
        h = torch.relu(torch.matmul(x, self.w))
        return {"hidden": h, "pooled": h.mean(1)}
  )");
  scripted.eval();
  torch::NoGradGuard no_grad;
  CompileOptions options;
  options.fallback_to_eager = false;  // a capture problem must fail the test
  auto fast = compile(scripted, options);
  for (int call = 0; call < kCallsPerSignature; ++call) {
    auto x = torch::randn({3, 4});
    auto got = fast({x});
    auto want = scripted.forward({x}).toGenericDict();
    ASSERT_TRUE(got.isGenericDict()) << call_name(call);
    auto dict = got.toGenericDict();
    ASSERT_EQ(dict.size(), 2u) << call_name(call);
    auto it = dict.begin();
    EXPECT_EQ(it->key().toStringRef(), "hidden") << "insertion order kept";
    // The same ATen kernels on both sides: a matmul of 4 terms, one rounding order.
    for (const char* key : {"hidden", "pooled"}) {
      EXPECT_TRUE(torch::allclose(dict.at(key).toTensor(), want.at(key).toTensor(), 1e-6, 1e-6)) << key << " "
                                                                                                   << call_name(call);
    }
  }
  EXPECT_EQ(fast.stats().eager_calls, 0);
}

}  // namespace
}  // namespace zenith
