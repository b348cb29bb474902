// Gradient stability: a ResNet-style CNN trained eagerly and through zenith::compile side by side,
// from the same initial weights on the same fixed batch, their gradient norms and losses compared
// at every step.
//
//   gradient_stability [--device cpu|cuda] [--dtype float32|bfloat16] [--steps N] [--size small|full]
//                      [--seed S] [--csv PATH] [--sync 0|1] [--channels-last 0|1] [--perturb REL]
//                      [--controls N] [--zenith 0|1] [--batch N] [--image N] [--momentum M]
//                      [--deterministic 0|1]
//
// The model and its loss are one module (ClassifierLoss: cross-entropy of the CNN's logits), so
// the compiled call covers the loss too; every twin runs in training mode (batch norm on batch
// statistics, running statistics updated). Each step, for each twin: zero_grad, loss, backward,
// the L2 norm of all gradients (accumulated in float64, so that the norm adds no rounding of its
// own), an SGD step (lr 1e-3, momentum 0.9).
//
// This training run amplifies rounding: one rounding difference (a max-pool window or a ReLU whose
// winner flips) sends two runs onto trajectories that differ by percents. So eager and Zenith are
// not compared along their own trajectories with a rounding-sized bound; the criteria, for the CPU
// and the GPU alike:
//
//   1. --sync 1, at the same weights every step (the Zenith twin takes eager's weights and buffers
//      before each step): over the first 100 steps the gradient norms agree to 1e-4 relative to
//      eager's, and the losses to 1e-5 relative to eager's or to 1, whichever is larger (a
//      cross-entropy is the difference of two terms of the logits' size, so its float32 rounding is
//      absolute: once the model has memorized its batch the loss is 1e-3 and its relative rounding
//      1e-5 and more, measured on the H100); batch norm's running statistics, updated by both from
//      the same buffers, to 1e-4 (relative L2 distance, all of them together) and their
//      num_batches_tracked counters exactly.
//   2. Default, independent trajectories over --steps (1000): no NaN or Inf; and Zenith's divergence
//      from eager is no larger than the system's own sensitivity. A third twin, the control, runs
//      eagerly from eager's initial weights moved by one float32 rounding (every parameter element
//      to its next representable value, up or down at random, seeded: 1 ulp). For each window of
//      100 steps (one window when --steps < 100), with the relative difference of a step
//      |norm_twin - norm_eager| / |norm_eager| and a window's divergence the largest over its
//      steps: Zenith's divergence <= 2 x the control's + 1e-6. At the end the num_batches_tracked
//      counters of all three agree exactly.
//
// Prints a progress line every 100 steps, the per-window table (criterion 2), PASS or FAIL per
// check with the measured value, and one RESULT line; exits 1 when a check fails, 2 on an error.
// Writes the CSV (plot with plot_training.py; the example runs it itself when python3 has
// matplotlib):
//   independent: step,eager_norm,zenith_norm,control_norm,rel_diff,control_rel_diff,
//                eager_loss,zenith_loss,control_loss
//   --sync 1:    step,eager_norm,zenith_norm,rel_diff,eager_loss,zenith_loss,loss_rel_diff
//                (loss_rel_diff relative to max(|eager_loss|, 1), as criterion 1)
//
// --size small is the zoo's CnnConfig::small() at batch 8, 32x32 (the CPU test); full is ResNet-50
// at batch 16, 64x64 (the GPU run). --dtype bfloat16 runs the forward under autocast (weights,
// gradients and optimizer in float32, as mixed-precision training does; Zenith compiles calls in
// an autocast region). On CUDA, TF32 is switched off for cuBLAS and cuDNN: a float32
// comparison must compare float32 arithmetic. Zenith compiles with CompileOptions::channels_last
// off unless --channels-last 1 (channels-last convolutions are other cuDNN kernels, with other
// rounding; docs/training.md). With --channels-last 1 the eager twins (eager and the controls) run
// channels-last too, their batch and convolution weights in that memory format, so that both sides
// run cuDNN's NHWC kernels and the criteria compare like with like.
// --perturb REL multiplies every gradient of the Zenith twin by (1 + REL * N(0, 1)) elementwise
// before its optimizer step (seeded): it plays a backend that rounds differently, to see the
// checks' margins. --zenith 0 runs the Zenith twin eagerly (Zenith disabled): eager against eager.
// --controls N trains N controls, each from its own 1-ulp perturbation (directions from --seed + 3,
// + 4, ...); a step's control divergence is then the largest of theirs (default 1, as criterion 2).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "models/cnn.h"
#include "autocast_scope.h"
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
  bool zenith = true;          // false: the Zenith twin runs eagerly (eager against eager)
  bool sync = false;           // the twin takes eager's weights before every step: criterion 1
  int controls = 1;            // control twins, each from its own 1-ulp perturbation
  bool channels_last = false;  // CompileOptions::channels_last: off, so that cuDNN runs eager's kernels
};

