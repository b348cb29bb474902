// Borrowed DLPack views of ATen tensors and back, for tensors crossing the plugin ABI.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "core/tensor_type.h"
#include "zenith/plugin.h"

namespace zenith {

/// A DLTensor describing `tensor` without copying or owning: its shape and strides point into the
/// tensor's own metadata, so `tensor` must outlive the view.
DLTensor borrow_dlpack(const at::Tensor& tensor);

/// A non-owning ATen tensor over a DLTensor's memory; throws zenith::Error for a dtype or device
/// ATen cannot represent.
at::Tensor wrap_dlpack(const DLTensor& view);

/// A DLTensor with `type`'s dtype, device, sizes and strides and no memory (data NULL): an output a
/// kernel is asked to hand back (zn_launch_args.provided). Its shape and strides point into `type`,
/// which must outlive the view.
DLTensor describe_dlpack(const ir::TensorType& type);

/// Hands `tensor` over the ABI with ownership (zn_launch_args.provided): the receiver calls the
/// result's deleter when done, which drops this reference.
DLManagedTensor* lend_dlpack(at::Tensor tensor);

/// Calls the deleter of every tensor still in `handed` and clears the entries: what a kernel handed
/// back (zn_launch_args.provided) and nothing adopted, on an error path.
void release_dlpack(std::vector<DLManagedTensor*>& handed);

/// Takes ownership of a tensor handed over by lend_dlpack or any DLPack producer: the ATen tensor
/// calls its deleter when its memory is freed. Throws zenith::Error (after calling the deleter) for
/// a dtype or device ATen cannot represent.
at::Tensor adopt_dlpack(DLManagedTensor* managed);

DLDataType to_dlpack_dtype(c10::ScalarType dtype);
c10::ScalarType from_dlpack_dtype(DLDataType dtype);
DLDevice to_dlpack_device(const c10::Device& device);
c10::Device from_dlpack_device(DLDevice device);

}  // namespace zenith
