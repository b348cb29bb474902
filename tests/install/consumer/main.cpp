// Uses only the installed public headers and the installed plugins.
#include <cstdio>

#include <torch/torch.h>
#include <zenith/compile.h>

int main() {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  torch::nn::Linear model(8, 4);
  zenith::CompileOptions options;
  options.fallback_to_eager = false;
  auto fast = zenith::compile(model, options);
  // The capture, then the plan on fresh values, each against eager (a linear layer: ATen's own
  // kernels on the same values, rounding of order 1e-7).
  bool ok = true;
  for (int call = 0; call < 2; ++call) {
    auto x = torch::randn({3, 8});
    ok = ok && torch::allclose(fast(x), model->forward(x), 1e-5, 1e-6);
  }
  ok = ok && fast.report().nodes_per_backend.count("cpu");
  // The installed header and the installed library are one release.
  if (zenith::version_string() != ZENITH_VERSION_STRING) {
    std::printf("consumer: libzenith %s, headers %s\n", zenith::version_string().c_str(), ZENITH_VERSION_STRING);
    ok = false;
  }
  std::printf("consumer: compiled result %s eager\n", ok ? "matches" : "DOES NOT MATCH");
  return ok ? 0 : 1;
}
