// The files prepare.py leaves for a case in the suite's folder, and their stand-ins in a smoke run:
//   <weights>.weights.safetensors  the model's weights (float32; one file per model, shared by cases)
//   <case>.io.safetensors          inputs and the eager outputs of Python's copy of the model
//   <case>.ts.pt / <case>.ts.error        the TorchScript trace, or why tracing failed
//   <case>.aoti.pt2 / <case>.aoti.error   the AOTInductor package, or why it did not compile
#pragma once

#include <functional>
#include <map>
#include <string>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "case_spec.h"
#include "context.h"

namespace zenith::bench {

class CaseFiles {
 public:
  CaseFiles(const Context& context, const CaseSpec& spec);

  /// Whether prepare.py's files are there to use (false in a smoke run).
  bool present() const { return !dir_.empty(); }

  /// Input `name` from the case's io file, on the device; `make` stands in without a folder.
  at::Tensor input(const std::string& name, const std::function<at::Tensor()>& make);

  /// Output `name` of Python's eager model, on the device; undefined without a folder.
  at::Tensor python_output(const std::string& name);

  /// Copies the case's weights into `module`, matching every parameter and buffer by name and
  /// shape (converting dtype); throws naming what is missing, extra or misshapen.
  void load_weights(torch::nn::Module& module);

  /// The path of the artifact `<case>.<kind>` ("ts.pt", "aoti.pt2"); throws with the text of
  /// `<case>.<first part of kind>.error` when Python could not make it.
  std::string artifact(const std::string& kind) const;

  /// The path of the weights file.
  std::string weights_path() const;

 private:
  const std::map<std::string, at::Tensor>& io();

  std::string dir_;
  CaseSpec spec_;
  torch::Device device_;
  std::map<std::string, at::Tensor> io_;
  bool io_loaded_ = false;
};

}  // namespace zenith::bench
