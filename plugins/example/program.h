// The compiled form of a group: a straight-line program over float "slots" that the fused kernel
// runs once per element. It is the only thing the parser and the kernel share, so a plugin author
// who wants another execution strategy (vectorized, threaded, GPU) replaces fused_kernel.cpp and
// keeps the parser.
#ifndef ZENITH_EXAMPLE_PROGRAM_H
#define ZENITH_EXAMPLE_PROGRAM_H

#include <cstdint>
#include <vector>

namespace zn_example {

enum class OpCode : uint8_t { Relu, Sigmoid, Tanh, Neg, Exp, Add, Sub, Mul, Div };

// slots[dst] = op(slots[lhs], slots[rhs]); unary ops ignore rhs.
struct Instruction {
  OpCode op;
  uint32_t dst;
  uint32_t lhs;
  uint32_t rhs;
};

struct Program {
  // Every tensor of the group has these sizes: the plugin refuses broadcasting, so one index space
  // serves all of them.
  std::vector<int64_t> sizes;
  // Slots [0, num_inputs) are loaded from the launch inputs, in the group's "inputs" order.
  uint32_t num_inputs = 0;
  uint32_t num_slots = 0;
  // In node order: the group's nodes are topologically sorted, so a slot is written before it is
  // read.
  std::vector<Instruction> code;
  // The slot each launch output is stored from, in the group's "outputs" order.
  std::vector<uint32_t> output_slots;
};

}  // namespace zn_example

#endif  // ZENITH_EXAMPLE_PROGRAM_H
