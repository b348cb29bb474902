// Replay profiles of calls (CompileOptions::profile_dir): the first profile_calls runs of each
// plan, timed step by step, one trace file per signature rewritten after each profiled run, so
// that a program stopped at any point leaves complete traces behind.
#include "runtime/engine.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/dump.h"
#include "core/log.h"

namespace zenith::detail {

std::shared_ptr<ReplayProfile> Engine::reserve_profile_run(const Signature& signature) {
  if (options_.profile_dir.empty()) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = profiles_[signature.hash];
  if (slot.reserved >= options_.profile_calls) return nullptr;
  if (!slot.profile) slot.profile = std::make_shared<ReplayProfile>(options_.name);
  ++slot.reserved;
  return slot.profile;
}

void Engine::record_profile_run(ReplayProfile& profile, const Plan& plan, const Signature& signature,
                                StepTimer& timer) {
  auto timings = timer.finish();
  auto path = (std::filesystem::path(options_.profile_dir) /
               fmt::format("{}-{:016x}.trace.json", options_.name, signature.hash))
                  .string();
  nlohmann::json trace;
  std::size_t runs = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    profile.add_run(plan, timings, fmt::format("{} run {}", signature.to_string(), profile.runs() + 1));
    trace = profile.to_json();
    runs = profile.runs();
  }
  // Written outside the lock: other calls need not wait for the disk. Two runs finishing together
  // write the same file in turn, each atomically; the later holds both.
  try {
    write_json_file(path, trace);
    log::info("{}: profile of {} runs of {} written to {}", options_.name, runs, signature.to_string(), path);
  } catch (const Error& error) {
    log::warn("{}: could not write the replay profile: {}", options_.name, error.what());
  }
}

}  // namespace zenith::detail
