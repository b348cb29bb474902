// Gradient stability: a ResNet-style CNN trained eagerly and through zenith::compile side by side,
// from the same initial weights on the same fixed batch, and their gradient norms compared at
// every step.
//
//   gradient_stability [--device cpu|cuda] [--dtype float32|bfloat16] [--steps N] [--size small|full]
//                      [--seed S] [--csv PATH] [--perturb REL] [--channels-last 0|1]
//
// The model and its loss are one module (ClassifierLoss: cross-entropy of the CNN's logits), so
// the compiled call covers the loss too; both twins run in training mode (batch norm on batch
// statistics, running statistics updated). Each step, for each twin: zero_grad, loss, backward,
// the L2 norm of all gradients (accumulated in float64, so that the norm adds no rounding of its
// own), an SGD step (lr 1e-3, momentum 0.9).
//
// --size small is the zoo's CnnConfig::small() at batch 8, 32x32 (the CPU test); full is ResNet-50
// at batch 16, 64x64 (the GPU run). --dtype bfloat16 runs the forward under autocast (weights,
// gradients and optimizer in float32, as mixed-precision training does). On CUDA, TF32 is switched
// off for cuBLAS and cuDNN: a float32 comparison must compare float32 arithmetic. Zenith compiles
// with CompileOptions::channels_last off unless --channels-last 1: this example checks that Zenith
// computes eager's gradients, and channels-last convolutions are other cuDNN kernels, with other
// rounding (docs/training.md).
// --perturb REL multiplies every gradient of the Zenith twin by (1 + REL * N(0, 1)) elementwise
// before its optimizer step: differences of the size rounding makes (1e-7 for float32), to see how
// far two runs that differ only by rounding drift apart. README.md has the measurements the bounds
// below come from.
//
// Prints progress every 100 steps and how many of the Zenith calls ran compiled; writes the CSV
// step,eager_norm,zenith_norm,rel_diff,eager_loss,zenith_loss (plot with plot_training.py).
// Exits 1 when a check fails:
//   - every norm and loss of both twins is finite;
//   - float32: the norms differ by at most 1e-4 (relative) at each of the first 100 steps;
//   - afterwards (bfloat16: from the first step) the runs are comparable: the median relative
//     difference of the norms is at most 0.1, no step's norms differ by more than 0.5 and no
//     step's losses by more than 0.15 (relative to eager's);
//   - at the end, batch norm's running statistics agree within 0.15 (relative L2 distance over all
//     of them) and its num_batches_tracked counters exactly.
// README.md says why these bounds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "models/cnn.h"
#include "plot_csv.h"
#include "zenith/compile.h"

