#include "runtime/derived_values.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "passes/effects.h"
#include "runtime/parameter_packing.h"
#include "runtime/executor.h"

namespace zenith {
namespace {

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.device() == b.device() && a.sizes() == b.sizes() &&
         a.strides() == b.strides();
}

// Waits until every device holding a kept value has finished computing it: a later call may read
// the values from another stream, which the stream that computed them does not order.
void finish(const std::vector<at::Tensor>& kept) {
  std::vector<c10::Device> devices;
  for (const auto& tensor : kept) {
    if (!tensor.defined() || tensor.device().is_cpu()) continue;
    if (std::find(devices.begin(), devices.end(), tensor.device()) == devices.end()) devices.push_back(tensor.device());
  }
  for (const auto& device : devices) {
    c10::impl::VirtualGuardImpl guard(device.type());
    guard.getStream(device).synchronize();
  }
}

// Per value id: its memory is, or is aliased by, a result the caller gets (through views, run by
// host steps, and outputs written in place).
std::vector<bool> exposed_memory(const Plan& plan) {
  std::vector<bool> exposed(plan.graph.values.size(), false);
  for (int id : plan.graph.outputs) exposed[id] = true;
  for (auto step = plan.steps.rbegin(); step != plan.steps.rend(); ++step) {
    for (std::size_t o = 0; o < step->outputs.size(); ++o) {
      if (!exposed[step->outputs[o]]) continue;
      if (step->kind == Step::Kind::Host) {
        for (int id : step->inputs) exposed[id] = true;
      } else if (!step->output_aliases.empty() && step->output_aliases[o] >= 0) {
        exposed[step->inputs[static_cast<std::size_t>(step->output_aliases[o])]] = true;
      }
    }
  }
  return exposed;
}

// How each value of the derived steps is derived, as text: its node's op, arguments (the values
// it reads by their own keys, a parameter or buffer by its index among them) and result type.
// Empty for values that are not shared: what a constant feeds (another plan's constant may
// differ) and what is not derived.
struct Derivations {
  std::vector<std::string> keys;
  std::vector<std::set<std::size_t>> sources;  // per value: the state indices it is derived from
};

Derivations derivations(const Plan& plan, const std::vector<bool>& derived_steps, std::size_t arguments) {
  const auto& graph = plan.graph;
  Derivations d;
  d.keys.resize(graph.values.size());
  d.sources.resize(graph.values.size());
  for (std::size_t i = arguments; i < graph.inputs.size(); ++i) {
    d.keys[graph.inputs[i]] = fmt::format("state{}", i - arguments);
    d.sources[graph.inputs[i]] = {i - arguments};
  }
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    if (!derived_steps[s]) continue;
    for (int n : plan.steps[s].nodes) {
      const auto& node = graph.nodes[static_cast<std::size_t>(n)];
      std::string text = node.op + "." + node.overload + "(";
      std::set<std::size_t> sources;
      bool shared = true;
      for (const auto& arg : node.args) {
        text += arg.name + "=";
        const auto ids = arg.value_ids();
        if (ids.empty()) {
          text += arg.to_string() + ",";
          continue;
        }
        for (int id : ids) {
          shared = shared && !d.keys[id].empty();
          text += "[" + d.keys[id] + "]";
          sources.insert(d.sources[id].begin(), d.sources[id].end());
        }
        text += ",";
      }
      text += ")";
      for (std::size_t o = 0; o < node.outputs.size(); ++o) {
        const int out = node.outputs[o];
        if (!shared) continue;
        d.keys[out] = text + fmt::format("#{}:{}", o, graph.value(out).type.to_string());
        d.sources[out] = sources;
      }
    }
  }
  return d;
}

