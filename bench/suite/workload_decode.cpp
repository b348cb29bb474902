// The LLaMA-style decoder generating with a KV cache: a prompt in one call, then one token per
// call. In the growing form (the zoo's forward) each call returns the grown caches; in the static
// form (LlamaStaticCache, case flag "static_cache") the caches are allocated once per mode with a
// slot for every token of a generation, zeroed before each generation and written in place. The
// tokens fed after the prompt are fixed in advance (the same for every mode) rather than sampled,
// so that every mode does the same work whatever its rounding; sampling (an argmax) costs nothing
// next to a step.
// Tokens per second are over the new tokens of a warm generation (the second and later); the
// first generation, which pays for every capture and compile, is reported apart. On CUDA each row
// also says how many kernels a new token launches (a whole warm generation under the profiler,
// less its prompt alone) and how long the host spends in a step call.
#include <chrono>
#include <cstdint>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "accuracy.h"
#include "case_files.h"
#include "device_copy.h"
#include "fixed_shape.h"
#include "greedy_tokens.h"
#include "kernel_profile.h"
#include "memory_trace.h"
#include "models/llama.h"
#include "models/llama_safetensors.h"
#include "timing.h"
#include "workloads.h"

namespace zenith::bench {

namespace {

using zenith::models::Llama;
using zenith::models::LlamaConfig;

struct Decode {
  LlamaConfig config;
  at::Tensor prompt;  // [1, prompt]
  at::Tensor tokens;  // [1, new tokens], fed one at a time
  torch::TensorOptions cache_options;
  c10::ScalarType dtype = c10::ScalarType::Half;
  bool static_cache = false;
  // The static form's positions, made ahead on the device as generation code keeps them.
  at::Tensor prompt_positions;  // [prompt]
  at::Tensor step_positions;    // [new tokens]: step i reads element i
};

// The static form's caches, one pair per mode.
struct StaticCaches {
  at::Tensor k, v;
};

struct Generation {
  double prompt_ms = 0;
  double decode_ms = 0;
  double step_host_ms = 0;  // the host's time inside the new tokens' step calls, summed
  Tensors logits;  // of the prompt and of the first new token: what is checked
};

// Adds the host time of its scope to `total_ms`: how long the caller's thread is busy in a call,
// without waiting for the device.
class HostTimer {
 public:
  explicit HostTimer(double& total_ms) : total_ms_(total_ms), start_(std::chrono::steady_clock::now()) {}
  ~HostTimer() { total_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count(); }
  HostTimer(const HostTimer&) = delete;
  HostTimer& operator=(const HostTimer&) = delete;