namespace {

using zenith::models::Cnn;
using zenith::models::CnnConfig;

// The compiled unit: the network and its loss, so that a compiled forward (and later its compiled
// backward) covers the loss as well.
struct ClassifierLossImpl : torch::nn::Module {
  explicit ClassifierLossImpl(CnnConfig config) { net = register_module("net", Cnn(std::move(config))); }
  // images: [N, C, H, W], labels: int64 [N] -> the mean cross-entropy, a scalar.
  torch::Tensor forward(torch::Tensor images, torch::Tensor labels) {
    return torch::nn::functional::cross_entropy(net->forward(images), labels);
  }
  Cnn net{nullptr};
};
TORCH_MODULE(ClassifierLoss);

struct Settings {
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  bool bfloat16 = false;
  int steps = 1000;
  bool full = false;
  std::uint64_t seed = 0;
  std::string csv = "gradient_stability.csv";
  double perturb = 0;
  std::int64_t batch = 0, image = 0;  // 0: the size's default
  double momentum = 0.9;
  bool deterministic = false;  // cuDNN's deterministic algorithms, benchmark mode off
  bool control = false;        // the twin runs eagerly too: the noise floor of eager against eager
  bool sync = false;           // the twin takes eager's weights before every step: one trajectory
  bool channels_last = false;  // CompileOptions::channels_last: off, so that cuDNN runs eager's kernels
};

Settings parse(int argc, char** argv) {
  Settings settings;
  if ((argc - 1) % 2 != 0) throw std::runtime_error(std::string("option ") + argv[argc - 1] + " needs a value");
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--device") {
      settings.device = torch::Device(value);
    } else if (flag == "--dtype") {
      if (value != "float32" && value != "bfloat16") throw std::runtime_error("--dtype is float32 or bfloat16");
      settings.bfloat16 = value == "bfloat16";
    } else if (flag == "--steps") {
      settings.steps = std::atoi(value.c_str());
      if (settings.steps < 1) throw std::runtime_error("--steps must be at least 1");
    } else if (flag == "--size") {
      if (value != "small" && value != "full") throw std::runtime_error("--size is small or full");
      settings.full = value == "full";
    } else if (flag == "--seed") {
      settings.seed = std::stoull(value);
    } else if (flag == "--csv") {
      settings.csv = value;
    } else if (flag == "--perturb") {
      settings.perturb = std::stod(value);
    } else if (flag == "--batch") {
      settings.batch = std::stoll(value);
    } else if (flag == "--image") {
      settings.image = std::stoll(value);
    } else if (flag == "--momentum") {
      settings.momentum = std::stod(value);
    } else if (flag == "--deterministic") {
      settings.deterministic = value == "1";
    } else if (flag == "--control") {
      settings.control = value == "1";
    } else if (flag == "--sync") {
      settings.sync = value == "1";
    } else if (flag == "--channels-last") {
      settings.channels_last = value == "1";
    } else {
      throw std::runtime_error("unknown option " + flag +
                               " (use --device, --dtype, --steps, --size, --seed, --csv, --perturb, --batch, --image, "
                               "--momentum, --deterministic 0|1, --control 0|1, --sync 0|1, --channels-last 0|1)");
    }
  }
  if (settings.device.is_cuda() && !torch::cuda::is_available()) {
    throw std::runtime_error("--device cuda, but this LibTorch sees no CUDA device");
  }
  return settings;
}

// Autocast to bfloat16 for one forward, as Python's torch.autocast does it: enabled on entry, the
// previous state restored and the cast-weight cache dropped on exit.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, bool enabled) : device_(device), enabled_(enabled) {
    if (!enabled_) return;
    was_enabled_ = at::autocast::is_autocast_enabled(device_);
    was_dtype_ = at::autocast::get_autocast_dtype(device_);
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::set_autocast_dtype(device_, torch::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, was_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = torch::kBFloat16;
};

struct StepResult {
  double loss = 0, norm = 0;
  std::size_t gradients = 0;  // parameters that received a gradient
};

// The L2 norm over every parameter's gradient, summed in float64.
StepResult gradient_norm(const std::vector<torch::Tensor>& parameters) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> squares;
  for (const auto& parameter : parameters) {
    if (parameter.grad().defined()) squares.push_back(parameter.grad().to(torch::kFloat64).square().sum());
  }
  StepResult result;
  result.gradients = squares.size();
  result.norm = squares.empty() ? 0.0 : torch::stack(squares).sum().sqrt().item<double>();
  return result;
}

// One training step of a twin; `loss_of` is the eager module or the compiled one.
template <typename LossOf>
StepResult train_step(LossOf& loss_of, torch::optim::SGD& optimizer, const std::vector<torch::Tensor>& parameters,
                      const torch::Tensor& images, const torch::Tensor& labels, bool bfloat16,
                      torch::Generator* noise, double perturb) {
  optimizer.zero_grad();
  torch::Tensor loss;
  {
    AutocastScope autocast(images.device().type(), bfloat16);
    loss = loss_of(images, labels);
  }
  loss.backward();
  if (noise != nullptr) {
    torch::NoGradGuard no_grad;
    for (const auto& parameter : parameters) {
      if (!parameter.grad().defined()) continue;
      auto factor = torch::randn(parameter.sizes(), *noise, torch::kFloat64) * perturb + 1.0;
      parameter.mutable_grad().mul_(factor.to(parameter.grad().options()));
    }
  }
  StepResult result = gradient_norm(parameters);
  result.loss = loss.item<double>();
  optimizer.step();
  return result;
}

// Batch norm's running statistics, which a training forward updates in place: the L2 distance of
// the twins' running means and variances, all together, relative to eager's, and whether their
// num_batches_tracked counters agree.
struct BufferComparison {
  double relative = 0;
  bool counters_equal = true;
};