// The value ids a step joins when it is one `aten::cat` along dimension 0, in order; else empty.
std::vector<int> concatenated_ids(const Plan& plan, const Step& step) {
  if (step.nodes.size() != 1 || step.outputs.size() != 1 || step.output_types.size() != 1) return {};
  const auto& node = plan.graph.nodes[static_cast<std::size_t>(step.nodes.front())];
  if (node.op != "aten::cat") return {};
  const ir::ValueListRef* list = nullptr;
  const std::int64_t* dim = nullptr;
  for (const auto& arg : node.args) {
    if (arg.name == "tensors") list = std::get_if<ir::ValueListRef>(&arg.value);
    if (arg.name == "dim") dim = std::get_if<std::int64_t>(&arg.value);
  }
  if (list == nullptr || dim == nullptr || list->ids.size() < 2) return {};
  if (*dim != 0 && *dim != -step.output_types.front().rank()) return {};
  std::vector<int> ids;
  for (const auto& id : list->ids) {
    if (!id) return {};
    ids.push_back(*id);
  }
  return ids;
}

void count_storage(const at::Tensor& tensor, std::map<const void*, std::int64_t>& bytes_by_storage) {
  if (!tensor.defined() || !tensor.has_storage()) return;
  const auto& storage = tensor.storage();
  bytes_by_storage[storage.unsafeGetStorageImpl()] = static_cast<std::int64_t>(storage.nbytes());
}

}  // namespace

std::shared_ptr<const DerivedValues> DerivedValues::of(std::shared_ptr<const Plan> plan, std::size_t state,
                                                       std::shared_ptr<DerivedValueShare> share) {
  const auto& graph = plan->graph;
  if (!plan->value_checks.empty() || state == 0 || state > graph.inputs.size()) return nullptr;
  const auto effects = passes::analyse_effects(graph);
  std::vector<bool> derived_value(graph.values.size(), false);
  const std::size_t arguments = graph.inputs.size() - state;
  for (std::size_t i = arguments; i < graph.inputs.size(); ++i) derived_value[graph.inputs[i]] = true;
  for (const auto& [id, tensor] : graph.constants) derived_value[id] = true;
  const auto exposed = exposed_memory(*plan);
  std::vector<bool> derived_steps(plan->steps.size(), false);
  std::vector<bool> made_by_derived(graph.values.size(), false);
  for (std::size_t s = 0; s < plan->steps.size(); ++s) {
    const auto& step = plan->steps[s];
    const bool pure = std::all_of(step.nodes.begin(), step.nodes.end(), [&](int n) {
      const auto& node = graph.nodes[static_cast<std::size_t>(n)];
      return !effects.node_has_effect[static_cast<std::size_t>(n)] && !node.size_dependent && !node.per_call;
    });
    const bool from_state = std::all_of(step.inputs.begin(), step.inputs.end(), [&](int id) { return derived_value[id]; });
    const bool writes_input = std::any_of(step.output_aliases.begin(), step.output_aliases.end(), [](int a) { return a >= 0; });
    // Kept memory the caller could hold, or a later step write, would not stay what was kept.
    const bool shared = std::any_of(step.outputs.begin(), step.outputs.end(),
                                    [&](int id) { return exposed[id] || effects.value_mutable[id]; });
    if (!pure || !from_state || writes_input || shared || step.nodes.empty()) continue;
    derived_steps[s] = true;
    for (int id : step.outputs) {
      derived_value[id] = true;
      made_by_derived[id] = true;
    }
  }
  // Kept: derived results read by the steps that run at every call. Sources: the state they come from.
  std::set<int> kept, read_by_derived;
  for (std::size_t s = 0; s < plan->steps.size(); ++s) {
    for (int id : plan->steps[s].inputs) {
      if (derived_steps[s]) {
        read_by_derived.insert(id);
        continue;
      }
      if (made_by_derived[id]) kept.insert(id);
    }
  }
  if (kept.empty()) return nullptr;
  std::vector<std::size_t> sources;
  for (std::size_t i = arguments; i < graph.inputs.size(); ++i) {
    if (read_by_derived.count(graph.inputs[i])) sources.push_back(i);
  }
  const auto derived = derivations(*plan, derived_steps, arguments);
  std::vector<std::string> keys;
  std::vector<std::vector<std::size_t>> kept_sources;
  for (int id : kept) {
    keys.push_back(derived.keys[id]);
    kept_sources.emplace_back(derived.sources[id].begin(), derived.sources[id].end());
  }
  std::vector<std::vector<int>> concatenated(plan->steps.size());
  std::vector<std::vector<std::size_t>> state_concatenations;
  std::map<int, std::size_t> state_position;  // value id -> index among the parameters and buffers
  for (std::size_t i = arguments; i < graph.inputs.size(); ++i) state_position.emplace(graph.inputs[i], i - arguments);
  for (std::size_t s = 0; s < plan->steps.size(); ++s) {
    if (!derived_steps[s]) continue;
    concatenated[s] = concatenated_ids(*plan, plan->steps[s]);
    std::vector<std::size_t> positions;
    for (int id : concatenated[s]) {
      auto it = state_position.find(id);
      if (it == state_position.end()) break;
      positions.push_back(it->second);
    }
    if (!concatenated[s].empty() && positions.size() == concatenated[s].size()) {
      state_concatenations.push_back(std::move(positions));
    }
  }
  auto values = std::shared_ptr<DerivedValues>(new DerivedValues(
      std::move(plan), std::move(derived_steps), std::move(sources), std::vector<int>(kept.begin(), kept.end()),
      std::move(keys), std::move(kept_sources), arguments, std::move(share)));
  values->concatenated_ = std::move(concatenated);
  std::set<int> constants_read;
  for (std::size_t s = 0; s < values->plan_->steps.size(); ++s) {
    if (!values->derived_steps_[s]) continue;
    for (int id : values->plan_->steps[s].inputs) {
      if (graph.constants.count(id)) constants_read.insert(id);
    }
  }
  for (int id : constants_read) values->constant_sources_.push_back(graph.constants.at(id));
  values->state_concatenations_ = std::move(state_concatenations);
  return values;
}

