// Backend: one loaded plugin, seen through its ABI table with every call checked.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "zenith/error.h"
#include "zenith/plugin.h"

namespace zenith {

class Backend;

/// A backend's call failed with ZN_STATUS_OUT_OF_MEMORY: an allocation on its device failed.
class BackendOutOfMemory : public Error {
 public:
  using Error::Error;
};

/// What a compile said about its kernel besides the kernel itself.
struct CompileOutcome {
  /// Where the kernel came from: a compiler, a cache, or nothing to compile.
  zn_compile_source source = ZN_COMPILE_COMPILED;
  /// The kernel runs other sizes of the same group (zn_compile_args.shape_generic).
  bool shape_generic = false;
  /// With shape_generic: the largest element count it handles; 0 for no limit.
  std::int64_t max_extent = 0;
  /// The kernel can hand back outputs in memory of its own (zn_compile_args.provides_outputs).
  bool provides_outputs = false;
  /// Its launches may be captured in a CUDA graph (zn_compile_args.graph_safe).
  bool graph_safe = false;
};

/// A compiled kernel; released through its plugin when the last reference goes.
class Kernel {
 public:
  Kernel(const Backend* backend, zn_kernel* handle, bool provides_outputs = false, bool graph_safe = false,
         std::string name = {})
      : backend_(backend),
        handle_(handle),
        provides_outputs_(provides_outputs),
        graph_safe_(graph_safe),
        name_(std::move(name)) {}
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;
  const Backend& backend() const { return *backend_; }
  zn_kernel* handle() const { return handle_; }
  /// Launches may ask it for outputs in its own memory (zn_launch_args.provided).
  bool provides_outputs() const { return provides_outputs_; }
  /// Its launches may be captured in a CUDA graph (zn_compile_args.graph_safe).
  bool graph_safe() const { return graph_safe_; }
  /// What the plugin called it (zn_compile_args.kernel_name), or empty when it did not say.
  const std::string& name() const { return name_; }

 private:
  const Backend* backend_;
  zn_kernel* handle_;
  bool provides_outputs_;
  bool graph_safe_;
  std::string name_;
};

/// A plugin that loaded and initialized. Lives until the process ends (plugins are never unloaded).
class Backend {
 public:
  Backend(const zn_plugin_api* api, void* context, std::string path);

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  const std::string& version() const { return version_; }
  const std::string& build_id() const { return build_id_; }
  int priority() const { return priority_; }

  /// Empty when the plugin can run the group, else its reason.
  std::optional<std::string> query(const std::string& group_json) const;
  /// Compiles a group; throws zenith::Error with the plugin's message on failure. `options_json`
  /// is a JSON object (zn_compile_args.options_json); `outcome`, when given, learns where the
  /// kernel came from and which sizes it serves.
  std::shared_ptr<Kernel> compile(const std::string& group_json, const std::string& options_json = "{}",
                                  CompileOutcome* outcome = nullptr) const;
  /// Launches a kernel; throws zenith::Error with the plugin's message on failure. `provided`
  /// (zn_launch_args.provided, only for a kernel that provides_outputs) has one null entry per
  /// output and receives the outputs the kernel hands back; on failure the host frees them.
  /// `inputs_unwritten` (zn_launch_args.inputs_unwritten: null, or one entry per input) is given
  /// only while the host records a CUDA graph of its own plan.
  void launch(const Kernel& kernel, const std::vector<DLTensor>& inputs, const std::vector<DLTensor>& outputs,
              void* stream, std::vector<DLManagedTensor*>* provided = nullptr,
              const std::uint8_t* inputs_unwritten = nullptr) const;
  /// Frees a kernel (Kernel's destructor calls this).
  void release(zn_kernel* kernel) const;

 private:
  const zn_plugin_api* api_;
  void* context_;
  std::string path_, name_, version_, build_id_;
  int priority_;
};

}  // namespace zenith