 private:
  double& total_ms_;
  std::chrono::steady_clock::time_point start_;
};

Generation generate_growing(const Context& context, const Decode& d, const Call& step) {
  Generation g;
  // A tuple, not a structured binding: C++17 lambdas cannot capture one (Clang refuses).
  const auto cache = zenith::models::empty_cache(d.config, 1, d.cache_options);
  Tensors out;
  g.prompt_ms = wall_ms(context.device, [&] { out = step({d.prompt, std::get<0>(cache), std::get<1>(cache)}); });
  g.logits.push_back(out.at(0));
  g.decode_ms = wall_ms(context.device, [&] {
    for (std::int64_t i = 0; i < d.tokens.size(1); ++i) {
      HostTimer timer(g.step_host_ms);
      out = step({d.tokens.narrow(1, i, 1), out.at(1), out.at(2)});
      if (i == 0) g.logits.push_back(out.at(0));
    }
  });
  return g;
}

Generation generate_static(const Context& context, const Decode& d, const Call& step, StaticCaches& caches) {
  Generation g;
  caches.k.zero_();
  caches.v.zero_();
  Tensors out;
  g.prompt_ms = wall_ms(context.device, [&] { out = step({d.prompt, d.prompt_positions, caches.k, caches.v}); });
  g.logits.push_back(out.at(0));
  g.decode_ms = wall_ms(context.device, [&] {
    for (std::int64_t i = 0; i < d.tokens.size(1); ++i) {
      HostTimer timer(g.step_host_ms);
      out = step({d.tokens.narrow(1, i, 1), d.step_positions.narrow(0, i, 1), caches.k, caches.v});
      if (i == 0) g.logits.push_back(out.at(0));
    }
  });
  return g;
}

// A greedy generation (greedy_tokens.h): each new token the argmax of the last position's logits,
// fed back as generation code does.
Greedy generate_greedy(const Decode& d, const Call& step, StaticCaches& caches) {
  Greedy g;
  auto take = [&g](const at::Tensor& logits) {
    auto last = logits.select(1, logits.size(1) - 1).squeeze(0).to(at::kCPU, at::kFloat);
    g.tokens.push_back(last.argmax().item<std::int64_t>());
    g.logits.push_back(last);
  };
  // A [1, 1] tensor of its own is the signature of the timed generations' columns of a
  // [1, new tokens] tensor (a size-1 dimension's stride is not in a signature), so these calls hit
  // the same plans.
  auto fed = [&] { return torch::full({1, 1}, g.tokens.back(), d.tokens.options()); };
  const auto count = d.tokens.size(1);
  if (d.static_cache) {
    caches.k.zero_();
    caches.v.zero_();
    take(step({d.prompt, d.prompt_positions, caches.k, caches.v}).at(0));
    for (std::int64_t i = 0; i + 1 < count; ++i) {
      take(step({fed(), d.step_positions.narrow(0, i, 1), caches.k, caches.v}).at(0));
    }
    return g;
  }
  auto [k, v] = zenith::models::empty_cache(d.config, 1, d.cache_options);
  Tensors out = step({d.prompt, k, v});
  take(out.at(0));
  for (std::int64_t i = 0; i + 1 < count; ++i) {
    out = step({fed(), out.at(1), out.at(2)});
    take(out.at(0));
  }
  return g;
}

// Every weight a step reads in full: all but the token embedding, of which a step reads one row.
double streamed_weight_bytes(const Llama& model) {
  double bytes = 0;
  for (const auto& item : model->named_parameters(true)) {
    if (item.key() != "embed_tokens.weight") bytes += static_cast<double>(item.value().nbytes());
  }
  return bytes;
}

Result decode_mode(const Context& context, const CaseSpec& spec, const ModeMaker& maker, const Decode& d,
                   Tensors& expected, Greedy& expected_greedy) {
  Result r = named_result(spec, maker.name);
  PeakMemory memory(context.device);
  Mode mode;
  r.setup_ms = wall_ms(context.device, [&] { mode = maker.make(); });
  mode.call = traced_calls(std::move(mode.call), context.device, spec.name + " " + maker.name,
                           context.memory_trace_calls, context.memory_history);
  StaticCaches caches;
  if (d.static_cache) {
    const auto slots = d.prompt.size(1) + d.tokens.size(1);
    std::tie(caches.k, caches.v) = zenith::models::static_cache(d.config, 1, slots, d.cache_options);
  }
  auto generate = [&](const Call& step) {
    return d.static_cache ? generate_static(context, d, step, caches) : generate_growing(context, d, step);
  };
  auto prompt_only = [&](const Call& step) {
    if (d.static_cache) {
      caches.k.zero_();  // as generate_static starts: those two fills are not a token's
      caches.v.zero_();
      return step({d.prompt, d.prompt_positions, caches.k, caches.v});
    }
    auto [k, v] = zenith::models::empty_cache(d.config, 1, d.cache_options);
    return step({d.prompt, k, v});
  };
  const auto first = generate(mode.call);
  r.first_call_ms = first.prompt_ms;
  r.extra["first_generation_ms"] = first.prompt_ms + first.decode_ms;
  // Checked on the second generation: the first one's calls are Zenith's captures, which return
  // the trace's own eager result.
  const auto second = generate(mode.call);
  if (expected.empty()) {
    expected = second.logits;
    r.max_rel_error = 0;
  } else {
    memory.exclude([&] {
      r.max_rel_error = check_close(second.logits, expected, d.dtype, maker.name + " logits against eager");
    });
  }
  const auto greedy = generate_greedy(d, mode.call, caches);
  if (expected_greedy.tokens.empty()) expected_greedy = greedy;
  compare_greedy(greedy, expected_greedy, r);
  memory.mark_warm();
  // Whole generations, as a user runs them; at least three so that the median means something.
  std::vector<double> per_token_ms, prompt_ms, host_ms;
  const auto start = std::chrono::steady_clock::now();
  const int passes = context.smoke ? 1 : 3;
  while (static_cast<int>(per_token_ms.size()) < passes ||
         (std::chrono::steady_clock::now() - start < std::chrono::duration<double>(context.seconds_per_mode) &&
          per_token_ms.size() < 10)) {
    const auto g = generate(mode.call);
    per_token_ms.push_back(g.decode_ms / static_cast<double>(d.tokens.size(1)));
    host_ms.push_back(g.step_host_ms / static_cast<double>(d.tokens.size(1)));
    prompt_ms.push_back(g.prompt_ms);
  }
  const auto samples = summarize(per_token_ms);
  r.extra["host_ms_per_token"] = summarize(host_ms).median_ms;
  if (context.device.is_cuda()) {
    // Kernels of a whole generation less those of its prompt alone, which starts as a generation
    // does: from empty caches, or from zeroed static ones.
    const auto whole = profile_kernels([&] { generate(mode.call); }, 1, 0);
    const auto prompt = profile_kernels([&] { prompt_only(mode.call); }, 1, 0);
    r.extra["launches_per_token"] =
        static_cast<double>(whole.kernels - prompt.kernels) / static_cast<double>(d.tokens.size(1));
  }
  r.median_ms = samples.median_ms;
  r.p90_ms = samples.p90_ms;
  r.reps = samples.reps;
  memory.record(r);
  r.extra["tokens_per_s"] = 1000.0 / samples.median_ms;
  r.extra["prompt_ms"] = summarize(prompt_ms).median_ms;
  r.extra["new_tokens"] = d.tokens.size(1);
  r.extra["prompt_tokens"] = d.prompt.size(1);
  if (mode.info) r.extra["plan"] = mode.info();
  return r;
}

}  // namespace

std::vector<Result> run_decode(const Context& context, const CaseSpec& spec) {
  Decode d;
  d.config = spec.text("config") == "tinyllama" ? LlamaConfig::tinyllama() : LlamaConfig::small();
  d.dtype = spec.dtype();
  d.cache_options = torch::TensorOptions().dtype(d.dtype).device(context.device);
  CaseFiles files(context, spec);
  Llama model(d.config);
  model->eval();
  model->to(context.device, d.dtype);
  // The weights come as a Hugging Face checkpoint would: HF names, through the zoo's loader.
  if (files.present()) zenith::models::load_llama_safetensors(model, files.weights_path());
  d.static_cache = spec.flag("static_cache");
  const auto tokens = torch::TensorOptions().dtype(torch::kLong);
  d.prompt = files.input("prompt", [&] { return torch::randint(d.config.vocab_size, {1, spec.integer("prompt")}, tokens); });
  d.tokens = files.input("tokens", [&] { return torch::randint(d.config.vocab_size, {1, spec.integer("new_tokens")}, tokens); });
  const double weight_bytes = streamed_weight_bytes(model);
  const auto positions = torch::TensorOptions().dtype(torch::kLong).device(context.device);
  d.prompt_positions = torch::arange(d.prompt.size(1), positions);
  d.step_positions = torch::arange(d.prompt.size(1), d.prompt.size(1) + d.tokens.size(1), positions);
  zenith::models::LlamaStaticCache static_model(model);

  const Call eager = d.static_cache ? call_with<4>([static_model](at::Tensor t, at::Tensor p, at::Tensor k,
                                                                  at::Tensor v) mutable { return static_model->forward(t, p, k, v); })
                                    : call_with<3>([model](at::Tensor t, at::Tensor k, at::Tensor v) mutable {
                                        return model->forward(t, k, v);
                                      });
  Tensors expected;
  Greedy expected_greedy;
  std::vector<Result> results;
  Result eager_result = named_result(spec, "eager");
  try {
    c10::InferenceMode inference;
    eager_result =
        decode_mode(context, spec, {"eager", [&] { return Mode{eager, nullptr}; }}, d, expected, expected_greedy);
    if (files.present()) {
      const Tensors python = {files.python_output("prompt_logits"), files.python_output("first_step_logits")};
      eager_result.extra["python_eager_rel_error"] = check_close(expected, python, d.dtype, "C++ eager against Python eager");
    }
  } catch (const std::exception& error) {
    eager_result.fail(error_message(error));
  }
  results.push_back(eager_result);
  torch::NoGradGuard no_grad;
  const auto new_tokens = spec.integer("new_tokens");
  for (const auto& maker : standard_modes(context, files, [&spec, &d, model, static_model, new_tokens] {
         auto options = zenith_options(spec.name);
         if (d.static_cache) {
           // Two signatures: the prompt's and the decode step's, whatever the position.
           auto fast = zenith::compile(static_model, options);
           return Mode{call_with<4>(fast), [fast] { return zenith_info(fast); }};
         }
         // Room for a plan per cache length of a generation, so that the second one replays them.
         options.plan_cache_size = static_cast<std::size_t>(new_tokens + 8);
         auto fast = zenith::compile(model, options);
         return Mode{call_with<3>(fast), [fast] { return zenith_info(fast); }};
       })) {
    Result r = named_result(spec, maker.name);
    if (expected.empty()) {
      r.fail("eager failed, so there is nothing to check against");
    } else {
      try {
        r = decode_mode(context, spec, maker, d, expected, expected_greedy);
      } catch (const std::exception& error) {
        r.fail(error_message(error));
      }
    }
    results.push_back(r);
  }
  for (auto& r : results) r.extra["weight_bytes"] = weight_bytes;
  // The bandwidth the weight-streaming bound divides by, measured in this case's own run.
  const auto yardstick = torch::randn({copy_yardstick_elements(context)}, torch::TensorOptions().device(context.device));
  results.push_back(device_copy(context, spec, yardstick));
  return results;
}

}  // namespace zenith::bench