DerivedValues::DerivedValues(std::shared_ptr<const Plan> plan, std::vector<bool> derived_steps,
                             std::vector<std::size_t> sources, std::vector<int> kept, std::vector<std::string> keys,
                             std::vector<std::vector<std::size_t>> kept_sources, std::size_t arguments,
                             std::shared_ptr<DerivedValueShare> share)
    : plan_(std::move(plan)),
      derived_steps_(std::move(derived_steps)),
      sources_(std::move(sources)),
      kept_(std::move(kept)),
      keys_(std::move(keys)),
      kept_sources_(std::move(kept_sources)),
      arguments_(arguments),
      share_(share ? std::move(share) : std::make_shared<DerivedValueShare>()) {}

std::size_t DerivedValues::step_count() const {
  return static_cast<std::size_t>(std::count(derived_steps_.begin(), derived_steps_.end(), true));
}

SourceSeen SourceSeen::of(const at::Tensor& tensor) {
  SourceSeen seen;
  if (!tensor.defined()) return seen;
  seen.impl = tensor.unsafeGetTensorImpl();
  seen.data = tensor.has_storage() ? tensor.storage().data() : nullptr;
  seen.tracked = !tensor.is_inference();
  // Tensor::_version() reads the same counter through the autograd hooks' virtual call.
  if (seen.tracked) seen.version = tensor.unsafeGetTensorImpl()->version_counter().current_version();
  return seen;
}

