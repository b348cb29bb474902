#include <torch/torch.h>

#include "case_files.h"
#include "device_copy.h"
#include "fixed_shape.h"
#include "workloads.h"

namespace zenith::bench {

namespace {

at::Tensor chain(at::Tensor x, at::Tensor a, at::Tensor b, at::Tensor c) { return torch::gelu(x * a + b) * c; }

}  // namespace

std::vector<Result> run_elementwise(const Context& context, const CaseSpec& spec) {
  const std::int64_t n = std::int64_t{1} << spec.integer("log2n");
  const auto options = torch::TensorOptions().dtype(spec.dtype()).device(context.device);
  CaseFiles files(context, spec);
  FixedCase c;
  c.spec = &spec;
  c.dtype = spec.dtype();
  for (const char* name : {"x", "a", "b", "c"}) {
    c.inputs.push_back(files.input(name, [&] { return torch::randn({n}, options); }));
  }
  c.eager = call_with<4>(&chain);
  if (files.present()) c.python_outputs = {files.python_output("y")};
  auto modes = standard_modes(context, files, [&spec] {
    auto fast = zenith::compile(&chain, zenith_options(spec.name));
    return Mode{call_with<4>(fast), [fast] { return zenith_info(fast); }};
  });
  std::vector<Result> results{device_copy(context, spec, c.inputs[0])};
  for (auto& r : measure_fixed(context, c, modes)) {
    // A fused kernel reads four tensors and writes one; eager moves more, but this is the work.
    r.extra["bytes_moved"] = 5.0 * n * c10::elementSize(spec.dtype());
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace zenith::bench