bool flag_value(const std::string& flag, const std::string& value) {
  if (value != "0" && value != "1") throw std::runtime_error(flag + " is 0 or 1");
  return value == "1";
}

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
      settings.deterministic = flag_value(flag, value);
    } else if (flag == "--zenith") {
      settings.zenith = flag_value(flag, value);
    } else if (flag == "--sync") {
      settings.sync = flag_value(flag, value);
    } else if (flag == "--channels-last") {
      settings.channels_last = flag_value(flag, value);
    } else if (flag == "--controls") {
      settings.controls = std::atoi(value.c_str());
      if (settings.controls < 1) throw std::runtime_error("--controls must be at least 1");
    } else if (flag == "--control") {
      throw std::runtime_error("--control is gone: every run without --sync 1 trains the 1-ulp control twin; "
                               "--zenith 0 runs the Zenith twin eagerly");
    } else {
      throw std::runtime_error("unknown option " + flag +
                               " (use --device, --dtype, --steps, --size, --seed, --csv, --sync 0|1, "
                               "--channels-last 0|1, --perturb, --zenith 0|1, --batch, --image, --momentum, "
                               "--deterministic 0|1)");
    }
  }
  if (settings.device.is_cuda() && !torch::cuda::is_available()) {
    throw std::runtime_error("--device cuda, but this LibTorch sees no CUDA device");
  }
  return settings;
}

struct StepResult {
  double loss = 0, norm = 0;
  std::size_t gradients = 0;  // parameters that received a gradient
  bool finite() const { return std::isfinite(loss) && std::isfinite(norm); }
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

// One twin: its module, its optimizer, and the wall time of its steps.
struct Twin {
  Twin(const CnnConfig& config, double lr, double momentum) : module(config) {
    parameters = module->parameters();
    optimizer = std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(lr).momentum(momentum));
  }
  ClassifierLoss module;
  std::vector<torch::Tensor> parameters;
  std::unique_ptr<torch::optim::SGD> optimizer;
  double seconds = 0;
};