bool DerivedValues::shares_memory_with_arguments(const std::vector<at::Tensor>& inputs) const {
  auto same_memory = [](const at::Tensor& tensor, const void* storage) {
    return tensor.defined() && tensor.has_storage() && tensor.storage().unsafeGetStorageImpl() == storage;
  };
  for (std::size_t a = 0; a < arguments_ && a < inputs.size(); ++a) {
    if (!inputs[a].defined() || !inputs[a].has_storage()) continue;
    const void* storage = inputs[a].storage().unsafeGetStorageImpl();
    for (std::size_t source : sources_) {
      if (source < inputs.size() && same_memory(inputs[source], storage)) return true;
    }
    for (const auto& constant : constant_sources_) {
      if (same_memory(constant, storage)) return true;
    }
  }
  return false;
}

bool DerivedValues::current(const std::vector<at::Tensor>& inputs) const {
  if (seen_.size() != sources_.size() || tensors_.empty()) return false;
  for (std::size_t k = 0; k < sources_.size(); ++k) {
    if (!(SourceSeen::of(inputs[sources_[k]]) == seen_[k])) return false;
  }
  return true;
}

void DerivedValues::compute(const std::vector<at::Tensor>& inputs) const {
  const auto& graph = plan_->graph;
  // Kept values need no gradient: an inference plan runs only when no call tensor requires one.
  at::NoGradGuard no_grad;
  // The graph holds the casts autocast made when it was traced; autocast must not cast again.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  // What another plan of the module computed from the sources as they are is taken, not computed
  // again: only the derived steps the other kept values need run.
  const auto taken = shared_now(inputs);
  std::set<int> wanted;
  for (std::size_t k = 0; k < kept_.size(); ++k) {
    if (!taken[k].tensor.defined()) wanted.insert(kept_[k]);
  }
  const bool computes = !wanted.empty();
  std::vector<bool> runs(plan_->steps.size(), false);
  for (std::size_t s = plan_->steps.size(); s-- > 0;) {
    const auto& step = plan_->steps[s];
    if (!derived_steps_[s] ||
        std::none_of(step.outputs.begin(), step.outputs.end(), [&](int id) { return wanted.count(id) > 0; })) {
      continue;
    }
    runs[s] = true;
    wanted.insert(step.inputs.begin(), step.inputs.end());
  }
  std::vector<at::Tensor> values(graph.values.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) values[graph.inputs[i]] = inputs[i];
  for (const auto& [id, tensor] : graph.constants) values[id] = tensor;
  for (std::size_t s = 0; s < plan_->steps.size(); ++s) {
    if (runs[s]) run_derived_step(s, values);
  }
  const bool first = tensors_.empty();
  bool moved = false;
  if (first) {
    tensors_.resize(kept_.size());
    own_memory_.assign(kept_.size(), false);
  }
  for (std::size_t k = 0; k < kept_.size(); ++k) {
    auto& held = tensors_[k];
    if (taken[k].tensor.defined()) {
      if (!first && held.defined() && held.data_ptr() != taken[k].tensor.data_ptr()) moved = true;
      held = taken[k].tensor;
      own_memory_[k] = taken[k].own_memory;
      continue;
    }
    auto& fresh = values[kept_[k]];
    // A view of a parameter or a constant (packed parameters' concatenation among them) is
    // rebound, never written through; memory of the kept value's own is written in place.
    const bool fresh_own =
        std::none_of(sources_.begin(), sources_.end(),
                     [&](std::size_t i) { return inputs[i].defined() && inputs[i].is_alias_of(fresh); }) &&
        std::none_of(graph.constants.begin(), graph.constants.end(),
                     [&](const auto& constant) { return constant.second.defined() && constant.second.is_alias_of(fresh); });
    if (!first && own_memory_[k] && fresh_own && same_layout(held, fresh) && !held.is_alias_of(fresh)) {
      // Same address as before: a CUDA graph captured over it reads the new values.
      held.copy_(fresh);
      continue;
    }
    if (!first && held.defined() && fresh.defined() && held.data_ptr() != fresh.data_ptr()) moved = true;
    held = fresh;
    own_memory_[k] = fresh_own;
  }
  if (computes) share_kept(inputs, moved);
  finish(tensors_);
  if (moved) ++moves_;
  record_seen(inputs);
  if (computes) ++share_->computations;
}

