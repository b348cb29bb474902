#include "kernel_profile.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

namespace zenith::bench {
namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

double now_ms() {
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// Long template names make the table unreadable; the head names the kernel well enough.
std::string shortened(const std::string& name) { return name.size() <= 110 ? name : name.substr(0, 107) + "..."; }

}  // namespace

KernelProfile profile_kernels(const std::function<void()>& body, int repeats, std::size_t keep) {
  const ProfilerConfig config(ProfilerState::KINETO);
  const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  const double start = now_ms();
  for (int i = 0; i < repeats; ++i) body();
  const double end = now_ms();
  auto result = profiler::disableProfiler();

  KernelProfile profile;
  profile.wall_ms = (end - start) / repeats;
  std::map<std::string, KernelTotal> by_name;
  for (const auto& event : result->events()) {
    if (event.deviceType() != c10::DeviceType::CUDA) continue;
    const auto name = event.name();
    const double ms = static_cast<double>(event.durationNs()) / 1e6;
    profile.device_ms += ms;
    if (starts_with(name, "Memcpy")) {
      ++profile.copies;
      profile.copy_ms += ms;
    } else if (starts_with(name, "Memset")) {
      ++profile.memsets;
      profile.memset_ms += ms;
    } else {
      ++profile.kernels;
      auto& total = by_name[name];
      total.name = name;
      ++total.count;
      total.device_ms += ms;
    }
  }
  for (auto& [name, total] : by_name) profile.top.push_back(total);
  std::sort(profile.top.begin(), profile.top.end(),
            [](const KernelTotal& a, const KernelTotal& b) { return a.device_ms > b.device_ms; });
  if (profile.top.size() > keep) profile.top.resize(keep);
  const double per_run = 1.0 / repeats;
  profile.device_ms *= per_run;
  profile.copy_ms *= per_run;
  profile.memset_ms *= per_run;
  for (auto& total : profile.top) total.device_ms *= per_run;
  // Counts stay whole per run when every run does the same work; rounding shows when they do not.
  profile.kernels = (profile.kernels + repeats / 2) / repeats;
  profile.copies = (profile.copies + repeats / 2) / repeats;
  profile.memsets = (profile.memsets + repeats / 2) / repeats;
  for (auto& total : profile.top) total.count = (total.count + repeats / 2) / repeats;
  return profile;
}

std::string KernelProfile::to_markdown(const std::string& title) const {
  std::string text = fmt::format(
      "### {}\n\nper step: wall {:.2f} ms, device busy {:.2f} ms ({:.0f}%), {} kernels, {} copies ({:.2f} ms), {} "
      "memsets\n\n| kernel | launches | device ms |\n| --- | --- | --- |\n",
      title, wall_ms, device_ms, wall_ms > 0 ? 100 * device_ms / wall_ms : 0.0, kernels, copies, copy_ms, memsets);
  for (const auto& total : top) text += fmt::format("| `{}` | {} | {:.3f} |\n", shortened(total.name), total.count, total.device_ms);
  return text;
}

}  // namespace zenith::bench
