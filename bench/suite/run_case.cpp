#include <map>

#include "workloads.h"

namespace zenith::bench {

std::vector<Result> run_case(const Context& context, const CaseSpec& spec) {
  using Runner = std::vector<Result> (*)(const Context&, const CaseSpec&);
  static const std::map<std::string, Runner> runners = {
      {"elementwise", run_elementwise}, {"sweep", run_sweep},   {"bert", run_bert},
      {"resnet", run_resnet},           {"decode", run_decode}, {"training", run_training}};
  Result whole_case;
  whole_case.case_name = spec.name;
  whole_case.workload = spec.workload;
  whole_case.mode = "all";
  auto runner = runners.find(spec.workload);
  if (runner == runners.end()) return {whole_case.fail("unknown workload '" + spec.workload + "' in cases.json")};
  if (context.past_deadline()) {
    whole_case.fail("not started: the run's time budget was spent");
    whole_case.status = "skipped";
    return {whole_case};
  }
  try {
    return runner->second(context, spec);
  } catch (const std::exception& error) {
    // Building the model or reading its files failed: no mode could run.
    return {whole_case.fail(error_message(error))};
  }
}

}  // namespace zenith::bench
