// Built when LibTorch has no CUDA: no plan can be replayed as a CUDA graph.
#include "runtime/plan_graph.h"

namespace zenith {

std::string plan_graph_refusal(const Plan&) { return "this LibTorch has no CUDA"; }

std::unique_ptr<PlanGraph> make_plan_graph(std::shared_ptr<const Plan>, std::vector<bool>, std::size_t, std::string,
                                           std::shared_ptr<PlanGraphCounters>, std::string& why,
                                           std::shared_ptr<const DerivedValues>, std::shared_ptr<GraphPool>) {
  why = "this LibTorch has no CUDA";
  return nullptr;
}

std::shared_ptr<GraphPool> make_graph_pool() { return nullptr; }

}  // namespace zenith
