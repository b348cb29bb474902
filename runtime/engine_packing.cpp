// Parameter packing for the engine (CompileOptions::pack_parameters): when a plan keeps the
// concatenation of some parameters, they move into it (runtime/parameter_packing.h). Moving a
// parameter frees its old memory, so no other call of the module may be reading it: packing runs
// under the engine's lock (no call starts a plan or an eager run meanwhile) and only while the
// call that packs is the only one in flight; otherwise the plan waits, keeping its copy, until a
// later call finds the module quiet.
#include <fmt/format.h>

#include "core/exception_message.h"
#include "core/log.h"
#include "runtime/engine.h"
#include "runtime/parameter_packing.h"

namespace zenith::detail {

void Engine::pack_parameters(const std::shared_ptr<const Entry>& made, const State& state) {
  if (!options_.pack_parameters) return;
  if (made && made->derived && !made->derived->packing_done() && !made->derived->state_concatenations().empty()) {
    to_pack_.push_back(made);
  }
  if (to_pack_.empty() || calls_in_flight_.load() > 1) return;
  auto waiting = std::move(to_pack_);
  to_pack_.clear();
  for (const auto& weak : waiting) {
    if (auto entry = weak.lock()) pack_entry(*entry, state);
  }
}

void Engine::pack_entry(const Entry& entry, const State& state) {
  if (entry.derived->packing_done()) return;  // queued twice, or shared with a plan packed before
  entry.derived->mark_packing_done();
  std::int64_t moved = 0, bytes = 0, blocks = 0;
  for (const auto& indices : entry.derived->state_concatenations()) {
    std::vector<at::Tensor> pieces;
    std::string names;
    for (std::size_t j : indices) {
      if (j >= state.size()) return;  // the module's state changed shape since: nothing to pack
      pieces.push_back(state[j].second);
      names += (names.empty() ? "" : ", ") + state[j].first;
    }
    if (adjacent_concatenation(pieces).defined()) continue;  // packed for another plan already
    if (auto why = packing_refusal(pieces); !why.empty()) {
      if (told_packing_.insert(names).second) {
        log::info("{}: {} stay where they are and the plan keeps their concatenation as a copy: {}", options_.name,
                  names, why);
      }
      continue;
    }
    try {
      bytes += pack_into_one_block(pieces);
    } catch (const PackedParametersLost&) {
      throw;  // the module cannot run; its caller must know
    } catch (const std::exception& error) {
      // A failed allocation leaves every parameter where it was (or puts it back there), and the
      // plan keeps its copy.
      const auto what = message_of(error);
      log::info("{}: {} could not be packed: {}", options_.name, names, what.substr(0, what.find('\n')));
      continue;
    }
    moved += static_cast<std::int64_t>(pieces.size());
    ++blocks;
  }
  if (moved == 0) return;
  stats_.packed_parameters += moved;
  stats_.packed_bytes += bytes;
  log::info("{}: {} parameters packed into {} concatenations the plan keeps ({:.1f} MB no longer held twice)",
            options_.name, moved, blocks, static_cast<double>(bytes) / (1 << 20));
}

}  // namespace zenith::detail