std::vector<DerivedValueShare::Kept> DerivedValues::shared_now(const std::vector<at::Tensor>& inputs) const {
  std::vector<DerivedValueShare::Kept> taken(kept_.size());
  std::lock_guard<std::mutex> lock(share_->mutex);
  for (std::size_t k = 0; k < kept_.size(); ++k) {
    if (keys_[k].empty()) continue;
    auto it = share_->kept.find(keys_[k]);
    if (it == share_->kept.end() || !it->second.tensor.defined()) continue;
    // The key names the sources by index, so this plan's list of them is the entry's.
    const auto& entry = it->second;
    const auto& sources = kept_sources_[k];
    bool fresh = entry.seen.size() == sources.size();
    for (std::size_t j = 0; j < sources.size() && fresh; ++j) {
      fresh = SourceSeen::of(inputs[arguments_ + sources[j]]) == entry.seen[j];
    }
    if (fresh) taken[k] = entry;
  }
  return taken;
}

void DerivedValues::share_kept(const std::vector<at::Tensor>& inputs, bool& moved) const {
  std::lock_guard<std::mutex> lock(share_->mutex);
  for (std::size_t k = 0; k < kept_.size(); ++k) {
    if (keys_[k].empty()) continue;
    auto& entry = share_->kept[keys_[k]];
    // A view of a parameter is rebound, never written through.
    if (own_memory_[k] && entry.own_memory && entry.tensor.defined() && same_layout(entry.tensor, tensors_[k]) &&
        !entry.tensor.is_same(tensors_[k])) {
      // Another plan holds it: the new values go where its CUDA graphs read them, and this plan
      // reads them there too.
      entry.tensor.copy_(tensors_[k]);
      moved = moved || tensors_[k].data_ptr() != entry.tensor.data_ptr();
      tensors_[k] = entry.tensor;
    } else {
      entry.tensor = tensors_[k];
      entry.own_memory = own_memory_[k];
    }
    entry.seen.clear();
    for (std::size_t j : kept_sources_[k]) entry.seen.push_back(SourceSeen::of(inputs[arguments_ + j]));
  }
}

void DerivedValueShare::count_own_memory(std::map<const void*, std::int64_t>& bytes_by_storage) {
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [key, entry] : kept) {
    if (entry.own_memory) count_storage(entry.tensor, bytes_by_storage);
  }
}

void DerivedValues::count_own_memory(std::map<const void*, std::int64_t>& bytes_by_storage) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t k = 0; k < tensors_.size(); ++k) {
    if (own_memory_[k]) count_storage(tensors_[k], bytes_by_storage);
  }
}

void DerivedValues::run_derived_step(std::size_t s, std::vector<at::Tensor>& values) const {
  const auto& step = plan_->steps[s];
  if (!concatenated_[s].empty()) {
    std::vector<at::Tensor> pieces;
    for (int id : concatenated_[s]) pieces.push_back(values[id]);
    auto view = adjacent_concatenation(pieces);
    const auto& type = step.output_types.front();
    if (view.defined() && view.scalar_type() == type.dtype && view.sizes().vec() == type.sizes) {
      values[step.outputs.front()] = std::move(view);
      return;
    }
  }
  run_step(step, values);
}

void DerivedValues::record_seen(const std::vector<at::Tensor>& inputs) const {
  seen_.clear();
  for (std::size_t i : sources_) seen_.push_back(SourceSeen::of(inputs[i]));
}

void DerivedValues::update(const std::vector<at::Tensor>& inputs) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!current(inputs)) compute(inputs);
}

void DerivedValues::bind(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& values) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!current(inputs)) compute(inputs);
  for (std::size_t k = 0; k < kept_.size(); ++k) values[kept_[k]] = tensors_[k];
}

}  // namespace zenith
