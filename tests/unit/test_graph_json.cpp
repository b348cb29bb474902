// JSON: round trips of hand-built and captured graphs, and clear errors for bad JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "core/graph_json.h"
#include "core/interpreter.h"
#include "graph_builders.h"
#include "zenith/error.h"

namespace zenith::ir {
namespace {

using testing::GraphBuilder;
using testing::value;
using testing::scalar;
using testing::real;
using testing::none;

void expect_same(const Graph& a, const Graph& b) {
  EXPECT_EQ(to_json(a, GraphKind::Graph).dump(), to_json(b, GraphKind::Graph).dump());
}

std::string error_of(const std::string& text) {
  try {
    from_json(parse_json(text, "test.json"));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GraphJson, RoundTripKeepsEverything) {
  GraphBuilder b;
  int x = b.input({3, 4});
  int i = b.input({3}, at::kLong);
  int c = b.constant(at::arange(4, at::kFloat));
  int s = b.op("aten::add", "Tensor", {value("self", x), value("other", c), real("alpha", 0.5)});
  auto parts = b.apply("aten::chunk", "", {value("self", s), scalar("chunks", 2), scalar("dim", 1)}, 2);
  int cat = b.op("aten::cat", "", {{"tensors", ValueListRef{{parts[1], parts[0]}}}, scalar("dim", 0)});
  int sel = b.op("aten::index_select", "", {value("self", cat), scalar("dim", 0), value("index", i)});
  int sum = b.op("aten::sum", "dim_IntList",
                 {value("self", sel), {"dim", std::vector<std::int64_t>{1}}, {"keepdim", false}, none("dtype")});
  auto g = b.finish({sum, cat});
  auto back = from_json(parse_json(to_json(g, GraphKind::Graph).dump(), "round trip"));
  expect_same(g, back);
  EXPECT_TRUE(back.nodes[1].list_output);
  EXPECT_TRUE(at::equal(back.constants.at(c), g.constants.at(c)));
  // The graph read back computes the same thing.
  auto inputs = b.example_inputs();
  inputs[1] = at::tensor({2, 0, 1}, at::kLong);
  auto want = interpret(g, inputs), got = interpret(back, inputs);
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(at::equal(want[k], got[k]));
}

TEST(GraphJson, DictAndConstantOutputsRoundTrip) {
  GraphBuilder b;
  int x = b.input({2, 3});
  int r = b.op("aten::relu", "", {value("self", x)});
  auto g = b.finish({r, x});
  // {"hidden": outputs[0], "extra": (outputs[1], None, 3)}, as a Hugging Face model returns.
  OutputStructure hidden, second, none_element;
  second.index = 1;
  none_element.kind = OutputStructure::Kind::Constant;
  OutputStructure three = none_element;
  three.constant = std::int64_t{3};
  OutputStructure extra;
  extra.kind = OutputStructure::Kind::Tuple;
  extra.elements = {second, none_element, three};
  g.output_structure = OutputStructure{};
  g.output_structure.kind = OutputStructure::Kind::Dict;
  g.output_structure.elements = {hidden, extra};
  g.output_structure.keys = {"hidden", "extra"};
  auto text = to_json(g, GraphKind::Graph);
  EXPECT_EQ(text["output_structure"]["dict"][0]["key"], "hidden");
  EXPECT_EQ(text["output_structure"]["dict"][1]["value"]["tuple"][1]["constant"]["none"], true);
  auto back = from_json(parse_json(text.dump(), "round trip"));
  EXPECT_TRUE(back.output_structure == g.output_structure);
  expect_same(g, back);

  auto repeated = text;
  repeated["output_structure"]["dict"][1]["key"] = "hidden";
  EXPECT_NE(error_of(repeated.dump()).find("repeats the key 'hidden'"), std::string::npos) << error_of(repeated.dump());
  auto keyless = text;
  keyless["output_structure"]["dict"][0].erase("key");
  EXPECT_NE(error_of(keyless.dump()).find("/output_structure/dict/0: missing 'key'"), std::string::npos)
      << error_of(keyless.dump());
  auto named = text;
  named["output_structure"]["dict"][1]["value"]["tuple"][1]["constant"] = {{"value", 0}};
  EXPECT_NE(error_of(named.dump()).find("a constant output cannot name values"), std::string::npos)
      << error_of(named.dump());
}

TEST(GraphJson, IntegersAndDoublesStayApart) {
  GraphBuilder b;
  int x = b.input({2}, at::kLong);
  int a = b.op("aten::add", "Scalar", {value("self", x), real("other", 1.0), scalar("alpha", 1)});
  auto g = b.finish({a});
  auto json = to_json(g, GraphKind::Graph);
  auto back = from_json(json);
  EXPECT_TRUE(std::holds_alternative<double>(back.nodes[0].args[1].value));
  EXPECT_TRUE(std::holds_alternative<std::int64_t>(back.nodes[0].args[2].value));
  EXPECT_EQ(back.value(a).type.dtype, at::kFloat);  // long + 1.0 promotes
}

TEST(GraphJson, InfinitiesAndNaNSurviveTheRoundTrip) {
  GraphBuilder b;
  int x = b.input({4, 4});
  int m = b.input({4, 4}, at::kBool);
  const double inf = std::numeric_limits<double>::infinity();
  int f = b.op("aten::masked_fill", "Scalar", {value("self", x), value("mask", m), real("value", -inf)});
  int c = b.op("aten::clamp", "", {value("self", f), real("min", std::numeric_limits<double>::quiet_NaN()),
                                    real("max", inf)});
  auto g = b.finish({c});
  auto text = to_json(g, GraphKind::Graph).dump();
  EXPECT_NE(text.find("\"double\":\"-inf\""), std::string::npos) << text;
  auto back = from_json(parse_json(text, "test"));
  EXPECT_EQ(std::get<double>(back.nodes[0].args[2].value), -inf);
  EXPECT_TRUE(std::isnan(std::get<double>(back.nodes[1].args[1].value)));
  EXPECT_EQ(std::get<double>(back.nodes[1].args[2].value), inf);
}

TEST(GraphJson, LargeConstantsAreElidedAndSaySo) {
  at::manual_seed(1);
  GraphBuilder b;
  int x = b.input({256});
  int c = b.constant(at::randn({256}));
  int y = b.op("aten::mul", "Tensor", {value("self", x), value("other", c)});
  auto g = b.finish({y});
  auto json = to_json(g, GraphKind::Graph, /*constant_limit=*/64);
  bool elided = false;
  for (const auto& v : json["values"]) elided |= v.contains("elided_bytes") && v["data"].is_null();
  EXPECT_TRUE(elided);
  EXPECT_THROW(from_json(json), Error);
  auto back = from_json(json, /*allow_missing_constant_data=*/true);
  EXPECT_FALSE(back.constants.count(c));
  try {
    interpret(back, b.example_inputs());
    FAIL() << "interpreting an elided constant must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("elided"), std::string::npos) << e.what();
  }
}

TEST(GraphJson, TruncatedTextNamesThePosition) {
  auto text = to_json(testing::elementwise_chain(), GraphKind::Graph).dump();
  auto message = error_of(text.substr(0, text.size() / 2));
  EXPECT_NE(message.find("test.json is not valid JSON (byte"), std::string::npos) << message;
}

TEST(GraphJson, MissingAndMistypedFieldsNameTheirPath) {
  auto json = to_json(testing::elementwise_chain(), GraphKind::Graph);
  auto no_name = json;
  no_name["nodes"][1]["args"][0].erase("name");
  EXPECT_NE(error_of(no_name.dump()).find("/nodes/1/args/0: missing 'name'"), std::string::npos) << error_of(no_name.dump());
  auto bad_sizes = json;
  bad_sizes["values"][0]["sizes"] = "four";
  EXPECT_NE(error_of(bad_sizes.dump()).find("/values/0/sizes"), std::string::npos) << error_of(bad_sizes.dump());
  auto bad_dtype = json;
  bad_dtype["values"][0]["dtype"] = "float128";
  EXPECT_NE(error_of(bad_dtype.dump()).find("/values/0/dtype"), std::string::npos);
  auto bad_arg = json;
  bad_arg["nodes"][0]["args"][0] = {{"name", "self"}, {"weird", 1}};
  EXPECT_NE(error_of(bad_arg.dump()).find("/nodes/0/args/0"), std::string::npos);
}

// Both found by fuzzing (tests/fuzz): nlohmann's own exceptions escaped instead of a zenith::Error.
TEST(GraphJson, FuzzFindingsGiveZenithErrors) {
  EXPECT_NE(error_of("5E92222").find("test.json holds JSON Zenith cannot read"), std::string::npos)
      << error_of("5E92222");
  auto json = to_json(testing::elementwise_chain(), GraphKind::Graph);
  auto mistyped = json;
  mistyped["values"][0]["requires_grad"] = "yes";
  EXPECT_NE(error_of(mistyped.dump()).find("/values/0/requires_grad: wrong type"), std::string::npos)
      << error_of(mistyped.dump());
  auto overload = json;
  overload["nodes"][0]["overload"] = 3;
  EXPECT_NE(error_of(overload.dump()).find("/nodes/0/overload: wrong type"), std::string::npos)
      << error_of(overload.dump());
}

TEST(GraphJson, StructuralProblemsAreCaughtByTheVerifier) {
  auto json = to_json(testing::elementwise_chain(), GraphKind::Graph);
  json["nodes"][0]["args"][0]["value"] = 99;
  EXPECT_NE(error_of(json.dump()).find("IR verifier"), std::string::npos) << error_of(json.dump());
  auto version = to_json(testing::elementwise_chain(), GraphKind::Graph);
  version["schema_version"] = 7;
  EXPECT_NE(error_of(version.dump()).find("schema_version: expected 1, got 7"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("expected an object"), std::string::npos) << error_of("[1, 2]");
  EXPECT_NE(error_of("").find("not valid JSON"), std::string::npos);
}

TEST(GraphJson, GroupsCarryAliases) {
  auto g = testing::elementwise_chain();
  auto json = to_json(g, GraphKind::Group);
  EXPECT_EQ(json["kind"], "group");
  EXPECT_EQ(json["output_aliases"], nlohmann::json::array({-1}));
}

}  // namespace
}  // namespace zenith::ir