BufferComparison compare_buffers(ClassifierLoss& eager, ClassifierLoss& twin) {
  torch::NoGradGuard no_grad;
  auto twin_buffers = twin->named_buffers(true);
  BufferComparison result;
  double difference = 0, reference = 0;
  for (const auto& item : eager->named_buffers(true)) {
    const auto& mine = item.value();
    const auto& other = twin_buffers[item.key()];
    if (!mine.is_floating_point()) {
      result.counters_equal = result.counters_equal && torch::equal(mine, other);
      continue;
    }
    difference += (other.to(torch::kFloat64) - mine.to(torch::kFloat64)).square().sum().item<double>();
    reference += mine.to(torch::kFloat64).square().sum().item<double>();
  }
  result.relative = reference > 0 ? std::sqrt(difference / reference) : std::sqrt(difference);
  return result;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double relative_difference(double eager, double zenith) {
  if (eager == zenith) return 0;  // both zero included
  return std::abs(zenith - eager) / std::abs(eager);
}

// The twins must start bitwise equal, or the comparison measures their initialization.
// --sync: the twin continues from eager's weights and buffers, so that each step compares the two
// gradients at the same point of one trajectory instead of along two that rounding makes diverge.
void copy_state(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto parameters = from.named_parameters(true), buffers = from.named_buffers(true);
  for (auto& item : to.named_parameters(true)) item.value().copy_(parameters[item.key()]);
  for (auto& item : to.named_buffers(true)) item.value().copy_(buffers[item.key()]);
}

void check_identical(ClassifierLoss& a, ClassifierLoss& b) {
  auto left = a->named_parameters(true), right = b->named_parameters(true);
  auto left_buffers = a->named_buffers(true), right_buffers = b->named_buffers(true);
  for (const auto& item : left) {
    if (!torch::equal(item.value(), right[item.key()])) {
      throw std::runtime_error("the twins' initial parameter " + item.key() + " differs");
    }
  }
  for (const auto& item : left_buffers) {
    if (!torch::equal(item.value(), right_buffers[item.key()])) {
      throw std::runtime_error("the twins' initial buffer " + item.key() + " differs");
    }
  }
}

int run(const Settings& settings) {
  const bool cuda = settings.device.is_cuda();
  if (cuda) {
    // cuDNN convolutions default to TF32 in PyTorch: a float32 comparison would then measure
    // TF32's 10-bit mantissa, not Zenith.
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
    if (settings.deterministic) {
      at::globalContext().setDeterministicCuDNN(true);
      at::globalContext().setBenchmarkCuDNN(false);
    }
  }
  const CnnConfig config = settings.full ? CnnConfig::resnet50() : CnnConfig::small();
  const std::int64_t batch = settings.batch > 0 ? settings.batch : settings.full ? 16 : 8;
  const std::int64_t image = settings.image > 0 ? settings.image : settings.full ? 64 : 32;
  const double lr = 1e-3, momentum = settings.momentum;
  const int strict_steps = 100;
  const double strict_bound = 1e-4;
  // Past the first switching event (a max-pool window or ReLU whose winner flips on a rounding
  // difference) two runs that differ only by rounding decorrelate: their norms then differ by up to
  // 3% at the median and 16% at a step, their losses by up to 4%, their running statistics by up to
  // 5%, whatever the size of the rounding (README.md, measured with --perturb). Each bound is 3x or
  // more the largest of those.
  const double median_bound = 0.1, step_bound = 0.5, loss_bound = 0.15, buffer_bound = 0.15;
  std::printf("gradient stability: %s CNN (%zu stages), batch %lld, %lldx%lld, %s, %d steps of SGD (lr %g, "
              "momentum %g) on %s\n",
              settings.full ? "ResNet-50" : "small", config.layers.size(), static_cast<long long>(batch),
              static_cast<long long>(image), static_cast<long long>(image),
              settings.bfloat16 ? "bfloat16 autocast" : "float32", settings.steps, lr, momentum,
              settings.device.str().c_str());
  if (cuda) std::printf("  TF32 off for cuBLAS and cuDNN%s\n", settings.deterministic ? "; cuDNN deterministic" : "");
  if (settings.control) std::printf("  --control 1: the twin runs eagerly too (eager against eager)\n");
  if (settings.sync) std::printf("  --sync 1: the twin takes eager's weights and buffers before every step\n");
  if (settings.channels_last) std::printf("  --channels-last 1: Zenith's convolutions run channels-last\n");
  if (settings.perturb != 0) {
    std::printf("  --perturb %g: the Zenith twin's gradients get relative noise of that size\n", settings.perturb);
  }

  // Both twins drawn from the same seed: the same initial weights, without copying anything.
  torch::manual_seed(settings.seed);
  ClassifierLoss eager(config);
  torch::manual_seed(settings.seed);
  ClassifierLoss twin(config);
  check_identical(eager, twin);
  eager->to(settings.device);
  twin->to(settings.device);
  eager->train();
  twin->train();

  // One fixed batch, drawn on the CPU so that every device trains on the same numbers.
  torch::manual_seed(settings.seed + 1);
  const auto images = torch::randn({batch, config.in_channels, image, image}).to(settings.device);
  const auto labels = torch::randint(config.num_classes, {batch}, torch::kLong).to(settings.device);

  zenith::CompileOptions options;
  options.name = "cnn_loss";
  options.disable = settings.control;
  options.channels_last = settings.channels_last;
  auto fast = zenith::compile(twin, options);

  const auto eager_parameters = eager->parameters(), twin_parameters = twin->parameters();
  torch::optim::SGD eager_optimizer(eager_parameters, torch::optim::SGDOptions(lr).momentum(momentum));
  torch::optim::SGD twin_optimizer(twin_parameters, torch::optim::SGDOptions(lr).momentum(momentum));
  torch::Generator noise = at::detail::createCPUGenerator(settings.seed + 2);
  auto eager_loss = [&](const torch::Tensor& x, const torch::Tensor& y) { return eager->forward(x, y); };

  if (const auto folder = std::filesystem::path(settings.csv).parent_path(); !folder.empty()) {
    std::filesystem::create_directories(folder);
  }
  std::ofstream csv(settings.csv);
  if (!csv) throw std::runtime_error("cannot write " + settings.csv);
  csv << "step,eager_norm,zenith_norm,rel_diff,eager_loss,zenith_loss\n" << std::setprecision(17);

  std::vector<double> rel_diffs, loss_diffs;
  int first_non_finite = 0;
  double eager_seconds = 0, zenith_seconds = 0;
  using Clock = std::chrono::steady_clock;
  std::printf("%6s %12s %12s %12s %12s %10s\n", "step", "eager loss", "zenith loss", "eager norm", "zenith norm",
              "rel diff");
  for (int step = 1; step <= settings.steps; ++step) {
    // item() inside each step waits for the device, so the wall times are the steps' own.
    auto started = Clock::now();
    const StepResult e =
        train_step(eager_loss, eager_optimizer, eager_parameters, images, labels, settings.bfloat16, nullptr, 0);
    eager_seconds += std::chrono::duration<double>(Clock::now() - started).count();
    started = Clock::now();
    const StepResult z = train_step(fast, twin_optimizer, twin_parameters, images, labels, settings.bfloat16,
                                    settings.perturb != 0 ? &noise : nullptr, settings.perturb);
    zenith_seconds += std::chrono::duration<double>(Clock::now() - started).count();
    if (step == 1 && e.gradients != z.gradients) {
      std::printf("FAIL: the Zenith twin got gradients for %zu parameters, eager for %zu (of %zu)\n", z.gradients,
                  e.gradients, eager_parameters.size());
      return 1;
    }
    const double rel = relative_difference(e.norm, z.norm);
    rel_diffs.push_back(rel);
    loss_diffs.push_back(relative_difference(e.loss, z.loss));
    csv << step << ',' << e.norm << ',' << z.norm << ',' << rel << ',' << e.loss << ',' << z.loss << '\n';
    const bool finite = std::isfinite(e.norm) && std::isfinite(z.norm) && std::isfinite(e.loss) &&
                        std::isfinite(z.loss);
    if (!finite && first_non_finite == 0) first_non_finite = step;
    if (step % 100 == 0 || step == 1 || step == settings.steps || !finite) {
      std::printf("%6d %12.6g %12.6g %12.6g %12.6g %10.3g\n", step, e.loss, z.loss, e.norm, z.norm, rel);
      std::fflush(stdout);
    }
    if (!finite) break;  // nothing after a NaN says anything
    if (settings.sync) copy_state(*eager, *twin);
  }
  csv.close();

  const auto stats = fast.stats();
  const auto calls = static_cast<std::int64_t>(rel_diffs.size());
  std::printf("\nsummary\n");
  std::printf("  wall time per step: eager %.2f ms, zenith %.2f ms\n", 1e3 * eager_seconds / calls,
              1e3 * zenith_seconds / calls);
  std::printf("  zenith calls: %lld, of which %lld ran compiled and %lld eagerly (plan hits %lld, captures %lld)\n",
              static_cast<long long>(calls), static_cast<long long>(calls - stats.eager_calls),
              static_cast<long long>(stats.eager_calls), static_cast<long long>(stats.hits),
              static_cast<long long>(stats.misses));
  const auto report = fast.report();
  if (report.signature.empty()) {
    std::printf("  no signature was compiled: every call ran eagerly (an autocast region, or Zenith disabled)\n");
  } else if (report.eager_fallback) {
    std::printf("  the compiled signature runs eagerly: %s\n", report.fallback_reason.c_str());
  }
  std::printf("  CSV: %s\n", settings.csv.c_str());
  zenith::examples::plot_csv(settings.csv);

  int status = 0;
  auto verdict = [&](bool pass, const std::string& what) {
    std::printf("  %s: %s\n", pass ? "PASS" : "FAIL", what.c_str());
    if (!pass) status = 1;
  };
  char line[256];
  if (first_non_finite != 0) {
    std::snprintf(line, sizeof line, "a loss or gradient norm is NaN or Inf at step %d", first_non_finite);
    verdict(false, line);
    return status;
  }
  verdict(true, "every loss and gradient norm is finite");

  std::size_t first_comparable = 0;
  if (!settings.bfloat16) {
    first_comparable = std::min<std::size_t>(strict_steps, rel_diffs.size());
    const auto worst = std::max_element(rel_diffs.begin(), rel_diffs.begin() + first_comparable);
    std::snprintf(line, sizeof line, "steps 1-%zu: norms within %g (worst %.3g at step %lld)", first_comparable,
                  strict_bound, *worst, static_cast<long long>(worst - rel_diffs.begin() + 1));
    verdict(*worst <= strict_bound, line);
  }
  if (first_comparable < rel_diffs.size()) {
    const std::vector<double> later(rel_diffs.begin() + first_comparable, rel_diffs.end());
    const double middle = median(later);
    const auto worst = std::max_element(later.begin(), later.end());
    std::snprintf(line, sizeof line, "steps %zu-%zu: median relative difference %.3g <= %g", first_comparable + 1,
                  rel_diffs.size(), middle, median_bound);
    verdict(middle <= median_bound, line);
    std::snprintf(line, sizeof line, "steps %zu-%zu: worst relative difference %.3g (step %lld) <= %g",
                  first_comparable + 1, rel_diffs.size(), *worst,
                  static_cast<long long>(first_comparable + (worst - later.begin()) + 1), step_bound);
    verdict(*worst <= step_bound, line);
    const auto worst_loss = std::max_element(loss_diffs.begin() + first_comparable, loss_diffs.end());
    std::snprintf(line, sizeof line, "steps %zu-%zu: worst relative loss difference %.3g (step %lld) <= %g",
                  first_comparable + 1, loss_diffs.size(), *worst_loss,
                  static_cast<long long>(worst_loss - loss_diffs.begin() + 1), loss_bound);
    verdict(*worst_loss <= loss_bound, line);
  }
  // A compiled training call must update the running statistics as eager does; gradients and
  // losses in training mode never read them, so only this check sees them.
  const auto buffers = compare_buffers(eager, twin);
  verdict(buffers.counters_equal, "batch norm's num_batches_tracked counters agree");
  std::snprintf(line, sizeof line, "batch norm running statistics agree (relative difference %.3g <= %g)",
                buffers.relative, buffer_bound);
  verdict(buffers.relative <= buffer_bound, line);
  std::printf("RESULT: %s\n", status == 0 ? "gradients stable" : "gradients NOT stable");
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gradient_stability: %s\n", error.what());
    return 2;
  }
}
