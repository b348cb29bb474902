#include <torch/torch.h>

#include "case_files.h"
#include "fixed_shape.h"
#include "models/bert.h"
#include "workloads.h"

namespace zenith::bench {

std::vector<Result> run_bert(const Context& context, const CaseSpec& spec) {
  using zenith::models::Bert;
  using zenith::models::BertConfig;
  const auto config = spec.text("config") == "base" ? BertConfig::base() : BertConfig::small();
  const std::int64_t batch = spec.integer("batch"), seq = spec.integer("seq");
  CaseFiles files(context, spec);
  Bert model(config);
  model->eval();
  files.load_weights(*model);
  model->to(context.device, spec.dtype());
  const auto tokens = torch::TensorOptions().dtype(torch::kLong);
  FixedCase c;
  c.spec = &spec;
  c.dtype = spec.dtype();
  c.inputs = {files.input("input_ids", [&] { return torch::randint(config.vocab_size, {batch, seq}, tokens); }),
              files.input("attention_mask", [&] { return torch::ones({batch, seq}, tokens); })};
  c.eager = call_with<2>([model](at::Tensor ids, at::Tensor mask) mutable { return model->forward(ids, mask); });
  if (files.present()) c.python_outputs = {files.python_output("hidden")};
  auto modes = standard_modes(context, files, [&spec, model] {
    auto fast = zenith::compile(model, zenith_options(spec.name));
    return Mode{call_with<2>(fast), [fast] { return zenith_info(fast); }};
  });
  return measure_fixed(context, c, modes);
}

}  // namespace zenith::bench
