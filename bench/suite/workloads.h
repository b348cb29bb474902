// The suite's workloads, one file each (workload_*.cpp): each runs one case of cases.json in every
// C++ mode the context asks for and returns one result per mode.
#pragma once

#include <vector>

#include "case_spec.h"
#include "context.h"
#include "result.h"

namespace zenith::bench {

/// y = gelu(x*a + b)*c, with the device copy measured in the same run as the yardstick.
std::vector<Result> run_elementwise(const Context& context, const CaseSpec& spec);
/// Linear + ReLU over a new sequence length at every step.
std::vector<Result> run_sweep(const Context& context, const CaseSpec& spec);
/// BERT encoder inference.
std::vector<Result> run_bert(const Context& context, const CaseSpec& spec);
/// ResNet-style CNN inference.
std::vector<Result> run_resnet(const Context& context, const CaseSpec& spec);
/// LLaMA-style decoder: a prompt, then one token at a time with a KV cache.
std::vector<Result> run_decode(const Context& context, const CaseSpec& spec);
/// One optimizer step of training: eager, and the model and loss through zenith::compile.
std::vector<Result> run_training(const Context& context, const CaseSpec& spec);

/// The case's workload; any exception becomes a failed result naming it. Past the context's
/// deadline the case is recorded as skipped.
std::vector<Result> run_case(const Context& context, const CaseSpec& spec);

}  // namespace zenith::bench