// One training step of a twin; `loss_of` is the eager module or the compiled one. With `noise`,
// every gradient is multiplied by (1 + perturb * N(0, 1)) before the norm and the optimizer step.
template <typename LossOf>
StepResult train_step(LossOf& loss_of, Twin& twin, const torch::Tensor& images, const torch::Tensor& labels,
                      bool bfloat16, torch::Generator* noise, double perturb) {
  const auto started = std::chrono::steady_clock::now();
  twin.optimizer->zero_grad();
  torch::Tensor loss;
  {
    zenith::examples::AutocastScope autocast(images.device().type(), bfloat16);
    loss = loss_of(images, labels);
  }
  loss.backward();
  if (noise != nullptr) {
    torch::NoGradGuard no_grad;
    for (const auto& parameter : twin.parameters) {
      if (!parameter.grad().defined()) continue;
      auto factor = torch::randn(parameter.sizes(), *noise, torch::kFloat64) * perturb + 1.0;
      parameter.mutable_grad().mul_(factor.to(parameter.grad().options()));
    }
  }
  StepResult result = gradient_norm(twin.parameters);
  result.loss = loss.item<double>();  // waits for the device: the wall time is the step's own
  twin.optimizer->step();
  twin.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

// Batch norm's running statistics, which a training forward updates in place: the L2 distance of
// two twins' running means and variances, all together, relative to the first's, and whether
// their num_batches_tracked counters agree.
struct BufferComparison {
  double relative = 0;
  bool counters_equal = true;
};

BufferComparison compare_buffers(ClassifierLoss& reference, ClassifierLoss& twin) {
  torch::NoGradGuard no_grad;
  auto twin_buffers = twin->named_buffers(true);
  BufferComparison result;
  double difference = 0, norm = 0;
  for (const auto& item : reference->named_buffers(true)) {
    const auto& mine = item.value();
    const auto& other = twin_buffers[item.key()];
    if (!mine.is_floating_point()) {
      result.counters_equal = result.counters_equal && torch::equal(mine, other);
      continue;
    }
    difference += (other.to(torch::kFloat64) - mine.to(torch::kFloat64)).square().sum().item<double>();
    norm += mine.to(torch::kFloat64).square().sum().item<double>();
  }
  result.relative = norm > 0 ? std::sqrt(difference / norm) : std::sqrt(difference);
  return result;
}

// |twin - eager| / |eager|; 0 when they are equal (both zero included).
double relative_difference(double eager, double twin) {
  if (eager == twin) return 0;
  return std::abs(twin - eager) / std::abs(eager);
}

// A loss's difference relative to max(|eager|, 1): criterion 1's measure for the cross-entropy,
// whose rounding is absolute once it is small.
double loss_difference(double eager, double twin) {
  if (eager == twin) return 0;
  return std::abs(twin - eager) / std::max(std::abs(eager), 1.0);
}

// --channels-last 1 for an eager twin: its convolution weights in channels-last memory format, so
// that cuDNN runs the NHWC kernels Zenith's channels-last rewrite runs. The values do not change;
// the optimizer's in-place updates keep the format.
void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& parameter : module.parameters(true)) {
    if (parameter.dim() == 4) parameter.set_data(parameter.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// --sync: the twin continues from eager's weights and buffers, so that each step compares the two
// gradients at the same point of one trajectory instead of along two that rounding makes diverge.
void copy_state(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto parameters = from.named_parameters(true), buffers = from.named_buffers(true);
  for (auto& item : to.named_parameters(true)) item.value().copy_(parameters[item.key()]);
  for (auto& item : to.named_buffers(true)) item.value().copy_(buffers[item.key()]);
}

// The twins must start bitwise equal, or the comparison measures their initialization.
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

// The control's initial weights: every parameter element moved to the next representable value of
// its dtype, up or down with probability 1/2 each (drawn from `seed`): one float32 rounding, 1 ulp.
// Buffers stay as they are. Checks that every element moved by exactly one step; returns how many.
std::int64_t perturb_one_ulp(ClassifierLoss& control, std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::Generator generator = at::detail::createCPUGenerator(seed);
  std::int64_t moved = 0;
  for (auto& item : control->named_parameters(true)) {
    auto& parameter = item.value();
    const auto before = parameter.clone();
    // +1 or -1 times infinity: the direction nextafter moves each element in.
    const auto sign = torch::randint(2, parameter.sizes(), generator, torch::dtype(parameter.scalar_type())) * 2 - 1;
    const auto direction = sign.to(parameter.device()) * std::numeric_limits<double>::infinity();
    parameter.copy_(torch::nextafter(parameter, direction));
    const bool one_step = torch::ne(parameter, before).all().item<bool>() &&
                          torch::equal(torch::nextafter(parameter, before), before);
    if (!one_step) throw std::runtime_error("the control's parameter " + item.key() + " did not move by 1 ulp");
    moved += parameter.numel();
  }
  return moved;
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
  // Criterion 1 (--sync): the first 100 steps at the same weights.
  const int sync_steps = 100;
  const double sync_norm_bound = 1e-4, sync_loss_bound = 1e-5, sync_buffer_bound = 1e-4;
  // Criterion 2 (independent trajectories): windows of 100 steps, Zenith's divergence within
  // 2x the control's plus 1e-6.
  const int window = 100;
  const double control_factor = 2, control_slack = 1e-6;
  const bool with_control = !settings.sync;

  std::printf("gradient stability: %s CNN (%zu stages), batch %lld, %lldx%lld, %s, %d steps of SGD (lr %g, "
              "momentum %g) on %s\n",
              settings.full ? "ResNet-50" : "small", config.layers.size(), static_cast<long long>(batch),
              static_cast<long long>(image), static_cast<long long>(image),
              settings.bfloat16 ? "bfloat16 autocast" : "float32", settings.steps, lr, momentum,
              settings.device.str().c_str());
  if (cuda) std::printf("  TF32 off for cuBLAS and cuDNN%s\n", settings.deterministic ? "; cuDNN deterministic" : "");
  if (settings.sync) {
    std::printf("  --sync 1 (criterion 1): the Zenith twin takes eager's weights and buffers before every step\n");
  } else {
    std::printf("  independent trajectories (criterion 2): eager, Zenith, and an eager control from eager's weights "
                "moved by 1 ulp\n");
  }
  std::printf("  Zenith's convolutions: channels-last %s\n", settings.channels_last ? "on (the eager twins' too)" : "off");
  if (!settings.zenith) std::printf("  --zenith 0: the Zenith twin runs eagerly (eager against eager)\n");
  if (settings.perturb != 0) {
    std::printf("  --perturb %g: the Zenith twin's gradients get relative noise of that size\n", settings.perturb);
  }

  // Every twin drawn from the same seed: the same initial weights, without copying anything.
  torch::manual_seed(settings.seed);
  Twin eager(config, lr, momentum);
  torch::manual_seed(settings.seed);
  Twin twin(config, lr, momentum);
  check_identical(eager.module, twin.module);
  std::vector<std::unique_ptr<Twin>> controls;
  for (int k = 0; with_control && k < settings.controls; ++k) {
    torch::manual_seed(settings.seed);
    controls.push_back(std::make_unique<Twin>(config, lr, momentum));
    check_identical(eager.module, controls.back()->module);
    const auto moved = perturb_one_ulp(controls.back()->module, settings.seed + 3 + k);
    std::printf("  control %d: %lld weights moved by 1 ulp (directions drawn from seed %llu)\n", k + 1,
                static_cast<long long>(moved), static_cast<unsigned long long>(settings.seed + 3 + k));
  }
  std::vector<Twin*> all = {&eager, &twin};
  for (auto& control : controls) all.push_back(control.get());
  for (Twin* each : all) {
    each->module->to(settings.device);
    each->module->train();
    if (settings.channels_last && each != &twin) to_channels_last(*each->module);
  }

  // One fixed batch, drawn on the CPU so that every device trains on the same numbers.
  torch::manual_seed(settings.seed + 1);
  const auto images = torch::randn({batch, config.in_channels, image, image}).to(settings.device);
  const auto labels = torch::randint(config.num_classes, {batch}, torch::kLong).to(settings.device);
  // The eager twins' batch: the same values, channels-last with --channels-last 1.
  const auto eager_images = settings.channels_last ? images.contiguous(at::MemoryFormat::ChannelsLast) : images;

  zenith::CompileOptions options;
  options.name = "cnn_loss";
  options.disable = !settings.zenith;
  options.channels_last = settings.channels_last;
  auto fast = zenith::compile(twin.module, options);

  torch::Generator noise = at::detail::createCPUGenerator(settings.seed + 2);
  auto eager_loss = [&](const torch::Tensor& x, const torch::Tensor& y) { return eager.module->forward(x, y); };

  if (const auto folder = std::filesystem::path(settings.csv).parent_path(); !folder.empty()) {
    std::filesystem::create_directories(folder);
  }
  std::ofstream csv(settings.csv);
  if (!csv) throw std::runtime_error("cannot write " + settings.csv);
  csv << (with_control ? "step,eager_norm,zenith_norm,control_norm,rel_diff,control_rel_diff,eager_loss,zenith_loss,"
                         "control_loss\n"
                       : "step,eager_norm,zenith_norm,rel_diff,eager_loss,zenith_loss,loss_rel_diff\n")
      << std::setprecision(17);

  // Per step: the relative differences of the norms (Zenith, control) and of the losses (Zenith).
  std::vector<double> rel_diffs, control_diffs, loss_diffs, buffer_diffs;
  bool sync_counters_equal = true;
  int first_non_finite = 0;
  if (with_control) {
    std::printf("%6s %11s %11s %11s %11s %11s %11s %10s %10s\n", "step", "eager loss", "zenith loss", "ctrl loss",
                "eager norm", "zenith norm", "ctrl norm", "zenith rel", "ctrl rel");
  } else {
    std::printf("%6s %12s %12s %12s %12s %10s %10s\n", "step", "eager loss", "zenith loss", "eager norm", "zenith norm",
                "norm rel", "loss rel");
  }
  for (int step = 1; step <= settings.steps; ++step) {
    const StepResult e = train_step(eager_loss, eager, eager_images, labels, settings.bfloat16, nullptr, 0);
    const StepResult z = train_step(fast, twin, images, labels, settings.bfloat16,
                                    settings.perturb != 0 ? &noise : nullptr, settings.perturb);
    // The controls: the first one's norm and loss go to the CSV; the largest relative difference
    // of any of them is the control's divergence at this step.
    StepResult c;
    double control_rel = 0;
    bool controls_finite = true;
    for (std::size_t k = 0; k < controls.size(); ++k) {
      auto control_loss = [&](const torch::Tensor& x, const torch::Tensor& y) {
        return controls[k]->module->forward(x, y);
      };
      const StepResult each =
          train_step(control_loss, *controls[k], eager_images, labels, settings.bfloat16, nullptr, 0);
      if (k == 0) c = each;
      control_rel = std::max(control_rel, relative_difference(e.norm, each.norm));
      controls_finite = controls_finite && each.finite();
    }
    if (step == 1 && e.gradients != z.gradients) {
      std::printf("FAIL: the Zenith twin got gradients for %zu parameters, eager for %zu (of %zu)\n", z.gradients,
                  e.gradients, eager.parameters.size());
      return 1;
    }
    const double rel = relative_difference(e.norm, z.norm), loss_rel = loss_difference(e.loss, z.loss);
    rel_diffs.push_back(rel);
    loss_diffs.push_back(loss_rel);
    const bool finite = e.finite() && z.finite() && controls_finite;
    if (with_control) {
      control_diffs.push_back(control_rel);
      csv << step << ',' << e.norm << ',' << z.norm << ',' << c.norm << ',' << rel << ',' << control_rel << ','
          << e.loss << ',' << z.loss << ',' << c.loss << '\n';
      if (step % 100 == 0 || step == 1 || step == settings.steps || !finite) {
        std::printf("%6d %11.6g %11.6g %11.6g %11.6g %11.6g %11.6g %10.3g %10.3g\n", step, e.loss, z.loss, c.loss,
                    e.norm, z.norm, c.norm, rel, control_rel);
      }
    } else {
      csv << step << ',' << e.norm << ',' << z.norm << ',' << rel << ',' << e.loss << ',' << z.loss << ','
          << loss_rel << '\n';
      if (step % 100 == 0 || step == 1 || step == settings.steps || !finite) {
        std::printf("%6d %12.6g %12.6g %12.6g %12.6g %10.3g %10.3g\n", step, e.loss, z.loss, e.norm, z.norm, rel,
                    loss_rel);
      }
    }
    std::fflush(stdout);
    if (!finite) {
      first_non_finite = step;
      break;  // nothing after a NaN says anything
    }
    if (settings.sync) {
      // Both updated the running statistics from the same buffers: compare, then continue from eager's.
      const auto buffers = compare_buffers(eager.module, twin.module);
      buffer_diffs.push_back(buffers.relative);
      if (step <= sync_steps) sync_counters_equal = sync_counters_equal && buffers.counters_equal;
      copy_state(*eager.module, *twin.module);
    }
  }
  csv.close();

  const auto stats = fast.stats();
  const auto calls = static_cast<std::int64_t>(rel_diffs.size());
  std::printf("\nsummary\n");
  std::printf("  wall time per step: eager %.2f ms, zenith %.2f ms", 1e3 * eager.seconds / calls,
              1e3 * twin.seconds / calls);
  if (!controls.empty()) std::printf(", control (eager) %.2f ms", 1e3 * controls[0]->seconds / calls);
  std::printf("\n");
  std::printf("  zenith calls: %lld, of which %lld ran compiled and %lld eagerly (plan hits %lld, captures %lld)\n",
              static_cast<long long>(calls), static_cast<long long>(calls - stats.eager_calls),
              static_cast<long long>(stats.eager_calls), static_cast<long long>(stats.hits),
              static_cast<long long>(stats.misses));
  const auto report = fast.report();
  if (report.signature.empty()) {
    std::printf("  no signature was compiled: every call ran eagerly (Zenith disabled)\n");
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
  auto result = [&](const char* criterion) {
    std::printf("RESULT: %s (%s)\n", status == 0 ? "gradients stable" : "gradients NOT stable", criterion);
    return status;
  };
  const char* criterion = settings.sync ? "criterion 1, same weights every step"
                                        : "criterion 2, independent trajectories against the 1-ulp control";
  char line[512];
  if (first_non_finite != 0) {
    std::snprintf(line, sizeof line, "a loss or gradient norm is NaN or Inf at step %d", first_non_finite);
    verdict(false, line);
    return result(criterion);
  }
  std::snprintf(line, sizeof line, "every loss and gradient norm of the %s is finite over %d steps",
                with_control ? "twins (eager, Zenith, controls)" : "two twins", settings.steps);
  verdict(true, line);

  if (settings.sync) {
    // Criterion 1.
    const auto checked = std::min<std::size_t>(sync_steps, rel_diffs.size());
    auto worst_of = [&](const std::vector<double>& values, std::size_t from, std::size_t to) {
      const auto worst = std::max_element(values.begin() + from, values.begin() + to);
      return std::make_pair(*worst, static_cast<long long>(worst - values.begin() + 1));
    };
    const auto norms = worst_of(rel_diffs, 0, checked), losses = worst_of(loss_diffs, 0, checked),
               buffers = worst_of(buffer_diffs, 0, checked);
    std::snprintf(line, sizeof line, "steps 1-%zu: gradient norms within %g relative (worst %.3g at step %lld)",
                  checked, sync_norm_bound, norms.first, norms.second);
    verdict(norms.first <= sync_norm_bound, line);
    std::snprintf(line, sizeof line, "steps 1-%zu: losses within %g of max(|eager|, 1) (worst %.3g at step %lld)",
                  checked,
                  sync_loss_bound, losses.first, losses.second);
    verdict(losses.first <= sync_loss_bound, line);
    // Gradients and losses in training mode never read the running statistics: a compiled training
    // call that forgot to update them would pass the other checks.
    std::snprintf(line, sizeof line,
                  "steps 1-%zu: batch norm running statistics within %g relative (worst %.3g at step %lld)", checked,
                  sync_buffer_bound, buffers.first, buffers.second);
    verdict(buffers.first <= sync_buffer_bound, line);
    verdict(sync_counters_equal, "steps 1-" + std::to_string(checked) + ": num_batches_tracked counters agree");
    if (checked < rel_diffs.size()) {
      const auto later = worst_of(rel_diffs, checked, rel_diffs.size());
      const auto later_loss = worst_of(loss_diffs, checked, loss_diffs.size());
      std::printf("  (not checked) steps %zu-%zu: worst norm difference %.3g (step %lld), worst loss difference "
                  "%.3g (step %lld)\n",
                  checked + 1, rel_diffs.size(), later.first, later.second, later_loss.first, later_loss.second);
    }
    return result(criterion);
  }

  // Criterion 2: per window, Zenith's worst relative difference against the control's.
  std::printf("\n  %-11s %14s %14s %12s  %s\n", "window", "control worst", "zenith worst", "bound", "verdict");
  int failed_windows = 0, windows = 0;
  double worst_ratio = 0;
  for (std::size_t from = 0; from < rel_diffs.size(); from += window) {
    const std::size_t to = std::min(rel_diffs.size(), from + window);
    const double control_worst = *std::max_element(control_diffs.begin() + from, control_diffs.begin() + to);
    const double zenith_worst = *std::max_element(rel_diffs.begin() + from, rel_diffs.begin() + to);
    const double bound = control_factor * control_worst + control_slack;
    const bool pass = zenith_worst <= bound;
    ++windows;
    if (!pass) ++failed_windows;
    worst_ratio = std::max(worst_ratio, zenith_worst / bound);
    char range[32];
    std::snprintf(range, sizeof range, "%zu-%zu", from + 1, to);
    std::printf("  %-11s %14.3g %14.3g %12.3g  %s\n", range, control_worst, zenith_worst, bound, pass ? "PASS" : "FAIL");
  }
  std::snprintf(line, sizeof line,
                "%d of %d windows of %d steps: Zenith's worst relative norm difference <= %g x the control's + %g "
                "(largest fraction of the bound used: %.3g)",
                windows - failed_windows, windows, window, control_factor, control_slack, worst_ratio);
  verdict(failed_windows == 0, line);
  // A compiled training call must count its batches as eager does (the running statistics
  // themselves are checked at the same weights, --sync 1).
  const auto zenith_buffers = compare_buffers(eager.module, twin.module);
  const auto control_buffers = compare_buffers(eager.module, controls[0]->module);
  verdict(zenith_buffers.counters_equal && control_buffers.counters_equal,
          "batch norm's num_batches_tracked counters of eager, Zenith and the control agree");
  std::printf("  (not checked) running statistics at the end, relative to eager's: Zenith %.3g, control %.3g\n",
              zenith_buffers.relative, control_buffers.relative);
  return result(criterion);
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
