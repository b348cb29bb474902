#include "runtime/replay_profile.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "core/dump.h"

namespace zenith {
namespace {

using json = nlohmann::json;

// A name a reader takes in at a glance: a fused group of dozens of ops is summed up.
constexpr std::size_t kOpsNamed = 4;

const int kProcessId = 1;
const int kHostTrack = 0;

json span(const std::string& name, const std::string& category, double start_us, double duration_us, int track,
          json args) {
  return json{{"name", name}, {"cat", category}, {"ph", "X"},        {"ts", start_us},
              {"dur", duration_us}, {"pid", kProcessId}, {"tid", track}, {"args", std::move(args)}};
}

json name_event(const char* what, int track, const std::string& name) {
  return json{{"name", what}, {"ph", "M"}, {"pid", kProcessId}, {"tid", track}, {"args", {{"name", name}}}};
}

std::vector<std::string> ops_of(const Plan& plan, const Step& step) {
  std::vector<std::string> ops;
  ops.reserve(step.nodes.size());
  for (int node : step.nodes) ops.push_back(plan.graph.nodes.at(node).op);
  return ops;
}

}  // namespace

std::string step_name(const Plan& plan, const Step& step) {
  if (step.kernel && !step.kernel->name().empty()) return step.kernel->name();
  auto ops = ops_of(plan, step);
  std::string name;
  for (std::size_t k = 0; k < std::min(ops.size(), kOpsNamed); ++k) name += (k == 0 ? "" : "+") + ops[k];
  if (ops.size() > kOpsNamed) name += fmt::format("+{} more", ops.size() - kOpsNamed);
  return name.empty() ? "(no ops)" : name;
}

ReplayProfile::ReplayProfile(std::string process) : process_(std::move(process)) {}

int ReplayProfile::track_of(const c10::Device& device) {
  auto name = device.str();
  auto found = std::find(tracks_.begin(), tracks_.end(), name);
  if (found != tracks_.end()) return static_cast<int>(found - tracks_.begin()) + 1;
  tracks_.push_back(name);
  return static_cast<int>(tracks_.size());
}

void ReplayProfile::add_run(const Plan& plan, const std::vector<StepTiming>& timings, const std::string& label) {
  ++runs_;
  if (timings.empty()) return;
  double start = timings.front().host_start_us;
  double end = start;
  for (const auto& timing : timings) {
    const auto& step = plan.steps.at(timing.step);
    const auto name = step_name(plan, step);
    json args{{"run", label},
              {"step", timing.step},
              {"backend", step.backend},
              {"kernel", name},
              {"group", step.nodes},
              {"ops", ops_of(plan, step)},
              {"host_us", timing.host_us}};
    if (timing.device_us) args["device_us"] = *timing.device_us;
    if (timing.device_start_us) {
      events_.push_back(span(name, step.backend, *timing.device_start_us, *timing.device_us, track_of(step.device), args));
      end = std::max(end, *timing.device_start_us + *timing.device_us);
    }
    events_.push_back(span(name, step.backend, timing.host_start_us, timing.host_us, kHostTrack, std::move(args)));
    end = std::max(end, timing.host_start_us + timing.host_us);
  }
  // The run's own span encloses its steps, device work included.
  events_.push_back(span(label, "run", start, end - start, kHostTrack, json{{"steps", plan.steps.size()}}));
}

json ReplayProfile::to_json() const {
  json events = json::array();
  events.push_back(name_event("process_name", kHostTrack, "zenith: " + process_));
  events.push_back(name_event("thread_name", kHostTrack, "host"));
  for (std::size_t k = 0; k < tracks_.size(); ++k) {
    events.push_back(name_event("thread_name", static_cast<int>(k) + 1, tracks_[k]));
  }
  for (const auto& event : events_) events.push_back(event);
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

void ReplayProfile::write(const std::string& path) const { write_json_file(path, to_json()); }

}  // namespace zenith
