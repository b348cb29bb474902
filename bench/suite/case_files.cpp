#include "case_files.h"

#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <torch/torch.h>

#include "models/safetensors.h"

namespace zenith::bench {

namespace {

bool readable(const std::string& path) { return std::ifstream(path).good(); }

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

CaseFiles::CaseFiles(const Context& context, const CaseSpec& spec)
    : dir_(context.dir), spec_(spec), device_(context.device) {}

const std::map<std::string, at::Tensor>& CaseFiles::io() {
  if (!io_loaded_) {
    io_ = zenith::models::load_safetensors(dir_ + "/" + spec_.name + ".io.safetensors", device_);
    io_loaded_ = true;
  }
  return io_;
}

at::Tensor CaseFiles::input(const std::string& name, const std::function<at::Tensor()>& make) {
  if (!present()) return make().to(device_);
  auto found = io().find("input." + name);
  if (found == io().end()) throw std::runtime_error(spec_.name + ".io.safetensors has no input." + name);
  return found->second;
}

at::Tensor CaseFiles::python_output(const std::string& name) {
  if (!present()) return {};
  auto found = io().find("output." + name);
  if (found == io().end()) throw std::runtime_error(spec_.name + ".io.safetensors has no output." + name);
  return found->second;
}

std::string CaseFiles::weights_path() const {
  return dir_ + "/" + spec_.text("weights") + ".weights.safetensors";
}

void CaseFiles::load_weights(torch::nn::Module& module) {
  if (!present()) return;
  const auto path = weights_path();
  auto tensors = zenith::models::load_safetensors(path);
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  auto copy_in = [&](const std::string& name, at::Tensor& target) {
    auto found = tensors.find(name);
    if (found == tensors.end()) throw std::runtime_error(path + " has no tensor '" + name + "'");
    if (found->second.sizes() != target.sizes()) {
      std::ostringstream message;
      message << path << ": '" << name << "' has shape " << found->second.sizes() << ", the model's " << target.sizes();
      throw std::runtime_error(message.str());
    }
    target.copy_(found->second);
    used.insert(name);
  };
  for (auto& item : module.named_parameters(true)) copy_in(item.key(), item.value());
  for (auto& item : module.named_buffers(true)) copy_in(item.key(), item.value());
  for (const auto& [name, tensor] : tensors) {
    if (!used.count(name)) throw std::runtime_error(path + " holds '" + name + "', which the C++ model does not have");
  }
}

std::string CaseFiles::artifact(const std::string& kind) const {
  if (!present()) throw std::runtime_error("no artifacts without prepare.py's folder");
  const std::string path = dir_ + "/" + spec_.name + "." + kind;
  if (readable(path)) return path;
  const std::string error = dir_ + "/" + spec_.name + "." + kind.substr(0, kind.find('.')) + ".error";
  if (readable(error)) throw std::runtime_error("Python could not make it: " + file_text(error));
  throw std::runtime_error("missing " + path + " (prepare.py did not get to it)");
}

}  // namespace zenith::bench
