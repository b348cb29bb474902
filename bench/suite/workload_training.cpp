// One training step (forward, loss, backward, AdamW step) of the CNN and of a 6-layer BERT-base
// encoder (about 43M parameters) with a masked-LM style loss over the tied token embedding;
// float32, or bfloat16 autocast. Two rows per case on the same weights and inputs:
//   "eager (training)"   the step module (model and loss) called eagerly
//   "zenith (training)"  the same step module through zenith::compile, compiled once
// Backward and the AdamW step are the same code in both; Zenith takes whatever part of the step
// its compiled call covers. Before a row is timed, the losses of its first steps and the gradient
// norm after its first backward are checked, within accuracy.h's tolerance for the case's dtype
// (tight for float32, loose for bfloat16): eager's against Python eager's (prepare.py wrote them,
// and torch.compile is checked against them too), Zenith's against eager's.
#include <torch/torch.h>

#include <cmath>
#include <optional>
#include <sstream>

#include "accuracy.h"
#include "autocast_guard.h"
#include "case_files.h"
#include "fixed_shape.h"
#include "models/bert.h"
#include "models/cnn.h"
#include "modes.h"
#include "timing.h"
#include "workloads.h"

namespace zenith::bench {

namespace {

// Losses checked before timing without prepare.py's files (the smoke run); with them, as many as
// the io file holds (case_models.CHECKED_STEPS). The first is the initial weights' (forward only);
// the later ones show that backward and the optimizer step agree too.
constexpr std::size_t kCheckedSteps = 3;
// A step is long (tens of milliseconds at full size): fewer timed steps than Context asks of
// inference calls. compile_peers.py times training with the same counts.
constexpr int kMinTimedSteps = 5;
constexpr int kMaxTimedSteps = 50;

// The model and its loss in one forward, so that a compiled call covers the loss too. Both rows
// call this module; case_models.py has the Python copy.
class CnnStepImpl : public torch::nn::Module {
 public:
  explicit CnnStepImpl(zenith::models::Cnn model) : model(register_module("model", std::move(model))) {}
  torch::Tensor forward(torch::Tensor images, torch::Tensor labels) {
    return torch::cross_entropy_loss(model->forward(images), labels);
  }
  zenith::models::Cnn model;
};
TORCH_MODULE(CnnStep);

class Transformer6StepImpl : public torch::nn::Module {
 public:
  explicit Transformer6StepImpl(zenith::models::Bert model) : model(register_module("model", std::move(model))) {}
  // Every position predicts a token through the tied word embedding.
  torch::Tensor forward(torch::Tensor ids, torch::Tensor mask, torch::Tensor labels) {
    auto hidden = model->forward(ids, mask);
    auto logits = torch::matmul(hidden, model->embeddings->word_embeddings->weight.t());
    return torch::cross_entropy_loss(logits.view({-1, logits.size(-1)}), labels);
  }
  zenith::models::Bert model;
};
TORCH_MODULE(Transformer6Step);

// One row's copy of the case's model, on the device, in training mode.
struct Trainee {
  std::shared_ptr<torch::nn::Module> model;  ///< what the weights file holds
  std::shared_ptr<torch::nn::Module> step;   ///< the model and its loss: what the rows call
  Call eager;
  std::function<Mode()> zenith;
};

struct TrainingCase {
  Tensors inputs;
  /// A new copy of the model, freshly initialized: the caller gives it the case's weights.
  std::function<Trainee()> make;
};

TrainingCase cnn(const Context& context, const CaseSpec& spec, CaseFiles& files) {
  using zenith::models::CnnConfig;
  const auto config = spec.text("config") == "resnet50" ? CnnConfig::resnet50() : CnnConfig::small();
  const auto batch = spec.integer("batch"), image = spec.integer("image");
  TrainingCase c;
  c.inputs = {files.input("images", [&] { return torch::randn({batch, config.in_channels, image, image}); }),
              files.input("labels", [&] { return torch::randint(config.num_classes, {batch}, torch::kLong); })};
  c.make = [config, device = context.device, name = spec.name] {
    zenith::models::Cnn model(config);
    CnnStep step(model);
    step->to(device);
    step->train();
    return Trainee{model.ptr(), step.ptr(),
                   call_with<2>([step](at::Tensor images, at::Tensor labels) mutable { return step->forward(images, labels); }),
                   [step, name] {
                     auto fast = zenith::compile(step, zenith_options(name));
                     return Mode{call_with<2>(fast), [fast] { return zenith_info(fast); }};
                   }};
  };
  return c;
}

TrainingCase transformer6(const Context& context, const CaseSpec& spec, CaseFiles& files) {
  using zenith::models::BertConfig;
  auto config = spec.text("config") == "base" ? BertConfig::base() : BertConfig::small();
  config.num_layers = 6;
  // Random dropout masks would make every row's losses differ (Zenith's and torch.compile's
  // random streams are not eager's), and the losses are what proves the rows train the same
  // model; Python's copy of the model has no dropout either.
  config.dropout = 0;
  const auto batch = spec.integer("batch"), seq = spec.integer("seq");
  const auto longs = torch::TensorOptions().dtype(torch::kLong);
  TrainingCase c;
  c.inputs = {files.input("input_ids", [&] { return torch::randint(config.vocab_size, {batch, seq}, longs); }),
              files.input("attention_mask", [&] { return torch::ones({batch, seq}, longs); }),
              files.input("labels", [&] { return torch::randint(config.vocab_size, {batch * seq}, longs); })};
  c.make = [config, device = context.device, name = spec.name] {
    zenith::models::Bert model(config);
    Transformer6Step step(model);
    step->to(device);
    step->train();
    return Trainee{model.ptr(), step.ptr(),
                   call_with<3>([step](at::Tensor ids, at::Tensor mask, at::Tensor labels) mutable {
                     return step->forward(ids, mask, labels);
                   }),
                   [step, name] {
                     auto fast = zenith::compile(step, zenith_options(name));
                     return Mode{call_with<3>(fast), [fast] { return zenith_info(fast); }};
                   }};
  };
  return c;
}

/// Copies every parameter and buffer of `from` into `to` (the same module type).
void copy_state(const torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  const auto source_parameters = from.named_parameters(true);
  const auto source_buffers = from.named_buffers(true);
  for (auto& item : to.named_parameters(true)) item.value().copy_(source_parameters[item.key()]);
  for (auto& item : to.named_buffers(true)) item.value().copy_(source_buffers[item.key()]);
}

/// What the first steps of a row produced.
struct Trace {
  std::vector<double> losses;  ///< of the first steps, in order
  double grad_norm = 0;        ///< the L2 norm of every gradient after the first backward
};

double grad_norm(const torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> squares;
  for (const auto& p : module.parameters()) {
    if (p.grad().defined()) squares.push_back(p.grad().to(torch::kDouble).pow(2).sum());
  }
  if (squares.empty()) throw std::runtime_error("no parameter has a gradient after the first backward");
  return torch::stack(squares).sum().sqrt().item<double>();
}

std::string listed(const std::vector<double>& values) {
  std::ostringstream out;
  out.precision(7);
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  return out.str();
}

/// The larger of the losses' and the gradient norm's relative errors; throws, naming `what` and
/// every value, when either exceeds the tolerance for `dtype`.
double check_trace(const Trace& got, const Trace& expected, c10::ScalarType dtype, const std::string& what) {
  auto as_tensor = [](const std::vector<double>& values) { return torch::tensor(values, torch::kDouble); };
  const double losses = max_relative_error({as_tensor(got.losses)}, {as_tensor(expected.losses)});
  const double norm = max_relative_error({as_tensor({got.grad_norm})}, {as_tensor({expected.grad_norm})});
  const double limit = tolerance(dtype);
  if (!(losses <= limit) || !(norm <= limit)) {
    std::ostringstream message;
    message << what << ": losses of the first " << expected.losses.size() << " steps " << listed(got.losses)
            << " against " << listed(expected.losses) << " (relative error " << losses
            << "), gradient norm after the first backward " << listed({got.grad_norm}) << " against "
            << listed({expected.grad_norm}) << " (relative error " << norm << "); the tolerance for "
            << c10::toString(dtype) << " is " << limit;
    throw std::runtime_error(message.str());
  }
  return std::max(losses, norm);
}

/// Python eager's first losses and gradient norm from the case's io file; none without a folder.
std::optional<Trace> python_trace(CaseFiles& files) {
  if (!files.present()) return std::nullopt;
  Trace trace;
  const auto losses = files.python_output("losses").to(torch::kCPU, torch::kDouble).contiguous();
  trace.losses.assign(losses.data_ptr<double>(), losses.data_ptr<double>() + losses.numel());
  trace.grad_norm = files.python_output("grad_norm").to(torch::kCPU, torch::kDouble).item<double>();
  if (trace.losses.empty()) throw std::runtime_error("the io file's output.losses is empty");
  return trace;
}

/// One row: set up, the first `checked` steps recorded into `trace` and passed to `check`, warm-up,
/// timed steps, peak memory. Throws on any failure, `check`'s included, before timing.
void run_row(const Context& context, const CaseSpec& spec, const Tensors& inputs, torch::nn::Module& step_module,
             const std::function<Mode()>& make, std::size_t checked, const std::function<void(const Trace&)>& check,
             Trace& trace, Result& r) {
  const PeakMemory memory(context.device);
  Mode mode;
  r.setup_ms = wall_ms(context.device, [&] { mode = make(); });
  torch::optim::AdamW optimizer(step_module.parameters(), torch::optim::AdamWOptions(spec.number("lr")));
  const bool mixed = spec.dtype() != c10::ScalarType::Float;
  std::int64_t calls = 0;
  double loss = 0;
  auto step = [&] {
    optimizer.zero_grad();
    at::Tensor value;
    {
      std::optional<AutocastGuard> autocast;
      if (mixed) autocast.emplace(context.device.type(), spec.dtype());
      value = mode.call(inputs).at(0);
      ++calls;
    }
    value.backward();
    optimizer.step();
    loss = value.item<double>();
  };
  auto steps_and_timing = [&] {
    r.first_call_ms = wall_ms(context.device, step);
    trace.grad_norm = grad_norm(step_module);  // the first backward's: kept until the next zero_grad
    trace.losses = {loss};
    while (trace.losses.size() < checked) {
      step();
      trace.losses.push_back(loss);
    }
    check(trace);
    for (int i = static_cast<int>(checked); i < context.warmup_calls(); ++i) step();
    const auto samples =
        time_calls(context.device, step, context.seconds_per_mode, context.smoke ? 1 : kMinTimedSteps, kMaxTimedSteps);
    r.median_ms = samples.median_ms;
    r.p90_ms = samples.p90_ms;
    r.reps = samples.reps;
    memory.record(r);
    r.extra["steps_per_s"] = 1000.0 / samples.median_ms;
    r.extra["last_loss"] = loss;
    r.extra["losses"] = trace.losses;
    r.extra["grad_norm"] = trace.grad_norm;
    if (!std::isfinite(loss)) throw std::runtime_error("the loss is not finite: " + std::to_string(loss));
  };
  // Zenith's counters go into the row even when a step or the check fails: they say whether the
  // failing calls ran compiled.
  auto record_plan = [&] {
    if (!mode.info) return;
    r.extra["plan"] = mode.info();
    r.extra["calls"] = calls;
  };
  try {
    steps_and_timing();
  } catch (...) {
    record_plan();
    throw;
  }
  record_plan();
}

/// Whether Zenith's row ran compiled, plainly: a call Zenith runs eagerly (one in an autocast
/// region, a signature that fell back) makes the row time eager LibTorch behind Zenith.
std::string zenith_note(const nlohmann::json& plan, std::int64_t calls) {
  const auto eager = plan.at("eager_calls").get<std::int64_t>();
  const auto hits = plan.at("plan_hits").get<std::int64_t>();
  const auto misses = plan.at("plan_misses").get<std::int64_t>();
  const auto reason = plan.value("fallback_reason", std::string());
  std::ostringstream note;
  if (eager >= calls) {
    note << "NOT COMPILED: all " << calls << " calls ran eagerly (Zenith does not compile this training step), so "
         << "this row times eager LibTorch behind Zenith's dispatch";
  } else if (eager > 0) {
    note << "partly compiled: " << eager << " of " << calls << " calls ran eagerly, " << hits << " replayed a plan";
  } else {
    note << "compiled: " << hits << " of " << calls << " calls replayed a plan, " << misses << " captured";
  }
  if (!reason.empty()) note << " (" << reason << ")";
  return note.str();
}

}  // namespace

std::vector<Result> run_training(const Context& context, const CaseSpec& spec) {
  CaseFiles files(context, spec);
  const auto kind = spec.text("model");
  if (kind != "cnn" && kind != "transformer6") {
    throw std::runtime_error("case " + spec.name + ": unknown training model '" + kind + "' (cnn, transformer6)");
  }
  TrainingCase c = kind == "cnn" ? cnn(context, spec, files) : transformer6(context, spec, files);
  const auto python = python_trace(files);
  const std::size_t checked = python ? python->losses.size() : kCheckedSteps;

  Trainee eager = c.make();
  files.load_weights(*eager.model);
  std::optional<Trainee> compiled;
  if (context.wants("zenith")) {
    compiled = c.make();
    copy_state(*eager.step, *compiled->step);  // before eager's first step changes its weights
  }
  std::int64_t parameters = 0, embeddings = 0;
  for (const auto& p : eager.model->named_parameters(true)) {
    parameters += p.value().numel();
    if (p.key().find("embeddings.") == 0 && p.value().dim() == 2) embeddings += p.value().numel();
  }
  auto with_sizes = [&](Result r) {
    r.extra["parameters"] = parameters;
    // The "about 43M" counts the six layers; the token embedding table adds 23M more.
    r.extra["parameters_without_embeddings"] = parameters - embeddings;
    return r;
  };

  std::vector<Result> results;
  Result r = with_sizes(named_result(spec, "eager (training)"));
  Trace eager_trace;
  try {
    run_row(context, spec, c.inputs, *eager.step, [&eager] { return Mode{eager.eager, nullptr}; }, checked,
            [&](const Trace& trace) {
              r.max_rel_error = 0;
              // The same weights and inputs through Python's copy: torch.compile's row is checked
              // against Python eager, so the two eagers must agree.
              if (python) {
                r.extra["python_eager_rel_error"] =
                    check_trace(trace, *python, spec.dtype(), "C++ eager against Python eager");
              }
            },
            eager_trace, r);
  } catch (const std::exception& error) {
    r.fail(error_message(error));
  }
  const double eager_ms = r.status == "ok" ? r.median_ms : std::nan("");
  results.push_back(r);
  eager = Trainee{};  // its gradients and optimizer state are gone with run_row; its weights go now

  if (compiled) {
    Result z = with_sizes(named_result(spec, "zenith (training)"));
    if (eager_trace.losses.size() != checked) {
      z.fail("eager failed before its first " + std::to_string(checked) + " steps, so there is nothing to check against");
    } else {
      Trace trace;
      try {
        run_row(context, spec, c.inputs, *compiled->step, compiled->zenith, checked,
                [&](const Trace& t) { z.max_rel_error = check_trace(t, eager_trace, spec.dtype(), "Zenith against eager"); },
                trace, z);
        if (std::isfinite(eager_ms)) z.extra["speedup_vs_eager"] = eager_ms / z.median_ms;
      } catch (const std::exception& error) {
        z.fail(error_message(error));
      }
    }
    if (z.extra.contains("plan")) z.extra["note"] = zenith_note(z.extra["plan"], z.extra["calls"].get<std::int64_t>());
    results.push_back(z);
  }
  return results;
}

}  // namespace zenith::bench
