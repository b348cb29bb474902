// The device code every generated row kernel (reduction_codegen.h) includes after the shared
// prelude (expression_rules.h): block-wide sum, maximum and minimum (ZnSum, ZnMax, ZnMin with
// zn_block_reduce), and four consecutive elements loaded or stored in one access (zn_load4,
// zn_store4), converted to and from float32 as zn_load and zn_store convert one.
#pragma once

namespace zenith::cuda {

/// The source text, the same for every row kernel.
const char* row_kernel_prelude();

}  // namespace zenith::cuda
