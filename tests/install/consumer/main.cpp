// Uses only the installed public headers and the installed plugins.
#include <cstdio>

#include <torch/torch.h>
#include <zenith/compile.h>

int main() {
  torch::NoGradGuard no_grad;
  torch::nn::Linear model(8, 4);
  zenith::CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = zenith::compile(model, options);
  auto x = torch::randn({3, 8});
  fast(x);
  bool ok = torch::allclose(fast(x), model->forward(x), 1e-5, 1e-6) && fast.report().nodes_per_backend.count("cpu");
  std::printf("consumer: compiled result %s eager\n", ok ? "matches" : "DOES NOT MATCH");
  return ok ? 0 : 1;
}
