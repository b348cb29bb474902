// Quickstart: compile a BERT-style transformer encoder with one line, run it, and check that the
// compiled call gives the same result as eager LibTorch.
//
//   quickstart [dump-folder]
//
// Prints Zenith's compile report, the largest difference against eager, and where the JSON trace
// dump went (inspect it with `zenith-inspect summary <file>`).
#include <cstdio>
#include <string>

#include <torch/torch.h>

#include "models/bert.h"
#include "zenith/compile.h"

int main(int argc, char** argv) {
  std::string dump_folder = argc > 1 ? argv[1] : "zenith-dumps";
  torch::manual_seed(0);

  auto config = zenith::models::BertConfig::small();
  zenith::models::Bert model(config);
  model->eval();
  torch::NoGradGuard no_grad;  // inference: Zenith compiles calls that need no gradients

  zenith::CompileOptions options;
  options.name = "bert_small";
  options.dump_dir = dump_folder;
  options.log_level = zenith::LogLevel::Info;  // print the compile report
  auto fast = zenith::compile(model, options);

  const int64_t batch = 2, length = 16;
  auto ids = torch::randint(config.vocab_size, {batch, length}, torch::kLong);
  auto mask = torch::ones({batch, length}, torch::kLong);
  mask.index_put_({1, torch::indexing::Slice(12)}, 0);  // the second sequence is padded

  fast(ids, mask);             // first call: capture, optimize, compile
  auto y = fast(ids, mask);    // later calls replay the plan
  auto expected = model->forward(ids, mask);

  double max_error = (y - expected).abs().max().item<double>();
  double scale = expected.abs().max().item<double>();
  bool matches = torch::allclose(y, expected, /*rtol=*/1e-5, /*atol=*/1e-5);
  auto report = fast.report();
  auto stats = fast.stats();
  std::printf("\noutput %s, max |zenith - eager| = %.3g (max |eager| = %.3g)\n", c10::str(y.sizes()).c_str(),
              max_error, scale);
  std::printf("plan cache: %lld hits, %lld misses\n", static_cast<long long>(stats.hits),
              static_cast<long long>(stats.misses));
  std::printf("JSON trace dump: %s\n", report.dump_path.empty() ? "(none written)" : report.dump_path.c_str());
  std::printf("%s\n", matches ? "RESULT: matches eager LibTorch" : "RESULT: DOES NOT MATCH eager LibTorch");
  return matches && !report.eager_fallback ? 0 : 1;
}
