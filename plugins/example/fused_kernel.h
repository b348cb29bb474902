// Runs a Program over borrowed DLPack tensors: every node of the group is evaluated per element in
// one loop over the shared index space, so intermediates never touch memory.
#ifndef ZENITH_EXAMPLE_FUSED_KERNEL_H
#define ZENITH_EXAMPLE_FUSED_KERNEL_H

#include <cstddef>
#include <string>

#include <dlpack/dlpack.h>

#include "program.h"

namespace zn_example {

// Returns "" when the launch tensors are what `program` was compiled for, otherwise a message
// naming what was expected and what came. A launch must call it: run_fused trusts its tensors.
std::string check_tensors(const Program& program, const DLTensor* inputs, std::size_t num_inputs,
                          const DLTensor* outputs, std::size_t num_outputs);

// Evaluates `program` into `outputs`. The tensors must have passed check_tensors.
void run_fused(const Program& program, const DLTensor* inputs, const DLTensor* outputs);

}  // namespace zn_example

#endif  // ZENITH_EXAMPLE_FUSED_KERNEL_H
